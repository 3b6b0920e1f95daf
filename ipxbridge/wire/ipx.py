"""IPX header codec and the DOSBox IPX-over-UDP control packets.

Contract:

* Rule 1. An IPX-over-UDP datagram is the bare 30-byte IPX header followed by the IPX data;
  there is no extra framing (RFC 1234 figure 1, and DOSBox ``ipx.cpp``). All header fields are
  big-endian (Novell IPX; ``docs/protocols.md`` section 3.1).
* Rule 2. ``parse_packet`` accepts a datagram only when it is at least 30 bytes long, its
  checksum is 0xFFFF (RFC 1234: "implementations should ignore packets with any other value"),
  and its Length field equals the datagram length. Anything else raises ``WireError`` with the
  reason. The hop count is decoded but not judged here: the limit of 16 is a routing rule,
  applied by the switch on links between bridges (policy/switch.py).
* Rule 3. The payload is returned as a zero-copy ``memoryview`` of the datagram.

Node addressing: DOSBox puts the client's IPv4 address and UDP port in the six node bytes
(docs/protocols.md section 3.2); RFC 1234 puts ``00 00`` followed by the IPv4 address (RFC 1234,
"Unicast address mapping"). Both conventions are provided here, and the bridge's own keyed
nodes (``keyed_node``), which an outsider cannot predict.
"""

import hashlib
import hmac
import ipaddress
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

from ipxbridge.wire.errors import WireError

# RFC 1234 figure 1 / docs/protocols.md 3.1: checksum, length, transport control, packet type,
# destination network, node, socket, source network, node, socket.
_HEADER: Final = struct.Struct("!HHBB4s6sH4s6sH")
HEADER_LEN: Final[int] = _HEADER.size  # 30

IPX_UDP_PORT: Final = 213  # RFC 1234: IANA "ipx", the tunnel's UDP port
CHECKSUM_NONE: Final = 0xFFFF  # RFC 1234 "Reserved packets": IPX never checksums.
MAX_HOPS: Final = 16  # IPX transport control: a router discards a packet after 16 hops.
MAX_DATAGRAM: Final = 65_507  # largest UDP payload over IPv4.

BROADCAST_NODE: Final = b"\xff" * 6
ZERO_NODE: Final = b"\x00" * 6
ZERO_NET: Final = b"\x00" * 4
# "Every network": IPXWrapper delivers a packet to a socket only if its destination network is
# the socket's own or this one (docs/protocols.md 6, "Native mode, addresses").
ALL_NETS: Final = b"\xff" * 4
DST_NET_OFFSET: Final = 6
# ipxbox writes checksum 0x0000 and transport control 127 (its own-frame mark) on every frame
# it bridges onto a LAN (docs/protocols.md 3.8).
CHECKSUM_ZERO: Final = 0x0000
IPXBOX_MARK: Final = 127

SOCKET_ECHO: Final = 0x0002  # echo / DOSBox registration and ping (docs/protocols.md 3.1, 4.5).
SOCKET_DPLAY_DISCOVERY: Final = 0xA57F  # DirectPlay IPX discovery socket (docs/protocols.md 1.9).
# vanilla-utilities' mini DOSBox server sends this to each client when it shuts down:
# sockets 86 (decimal) on both ends, packet type 0xFF, null source address.
SOCKET_SHUTDOWN: Final = 86
PACKET_TYPE_SHUTDOWN: Final = 0xFF
# IPXWrapper coalescing (docs/protocols.md section 6): source socket 0 and packet type 2, data is a
# run of complete IPX packets. The switch unpacks them where they enter (policy/switch.py).
PACKET_TYPE_COALESCED: Final = 2
# Offsets of the header fields read from an encoded packet without decoding it (3.1).
TYPE_OFFSET: Final = 5
SRC_SOCKET_OFFSET: Final = 28

# Sockets that carry LAN file sharing and management, not games. ipxbox filters the same list
# "which could present a security risk" (docs/reliability.md I3): NCP, SAP, RIP, 0x454, NetBIOS;
# NWLink SMB 0x551-0x553; SNMP over IPX 0x900F/0x9010.
DEFAULT_FILTERED_SOCKETS: Final[frozenset[int]] = frozenset(
    {0x0451, 0x0452, 0x0453, 0x0454, 0x0455, 0x0551, 0x0552, 0x0553, 0x900F, 0x9010}
)


class IpxHeader(NamedTuple):
    """The 30-byte IPX header (docs/protocols.md 3.1). Networks are 4 raw bytes, nodes 6.

    A named tuple, not a frozen dataclass: one is built for every packet switched, and a
    frozen dataclass's ``__init__`` (an ``object.__setattr__`` per field) costs 1.3 µs more
    than ``_make`` on the unpacked fields (``docs/benchmarks.md``, "Read coalescing").
    """

    checksum: int
    length: int
    hops: int
    packet_type: int
    dst_net: bytes
    dst_node: bytes
    dst_socket: int
    src_net: bytes
    src_node: bytes
    src_socket: int

    @property
    def is_broadcast(self) -> bool:
        """True when the destination node is the all-ones broadcast node."""
        return self.dst_node == BROADCAST_NODE

    @property
    def is_registration(self) -> bool:
        """DOSBox registration: destination net and node zero, destination socket 2.

        The packet type is ignored on purpose: DOSBox 0.74 leaves it uninitialised,
        IPXWrapper sends 2 and vanilla-utilities 0xFF (docs/protocols.md 4.7, "Variants").
        """
        return (
            self.dst_socket == SOCKET_ECHO
            and self.dst_node == ZERO_NODE
            and self.dst_net == ZERO_NET
        )

    @property
    def is_echo(self) -> bool:
        """A DOSBox ping or ping reply: both sockets are 2 (docs/protocols.md 4.5)."""
        return self.dst_socket == SOCKET_ECHO and self.src_socket == SOCKET_ECHO

    @property
    def is_shutdown(self) -> bool:
        """The vanilla-utilities shutdown packet (sockets 86, packet type 0xFF)."""
        return (
            self.packet_type == PACKET_TYPE_SHUTDOWN
            and self.dst_socket == SOCKET_SHUTDOWN
            and self.src_socket == SOCKET_SHUTDOWN
        )

    @property
    def is_coalesced(self) -> bool:
        """An IPXWrapper coalesced datagram (source socket 0, packet type 2)."""
        return self.src_socket == 0 and self.packet_type == PACKET_TYPE_COALESCED


def parse_header(data: bytes | memoryview) -> IpxHeader:
    """Decode and validate the IPX header of one UDP datagram.

    Args:
        data: the whole UDP payload.

    Returns:
        The decoded header.

    Raises:
        WireError: ``truncated`` (< 30 bytes), ``bad_checksum`` (not 0xFFFF),
            or ``bad_length`` (Length field != datagram length).

    The transport-control (hop) byte is decoded, not judged: whether a hop count is too high
    is a routing rule of the switch, and DOSBox clients send whatever the DOS program left in
    that byte (docs/protocols.md 4.1), so the codec must not reject it.
    """
    size = len(data)
    if size < HEADER_LEN:
        raise WireError("truncated", f"{size} bytes, an IPX header needs {HEADER_LEN}")
    header = IpxHeader._make(_HEADER.unpack_from(data))
    if header.checksum != CHECKSUM_NONE:
        raise WireError("bad_checksum", f"checksum 0x{header.checksum:04x}, expected 0xffff")
    if header.length != size:
        raise WireError("bad_length", f"length field {header.length} but datagram is {size}")
    return header


def parse_packet(data: bytes | memoryview) -> tuple[IpxHeader, memoryview]:
    """Decode a datagram into its header and a zero-copy view of the IPX data.

    Raises:
        WireError: as ``parse_header``.
    """
    header = parse_header(data)
    return header, memoryview(data)[HEADER_LEN:]


def build_packet(
    *,
    dst_net: bytes = ZERO_NET,
    dst_node: bytes,
    dst_socket: int,
    src_net: bytes = ZERO_NET,
    src_node: bytes,
    src_socket: int,
    packet_type: int = 0,
    hops: int = 0,
    payload: bytes | memoryview = b"",
) -> bytes:
    """Encode an IPX packet with checksum 0xFFFF and the correct Length.

    Raises:
        ValueError: a field does not fit (local misuse, not remote input).
    """
    if len(dst_net) != 4 or len(src_net) != 4 or len(dst_node) != 6 or len(src_node) != 6:
        raise ValueError("IPX networks are 4 bytes and nodes 6 bytes")
    length = HEADER_LEN + len(payload)
    if length > MAX_DATAGRAM:
        raise ValueError(f"IPX packet of {length} bytes exceeds a UDP datagram")
    head = _HEADER.pack(
        CHECKSUM_NONE,
        length,
        hops,
        packet_type,
        dst_net,
        dst_node,
        dst_socket,
        src_net,
        src_node,
        src_socket,
    )
    return head + bytes(payload)


def with_hops(data: bytes, hops: int) -> bytes:
    """Return a copy of an encoded packet with its transport-control (hop) byte replaced."""
    return b"".join((data[:4], bytes((hops,)), data[5:]))


def with_dst_net(data: bytes, net: bytes) -> bytes:
    """Return a copy of an encoded packet addressed to destination network ``net``.

    The checksum is 0xFFFF on everything the switch forwards (``forgiven``), so it stays valid.
    """
    return b"".join((data[:DST_NET_OFFSET], net, data[DST_NET_OFFSET + 4 :]))


def forgiven(data: bytes) -> tuple[bytes, str | None]:
    """A packet from a LAN station as the strict parser takes it, and what was forgiven.

    ipxbox's frames (docs/protocols.md 3.8) carry checksum 0x0000, which by Novell's letter
    is a wrong checksum (0xFFFF means none), and transport control 127, its mark, which is
    no hop count. They are what the most used DOSBox server puts on real LANs, so a segment
    takes them: the checksum becomes 0xFFFF and the mark hop 0 (loops stay bounded by the
    duplicate filter and rule 9, as for IPXWrapper, whose header has no hop count at all).
    Returns the packet unchanged and None for anything else, checksummed or not.
    """
    if len(data) < HEADER_LEN or data[0] or data[1]:
        return data, None
    if data[4] == IPXBOX_MARK:
        return b"".join((b"\xff\xff", data[2:4], b"\x00", data[5:])), "ipxbox_mark"
    return b"".join((b"\xff\xff", data[2:])), "checksum_zero"


# --- node address conventions -------------------------------------------------------------


def dosbox_node(ip: str, port: int) -> bytes:
    """DOSBox node: the client's IPv4 address then its UDP port, network order."""
    return ipaddress.IPv4Address(ip).packed + port.to_bytes(2, "big")


KEYED_NODE_PREFIX: Final = b"\x02"  # unicast, locally administered (IEEE 802 U/L bit)


def keyed_node(key: bytes, ip: str, port: int) -> bytes:
    """The node the bridge assigns to a client at ``ip:port`` (policy/clients.py, rule 2).

    ``02`` then the first 5 bytes of HMAC-SHA256(key, "ip:port"): a valid unicast MAC that
    no vendor assigns, unpredictable without the key, and the same after a restart.
    """
    return KEYED_NODE_PREFIX + hmac.digest(key, f"{ip}:{port}".encode(), "sha256")[:5]


def keyed_nodes(key: bytes) -> Callable[[tuple[str, int]], bytes]:
    """The switch's ``node_for`` with keyed nodes (``node_assignment: keyed``)."""

    def node_for(addr: tuple[str, int]) -> bytes:
        return keyed_node(key, addr[0], addr[1])

    return node_for


def address_node(addr: tuple[str, int]) -> bytes:
    """The DOSBox convention (``node_assignment: address``): IPv4 address + UDP port.

    A WebSocket connection's address carries its TCP port above the UDP range
    (``policy/connections.CONNECTION_PORT_BASE``): its node is the IPv4 address and the TCP
    port, as the reference js-dos server gives (docs/protocols.md 3.10). An IPv6 player's
    has no IPv4 address: 02 and a hash of its address and port, as predictable as the
    convention.
    """
    ip, port = addr[0], addr[1] & 0xFFFF
    if ":" in ip:
        return KEYED_NODE_PREFIX + hashlib.sha256(f"{ip}:{port}".encode()).digest()[:5]
    return dosbox_node(ip, port)


def rfc1234_node(ip: str) -> bytes:
    """RFC 1234 host number: ``00 00`` followed by the IPv4 address."""
    return b"\x00\x00" + ipaddress.IPv4Address(ip).packed


# --- DOSBox protocol control packets (docs/protocols.md section 4) -----------------------------


def build_registration() -> bytes:
    """The 30-byte registration a DOSBox client sends (docs/protocols.md 4.2)."""
    return build_packet(
        dst_node=ZERO_NODE, dst_socket=SOCKET_ECHO, src_node=ZERO_NODE, src_socket=SOCKET_ECHO
    )


# The server's ack carries source network 1 (later DOSBox servers and ipxbox, docs/protocols.md
# 4.3).
SERVER_NET: Final = b"\x00\x00\x00\x01"


def build_registration_reply(client_node: bytes, server_node: bytes) -> bytes:
    """The server's answer: the destination node is the address assigned to the client.

    DOSBox copies the destination network and node of the first datagram it receives as its
    own address (docs/protocols.md 4.2), so this must be the first thing a new address gets.
    """
    return build_packet(
        dst_node=client_node,
        dst_socket=SOCKET_ECHO,
        src_net=SERVER_NET,
        src_node=server_node,
        src_socket=SOCKET_ECHO,
    )


def build_ping(src_node: bytes) -> bytes:
    """A broadcast echo request on socket 2; also used as the keepalive.

    docs/protocols.md 4.5, 4.6.

    Unlike ipxbox's keepalive (checksum and length zero) it is well-formed, so strict
    receivers such as IPXWrapper accept it.
    """
    return build_broadcast(src_node, SOCKET_ECHO, SOCKET_ECHO, b"")


def build_ping_reply(pinger_node: bytes, own_node: bytes) -> bytes:
    """The unicast answer to a ping, as a DOSBox client sends it (docs/protocols.md 4.5)."""
    return build_packet(
        dst_node=pinger_node, dst_socket=SOCKET_ECHO, src_node=own_node, src_socket=SOCKET_ECHO
    )


def build_broadcast(src_node: bytes, dst_socket: int, src_socket: int, payload: bytes) -> bytes:
    """A broadcast IPX packet from ``src_node`` (the bridge's own probes)."""
    return build_packet(
        dst_node=BROADCAST_NODE,
        dst_socket=dst_socket,
        src_node=src_node,
        src_socket=src_socket,
        payload=payload,
    )


def build_shutdown(client_node: bytes) -> bytes:
    """The vanilla-utilities server shutdown notice (sockets 86, type 0xFF)."""
    return build_packet(
        dst_node=client_node,
        dst_socket=SOCKET_SHUTDOWN,
        src_node=ZERO_NODE,
        src_socket=SOCKET_SHUTDOWN,
        packet_type=PACKET_TYPE_SHUTDOWN,
    )


# --- ipxbridge's own beacon (two bridges on one segment, policy/bridges.py rule 8) ---------

# A socket in Novell's assigned range that no protocol in docs/protocols.md 3.1 uses. Stations
# without it open discard the packet, as they discard RIP and SAP they do not listen to.
SOCKET_BEACON: Final = 0x9B1B
BEACON_PREFIX: Final = b"ipxbridge-beacon/"  # any version: consumed, never relayed
BEACON_MAGIC: Final = BEACON_PREFIX + b"2"
MAX_BEACON_PEERS: Final = 32  # peers a beacon lists (bounds what a receiver stores)
MAX_BEACON_TAGS: Final = 32  # segment tags a peer-link beacon declares
TAG_LEN: Final = 8
MAC_LEN: Final = 16  # HMAC-SHA256, truncated (RFC 2104 section 5)
_FLAG_MAC: Final = 0x01
_FIXED: Final = struct.Struct("!BQ8s")  # flags, sequence, segment tag
NO_TAG: Final = bytes(TAG_LEN)


@dataclass(frozen=True)
class Beacon:
    """An ipxbridge beacon (version 2), as the receiver reads it.

    Attributes:
        bridge_id: the sender (the packet's source node).
        seq: the sender's wall clock in ms when it sent it; increases across restarts, so a
            replayed beacon is older than the last one accepted.
        tag: the random tag of the segment it was sent on (``NO_TAG`` on a peer link).
        peers: the identities of the sender's RFC 1234 peers.
        tags: on a peer link, the tags of every segment the sender is on: a bridge heard on
            a segment with one of them is that peer (confirmation through the peer link). On
            a segment, the tags of the bridges the sender hears there (their echo: proof
            that it hears them on that segment now, policy/bridges.py).
        signed: a MAC was present and checked with the receiver's key.
    """

    bridge_id: bytes
    seq: int
    tag: bytes
    peers: frozenset[bytes]
    tags: frozenset[bytes]
    signed: bool


def _beacon_mac(key: bytes, bridge_id: bytes, body: bytes) -> bytes:
    return hmac.new(key, bridge_id + body, hashlib.sha256).digest()[:MAC_LEN]


def build_beacon(
    bridge_id: bytes,
    dst_node: bytes = BROADCAST_NODE,
    peers: tuple[bytes, ...] = (),
    *,
    seq: int = 0,
    tag: bytes = NO_TAG,
    tags: tuple[bytes, ...] = (),
    key: bytes | None = None,
) -> bytes:
    """A bridge announcing itself on a segment or to a peer: source node = its bridge id.

    Data: the magic, flags, sequence, segment tag, a count and the 6-byte identity of each
    RFC 1234 peer (its bridge id, or ``00 00`` + IPv4 for a peer that sent no beacon), a
    count and each declared tag, then with a key an HMAC-SHA256 of the bridge id and all of
    that, cut to 16 bytes.

    Raises:
        ValueError: too many peers or tags, or a field of the wrong size.
    """
    if len(peers) > MAX_BEACON_PEERS or any(len(p) != 6 for p in peers):
        raise ValueError(f"at most {MAX_BEACON_PEERS} peer identities of 6 bytes")
    if len(tags) > MAX_BEACON_TAGS or any(len(t) != TAG_LEN for t in (tag, *tags)):
        raise ValueError(f"at most {MAX_BEACON_TAGS} tags of {TAG_LEN} bytes")
    flags = _FLAG_MAC if key else 0
    body = (
        BEACON_MAGIC
        + _FIXED.pack(flags, seq & 0xFFFFFFFFFFFFFFFF, tag)
        + bytes((len(peers),))
        + b"".join(peers)
        + bytes((len(tags),))
        + b"".join(tags)
    )
    if key:
        body += _beacon_mac(key, bridge_id, body)
    return build_packet(
        dst_node=dst_node,
        dst_socket=SOCKET_BEACON,
        src_node=bridge_id,
        src_socket=SOCKET_BEACON,
        packet_type=4,  # PEP, as applications use (docs/protocols.md 3.1)
        payload=body,
    )


def is_beacon(header: IpxHeader, data: bytes | memoryview) -> bool:
    """An ipxbridge beacon of any version (consumed by bridges, never relayed)."""
    if header.dst_socket != SOCKET_BEACON or header.src_socket != SOCKET_BEACON:
        return False
    end = HEADER_LEN + len(BEACON_PREFIX)
    return bytes(data[HEADER_LEN:end]) == BEACON_PREFIX


def parse_beacon(header: IpxHeader, data: bytes | memoryview, key: bytes | None) -> Beacon:
    """Read a beacon (``is_beacon`` is true) and check its MAC when a key is given.

    Without a key the MAC, if any, is not checked and ``signed`` is False.

    Raises:
        WireError: ``beacon_malformed`` (another version, or fields past the end) or
            ``beacon_unverified`` (a key is set and the MAC is missing or wrong).
    """
    raw = bytes(data[HEADER_LEN : header.length])
    if not raw.startswith(BEACON_MAGIC) or len(raw) < len(BEACON_MAGIC) + _FIXED.size + 2:
        raise WireError("beacon_malformed", "not a version 2 beacon, or too short")
    at = len(BEACON_MAGIC)
    flags, seq, tag = _FIXED.unpack_from(raw, at)
    at += _FIXED.size
    n_peers = raw[at]
    at += 1
    peers_end = at + 6 * n_peers
    if n_peers > MAX_BEACON_PEERS or peers_end >= len(raw):
        raise WireError("beacon_malformed", f"{n_peers} peers do not fit")
    peers = frozenset(raw[i : i + 6] for i in range(at, peers_end, 6))
    n_tags = raw[peers_end]
    tags_end = peers_end + 1 + TAG_LEN * n_tags
    mac_end = tags_end + (MAC_LEN if flags & _FLAG_MAC else 0)
    if n_tags > MAX_BEACON_TAGS or mac_end != len(raw):
        raise WireError("beacon_malformed", f"{n_tags} tags do not fit the data")
    tags = frozenset(raw[i : i + TAG_LEN] for i in range(peers_end + 1, tags_end, TAG_LEN))
    if key is not None:
        expected = _beacon_mac(key, header.src_node, raw[:tags_end])
        if not flags & _FLAG_MAC or not hmac.compare_digest(raw[tags_end:mac_end], expected):
            raise WireError("beacon_unverified", "missing or wrong MAC")
    return Beacon(header.src_node, seq, tag, peers, tags, key is not None)
