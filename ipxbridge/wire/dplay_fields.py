"""Bounds-checked field access shared by the DirectPlay codecs (``wire.directplay``).

Contract:

* Rule 1. Readers check every end position against the buffer before touching it and raise
  ``DPlayError`` with a reason (``dplay_truncated`` for a cut-off fixed part,
  ``dplay_bad_offset`` for an offset or length that leaves the buffer, ``dplay_bad_string``);
  nothing else escapes them, so the codecs built on them are total.
* Rule 2. Strings are UTF-16LE with a NUL terminator ([MC-DPL4CS] "null-terminated Unicode
  string"; docs/protocols.md 1.4-1.8, 2.3). Decoding uses ``surrogatepass`` so that any even-length
  code-unit sequence decodes and re-encodes to the same bytes.
* Rule 3. Writers raise ``ValueError`` for values that do not fit (a caller bug).

Internal to the DirectPlay codecs; the public API is ``wire.directplay``.
"""

import struct
from typing import Final

from ipxbridge.wire.errors import DPlayError

NUL16: Final = b"\x00\x00"
_U32_ARRAYS: dict[int, struct.Struct] = {}


def as_bytes(payload: bytes | bytearray | memoryview) -> bytes:
    """The payload as ``bytes`` (copied once if it is a view)."""
    return payload if isinstance(payload, bytes) else bytes(payload)


def need(data: bytes, end: int, what: str) -> None:
    """Raise ``dplay_truncated`` unless the fixed part of ``what`` ends inside the buffer."""
    if end > len(data):
        raise DPlayError("dplay_truncated", f"{what} needs {end} bytes, buffer has {len(data)}")


def check_span(start: int, size: int, limit: int, what: str) -> None:
    """Raise ``dplay_bad_offset`` unless ``size`` bytes at ``start`` lie within ``limit``."""
    if start + size > limit:
        raise DPlayError(
            "dplay_bad_offset", f"{what}: {size} bytes at {start} exceed the {limit}-byte buffer"
        )


def check_offset(offset: int, minimum: int, limit: int, what: str) -> None:
    """Raise ``dplay_bad_offset`` unless ``minimum <= offset <= limit``.

    ``minimum`` is the end of the structure's fixed part: an offset may not point back into
    the fixed fields. ``limit`` is the buffer length counted from the same base.
    """
    if offset < minimum or offset > limit:
        raise DPlayError("dplay_bad_offset", f"{what} {offset} outside {minimum}..{limit}")


def decode_utf16(raw: bytes, what: str) -> str:
    """Decode UTF-16LE code units (no terminator), keeping unpaired surrogates."""
    try:
        return raw.decode("utf-16-le", "surrogatepass")
    except UnicodeDecodeError as exc:  # only an odd length can fail; callers check it first
        raise DPlayError("dplay_bad_string", f"{what}: {exc.reason}") from None


def read_nul_string(
    data: bytes, start: int, what: str, *, terminated: bool = True
) -> tuple[str, int]:
    """The string at ``start`` up to its first NUL code unit; returns (text, end after NUL).

    Args:
        data: the buffer (the whole message: it bounds the string).
        start: where the string begins.
        what: the field's name, for the error.
        terminated: the NUL is required. With False a string that runs to the end of
            ``data`` without one is accepted (the end is returned as ``len(data)``); it must
            still be whole UTF-16 code units.

    Raises:
        DPlayError: ``dplay_bad_string`` when the buffer ends before a NUL (``terminated``),
            or the unterminated rest has an odd length.
    """
    pos = start
    while True:
        end = data.find(NUL16, pos)
        if end < 0:
            if not terminated and (len(data) - start) % 2 == 0:
                return decode_utf16(data[start:], what), len(data)
            raise DPlayError("dplay_bad_string", f"{what} at {start} has no NUL terminator")
        if (end - start) % 2 == 0:  # a NUL code unit, not the high byte of one + low of next
            return decode_utf16(data[start:end], what), end + 2
        pos = end + 1


def counted_string(raw: bytes, what: str, *, terminated: bool = True) -> str | None:
    """A string whose byte count (NUL included) is given; an empty field means no string.

    Args:
        raw: the field's bytes.
        what: the field's name, for the error.
        terminated: the final NUL is required. With False a field without it is read to its
            end: the count already bounds it (docs/protocols.md 2.3, DP8 SessionName).

    Raises:
        DPlayError: ``dplay_bad_string`` for an odd length, a missing final NUL (when
            ``terminated``) or an embedded NUL.
    """
    if not raw:
        return None
    if len(raw) % 2:
        raise DPlayError("dplay_bad_string", f"{what} has odd length {len(raw)}")
    if raw[-2:] == NUL16:
        raw = raw[:-2]
    elif terminated:
        raise DPlayError("dplay_bad_string", f"{what} does not end in NUL")
    text = decode_utf16(raw, what)
    if "\x00" in text:
        raise DPlayError("dplay_bad_string", f"{what} contains an embedded NUL")
    return text


def encode_string(text: str | None) -> bytes:
    """UTF-16LE with its NUL, or nothing for ``None``.

    Raises:
        ValueError: ``text`` contains NUL (it could not be read back).
    """
    if text is None:
        return b""
    if "\x00" in text:
        raise ValueError("DirectPlay strings are NUL-terminated and cannot contain NUL")
    return text.encode("utf-16-le", "surrogatepass") + NUL16


def pack(layout: struct.Struct, *values: object) -> bytes:
    """``layout.pack`` reporting out-of-range fields as ``ValueError`` (a caller bug)."""
    try:
        return layout.pack(*values)
    except struct.error as exc:
        raise ValueError(f"field out of range: {exc}") from None


def read_uint(data: bytes, pos: int, width: int, what: str) -> tuple[int, int]:
    """A little-endian unsigned field of ``width`` bytes at ``pos``; returns (value, end)."""
    need(data, pos + width, what)
    return int.from_bytes(data[pos : pos + width], "little"), pos + width


def _u32_array(count: int) -> struct.Struct:
    layout = _U32_ARRAYS.get(count)
    if layout is None:
        layout = struct.Struct(f"<{count}I")
        if count <= 64:  # cache the common small sizes only
            _U32_ARRAYS[count] = layout
    return layout


def read_u32s(data: bytes, pos: int, count: int, what: str) -> tuple[tuple[int, ...], int]:
    """``count`` little-endian u32 (player IDs) at ``pos``; returns (values, end).

    Raises:
        DPlayError: ``dplay_bad_offset`` when the array runs past the buffer.
    """
    check_span(pos, 4 * count, len(data), what)
    return _u32_array(count).unpack_from(data, pos), pos + 4 * count


def pack_u32s(values: tuple[int, ...]) -> bytes:
    """Encode u32 values little-endian.

    Raises:
        ValueError: a value does not fit 32 bits.
    """
    return pack(_u32_array(len(values)), *values)
