"""Errors raised by the wire codecs for malformed remote input.

Every ``WireError`` carries a ``reason`` from a closed set. The I/O layer catches it, counts
the datagram under ``dropped{reason}`` and carries on: a bad packet is never fatal.

The DirectPlay codec (``wire.directplay``) raises ``DPlayError``, a ``WireError`` whose reason
is one of ``DPLAY_REASONS``:

* ``not_dplay``: the payload is not DirectPlay at all (``classify`` said ``NONE``);
* ``dplay_truncated``: the buffer ends inside a fixed-size part of a structure;
* ``dplay_bad_size``: a declared size disagrees with the layout (SP header size != message
  length, DPSESSIONDESC2.dwSize != 80, PACKEDPLAYER Size/FixedSize, SUPERPACKEDPLAYER Size);
* ``dplay_bad_token``: SP header token not 0xFAB, 0xCAB or 0xBAB;
* ``dplay_bad_sockaddr``: SP header address family not AF_INET or non-zero ``sin_zero``;
* ``dplay_bad_signature``: no ``play`` where the layout requires it;
* ``dplay_bad_version``: DirectPlay 4 version outside 0x01..0x0E (DX3 to DX9);
* ``dplay_bad_offset``: an offset or length points outside the buffer (or into the fixed part);
* ``dplay_bad_string``: a UTF-16LE string without its NUL, of odd length, or with an
  embedded NUL;
* ``dplay_bad_value``: a field holds a value outside its domain (DP8 query type, CFRAME
  command bits or opcode).
"""

from typing import Final, Literal, get_args

from ipxbridge.errors import IpxbridgeError

DPlayReason = Literal[
    "not_dplay",
    "dplay_truncated",
    "dplay_bad_size",
    "dplay_bad_token",
    "dplay_bad_sockaddr",
    "dplay_bad_signature",
    "dplay_bad_version",
    "dplay_bad_offset",
    "dplay_bad_string",
    "dplay_bad_value",
]

IpxReason = Literal["truncated", "bad_checksum", "bad_length"]
# Native IPX frames on an Ethernet port (wire/ethernet.py rule 1).
EthernetReason = Literal[
    "eth_truncated",  # shorter than the Ethernet header, or the IPX header does not fit
    "eth_not_ipx",  # another EtherType, another LLC SAP or SNAP protocol: not ours
    "eth_bad_8023_length",  # the 802.3 length field claims more bytes than the frame holds
    "eth_bad_ipx_length",  # IPX Length < 30 or larger than the bytes the framing carries
]
# ipxbridge's own beacons (wire/ipx.py, policy/bridges.py rule 8).
BeaconReason = Literal[
    "beacon_malformed",  # another version, or a count that runs past the data
    "beacon_unverified",  # a key is configured and the MAC is missing or wrong
]
# A coalesced IPXWrapper batch that does not split into IPX packets (wire/ipxwrapper.py
# rule 4); the switch drops the whole datagram with the reason (policy/switch.py rule 1).
CoalescedReason = Literal[
    "batch_truncated",  # the data ends inside an inner packet's header or data
    "batch_bad_length",  # an inner Length below 30
    "batch_bad_checksum",  # an inner checksum other than 0xFFFF
    "batch_nested",  # a magic packet (a batch, an SPX lookup) inside the batch
    "batch_too_large",  # more data than IPXWrapper ever batches (1384 bytes)
]
# ipxbox's uplink control packets (wire/uplink.py, docs/protocols.md 3.9).
UplinkReason = Literal["uplink_malformed"]  # not a JSON object with a type, or bad base64
WireReason = (
    IpxReason | DPlayReason | EthernetReason | CoalescedReason | BeaconReason | UplinkReason
)

DPLAY_REASONS: Final[tuple[DPlayReason, ...]] = get_args(DPlayReason)

WIRE_REASONS: Final[tuple[WireReason, ...]] = (
    *get_args(IpxReason),
    *DPLAY_REASONS,
    *get_args(EthernetReason),
    *get_args(CoalescedReason),
    *get_args(BeaconReason),
    *get_args(UplinkReason),
)


class WireError(IpxbridgeError, ValueError):
    """A remote peer sent bytes that do not decode.

    Attributes:
        reason: machine-readable drop reason (one of ``WIRE_REASONS``).
    """

    def __init__(self, reason: WireReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: WireReason = reason
        self.detail = detail


class DPlayError(WireError):
    """Bytes that were offered as DirectPlay do not decode.

    Attributes:
        reason: one of ``DPLAY_REASONS``.
    """

    def __init__(self, reason: DPlayReason, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason: DPlayReason = reason
