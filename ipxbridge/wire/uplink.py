"""ipxbox's uplink protocol: control packets and the solutions (docs/protocols.md 3.9).

The uplink connects a whole IPX network to an ipxbox server (or to another ipxbridge) over
the DOSBox protocol's UDP port. Facts this codec follows (ipxbox ``server/uplink/protocol.go``
and ``client/uplink/client.go``, read at 38dc341; written here from the description, not
copied):

* Rule 1. A control packet is an IPX datagram whose destination node is ASCII ``UpLiNK``;
  every other header field is zero, checksum and Length included (ipxbox leaves them
  unset). Network and sockets are ignored when reading; the checksum and Length are not
  judged, so the check comes before ``wire.ipx.parse_header``, which would refuse both.
* Rule 2. The data is compact JSON ``{"message-type": T, "challenge": B64, "solution": B64}``
  in that key order; an absent field is ``null``; B64 is standard base64 with padding (Go's
  ``encoding/json`` for ``[]byte``). A challenge of 64 bytes is 88 characters, a SHA-256
  solution 44.
* Rule 3. The solutions: SHA-256(side ‖ challenge ‖ password ‖ challenge), side ``client``
  for the client's answer to the server's challenge, ``server`` for the server's answer to
  the client's.
* Rule 4. Data packets from an uplink may come from a pcap-bridged ipxbox segment: Ethernet
  padding past the Length field, checksum 0x0000, and transport control 127 (ipxbox's mark
  on its own frames). ``normalise_data`` makes such a packet one the switch takes.
  ``wire/ipx.py`` has no helper for this (yet), hence this local one.

Not encrypted: the password only gates who may connect.
"""

import base64
import binascii
import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Final, Literal

from ipxbridge.wire.errors import WireError
from ipxbridge.wire.ipx import CHECKSUM_NONE, HEADER_LEN, IPXBOX_MARK

UPLINK_NODE: Final = b"UpLiNK"  # 55 70 4c 69 4e 4b
# destination node, docs/protocols.md 3.1 (two ints: mypyc takes a slice constant as an index)
_DST_NODE_START: Final = 10
_DST_NODE_END: Final = 16
MIN_CHALLENGE: Final = 64  # ipxbox MinChallengeLength: shorter gets no answer at all
# Larger than any real control packet (a 64-byte challenge and a solution: ~200 bytes); a
# JSON parser is never handed more than this from a stranger.
MAX_CONTROL_DATA: Final = 1024

MessageType = Literal[
    "get-challenge-request",
    "get-challenge-response",
    "submit-solution",
    "submit-solution-accepted",
    "submit-solution-rejected",
    "keepalive",
    "close-connection",
]
GET_CHALLENGE_REQUEST: Final = "get-challenge-request"
GET_CHALLENGE_RESPONSE: Final = "get-challenge-response"
SUBMIT_SOLUTION: Final = "submit-solution"
SOLUTION_ACCEPTED: Final = "submit-solution-accepted"
SOLUTION_REJECTED: Final = "submit-solution-rejected"
KEEPALIVE: Final = "keepalive"
CLOSE_CONNECTION: Final = "close-connection"

_HEADER: Final = struct.Struct("!HHB")  # checksum, length, transport control


@dataclass(frozen=True)
class UplinkMessage:
    """One control message. ``type`` is kept as sent: an unknown one is the caller's to skip."""

    type: str
    challenge: bytes | None = None
    solution: bytes | None = None


def is_uplink_control(data: bytes | memoryview) -> bool:
    """Is this datagram an uplink control packet (rule 1)? Only the destination node counts."""
    return len(data) >= HEADER_LEN and data[_DST_NODE_START:_DST_NODE_END] == UPLINK_NODE


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def build_control(message: UplinkMessage) -> bytes:
    """Encode a control packet byte for byte as ipxbox does (rules 1 and 2)."""
    body = json.dumps(
        {
            "message-type": message.type,
            "challenge": _b64(message.challenge),
            "solution": _b64(message.solution),
        },
        separators=(",", ":"),
    ).encode("ascii")
    return bytes(10) + UPLINK_NODE + bytes(HEADER_LEN - 16) + body


def _field(obj: dict[str, object], name: str) -> bytes | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise WireError("uplink_malformed", f"{name} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("uplink_malformed", f"{name} is not standard base64") from None


def parse_control(data: bytes | memoryview) -> UplinkMessage:
    """Decode a control packet (``is_uplink_control`` said yes).

    Raises:
        WireError: ``uplink_malformed``: too long, not a JSON object, no string
            ``message-type``, or a field that is neither null nor base64.
    """
    body = bytes(data[HEADER_LEN:])
    if len(body) > MAX_CONTROL_DATA:
        raise WireError(
            "uplink_malformed", f"{len(body)} bytes of JSON, at most {MAX_CONTROL_DATA}"
        )
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        raise WireError("uplink_malformed", "not JSON") from None
    if not isinstance(obj, dict):
        raise WireError("uplink_malformed", "not a JSON object")
    kind = obj.get("message-type")
    if not isinstance(kind, str):
        raise WireError("uplink_malformed", "no message-type")
    return UplinkMessage(kind, _field(obj, "challenge"), _field(obj, "solution"))


def solve(side: Literal["client", "server"], password: bytes, challenge: bytes) -> bytes:
    """The answer to ``challenge`` (rule 3): SHA-256(side ‖ challenge ‖ password ‖ challenge)."""
    return hashlib.sha256(side.encode() + challenge + password + challenge).digest()


def normalise_data(data: bytes) -> tuple[bytes, str]:
    """A data packet from an authenticated uplink, as the switch takes it (rule 4).

    Returns the packet (checksum 0xFFFF, trimmed to its Length; an ipxbox-marked packet,
    transport control 127 with checksum 0, gets hop count 0) and what was changed: ``""``
    (nothing), ``ipxbox_mark``, ``checksum_zero`` or ``padding``, for the books.

    Raises:
        WireError: ``truncated``, ``bad_checksum`` (neither 0xFFFF nor 0), ``bad_length``
            (Length below 30 or past the datagram).
    """
    size = len(data)
    if size < HEADER_LEN:
        raise WireError("truncated", f"{size} bytes, an IPX header needs {HEADER_LEN}")
    checksum, length, hops = _HEADER.unpack_from(data)
    if checksum == CHECKSUM_NONE and length == size:
        return data, ""
    if checksum not in (0, CHECKSUM_NONE):
        raise WireError("bad_checksum", f"checksum 0x{checksum:04x}, expected 0xffff or 0")
    if not HEADER_LEN <= length <= size:
        raise WireError("bad_length", f"length field {length} but datagram is {size}")
    what = "padding"
    if checksum == 0:
        what = "checksum_zero"
        if hops == IPXBOX_MARK:
            hops, what = 0, "ipxbox_mark"
    return b"\xff\xff" + data[2:4] + bytes((hops,)) + data[5:length], what


__all__ = [
    "CLOSE_CONNECTION",
    "GET_CHALLENGE_REQUEST",
    "GET_CHALLENGE_RESPONSE",
    "KEEPALIVE",
    "MIN_CHALLENGE",
    "SOLUTION_ACCEPTED",
    "SOLUTION_REJECTED",
    "SUBMIT_SOLUTION",
    "UPLINK_NODE",
    "MessageType",
    "UplinkMessage",
    "build_control",
    "is_uplink_control",
    "normalise_data",
    "parse_control",
    "solve",
]
