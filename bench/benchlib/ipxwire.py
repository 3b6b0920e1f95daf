"""IPX on the wire as the threat bench writes and reads it, with ``struct`` only.

Written from docs/protocols.md, not from ``ipxbridge/wire``: what the bench checks must not be
built or read by the code under test.

* IPX header (docs/protocols.md 3.1): 30 bytes, big-endian; checksum 0xFFFF means none.
* The four Ethernet framings a NetWare ODI driver tells apart (3.1): EtherType 0x8137
  (Ethernet II); an 802.3 length followed by FF FF (raw 802.3), by E0 E0 03 (802.2), or by
  AA AA 03 00 00 00 81 37 (SNAP). Frames are padded to 60 bytes.
* IPXWrapper's own UDP format (6): a packed 27-byte header (type, destination network,
  node, socket, source network, node, socket, data size), UDP port 54792.
* IPXWrapper's coalesced batch (6): source socket 0, packet type 2, data = complete IPX
  packets one after the other, at most 1384 bytes.
* ipxbridge's version-1 beacon (IPX socket 0x9B1B, data ``ipxbridge-beacon/1``, a count
  byte, six bytes per peer): what a bystander on the segment hears and imitates.
"""

import socket
import struct
from dataclasses import dataclass
from typing import Final

IPX_HEADER: Final = struct.Struct("!HHBB4s6sH4s6sH")
IPXWRAPPER_HEADER: Final = struct.Struct("!B4s6sH4s6sHH")
ETH_HEADER: Final = struct.Struct("!6s6sH")
BROADCAST: Final = b"\xff" * 6
ZERO_NET: Final = bytes(4)
ALL_NETS: Final = b"\xff" * 4
ETH_P_IPX: Final = 0x8137
ETH_P_IP: Final = 0x0800
IPXWRAPPER_PORT: Final = 54792
RFC1234_PORT: Final = 213
GAME_SOCKET: Final = 0x4545
BEACON_SOCKET: Final = 0x9B1B
BEACON_MAGIC_V1: Final = b"ipxbridge-beacon/1"
BEACON_MAGIC_PREFIX: Final = b"ipxbridge-beacon/"
FILTERED_SOCKETS: Final = (0x0451, 0x0452, 0x0453)  # NCP, SAP, RIP (3.1)
COALESCED_MAX: Final = 1384
MIN_FRAME: Final = 60

ETHERNET_II: Final = "ethernet_ii"
RAW_8023: Final = "802.3"
LLC: Final = "802.2"
SNAP: Final = "snap"
FRAMINGS: Final = (ETHERNET_II, RAW_8023, LLC, SNAP)
_LLC: Final = b"\xe0\xe0\x03"
_SNAP: Final = b"\xaa\xaa\x03\x00\x00\x00\x81\x37"

# Every test packet carries this, then the attack's code byte and a sequence number, so a
# copy is recognised in any framing or encapsulation by searching the frame for it.
MAGIC: Final = b"THR!"
_TAG: Final = struct.Struct("!4sBI")


def tag(code: int, seq: int, size: int = 0) -> bytes:
    """The data of a test packet: MAGIC, code, seq, zero-padded to ``size`` bytes."""
    return _TAG.pack(MAGIC, code, seq).ljust(size, b"\0")


def find_tag(data: bytes) -> tuple[int, int] | None:
    """(code, seq) of the first tag in ``data``, or None."""
    at = data.find(MAGIC)
    if at < 0 or len(data) < at + _TAG.size:
        return None
    _, code, seq = _TAG.unpack_from(data, at)
    return code, seq


def ipx(
    dst_node: bytes,
    dst_socket: int,
    src_node: bytes,
    src_socket: int,
    data: bytes = b"",
    *,
    ptype: int = 0,
    hops: int = 0,
    checksum: int = 0xFFFF,
    dst_net: bytes = ZERO_NET,
    src_net: bytes = ZERO_NET,
    length: int | None = None,
) -> bytes:
    """One IPX packet (docs/protocols.md 3.1); ``length`` lies about the Length field if given."""
    size = IPX_HEADER.size + len(data) if length is None else length
    head = IPX_HEADER.pack(
        checksum, size, hops, ptype, dst_net, dst_node, dst_socket, src_net, src_node, src_socket
    )
    return head + data


def frame(dst_mac: bytes, src_mac: bytes, framing: str, packet: bytes) -> bytes:
    """An Ethernet frame (no FCS) carrying ``packet`` in ``framing``, padded to 60 bytes."""
    if framing == ETHERNET_II:
        body, kind = packet, ETH_P_IPX
    else:
        body = {RAW_8023: b"", LLC: _LLC, SNAP: _SNAP}[framing] + packet
        kind = len(body)
    return (ETH_HEADER.pack(dst_mac, src_mac, kind) + body).ljust(MIN_FRAME, b"\0")


def ipxwrapper(
    dst_node: bytes,
    dst_socket: int,
    src_node: bytes,
    src_socket: int,
    data: bytes,
    *,
    ptype: int = 0,
    dst_net: bytes = ZERO_NET,
    src_net: bytes = ZERO_NET,
) -> bytes:
    """An IPXWrapper datagram: the 27-byte header (size = data bytes), then the data."""
    head = IPXWRAPPER_HEADER.pack(
        ptype, dst_net, dst_node, dst_socket, src_net, src_node, src_socket, len(data)
    )
    return head + data


def batch(dst_node: bytes, src_node: bytes, inner: list[bytes]) -> bytes:
    """A coalesced batch as IPXWrapper's DOSBox mode sends it: an IPX packet, type 2, sockets
    0, whose data is the inner packets."""
    return ipx(dst_node, 0, src_node, 0, b"".join(inner), ptype=2)


def batch_ipxwrapper(dst_node: bytes, src_node: bytes, inner: list[bytes]) -> bytes:
    """The same batch in IPXWrapper's own 27-byte-header format (UDP 54792)."""
    return ipxwrapper(dst_node, 0, src_node, 0, b"".join(inner), ptype=2)


def beacon_v1(bridge_id: bytes, peers: list[bytes], dst_node: bytes = BROADCAST) -> bytes:
    """A version-1 ipxbridge beacon as its bridges send it: PEP, socket 0x9B1B both ends,
    source node = the bridge id, data = magic, count, peer identities."""
    data = BEACON_MAGIC_V1 + bytes((len(peers),)) + b"".join(peers)
    return ipx(dst_node, BEACON_SOCKET, bridge_id, BEACON_SOCKET, data, ptype=4)


def beacon_v1_peers(data: bytes) -> list[bytes]:
    """The peer identities listed in a version-1 beacon's data (after the IPX header)."""
    if not data.startswith(BEACON_MAGIC_V1) or len(data) <= len(BEACON_MAGIC_V1):
        return []
    count = data[len(BEACON_MAGIC_V1)]
    body = data[len(BEACON_MAGIC_V1) + 1 : len(BEACON_MAGIC_V1) + 1 + 6 * count]
    return [body[i : i + 6] for i in range(0, len(body) - 5, 6)]


def with_source(packet: bytes, src_node: bytes) -> bytes:
    """An IPX packet with its source node replaced (a forger's edit of a heard packet)."""
    return packet[:22] + src_node + packet[28:]


def ipx_to_ipxwrapper(packet: bytes) -> bytes:
    """The IPXWrapper form of an IPX packet (what a bridge's IPXWrapper port sends)."""
    _, _, _, ptype, dnet, dnode, dsock, snet, snode, ssock = IPX_HEADER.unpack_from(packet)
    return ipxwrapper(
        dnode,
        dsock,
        snode,
        ssock,
        packet[IPX_HEADER.size :],
        ptype=ptype,
        dst_net=dnet,
        src_net=snet,
    )


def ipxwrapper_to_ipx(datagram: bytes) -> bytes:
    """The IPX form of an IPXWrapper datagram."""
    ptype, dnet, dnode, dsock, snet, snode, ssock, _ = IPXWRAPPER_HEADER.unpack_from(datagram)
    data = datagram[IPXWRAPPER_HEADER.size :]
    return ipx(dnode, dsock, snode, ssock, data, ptype=ptype, dst_net=dnet, src_net=snet)


# --- reading frames ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Seen:
    """One frame as a tap or a station read it.

    ``kind`` is a framing for native IPX, ``ipxwrapper`` (UDP 54792), ``udp213`` (RFC 1234
    or the tunnel), ``udp`` / ``ip`` / ``arp`` / ``other`` for the rest. The IPX fields are
    those of the IPX packet inside (IPXWrapper datagrams converted), zero when there is none.
    """

    at: float
    port: str
    kind: str
    src_mac: bytes
    dst_mac: bytes
    size: int  # frame bytes
    payload: int  # IPX packet bytes, or UDP payload bytes for other UDP
    ip_src: str = ""
    ip_dst: str = ""
    dst_node: bytes = b""
    src_node: bytes = b""
    dst_socket: int = 0
    src_socket: int = 0
    checksum: int = 0
    tag: tuple[int, int] | None = None
    packet: bytes = b""  # the IPX packet (beacons and batches are kept for the forger)

    @property
    def is_ipx(self) -> bool:
        """A native IPX frame, an IPXWrapper datagram or an IPX-over-UDP datagram."""
        return self.kind in FRAMINGS or self.kind in ("ipxwrapper", "udp213")

    @property
    def is_beacon(self) -> bool:
        """An ipxbridge beacon, any version."""
        return self.is_ipx and self.dst_socket == BEACON_SOCKET


def read_frame(raw: bytes, at: float, port: str, keep: bool = False) -> Seen:
    """Classify one Ethernet frame (``keep``: hold its IPX packet in ``Seen.packet``)."""
    if len(raw) < ETH_HEADER.size:
        return Seen(at, port, "other", b"", b"", len(raw), 0)
    dst, src, kind_field = ETH_HEADER.unpack_from(raw)
    packet = b""
    kind = "other"
    ip_src = ip_dst = ""
    payload = 0
    if kind_field == ETH_P_IPX:
        kind, packet = ETHERNET_II, raw[14:]
    elif 0 < kind_field <= 1500:
        body = raw[14 : 14 + kind_field]
        if body[:2] == b"\xff\xff":
            kind, packet = RAW_8023, body
        elif body[:3] == _LLC:
            kind, packet = LLC, body[3:]
        elif body[:8] == _SNAP:
            kind, packet = SNAP, body[8:]
    elif kind_field == ETH_P_IP and len(raw) >= 34:
        ihl = (raw[14] & 0x0F) * 4
        ip_src, ip_dst = socket.inet_ntoa(raw[26:30]), socket.inet_ntoa(raw[30:34])
        kind = "ip"
        if raw[23] == socket.IPPROTO_UDP and len(raw) >= 14 + ihl + 8:
            sport, dport, ulen = struct.unpack_from("!HHH", raw, 14 + ihl)
            udp = raw[14 + ihl + 8 : 14 + ihl + ulen]
            kind, payload = "udp", len(udp)
            if dport == IPXWRAPPER_PORT and len(udp) >= IPXWRAPPER_HEADER.size:
                kind, packet = "ipxwrapper", ipxwrapper_to_ipx(udp)
            elif RFC1234_PORT in (sport, dport):
                kind, packet = "udp213", udp
    elif kind_field == 0x0806:
        kind = "arp"
    if len(packet) < IPX_HEADER.size:
        return Seen(at, port, kind, src, dst, len(raw), payload, ip_src, ip_dst, tag=find_tag(raw))
    checksum, length, _, _, _, dnode, dsock, _, snode, ssock = IPX_HEADER.unpack_from(packet)
    if kind in FRAMINGS and IPX_HEADER.size <= length <= len(packet):
        packet = packet[:length]  # Ethernet padding is not part of the packet
    return Seen(
        at,
        port,
        kind,
        src,
        dst,
        len(raw),
        len(packet),
        ip_src,
        ip_dst,
        dnode,
        snode,
        dsock,
        ssock,
        checksum,
        find_tag(packet),
        packet if keep or dsock == BEACON_SOCKET or ssock == 0 else b"",
    )
