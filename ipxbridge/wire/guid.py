"""Windows GUIDs as DirectPlay puts them on the wire.

Contract:

* Rule 1. On the wire a GUID is 16 bytes in the Windows ``GUID`` layout: Data1 (u32), Data2
  (u16) and Data3 (u16) little-endian, then Data4 (8 bytes) as they are ([MC-DPL4CS] 2.2.4,
  docs/protocols.md 1.4 and 8). That is Python's ``UUID(bytes_le=...)``; ``UUID(bytes=...)`` would
  be the raw byte order that Wireshark's ``dplay`` dissector prints (docs/protocols.md 9, 4.4).
* Rule 2. The text form is the registry form Windows shows: braces, upper case,
  ``{76F93801-9340-11D2-AE34-00600895C779}``.
* Rule 3. ``guid_from_wire`` is for exact 16-byte slices; a wrong length is a caller bug
  (``ValueError``), never remote input, because the codecs check lengths before slicing.
"""

from typing import Final
from uuid import UUID

GUID_LEN: Final = 16
GUID_NULL: Final = UUID(int=0)  # DirectPlay's "any application" GUID


def guid_from_wire(data: bytes | memoryview) -> UUID:
    """Decode 16 wire bytes (Windows layout, Data1-3 little-endian) into a UUID.

    Raises:
        ValueError: ``data`` is not exactly 16 bytes (caller bug).
    """
    if len(data) != GUID_LEN:
        raise ValueError(f"a GUID is {GUID_LEN} bytes, got {len(data)}")
    return UUID(bytes_le=bytes(data))


def guid_to_wire(guid: UUID) -> bytes:
    """Encode a UUID as the 16 bytes DirectPlay sends (Windows layout)."""
    return guid.bytes_le


def format_guid(guid: UUID) -> str:
    """Windows text form: ``{76F93801-9340-11D2-AE34-00600895C779}``."""
    return "{" + str(guid).upper() + "}"
