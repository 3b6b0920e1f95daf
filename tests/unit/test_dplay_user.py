"""Game-defined user fields (``wire.dplay_user``): Star Trek: Armada's layout, docs/protocols.md
1.6.1.

Bit numbering as decided there: bit 1 is the least significant bit. So byte 73 (from ``play``)
& 0x07 is the maximum (0 means 8), and byte 74 carries head-to-head 0x02, password 0x04,
started 0x20 and closed 0x40; bytes 76..87 are the map name in wire order.
"""

import uuid

import pytest

from ipxbridge.wire import directplay as dp
from ipxbridge.wire.directplay import EnumSessionsReply, SessionDesc
from ipxbridge.wire.dplay_user import (
    STAR_TREK_ARMADA,
    USER_FIELD_DECODERS,
    UserFields,
    decode_armada,
    decode_user_fields,
    user_bytes,
)
from tests.factories import armada_user
from tests.unit.vectors import load_vectors


def test_armada_is_the_one_game_in_the_table() -> None:
    assert str(STAR_TREK_ARMADA).upper() == "76F93801-9340-11D2-AE34-00600895C779"
    assert set(USER_FIELD_DECODERS) == {STAR_TREK_ARMADA}
    assert decode_user_fields(uuid.UUID(int=1), (0, 0, 0, 0)) is None


def test_armada_fields_read_from_an_enum_sessions_reply() -> None:
    """Built on the wire and parsed back: the decoder sees exactly bytes 72..87 from 'play'."""
    user = armada_user(players=3, flags=0x02 | 0x04 | 0x20 | 0x40, map_name=b"bridge01.bzn")
    desc = SessionDesc(0, uuid.uuid4(), STAR_TREK_ARMADA, 0, 2, user)
    wire = dp.build_enum_sessions_reply(EnumSessionsReply(desc, "Armada LAN"), bare=True)
    assert wire[72:88] == bytes([0, 3, 0x66, 0]) + b"bridge01.bzn"  # offsets from 'play'
    reply = dp.parse_dp4(wire, bare=True).parsed
    assert isinstance(reply, EnumSessionsReply)
    fields = decode_user_fields(reply.desc.application_guid, reply.desc.user)
    assert fields == UserFields(
        max_players=3,
        password=True,
        closed=True,
        started=True,
        head_to_head=True,
        map="bridge01.bzn",
    )
    assert user_bytes(reply.desc.user) == wire[72:88]  # raw bytes, wire order


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (0x00, (False, False, False, False)),
        (0x02, (True, False, False, False)),
        (0x04, (False, True, False, False)),
        (0x20, (False, False, True, False)),
        (0x40, (False, False, False, True)),
        (0x99, (False, False, False, False)),  # bits 1, 4, 5 and 8: not in the layout
    ],
)
def test_armada_flag_bits(flags: int, expected: tuple[bool, bool, bool, bool]) -> None:
    f = decode_armada(armada_user(flags=flags))
    assert (f.head_to_head, f.password, f.started, f.closed) == expected


@pytest.mark.parametrize(
    ("byte73", "players"), [(0, 8), (1, 1), (2, 2), (4, 4), (7, 7), (0x08, 8), (0xF9, 1)]
)
def test_armada_max_players_is_three_bits_and_zero_means_eight(byte73: int, players: int) -> None:
    assert decode_armada(armada_user(players=byte73)).max_players == players


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        (b"", None),  # all NUL: no map
        (b"   ", None),  # blanks strip to nothing
        (b" lake.bzn ", "lake.bzn"),
        (b"abc\x00garbage", "abc"),  # cut at the first NUL
        (b"twelve_chars", "twelve_chars"),  # no terminator at all
        (b"caf\xe9\x81.bzn", "caf\xe9\ufffd.bzn"),  # cp1252, undefined 0x81 replaced
    ],
)
def test_armada_map_name(raw: bytes, name: str | None) -> None:
    assert decode_armada(armada_user(map_name=raw)).map == name


def test_armada_decoder_is_total() -> None:
    """Rule 3: any four integers decode, as the u32 the wire carries."""
    assert decode_armada((-1, 1 << 40, 0x8081_8D8F, 0)).max_players == 7
    assert decode_armada((0xFFFF_FFFF,) * 4).map == "\xff" * 12


def test_shared_vector_b_decodes_as_armada() -> None:
    """Vector b is an Armada reply with placeholder user words 0x11111111, 0x22222222."""
    reply = dp.parse_dp4(load_vectors()["b"].data).parsed
    assert isinstance(reply, EnumSessionsReply)
    fields = decode_user_fields(reply.desc.application_guid, reply.desc.user)
    assert fields == UserFields(1, False, False, False, False, '""""')
