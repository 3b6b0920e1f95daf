"""Game-defined session state in DPSESSIONDESC2.dwUser1..4: one table, keyed by game GUID.

DirectPlay leaves the four dwUser words to the game (docs/protocols.md 1.6). Some games keep their
lobby state there instead of in dwFlags / dwMaxPlayers, so a game list that reads only the
DirectPlay fields shows their password-protected or closed sessions as open (docs/protocols.md
1.6.1, Star Trek: Armada).

Contract:

* Rule 1. ``USER_FIELD_DECODERS`` is the only place that knows a game's layout. docs/protocols.md
  1.6.1 asks for one table in the code so that a capture can correct it: the masks and byte
  positions of each game sit next to its decoder and nowhere else.
* Rule 2. A game not in the table has no decoded user fields (``decode_user_fields`` returns
  None); a field a game's layout does not have is None in ``UserFields``, never a guess.
* Rule 3. Decoders are total: any four integers decode (each is taken modulo 2**32, as the
  u32 the wire carries), nothing raises. The raw words stay with the caller
  (``SessionDesc.user``) and must be shown beside the decoded values (``user_bytes`` gives
  them in wire order).

Pure: no I/O; imports only the standard library.
"""

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final
from uuid import UUID

UserWords = tuple[int, int, int, int]

_USER: Final = struct.Struct("<4I")  # dwUser1..4, little-endian like all of DPSESSIONDESC2
USER_LEN: Final = _USER.size  # 16 bytes: 64..79 of the description, 72..87 from 'play'


@dataclass(frozen=True)
class UserFields:
    """What a game says about its session in dwUser1..4; None where its layout has no field.

    Attributes:
        max_players: the session's maximum number of players.
        password: a password is needed to join.
        closed: joining is closed (the game's own "no joining" switch).
        started: the match is already running.
        head_to_head: a one-against-one match.
        map: the map name, or None when the game sends none.
    """

    max_players: int | None = None
    password: bool | None = None
    closed: bool | None = None
    started: bool | None = None
    head_to_head: bool | None = None
    map: str | None = None


def user_bytes(user: UserWords) -> bytes:
    """dwUser1..4 as the 16 bytes on the wire (little-endian words, in order)."""
    return _USER.pack(*(word & 0xFFFF_FFFF for word in user))


# --- Star Trek: Armada (docs/protocols.md 1.6.1) ---------------------------------------

STAR_TREK_ARMADA: Final = UUID("76F93801-9340-11D2-AE34-00600895C779")  # docs/protocols.md 1.6.1, 8

# Positions count within the 16 user bytes: index 0 is byte 72 from 'play' (dwUser1's low
# byte). docs/protocols.md 1.6.1 decided "bit 1 = the least significant bit"; the mirrored reading
# (players 0xE0; flags 0x40 / 0x20 / 0x04 / 0x02) is the alternative if a capture says so.
ARMADA_PLAYERS_BYTE: Final = 1  # byte 73 = (dwUser1 >> 8) & 0xFF
ARMADA_PLAYERS_MASK: Final = 0x07  # bits 1-3: a 3-bit count in which 8 wraps to 0
ARMADA_ALL_SLOTS: Final = 8  # what a count of 0 means
ARMADA_FLAGS_BYTE: Final = 2  # byte 74 = (dwUser1 >> 16) & 0xFF
ARMADA_HEAD_TO_HEAD: Final = 0x02  # bit 2
ARMADA_PASSWORD: Final = 0x04  # bit 3
ARMADA_STARTED: Final = 0x20  # bit 6
ARMADA_CLOSED: Final = 0x40  # bit 7
# bytes 76..87 = dwUser2..4 in wire order: 12 bytes (8.3 name). Two ints, not a slice object:
# mypyc takes a slice constant as an integer index.
ARMADA_MAP_START: Final = 4
ARMADA_MAP_END: Final = 16


def decode_armada(user: UserWords) -> UserFields:
    """Star Trek: Armada's lobby state (docs/protocols.md 1.6.1; the table above)."""
    raw = user_bytes(user)
    players = raw[ARMADA_PLAYERS_BYTE] & ARMADA_PLAYERS_MASK
    flags = raw[ARMADA_FLAGS_BYTE]
    # No encoding or terminator is given: cut at the first NUL, cp1252 with replacement.
    map_bytes = raw[ARMADA_MAP_START:ARMADA_MAP_END]
    name = map_bytes.split(b"\x00", 1)[0].decode("cp1252", "replace").strip()
    return UserFields(
        max_players=players or ARMADA_ALL_SLOTS,
        password=bool(flags & ARMADA_PASSWORD),
        closed=bool(flags & ARMADA_CLOSED),
        started=bool(flags & ARMADA_STARTED),
        head_to_head=bool(flags & ARMADA_HEAD_TO_HEAD),
        map=name or None,
    )


# --- the table ----------------------------------------------------------------------------------

USER_FIELD_DECODERS: Final[Mapping[UUID, Callable[[UserWords], UserFields]]] = MappingProxyType(
    {STAR_TREK_ARMADA: decode_armada}
)


def decode_user_fields(game_guid: UUID, user: UserWords) -> UserFields | None:
    """The user fields of a session of ``game_guid``, or None if its layout is not known."""
    decoder = USER_FIELD_DECODERS.get(game_guid)
    return None if decoder is None else decoder(user)
