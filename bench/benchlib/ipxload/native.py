"""Native IPX stations for the mixed-ports bench: one AF_PACKET socket per station on a veth.

A station behaves like a NetWare or Windows 9x IPX stack on one Ethernet card (docs/protocols.md
section 3.1): its IPX node is its MAC, it speaks one fixed framing, it sends a
broadcast to ``ff:ff:ff:ff:ff:ff`` and a unicast to the destination node taken as a MAC (for a
DOSBox client that is its IPv4 + port pseudo-MAC, which the bridge catches promiscuously), and
it takes in only frames addressed to its MAC or to the broadcast MAC, in its own framing, as a
card without promiscuous mode and a stack bound to one frame type would.

The framing codec here is written from the frame layouts (IEEE 802.3, 802.2 LLC, SNAP with the
0x8137 type) and deliberately does not use ``ipxbridge.wire.ethernet``: the stations judge what
the bridge puts on the wire with their own reading of it.

The segment itself (``build_segment``) is a Linux bridge device in its own namespace, like a
switch: one port goes to the bridge under test, one veth per station. Its multicast snooping is
off, so a frame to a DOSBox pseudo-MAC (multicast bit set: 127.x.x.x) floods as on a plain
switch.
"""

import contextlib
import socket
import struct
from typing import Final

from benchlib import BenchError
from benchlib.netns import inside, sh
from ipxbridge.wire import ipx

FRAMINGS: Final = ("ethernet_ii", "802.3", "802.2", "snap")  # the names --ipx-iface uses
DEFAULT_FRAMING: Final = "802.2"  # NetWare 3.12's default frame type
SEGMENT_IF: Final = "seg0"  # the bridge's port, in the bridge's namespace
UPLINK_IF: Final = "up0"  # its peer, a port of the switch
SWITCH_IF: Final = "br0"
STATION_MAC_PREFIX: Final = b"\x02\x1b\xee\x00\x00"  # locally administered, unicast

ETH_P_ALL: Final = 0x0003
SOL_PACKET: Final = 263
PACKET_STATISTICS: Final = 6
PACKET_IGNORE_OUTGOING: Final = 23  # Linux 4.20+
_TPACKET_STATS: Final = struct.Struct("II")  # tp_packets, tp_drops
MIN_FRAME: Final = 60  # without the FCS; a real card pads shorter frames
_BROADCAST_MAC: Final = b"\xff" * 6
_LLC: Final = b"\xe0\xe0\x03"
_SNAP: Final = b"\xaa\xaa\x03\x00\x00\x00\x81\x37"
_ETHERTYPE_IPX: Final = b"\x81\x37"
_RAW_CHECKSUM: Final = b"\xff\xff"
FRAME_BUFSIZE: Final = 2048
SOCKET_BUFFER: Final = 4 << 20


def station_if(index: int) -> str:
    """The interface of native station ``index`` in the segment's namespace."""
    return f"st{index}"


def station_mac(index: int) -> bytes:
    """The MAC (and so the IPX node) of native station ``index``."""
    return STATION_MAC_PREFIX + bytes([index + 1])


def _mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def frame_parts(framing: str, dst: bytes, src: bytes, ipx_len: int) -> tuple[bytes, bytes]:
    """What goes before and after an IPX packet of ``ipx_len`` bytes: the Ethernet header (with
    the 802.2 or SNAP header) and the padding up to the 60-byte minimum."""
    if framing == "ethernet_ii":
        head = dst + src + _ETHERTYPE_IPX
    elif framing == "802.3":
        head = dst + src + ipx_len.to_bytes(2, "big")  # raw: the IPX checksum FF FF follows
    elif framing == "802.2":
        head = dst + src + (ipx_len + len(_LLC)).to_bytes(2, "big") + _LLC
    elif framing == "snap":
        head = dst + src + (ipx_len + len(_SNAP)).to_bytes(2, "big") + _SNAP
    else:
        raise ValueError(f"unknown framing {framing!r}")
    return head, bytes(max(0, MIN_FRAME - len(head) - ipx_len))


def _header_len(framing: str) -> int:
    return 14 + {"ethernet_ii": 0, "802.3": 0, "802.2": len(_LLC), "snap": len(_SNAP)}[framing]


def ipx_in_frame(frame: bytes, framing: str, offset: int) -> bytes | None:
    """The IPX packet in ``frame`` if it is in ``framing`` (``offset`` = its header length),
    trimmed to the IPX length (padding dropped); None for anything else."""
    kind = frame[12:14]
    if framing == "ethernet_ii":
        if kind != _ETHERTYPE_IPX:
            return None
    else:
        length = int.from_bytes(kind, "big")
        if length > 1500 or 14 + length > len(frame):
            return None
        if framing == "802.3" and frame[14:16] != _RAW_CHECKSUM:
            return None
        if framing == "802.2" and frame[14:17] != _LLC:
            return None
        if framing == "snap" and frame[14:22] != _SNAP:
            return None
    if len(frame) < offset + ipx.HEADER_LEN:
        return None
    ipx_len = int.from_bytes(frame[offset + 2 : offset + 4], "big")
    if ipx_len < ipx.HEADER_LEN or offset + ipx_len > len(frame):
        return None
    return frame[offset : offset + ipx_len]


class NativeStation:
    """A native IPX station: an AF_PACKET socket on ``st<index>`` in namespace ``ns``."""

    kind: Final = "native"
    __slots__ = ("_offset", "framing", "ignored", "node", "port", "sock")

    def __init__(self, ns: str, index: int, framing: str) -> None:
        if framing not in FRAMINGS:
            raise BenchError(f"unknown framing {framing!r}")
        with inside(ns):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            # A card does not hear its own frames; without this its socket would see them.
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            sock.bind((station_if(index), ETH_P_ALL))
        except OSError as exc:
            sock.close()
            raise BenchError(f"native station {index} in {ns}: {exc}") from exc
        self.sock = sock
        self.node: bytes = sock.getsockname()[4]
        self.framing = framing
        self.port = -1  # no UDP port: its drops come from drops()
        self.ignored = 0  # frames for another MAC or in another framing
        self._offset = _header_len(framing)
        self.drops()  # reading the statistics resets them

    def frame_parts(self, dst_node: bytes, ipx_len: int) -> tuple[bytes, bytes]:
        """Header and padding around an IPX packet to ``dst_node`` (a node is a MAC)."""
        dst = _BROADCAST_MAC if dst_node == ipx.BROADCAST_NODE else dst_node
        return frame_parts(self.framing, dst, self.node, ipx_len)

    def recv_ipx(self) -> bytes | None:
        """Read one frame: the IPX packet in it if the card and the stack would take it, else
        None. Socket errors (BlockingIOError, TimeoutError) propagate."""
        frame = self.sock.recv(FRAME_BUFSIZE)
        dst = frame[:6]
        if dst not in (self.node, _BROADCAST_MAC):
            self.ignored += 1
            return None
        packet = ipx_in_frame(frame, self.framing, self._offset)
        if packet is None:
            self.ignored += 1
        return packet

    def answer_if_ping(self, _data: bytes) -> bool:
        """A native stack has no DOSBox keepalive to answer."""
        return False

    def drops(self) -> int:
        """Frames the kernel dropped at this socket since the last call (PACKET_STATISTICS)."""
        raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _TPACKET_STATS.size)
        return int(_TPACKET_STATS.unpack(raw)[1])


def build_segment(bridge_ns: str, segment_ns: str, stations: int) -> None:
    """One Ethernet segment: ``SEGMENT_IF`` in ``bridge_ns`` (the bridge's port) plugged into a
    Linux bridge in ``segment_ns``, with one veth per native station (``st<i>``, MAC
    ``station_mac(i)``). IPv6 is off on the new links (no router solicitations or MLD reports
    on the segment). Both namespaces must exist; deleting them removes it all.

    Raises:
        BenchError: a command failed (no bridge or veth support, a name taken).
    """
    for ns in (bridge_ns, segment_ns):
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
    sh(
        *("ip", "link", "add", SEGMENT_IF, "netns", bridge_ns, "type", "veth"),
        *("peer", "name", UPLINK_IF, "netns", segment_ns),
    )
    batch = [
        f"link add {SWITCH_IF} type bridge stp_state 0 mcast_snooping 0",
        f"link set {UPLINK_IF} master {SWITCH_IF} up",
    ]
    for index in range(stations):
        mac = _mac_text(station_mac(index))
        batch += [
            f"link add {station_if(index)} address {mac} type veth peer name sp{index}",
            f"link set sp{index} master {SWITCH_IF} up",
            f"link set {station_if(index)} up",
        ]
    batch.append(f"link set {SWITCH_IF} up")
    sh("ip", "-n", segment_ns, "-batch", "-", stdin="\n".join(batch) + "\n")
    sh("ip", "-n", bridge_ns, "link", "set", SEGMENT_IF, "up")
