"""Captured packets down to their transport payload: link layer, IPv4, then UDP or TCP.

Two pure pieces for ``ipxbridge decode --pcap``:

* :func:`decode_link` takes one captured packet and its link type (Ethernet with or without
  one 802.1Q tag, Linux cooked v1 and v2, raw IPv4) and yields the transport (udp/tcp),
  addresses, ports and payload, or the reason it cannot. A packet that is neither UDP nor
  TCP (ICMP, IGMP, ARP, ICMPv6, ...) is no failure: its ``other`` says what it carries.
* :func:`read_pcap` reads a classic libpcap file (both byte orders, micro- or nanosecond
  timestamps). pcapng files are read by ``ipxbridge.io.capture``, which wraps a library and
  hands each packet to :func:`decode_link`.

Contract: never raises anything but ``PcapError`` (for the file), whose ``reason`` is one of
``PCAP_REASONS``, and never fails a whole file for one bad record: such a record is returned
as a ``Frame`` with ``error`` set.
"""

import ipaddress
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal, get_args

from ipxbridge.errors import IpxbridgeError

# Link types: https://www.tcpdump.org/linktypes.html (the same numbers in pcap and pcapng)
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101  # also 12 and 14 on some systems
LINKTYPE_RAW_ALIASES: Final = frozenset({12, 14, 101, 228})
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_LINUX_SLL2: Final = 276
ETHERTYPE_IPV4: Final = 0x0800
ETHERTYPE_ARP: Final = 0x0806
ETHERTYPE_VLAN: Final = 0x8100
ETHERTYPE_IPV6: Final = 0x86DD
IPPROTO_TCP: Final = 6
IPPROTO_UDP: Final = 17
IPV6_FRAGMENT: Final = 44
# IPv6 extension headers that say only where the next one is (RFC 8200 4.3, 4.4, 4.6)
IPV6_SKIPPABLE: Final = frozenset({0, 43, 60})
IP_PROTOCOL_NAMES: Final = {
    1: "ICMP",
    2: "IGMP",
    47: "GRE",
    50: "ESP",
    51: "AH",
    58: "ICMPv6",
    89: "OSPF",
    103: "PIM",
    112: "VRRP",
    132: "SCTP",
}  # IANA protocol numbers

PcapReason = Literal["too_short", "bad_magic", "truncated", "malformed", "unsupported"]
"""Why a whole capture file is unreadable:

* ``too_short``: shorter than a classic pcap file header;
* ``bad_magic``: neither pcap nor pcapng (or a pcapng byte-order magic that is neither);
* ``truncated``: a pcapng file that ends inside a block before its first packet;
* ``malformed``: a pcapng block that does not decode, before the first packet;
* ``unsupported``: a pcapng section of another major version than 1.
"""

PCAP_REASONS: Final[tuple[PcapReason, ...]] = get_args(PcapReason)


class PcapError(IpxbridgeError):
    """The capture file is unreadable; ``str()`` is the one-line message for the user.

    Attributes:
        reason: machine-readable cause, one of ``PCAP_REASONS``.
    """

    def __init__(self, reason: PcapReason, message: str) -> None:
        super().__init__(message)
        self.reason: PcapReason = reason


@dataclass(frozen=True)
class Frame:
    """One captured record, decoded down to its transport payload."""

    number: int
    timestamp: float | None  # seconds since the epoch; None: the record carries none
    transport: str | None = None  # "udp" | "tcp" | None
    src: str = ""
    dst: str = ""
    sport: int = 0
    dport: int = 0
    payload: bytes = b""
    error: str | None = None  # why this record could not be decoded
    other: str | None = None  # neither UDP nor TCP: what it carries ("ICMP", "ARP", ...)


def read_pcap(data: bytes) -> Iterator[Frame]:
    """Yield every record of a classic pcap file.

    Raises:
        PcapError: a truncated global header (``too_short``) or an unknown magic
            (``bad_magic``; pcapng too: ``ipxbridge.io.capture.read_capture`` reads both).
    """
    if len(data) < 24:
        raise PcapError("too_short", "file too short for a pcap header")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    elif magic == b"\x0a\x0d\x0d\x0a":
        raise PcapError("bad_magic", "a pcapng file, not classic pcap")
    else:
        raise PcapError("bad_magic", "not a pcap file (bad magic)")
    nanos = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack_from(endian + "I", data, 20)[0] & 0x0FFFFFFF
    record = struct.Struct(endian + "IIII")
    offset = 24
    number = 0
    while offset + record.size <= len(data):
        number += 1
        sec, frac, caplen, _origlen = record.unpack_from(data, offset)
        offset += record.size
        ts = sec + frac / (1e9 if nanos else 1e6)
        packet = data[offset : offset + caplen]
        offset += caplen
        if len(packet) < caplen:
            yield Frame(number, ts, error="truncated record")
            return
        yield decode_link(number, ts, linktype, packet)


def decode_link(number: int, ts: float | None, linktype: int, pkt: bytes) -> Frame:
    """One captured packet of link type ``linktype``, down to its UDP or TCP payload.

    Never raises: a packet that does not decode is a ``Frame`` with ``error`` set.
    """
    if linktype == LINKTYPE_ETHERNET:
        if len(pkt) < 14:
            return Frame(number, ts, error="truncated Ethernet header")
        ethertype = int.from_bytes(pkt[12:14], "big")
        start = 14
        if ethertype == ETHERTYPE_VLAN and len(pkt) >= 18:
            ethertype = int.from_bytes(pkt[16:18], "big")
            start = 18
    elif linktype == LINKTYPE_LINUX_SLL:
        if len(pkt) < 16:
            return Frame(number, ts, error="truncated Linux cooked header")
        ethertype = int.from_bytes(pkt[14:16], "big")
        start = 16
    elif linktype == LINKTYPE_LINUX_SLL2:
        if len(pkt) < 20:
            return Frame(number, ts, error="truncated Linux cooked v2 header")
        ethertype = int.from_bytes(pkt[0:2], "big")
        start = 20
    elif linktype in LINKTYPE_RAW_ALIASES:
        ethertype, start = ETHERTYPE_IPV4, 0
    else:
        return Frame(number, ts, error=f"unsupported link type {linktype}")
    if ethertype == ETHERTYPE_ARP:
        return Frame(number, ts, other="ARP")
    if ethertype == ETHERTYPE_IPV6:
        return _classify_ipv6(number, ts, pkt[start:])
    if ethertype != ETHERTYPE_IPV4:
        return Frame(number, ts, error=f"not IPv4 (ethertype 0x{ethertype:04x})")
    return _decode_ipv4(number, ts, pkt[start:])


def _protocol_name(proto: int) -> str:
    return IP_PROTOCOL_NAMES.get(proto, f"IP protocol {proto}")


def _classify_ipv6(number: int, ts: float | None, ip: bytes) -> Frame:
    """IPv6 is not decoded; only what is neither UDP nor TCP is told apart (and skipped)."""
    if len(ip) < 40 or ip[0] >> 4 != 6:
        return Frame(number, ts, error="not an IPv6 packet")
    proto, pos = ip[6], 40
    while proto in IPV6_SKIPPABLE and pos + 2 <= len(ip):
        proto, pos = ip[pos], pos + (ip[pos + 1] + 1) * 8
    if proto in IPV6_SKIPPABLE:
        return Frame(number, ts, error="truncated IPv6 extension header")
    if proto in (IPPROTO_UDP, IPPROTO_TCP, IPV6_FRAGMENT):
        # it may hold what we look for, and we cannot read it: a real failure
        return Frame(number, ts, error="IPv6 UDP or TCP: only IPv4 is decoded")
    return Frame(number, ts, other=_protocol_name(proto))


def _decode_ipv4(number: int, ts: float | None, ip: bytes) -> Frame:
    if len(ip) < 20 or ip[0] >> 4 != 4:
        return Frame(number, ts, error="not an IPv4 packet")
    ihl = (ip[0] & 0x0F) * 4
    total = int.from_bytes(ip[2:4], "big")
    if ihl < 20 or total < ihl or len(ip) < ihl:
        return Frame(number, ts, error="bad IPv4 header length")
    proto = ip[9]
    if proto not in (IPPROTO_UDP, IPPROTO_TCP):
        return Frame(number, ts, other=_protocol_name(proto))
    frag = int.from_bytes(ip[6:8], "big")
    if frag & 0x1FFF:
        return Frame(number, ts, error="IPv4 fragment (not reassembled)")
    src = str(ipaddress.IPv4Address(ip[12:16]))
    dst = str(ipaddress.IPv4Address(ip[16:20]))
    body = ip[ihl : min(total, len(ip))]
    if proto == IPPROTO_UDP:
        if len(body) < 8:
            return Frame(number, ts, error="truncated UDP header")
        sport, dport, ulen = struct.unpack_from("!HHH", body)
        return Frame(number, ts, "udp", src, dst, sport, dport, body[8 : max(8, ulen)])
    if len(body) < 20:
        return Frame(number, ts, error="truncated TCP header")
    sport, dport = struct.unpack_from("!HH", body)
    doff = (body[12] >> 4) * 4
    if doff < 20 or doff > len(body):
        return Frame(number, ts, error="bad TCP header length")
    return Frame(number, ts, "tcp", src, dst, sport, dport, body[doff:])
