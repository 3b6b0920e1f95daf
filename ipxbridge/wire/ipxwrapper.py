"""IPXWrapper's native UDP encapsulation, and its coalesced packets (docs/protocols.md section 6).

IPXWrapper (solemnwarning/ipxwrapper) in its default mode does not put a Novell IPX header on
the wire. It sends its own packed ``struct ipx_packet`` as the UDP payload on port 54792:

    off size field
      0    1 ptype       packet type
      1    4 dst_net
      5    6 dst_node
     11    2 dst_sock    big-endian, like every IPX socket
     13    4 src_net
     17    6 src_node
     23    2 src_sock
     25    2 size        big-endian: bytes of *data* only, the 27-byte header excluded
     27    n data

Contract:

* Rule 1. ``parse_ipxwrapper`` accepts a datagram only when it holds the 27-byte header and
  its ``size`` field equals the number of bytes after the header, exactly. That is the check
  IPXWrapper's own receiver makes (``router.c``: ``size + sizeof(ipx_packet) - 1 != len`` is
  dropped), so ``size`` counts only the data and trailing bytes are an error, not padding.
  A datagram shorter than the header raises ``truncated``; any other disagreement between
  ``size`` and the datagram (short or trailing bytes) raises ``bad_length``, as
  ``ipx.parse_header`` does for the IPX Length field. Data longer than an IPX packet can
  carry in one UDP datagram (``MAX_DATA``) is ``bad_length`` too, so every packet this module
  accepts converts to IPX.
* Rule 2. There is no checksum and no hop count in this format. Converting to IPX
  (``ipxwrapper_to_ipx``) writes checksum 0xFFFF, Length = 30 + data and transport control
  0: a packet entering the IPX network from an IPXWrapper station starts its journey there,
  as a sender's packet does (docs/protocols.md 3.1). Converting from IPX (``ipx_to_ipxwrapper``)
  drops the hop count: IPXWrapper stations are end hosts, so the count ends with them. Loop
  protection across IPXWrapper segments is therefore the switch's duplicate filter, not the
  hop limit (docs/reliability.md R19).
* Rule 3. Packets from source socket 0 are IPXWrapper's internal "magic" packets
  (``IpxWrapperMagic``): type 1 asks for SPX-over-TCP addresses, type 2 is a coalesced
  batch. They are decoded like any packet; ``magic`` names them and the caller decides.
* Rule 4. ``unpack_coalesced`` splits a coalesced packet's data into its complete IPX packets
  (30-byte header each, sized by its Length field, checksum 0xFFFF), all or nothing: data
  over IPXWrapper's 1384-byte bound is ``batch_too_large``; a trailing partial packet
  (header or data) is ``batch_truncated``; a Length below 30 is ``batch_bad_length``; a
  checksum other than 0xFFFF is ``batch_bad_checksum``; a magic packet inside is
  ``batch_nested``. Nothing is ever unpacked twice: a batch never holds another batch. With
  at least 30 bytes a packet, a batch holds at most 46 packets. The switch unpacks every
  batch where it enters (policy/switch.py rule 1); none is forwarded as a batch.

Every error raised for remote input is a ``WireError``: an ``IpxWrapperError`` (reason in
``IPXWRAPPER_REASONS``) from the datagram codec, a ``CoalescedError`` (``COALESCED_REASONS``)
from ``unpack_coalesced``. Both sets are part of ``WIRE_REASONS``, so the drops metric
already exports them. ``ValueError`` from a builder means the caller misused the API.
Anything else is a bug.
"""

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Literal, get_args

from ipxbridge.wire import ipx
from ipxbridge.wire.errors import CoalescedReason, WireError

# docs/protocols.md 6: IPXWrapper's UDP port (src/ipxwrapper.h ``#define PORT 54792``).
IPXWRAPPER_UDP_PORT: Final = 54792
# The IPX network an IPXWrapper host is on unless configured otherwise (docs/protocols.md 6).
IPXWRAPPER_DEFAULT_NET: Final = b"\x00\x00\x00\x01"

# docs/protocols.md 6, ``struct ipx_packet`` (packed): ptype, dst net/node/socket,
# src net/node/socket, size (data bytes only). Network byte order throughout.
_HEADER: Final = struct.Struct("!B4s6sH4s6sHH")
IPXWRAPPER_HEADER_LEN: Final = _HEADER.size  # 27

# The most data one packet may carry here: what still fits a 30-byte IPX header in one UDP
# datagram, so that every accepted packet converts to IPX (Rule 1). IPXWrapper's own limit
# is lower, so no genuine packet is refused.
MAX_DATA: Final = ipx.MAX_DATAGRAM - ipx.HEADER_LEN

# docs/protocols.md 6, coalescing (src/coalesce.h IPXWRAPPER_COALESCE_PACKET_MAX_SIZE): a batch
# is at most 1384 bytes of UDP payload, outer header included, so its data is always less.
# The bound is applied to the data alone, whichever outer header (30-byte IPX in DOSBox
# mode, 27-byte here) carried it.
COALESCED_MAX_SIZE: Final = 1384

# The fewest bytes an inner packet takes (its header), hence the most packets one batch holds.
COALESCED_MAX_PACKETS: Final = COALESCED_MAX_SIZE // ipx.HEADER_LEN  # 46

IpxWrapperReason = Literal["truncated", "bad_length"]
IPXWRAPPER_REASONS: Final[tuple[IpxWrapperReason, ...]] = get_args(IpxWrapperReason)
COALESCED_REASONS: Final[tuple[CoalescedReason, ...]] = get_args(CoalescedReason)


class IpxWrapperError(WireError):
    """Bytes offered as IPXWrapper UDP do not decode.

    Attributes:
        reason: one of ``IPXWRAPPER_REASONS``.
    """

    def __init__(self, reason: IpxWrapperReason, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason: IpxWrapperReason = reason


class CoalescedError(WireError):
    """The data of a coalesced batch does not split into IPX packets (Rule 4).

    Attributes:
        reason: one of ``COALESCED_REASONS``.
    """

    def __init__(self, reason: CoalescedReason, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason: CoalescedReason = reason


class IpxWrapperMagic(IntEnum):
    """Packet types of IPXWrapper's internal packets (source socket 0; docs/protocols.md 6)."""

    SPX_LOOKUP = 1  # IPX_MAGIC_SPXLOOKUP: ask a host for its SPX-over-TCP IP and port
    COALESCED = ipx.PACKET_TYPE_COALESCED  # IPX_MAGIC_COALESCED: a batch of IPX packets


@dataclass(frozen=True)
class IpxWrapperPacket:
    """One IPXWrapper UDP packet (docs/protocols.md 6).

    Networks are 4 raw bytes and nodes 6; ``data`` excludes the 27-byte header (its length is
    the ``size`` field on the wire).
    """

    packet_type: int
    dst_net: bytes
    dst_node: bytes
    dst_socket: int
    src_net: bytes
    src_node: bytes
    src_socket: int
    data: bytes | memoryview

    @property
    def is_broadcast(self) -> bool:
        """True when the destination node is the all-ones broadcast node."""
        return self.dst_node == ipx.BROADCAST_NODE

    @property
    def magic(self) -> IpxWrapperMagic | None:
        """The internal packet this is (source socket 0, known type), else None."""
        if self.src_socket != 0:
            return None
        try:
            return IpxWrapperMagic(self.packet_type)
        except ValueError:
            return None

    @property
    def is_coalesced(self) -> bool:
        """A coalesced batch: source socket 0, packet type 2 (docs/protocols.md 6)."""
        return self.magic is IpxWrapperMagic.COALESCED

    @property
    def is_spx_lookup(self) -> bool:
        """An SPX lookup: source socket 0, packet type 1 (docs/protocols.md 6)."""
        return self.magic is IpxWrapperMagic.SPX_LOOKUP


def parse_ipxwrapper(datagram: bytes | memoryview) -> IpxWrapperPacket:
    """Decode one IPXWrapper UDP payload (Rule 1).

    Args:
        datagram: the whole UDP payload received on port 54792.

    Returns:
        The packet; ``data`` is a zero-copy view of the datagram.

    Raises:
        IpxWrapperError: ``truncated`` (shorter than 27 bytes) or ``bad_length`` (the size
            field disagrees with the bytes that follow the header, or exceeds ``MAX_DATA``).
    """
    total = len(datagram)
    if total < IPXWRAPPER_HEADER_LEN:
        raise IpxWrapperError(
            "truncated", f"{total} bytes, an IPXWrapper header needs {IPXWRAPPER_HEADER_LEN}"
        )
    ptype, dnet, dnode, dsock, snet, snode, ssock, size = _HEADER.unpack_from(datagram)
    present = total - IPXWRAPPER_HEADER_LEN
    if size != present:
        # IPXWrapper's receiver drops these too (router.c); trailing bytes are not padding.
        raise IpxWrapperError("bad_length", f"size field {size} but {present} data bytes follow")
    if size > MAX_DATA:
        raise IpxWrapperError("bad_length", f"{size} data bytes do not fit an IPX packet")
    data = memoryview(datagram)[IPXWRAPPER_HEADER_LEN:]
    return IpxWrapperPacket(ptype, dnet, dnode, dsock, snet, snode, ssock, data)


def _check_fields(packet: IpxWrapperPacket) -> None:
    """Refuse a packet no wire format can hold (``ValueError``: local misuse)."""
    if not 0 <= packet.packet_type <= 0xFF:
        raise ValueError(f"packet type {packet.packet_type} is not one byte")
    if not (0 <= packet.dst_socket <= 0xFFFF and 0 <= packet.src_socket <= 0xFFFF):
        raise ValueError("IPX sockets are 2 bytes")
    if len(packet.dst_net) != 4 or len(packet.src_net) != 4:
        raise ValueError("IPX networks are 4 bytes")
    if len(packet.dst_node) != 6 or len(packet.src_node) != 6:
        raise ValueError("IPX nodes are 6 bytes")
    if len(packet.data) > MAX_DATA:
        raise ValueError(f"{len(packet.data)} data bytes exceed {MAX_DATA}")


def build_ipxwrapper(packet: IpxWrapperPacket) -> bytes:
    """Encode a packet as IPXWrapper sends it: 27-byte header, size = data length.

    Raises:
        ValueError: a field does not fit (local misuse, not remote input).
    """
    _check_fields(packet)
    head = _HEADER.pack(
        packet.packet_type,
        packet.dst_net,
        packet.dst_node,
        packet.dst_socket,
        packet.src_net,
        packet.src_node,
        packet.src_socket,
        len(packet.data),
    )
    return head + bytes(packet.data)


def ipxwrapper_to_ipx(packet: IpxWrapperPacket) -> bytes:
    """The standard 30-byte-header IPX packet carrying the same addresses, type and data.

    Checksum 0xFFFF, Length 30 + data, transport control 0 (Rule 2).

    Raises:
        ValueError: a field does not fit (local misuse; never for a parsed packet).
    """
    _check_fields(packet)
    return ipx.build_packet(
        dst_net=packet.dst_net,
        dst_node=packet.dst_node,
        dst_socket=packet.dst_socket,
        src_net=packet.src_net,
        src_node=packet.src_node,
        src_socket=packet.src_socket,
        packet_type=packet.packet_type,
        hops=0,
        payload=packet.data,
    )


def ipx_to_ipxwrapper(datagram: bytes | memoryview) -> IpxWrapperPacket:
    """Decode a standard IPX packet and carry it over to IPXWrapper's format.

    The checksum and hop count are dropped (Rule 2); ``data`` is a zero-copy view.

    Raises:
        WireError: as ``ipx.parse_header`` (``truncated``, ``bad_checksum``, ``bad_length``).
    """
    header, payload = ipx.parse_packet(datagram)
    return IpxWrapperPacket(
        packet_type=header.packet_type,
        dst_net=header.dst_net,
        dst_node=header.dst_node,
        dst_socket=header.dst_socket,
        src_net=header.src_net,
        src_node=header.src_node,
        src_socket=header.src_socket,
        data=payload,
    )


_MAGIC_TYPES: Final = frozenset(int(m) for m in IpxWrapperMagic)


def unpack_coalesced(data: bytes | memoryview) -> list[bytes]:
    """Split a coalesced batch's data into its IPX packets (Rule 4; docs/protocols.md 6).

    Args:
        data: the data of a coalesced packet (after its IPX or IPXWrapper header).

    Returns:
        Each inner packet, 30-byte IPX header included, in order; each one passes
        ``ipx.parse_header``, none is a magic packet, and there are at most
        ``COALESCED_MAX_PACKETS``. Empty data gives an empty list.

    Raises:
        CoalescedError: ``batch_too_large`` (data over 1384 bytes), ``batch_truncated``
            (the data ends inside a packet), ``batch_bad_length`` (an inner Length below
            30), ``batch_bad_checksum`` (an inner checksum other than 0xFFFF) or
            ``batch_nested`` (a magic packet inside).
    """
    view = memoryview(data)
    total = len(view)
    if total > COALESCED_MAX_SIZE:
        raise CoalescedError(
            "batch_too_large", f"{total} bytes of coalesced data exceed {COALESCED_MAX_SIZE}"
        )
    packets: list[bytes] = []
    offset = 0
    while offset < total:
        left = total - offset
        if left < ipx.HEADER_LEN:
            raise CoalescedError(
                "batch_truncated", f"{left} trailing bytes at offset {offset}, not an IPX header"
            )
        checksum, length = struct.unpack_from("!HH", view, offset)
        if length < ipx.HEADER_LEN:
            raise CoalescedError(
                "batch_bad_length", f"inner packet at offset {offset} has length {length} < 30"
            )
        if length > left:
            raise CoalescedError(
                "batch_truncated",
                f"inner packet at offset {offset} has length {length}, {left} left",
            )
        if checksum != ipx.CHECKSUM_NONE:
            raise CoalescedError(
                "batch_bad_checksum",
                f"inner packet at offset {offset} has checksum 0x{checksum:04x}",
            )
        src_socket = int.from_bytes(
            view[offset + ipx.SRC_SOCKET_OFFSET : offset + ipx.HEADER_LEN], "big"
        )
        if src_socket == 0 and view[offset + ipx.TYPE_OFFSET] in _MAGIC_TYPES:
            # IPXWrapper batches what applications send, and no application sends from
            # socket 0: a batch (or lookup) inside a batch is forged. Refusing it keeps one
            # datagram from unfolding twice.
            raise CoalescedError(
                "batch_nested", f"magic packet nested in a coalesced batch at offset {offset}"
            )
        packets.append(bytes(view[offset : offset + length]))
        offset += length
    return packets
