"""Small builders the tests share (one place for records with many fields)."""

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
