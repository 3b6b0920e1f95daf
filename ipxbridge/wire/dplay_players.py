"""DirectPlay 4 player records: DPLAYI_PACKEDPLAYER and DPLAYI_SUPERPACKEDPLAYER.

Sources: docs/protocols.md 1.8, [MC-DPL4CS] 2.2.2 and 2.2.3, Wine's dplayx conformance tests.

Contract:

* Rule 1. A PACKEDPLAYER is 48 fixed bytes (FixedSize must be 48) followed by ShortName,
  LongName (UTF-16LE with NUL, lengths in bytes, 0 = absent), SP data, player data and
  NumberOfPlayers x u32 player IDs. Size counts all of it, the ID list included: DirectPlay
  sizes a packed group as the packed player plus 4 bytes per member. docs/protocols.md's formula
  "48 + the four variable lengths" is the NumberOfPlayers = 0 case (every Wine test).
* Rule 2. A SUPERPACKEDPLAYER is 20 fixed bytes (Size = 16 by definition) and optional fields
  whose presence and length-field widths come from PlayerInfoMask; mask bits above 0x400
  "must be ignored" and are kept as sent.
* Rule 3. A record is parsed from the start of a buffer; bytes after it (the next record)
  are left alone. Lengths and counts are checked against the buffer first (``DPlayError``
  ``dplay_bad_offset``), declared sizes against the layout (``dplay_bad_size``).
* Rule 4. Builders compute every length, count and size; ``info_mask`` is the one input that
  encodes a choice (field widths) and must agree with which fields are present.
"""

import struct
from dataclasses import dataclass
from typing import Final

from ipxbridge.wire.dplay_fields import (
    as_bytes,
    check_span,
    counted_string,
    encode_string,
    need,
    pack,
    pack_u32s,
    read_nul_string,
    read_u32s,
    read_uint,
)
from ipxbridge.wire.errors import DPlayError

# DPLAYI_PACKEDPLAYER.Flags / SUPERPACKEDPLAYER.Flags (docs/protocols.md 1.8).
PLAYER_SYSTEM: Final = 0x1
PLAYER_NAME_SERVER: Final = 0x2
PLAYER_IN_GROUP: Final = 0x4
PLAYER_LOCAL: Final = 0x8


@dataclass(frozen=True)
class PackedPlayer:
    """DPLAYI_PACKEDPLAYER ([MC-DPL4CS] 2.2.2).

    Names are None when their length field is 0. With the Winsock SP ``sp_data`` is 32 bytes,
    two SOCKADDR_IN (``directplay.parse_winsock_sp_data``). ``player_ids`` lists a group's
    members.
    """

    flags: int
    player_id: int
    short_name: str | None
    long_name: str | None
    sp_data: bytes
    player_data: bytes
    system_player_id: int
    player_version: int
    parent_id: int
    player_ids: tuple[int, ...]


# Size, Flags, PlayerID, ShortNameLength, LongNameLength, ServiceProviderDataSize,
# PlayerDataSize, NumberOfPlayers, SystemPlayerID, FixedSize, PlayerVersion, ParentID.
_PACKED_PLAYER: Final = struct.Struct("<12I")
PACKED_PLAYER_FIXED_SIZE: Final = _PACKED_PLAYER.size  # 48


def parse_packed_player(data: bytes | bytearray | memoryview) -> PackedPlayer:
    """Decode the DPLAYI_PACKEDPLAYER at the start of ``data``.

    Its length is Size, i.e. ``len(build_packed_player(result))``.

    Raises:
        DPlayError: ``dplay_truncated`` (< 48 bytes), ``dplay_bad_size`` (FixedSize != 48 or
            Size != the sum of the parts), ``dplay_bad_offset`` (the parts run past the
            buffer) or ``dplay_bad_string`` (a name).
    """
    buf = as_bytes(data)
    need(buf, PACKED_PLAYER_FIXED_SIZE, "DPLAYI_PACKEDPLAYER")
    (size, flags, player_id, short_len, long_len, sp_len, pd_len, count, system_id, fixed,
     version, parent) = _PACKED_PLAYER.unpack_from(buf)  # fmt: skip
    if fixed != PACKED_PLAYER_FIXED_SIZE:
        raise DPlayError("dplay_bad_size", f"FixedSize {fixed}, expected 48")
    total = PACKED_PLAYER_FIXED_SIZE + short_len + long_len + sp_len + pd_len + 4 * count
    check_span(0, total, len(buf), "DPLAYI_PACKEDPLAYER parts")
    if size != total:
        raise DPlayError("dplay_bad_size", f"Size {size}, the parts add up to {total}")
    pos = PACKED_PLAYER_FIXED_SIZE
    parts = []
    for length in (short_len, long_len, sp_len, pd_len):
        parts.append(buf[pos : pos + length])
        pos += length
    player_ids, _ = read_u32s(buf, pos, count, "PlayerIDs")
    return PackedPlayer(
        flags=flags,
        player_id=player_id,
        short_name=counted_string(parts[0], "ShortName"),
        long_name=counted_string(parts[1], "LongName"),
        sp_data=parts[2],
        player_data=parts[3],
        system_player_id=system_id,
        player_version=version,
        parent_id=parent,
        player_ids=player_ids,
    )


def build_packed_player(player: PackedPlayer) -> bytes:
    """Encode a DPLAYI_PACKEDPLAYER; lengths, Size and FixedSize (48) are computed.

    Raises:
        ValueError: a field does not fit 32 bits, or a name contains NUL.
    """
    short_name = encode_string(player.short_name)
    long_name = encode_string(player.long_name)
    sp_data = bytes(player.sp_data)
    player_data = bytes(player.player_data)
    variable = short_name + long_name + sp_data + player_data + pack_u32s(player.player_ids)
    fixed = pack(
        _PACKED_PLAYER,
        PACKED_PLAYER_FIXED_SIZE + len(variable),
        player.flags,
        player.player_id,
        len(short_name),
        len(long_name),
        len(sp_data),
        len(player_data),
        len(player.player_ids),
        player.system_player_id,
        PACKED_PLAYER_FIXED_SIZE,
        player.player_version,
        player.parent_id,
    )
    return fixed + variable


@dataclass(frozen=True)
class SuperPackedPlayer:
    """DPLAYI_SUPERPACKEDPLAYER ([MC-DPL4CS] 2.2.3), the entries of SUPERENUMPLAYERSREPLY.

    ``info_mask`` says which optional fields are present and how wide their length or count
    fields are (``SPP_*``); an absent field is None. ``version_or_system_player_id`` is the
    DP4 version for a system player (Flags 0x1), otherwise its system player's ID.
    """

    flags: int
    player_id: int
    info_mask: int
    version_or_system_player_id: int
    short_name: str | None
    long_name: str | None
    player_data: bytes | None
    sp_data: bytes | None
    player_ids: tuple[int, ...] | None
    parent_id: int | None
    shortcut_ids: tuple[int, ...] | None


# Size (16: the spec's value, although the fixed part is 20 bytes), Flags, ID,
# PlayerInfoMask, VersionOrSystemPlayerID.
_SUPER_FIXED: Final = struct.Struct("<5I")
SUPER_PACKED_SIZE: Final = 16
SUPER_PACKED_FIXED_LEN: Final = _SUPER_FIXED.size  # 20
# PlayerInfoMask: SN 0x1, LN 0x2, SL (SP data length width) bits 2-3, PD (player data length
# width) bits 4-5, PC (player count width) bits 6-7, PI 0x100, SC (shortcut count width)
# bits 9-10. A width code is 0 absent, 1 one byte, 2 two bytes, 3 four bytes.
SPP_SHORT_NAME: Final = 0x001
SPP_LONG_NAME: Final = 0x002
SPP_SP_LENGTH_SHIFT: Final = 2
SPP_PLAYER_DATA_SHIFT: Final = 4
SPP_PLAYER_COUNT_SHIFT: Final = 6
SPP_PARENT_ID: Final = 0x100
SPP_SHORTCUT_COUNT_SHIFT: Final = 9
_WIDTH_BYTES: Final = (0, 1, 2, 4)


def spp_width(mask: int, shift: int) -> int:
    """Byte width of the length/count field coded at ``shift`` in a PlayerInfoMask (0 = absent)."""
    return _WIDTH_BYTES[(mask >> shift) & 3]


def parse_super_packed_player(
    data: bytes | bytearray | memoryview,
) -> tuple[SuperPackedPlayer, int]:
    """Decode the DPLAYI_SUPERPACKEDPLAYER at the start of ``data``.

    Returns:
        The record and the number of bytes it occupies (the next record starts there).

    Raises:
        DPlayError: ``dplay_truncated`` (fixed part or a length field cut off),
            ``dplay_bad_size`` (Size != 16), ``dplay_bad_offset`` (data or IDs run past the
            buffer) or ``dplay_bad_string`` (a name without NUL).
    """
    buf = as_bytes(data)
    need(buf, SUPER_PACKED_FIXED_LEN, "DPLAYI_SUPERPACKEDPLAYER")
    size, flags, player_id, mask, version_or_system = _SUPER_FIXED.unpack_from(buf)
    if size != SUPER_PACKED_SIZE:
        raise DPlayError("dplay_bad_size", f"SUPERPACKEDPLAYER Size {size}, expected 16")
    pos = SUPER_PACKED_FIXED_LEN
    short_name = long_name = None
    if mask & SPP_SHORT_NAME:
        short_name, pos = read_nul_string(buf, pos, "ShortName")
    if mask & SPP_LONG_NAME:
        long_name, pos = read_nul_string(buf, pos, "LongName")
    blobs: list[bytes | None] = []
    # Wire order: player data, then SP data (although the SL bits come first in the mask).
    for shift, what in ((SPP_PLAYER_DATA_SHIFT, "PlayerData"), (SPP_SP_LENGTH_SHIFT, "SPData")):
        width = spp_width(mask, shift)
        if not width:
            blobs.append(None)
            continue
        length, pos = read_uint(buf, pos, width, f"{what} length")
        check_span(pos, length, len(buf), what)
        blobs.append(buf[pos : pos + length])
        pos += length
    player_ids = shortcut_ids = parent_id = None
    if width := spp_width(mask, SPP_PLAYER_COUNT_SHIFT):
        count, pos = read_uint(buf, pos, width, "PlayerCount")
        player_ids, pos = read_u32s(buf, pos, count, "PlayerIDs")
    if mask & SPP_PARENT_ID:
        parent_id, pos = read_uint(buf, pos, 4, "ParentID")
    if width := spp_width(mask, SPP_SHORTCUT_COUNT_SHIFT):
        count, pos = read_uint(buf, pos, width, "ShortcutIDCount")
        shortcut_ids, pos = read_u32s(buf, pos, count, "ShortcutIDs")
    record = SuperPackedPlayer(
        flags=flags,
        player_id=player_id,
        info_mask=mask,
        version_or_system_player_id=version_or_system,
        short_name=short_name,
        long_name=long_name,
        player_data=blobs[0],
        sp_data=blobs[1],
        player_ids=player_ids,
        parent_id=parent_id,
        shortcut_ids=shortcut_ids,
    )
    return record, pos


def _counted(value: int, width: int, what: str) -> bytes:
    if value >= 1 << (8 * width):
        raise ValueError(f"{what} {value} does not fit its {width}-byte field (info_mask)")
    return value.to_bytes(width, "little")


def _agree(present: bool, value: object, what: str) -> None:
    if present != (value is not None):
        state = "present" if present else "absent"
        raise ValueError(f"info_mask says {what} is {state}, the record disagrees")


def build_super_packed_player(player: SuperPackedPlayer) -> bytes:
    """Encode a DPLAYI_SUPERPACKEDPLAYER, using ``info_mask`` for presence and widths.

    Raises:
        ValueError: ``info_mask`` disagrees with which fields are None, a length or count
            does not fit its width, a name contains NUL, or a field does not fit 32 bits.
    """
    mask = player.info_mask
    _agree(bool(mask & SPP_SHORT_NAME), player.short_name, "short_name")
    _agree(bool(mask & SPP_LONG_NAME), player.long_name, "long_name")
    _agree(bool(mask & SPP_PARENT_ID), player.parent_id, "parent_id")
    parts = [
        pack(
            _SUPER_FIXED,
            SUPER_PACKED_SIZE,
            player.flags,
            player.player_id,
            mask,
            player.version_or_system_player_id,
        ),
        encode_string(player.short_name),
        encode_string(player.long_name),
    ]
    for shift, blob, what in (
        (SPP_PLAYER_DATA_SHIFT, player.player_data, "player_data"),
        (SPP_SP_LENGTH_SHIFT, player.sp_data, "sp_data"),
    ):
        width = spp_width(mask, shift)
        _agree(bool(width), blob, what)
        if blob is not None:
            parts += [_counted(len(blob), width, f"{what} length"), bytes(blob)]
    width = spp_width(mask, SPP_PLAYER_COUNT_SHIFT)
    _agree(bool(width), player.player_ids, "player_ids")
    if player.player_ids is not None:
        count = _counted(len(player.player_ids), width, "player count")
        parts += [count, pack_u32s(player.player_ids)]
    if player.parent_id is not None:
        parts.append(pack_u32s((player.parent_id,)))
    width = spp_width(mask, SPP_SHORTCUT_COUNT_SHIFT)
    _agree(bool(width), player.shortcut_ids, "shortcut_ids")
    if player.shortcut_ids is not None:
        count = _counted(len(player.shortcut_ids), width, "shortcut count")
        parts += [count, pack_u32s(player.shortcut_ids)]
    return b"".join(parts)
