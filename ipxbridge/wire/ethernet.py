"""Native IPX in Ethernet frames: the four Novell framings (``ethernet`` ports).

Contract:

* Rule 1. A frame is read without its FCS: destination MAC (6), source MAC (6), then a 16-bit
  big-endian length/type field. A value of 0x8137 is the IPX EtherType (Ethernet II); a value
  up to 1500 is an IEEE 802.3 length, and the first bytes of the 802.3 data say which of the
  three 802.3 framings it is: ``FF FF`` (the IPX checksum) is Novell's raw 802.3, ``E0 E0 03``
  is 802.2 LLC, ``AA AA 03 00 00 00 81 37`` is SNAP. Anything else is not IPX. This is the
  classic dispatch order of NetWare and Wireshark; raw is tested first because a raw frame
  has no LLC header at all (``docs/protocols.md`` section 3.1: the checksum is always
  0xFFFF, which is what makes raw 802.3 recognisable).
* Rule 2. ``parse_frame`` returns the IPX packet trimmed to the IPX Length field, as a
  zero-copy ``memoryview``: frames shorter than 60 bytes are padded by the sender, and the
  padding is not part of the packet (docs/protocols.md 3.1: "Wireshark trims the payload to this
  value"). It judges only the framing and the lengths; the IPX header itself (checksum,
  hops) is judged by ``wire.ipx.parse_packet`` on the trimmed packet, as for UDP ports.
* Rule 3. ``build_frame`` never truncates: a packet larger than ``max_ipx_len`` for the framing
  is a caller bug (``ValueError``); callers check ``max_ipx_len`` first and drop, counted.

Raises: ``parse_frame`` raises only ``EthernetError`` (a ``WireError``) for remote input;
``build_frame`` and ``max_ipx_len`` raise ``ValueError`` on local misuse. Which framing each
station speaks is learned above the codec (``policy/framings.py``).
"""

import builtins
import enum
import struct
from dataclasses import dataclass
from typing import Final, get_args

from ipxbridge.wire.errors import EthernetReason, WireError
from ipxbridge.wire.ipx import CHECKSUM_NONE
from ipxbridge.wire.ipx import HEADER_LEN as IPX_HEADER_LEN

# Closed set of drop reasons for a frame that is not usable native IPX (owned by wire/errors).
ETHERNET_REASONS: Final[tuple[EthernetReason, ...]] = get_args(EthernetReason)


class EthernetError(WireError):
    """A received frame is not well-formed native IPX.

    Attributes:
        reason: one of ``ETHERNET_REASONS``.
    """

    def __init__(self, reason: EthernetReason, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason: EthernetReason = reason


class Framing(enum.StrEnum):
    """How an IPX packet sits in an Ethernet frame (NetWare frame type names in comments)."""

    ETHERNET_II = "ethernet_ii"  # ETHERNET_II: EtherType 0x8137
    RAW_8023 = "802.3"  # ETHERNET_802.3 ("raw"): 802.3 length, then the IPX packet
    LLC = "802.2"  # ETHERNET_802.2: 802.3 length, LLC E0 E0 03, then the IPX packet
    SNAP = "snap"  # ETHERNET_SNAP: 802.3 length, LLC AA AA 03, SNAP 00 00 00 81 37


# IEEE 802.3 frame: destination, source, length/type (big-endian).
_ETH_HEADER: Final = struct.Struct("!6s6sH")
ETH_HEADER_LEN: Final = _ETH_HEADER.size  # 14
MIN_FRAME_LEN: Final = 60  # 64-byte minimum frame less the 4-byte FCS (IEEE 802.3 clause 3)
MAX_8023_LENGTH: Final = 1500  # length/type <= 1500 is a length (IEEE 802.3 clause 3.2.6)
ETHERTYPE_IPX: Final = 0x8137  # Novell IPX EtherType (IEEE EtherType registry)
DEFAULT_MTU: Final = 1500

_RAW_PREFIX: Final = CHECKSUM_NONE.to_bytes(2, "big")  # raw 802.3: the IPX checksum FF FF
_LLC_HEADER: Final = b"\xe0\xe0\x03"  # DSAP E0, SSAP E0 (Novell), control 03 (UI)
_SNAP_HEADER: Final = b"\xaa\xaa\x03\x00\x00\x00\x81\x37"  # LLC AA AA 03, OUI 0, type 0x8137
_IPX_MAX_LEN: Final = 0xFFFF  # the IPX Length field is 16 bits (docs/protocols.md 3.1)

# Bytes between the Ethernet header and the IPX packet, per framing.
_ENCAPSULATION: Final[dict[Framing, bytes]] = {
    Framing.ETHERNET_II: b"",
    Framing.RAW_8023: b"",
    Framing.LLC: _LLC_HEADER,
    Framing.SNAP: _SNAP_HEADER,
}

BROADCAST_MAC: Final = b"\xff" * 6
MAC_LEN: Final = 6


@dataclass(frozen=True)
class EthernetIpx:
    """One native IPX frame: MACs are 6 raw bytes; ``packet`` is the whole IPX packet."""

    dst_mac: bytes
    src_mac: bytes
    framing: Framing
    # builtins.: mypyc looks a dataclass field's type up in the module's globals, not builtins
    packet: builtins.memoryview


def parse_frame(frame: bytes | memoryview) -> EthernetIpx:
    """Decode an Ethernet frame (no FCS) carrying IPX in any of the four framings.

    Args:
        frame: the frame as an AF_PACKET socket returns it, padding included or not.

    Returns:
        The MACs, the framing and the IPX packet trimmed to its Length field.

    Raises:
        EthernetError: ``eth_truncated``, ``eth_not_ipx``, ``eth_bad_8023_length`` or
            ``eth_bad_ipx_length``.
    """
    # Offsets into the frame rather than nested views: this runs once per frame read from a
    # promiscuous interface, on the IPX switch's latency path (docs/benchmarks.md, mixed ports).
    data = bytes(frame) if isinstance(frame, memoryview) else frame
    size = len(data)
    if size < ETH_HEADER_LEN:
        raise EthernetError("eth_truncated", f"{size} bytes, an Ethernet header needs 14")
    length_or_type = (data[12] << 8) | data[13]
    if length_or_type == ETHERTYPE_IPX:
        framing, start, end = Framing.ETHERNET_II, ETH_HEADER_LEN, size
    elif length_or_type <= MAX_8023_LENGTH:
        # 802.3: the field counts the LLC data; padding may follow it, so a shorter frame
        # is the only lie we can see. A longer one is trimmed below (rule 2).
        end = ETH_HEADER_LEN + length_or_type
        if end > size:
            raise EthernetError(
                "eth_bad_8023_length",
                f"802.3 length {length_or_type} but the frame carries {size - ETH_HEADER_LEN}",
            )
        head = data[ETH_HEADER_LEN : min(end, ETH_HEADER_LEN + 8)]
        if head.startswith(_RAW_PREFIX):
            framing, start = Framing.RAW_8023, ETH_HEADER_LEN
        elif head.startswith(_LLC_HEADER):
            framing, start = Framing.LLC, ETH_HEADER_LEN + len(_LLC_HEADER)
        elif head == _SNAP_HEADER:
            framing, start = Framing.SNAP, ETH_HEADER_LEN + len(_SNAP_HEADER)
        else:
            raise EthernetError("eth_not_ipx", f"802.3 data starts {head.hex()}")
    else:
        # 1501..1535 is undefined, anything else another EtherType (IPv4, ARP, ...).
        raise EthernetError("eth_not_ipx", f"length/type 0x{length_or_type:04x}")
    available = end - start
    if available < IPX_HEADER_LEN:
        raise EthernetError(
            "eth_truncated", f"{available} bytes of IPX in {framing}, the header needs 30"
        )
    ipx_length = (data[start + 2] << 8) | data[start + 3]  # docs/protocols.md 3.1: offset 2
    if not IPX_HEADER_LEN <= ipx_length <= available:
        raise EthernetError(
            "eth_bad_ipx_length",
            f"IPX length {ipx_length} but {framing} carries {available} bytes",
        )
    packet = memoryview(data)[start : start + ipx_length]
    return EthernetIpx(data[:6], data[6:12], framing, packet)


def max_ipx_len(framing: Framing, mtu: int = DEFAULT_MTU) -> int:
    """The largest IPX packet (header included) one frame of ``framing`` carries.

    The 802.3 framings are capped at 1500 bytes of data whatever the MTU, since a larger
    length field would read as an EtherType (rule 1); LLC and SNAP also spend 3 and 8 of them.

    Raises:
        ValueError: the MTU cannot carry even an IPX header in this framing.
    """
    data = mtu if framing is Framing.ETHERNET_II else min(mtu, MAX_8023_LENGTH)
    limit = min(data - len(_ENCAPSULATION[framing]), _IPX_MAX_LEN)
    if limit < IPX_HEADER_LEN:
        raise ValueError(f"MTU {mtu} cannot carry an IPX header in {framing}")
    return limit


def build_frame(
    dst_mac: bytes,
    src_mac: bytes,
    framing: Framing,
    ipx_packet: bytes | memoryview,
    *,
    mtu: int = DEFAULT_MTU,
) -> bytes:
    """Encode an IPX packet as an Ethernet frame (no FCS), zero-padded to 60 bytes.

    Raises:
        ValueError: a MAC is not 6 bytes, the packet is shorter than an IPX header or does
            not start with FF FF in raw 802.3, or it exceeds ``max_ipx_len(framing, mtu)``
            (drop it instead, rule 3).
    """
    if len(dst_mac) != MAC_LEN or len(src_mac) != MAC_LEN:
        raise ValueError("MAC addresses are 6 bytes")
    size = len(ipx_packet)
    if size < IPX_HEADER_LEN:
        raise ValueError(f"{size} bytes is not an IPX packet")
    if size > max_ipx_len(framing, mtu):
        raise ValueError(f"IPX packet of {size} bytes exceeds {framing} at MTU {mtu}")
    if framing is Framing.RAW_8023 and bytes(ipx_packet[:2]) != _RAW_PREFIX:
        # Receivers recognise raw 802.3 by the checksum FF FF alone (rule 1).
        raise ValueError("raw 802.3 needs the IPX checksum 0xFFFF")
    encapsulation = _ENCAPSULATION[framing]
    # The 802.3 length counts encapsulation and packet, never the padding.
    ethernet_ii = framing is Framing.ETHERNET_II
    length_or_type = ETHERTYPE_IPX if ethernet_ii else len(encapsulation) + size
    frame = b"".join(
        (_ETH_HEADER.pack(dst_mac, src_mac, length_or_type), encapsulation, ipx_packet)
    )
    return frame.ljust(MIN_FRAME_LEN, b"\x00")
