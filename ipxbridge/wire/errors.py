"""Errors raised by the wire codecs for malformed remote input.

Every ``WireError`` carries a ``reason`` from a closed set. The I/O layer catches it, counts
the datagram under ``dropped{reason}`` and carries on: a bad packet is never fatal.
"""

from typing import Final, Literal

from ipxbridge.errors import IpxbridgeError

WireReason = Literal["truncated", "bad_checksum", "bad_length", "hop_limit"]

WIRE_REASONS: Final[tuple[WireReason, ...]] = (
    "truncated",
    "bad_checksum",
    "bad_length",
    "hop_limit",
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
