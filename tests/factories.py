"""Small builders the tests share (one place for records with many fields)."""

import struct
import uuid
from typing import Any

from ipxbridge.wire.directplay import DP8EnumResponse


def dp8_response(**fields: Any) -> DP8EnumResponse:
    """A DirectPlay 8 EnumResponse with empty optional data; ``fields`` override."""
    values: dict[str, Any] = {
        "cookie": 1,
        "flags": 0,
        "max_players": 4,
        "current_players": 1,
        "session_name": "x",
        "password": b"",
        "reserved_data": b"",
        "app_reserved_data": b"",
        "instance_guid": uuid.uuid4(),
        "application_guid": uuid.uuid4(),
        "reply_data": b"",
    }
    values.update(fields)
    return DP8EnumResponse(**values)


def armada_user(
    players: int = 0, flags: int = 0, map_name: bytes = b"", byte72: int = 0
) -> tuple[int, int, int, int]:
    """dwUser1..4 as Star Trek: Armada fills them (docs/protocols.md 1.6.1).

    ``players`` goes to byte 73 (from ``play``), ``flags`` to byte 74 and ``map_name`` (at
    most 12 bytes, NUL-padded) to bytes 76..87, in wire order.
    """
    raw = bytes([byte72, players, flags, 0]) + map_name.ljust(12, b"\x00")
    assert len(raw) == 16
    words = struct.unpack("<4I", raw)
    return (words[0], words[1], words[2], words[3])
