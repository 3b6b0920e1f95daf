"""Adversarial lengths and offsets: every size/offset/count field of the DirectPlay codec is
set to {0, 1, min-1, min, min+1, len-1, len, len+1, 0xFFFF, 0xFFFFFFFF} and must give a
defined outcome: a parse, or ``DPlayError`` with the reason the table names. Then every
prefix of the vectors is parsed (truncation at each byte).

``min`` is the smallest legal value of the field (the end of the fixed part for an offset),
``len`` the length the field can reach in the buffer. Offsets count from ``play`` in DP4 and
from byte 4 in a DP8 EnumResponse (docs/protocols.md 1.2, 2.3).
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import pytest

from ipxbridge.wire import directplay as dp
from ipxbridge.wire.directplay import DPlayError, PackedPlayer, PacketFragment, SockAddr
from tests.unit.vectors import load_vectors

VECTORS: Final = load_vectors()
OK: Final = "ok"
TRUNC: Final = "dplay_truncated"
SIZE: Final = "dplay_bad_size"
OFFSET: Final = "dplay_bad_offset"
STRING: Final = "dplay_bad_string"
TOKEN: Final = "dplay_bad_token"  # noqa: S105 - a reason, not a secret
VALUE: Final = "dplay_bad_value"
LABELS: Final = ("0", "1", "min-1", "min", "min+1", "len-1", "len", "len+1", "0xFFFF", "0xFFFFFFFF")


def outcome(parse: Callable[[bytes], object], data: bytes) -> str:
    """``ok`` or the DPlayError reason; any other exception fails the test."""
    try:
        parse(data)
    except DPlayError as exc:
        return exc.reason
    return OK


def values(minimum: int, length: int) -> dict[str, int]:
    raw = {
        "0": 0,
        "1": 1,
        "min-1": minimum - 1,
        "min": minimum,
        "min+1": minimum + 1,
        "len-1": length - 1,
        "len": length,
        "len+1": length + 1,
        "0xFFFF": 0xFFFF,
        "0xFFFFFFFF": 0xFFFF_FFFF,
    }
    return {label: value for label, value in raw.items() if value >= 0}


def put_u32(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + value.to_bytes(4, "little") + data[at + 4 :]


@dataclass(frozen=True)
class Field:
    """One u32 field of one message and the outcome expected for each probe value."""

    name: str
    base: bytes
    at: int
    minimum: int
    length: int
    parse: Callable[[bytes], object]
    expect: dict[str, str]
    patch: Callable[[bytes, int, int], bytes] = put_u32


# --- the messages under test -----------------------------------------------------------------

A: Final = VECTORS["a"].data  # EnumSessions, 52 bytes
A2: Final = VECTORS["a2"].data  # EnumSessions with password, 70 bytes (50 from 'play')
B: Final = VECTORS["b"].data  # EnumSessionsReply, 134 bytes (114 from 'play')
D3: Final = VECTORS["d3"].data  # DP8 EnumResponse, 118 bytes (114 from byte 4)
CLIENT: Final = SockAddr(2, 2300, "0.0.0.0")
FRAGMENT: Final = dp.build_packet_fragment(
    PacketFragment(0x30, uuid.UUID(int=3), 0, 20, 0, 2, 40, 48, bytes(range(20))), sockaddr=CLIENT
)  # 88 bytes, 68 from 'play'; DataSize at 48, PacketOffset at 64
PLAYER: Final = dp.build_packed_player(
    PackedPlayer(
        flags=1,
        player_id=0x1234,
        short_name="Kirk",  # 10 bytes
        long_name="James T. Kirk",  # 28 bytes
        sp_data=dp.build_winsock_sp_data(CLIENT, SockAddr(2, 2350, "0.0.0.0")),  # 32
        player_data=b"abc",  # 3
        system_player_id=0x1234,
        player_version=0x0E,
        parent_id=0,
        player_ids=(7, 8),  # 8
    )
)  # 48 + 81 = 129 bytes
SPP_DATA: Final = (
    (16).to_bytes(4, "little")
    + bytes(8)
    + (3 << dp.SPP_PLAYER_DATA_SHIFT).to_bytes(4, "little")  # 4-byte player data length
    + bytes(4)
    + (10).to_bytes(4, "little")
    + bytes(range(10))
)  # 34 bytes; the length is the last field, so shorter values still parse
SPP_COUNT: Final = (
    (16).to_bytes(4, "little")
    + bytes(8)
    + (3 << dp.SPP_PLAYER_COUNT_SHIFT).to_bytes(4, "little")
    + bytes(4)
    + (3).to_bytes(4, "little")
    + bytes(12)
)  # 36 bytes: three player IDs


def parse_spp(data: bytes) -> object:
    return dp.parse_super_packed_player(data)


def sp_size_patch(data: bytes, at: int, value: int) -> bytes:
    """Size in the low 20 bits with the token kept; a wider value replaces the whole u32."""
    mixed = dp.TOKEN_REMOTE << 20 | value if value <= 0xFFFFF else value
    return put_u32(data, at, mixed)


def with_reply_offset(offset: int) -> bytes:
    return put_u32(D3, 4, offset)


FIELDS: Final = [
    Field("sp_header.size", A, 0, 28, 52, dp.parse_dp4, {
        "0": SIZE, "1": SIZE, "min-1": SIZE, "min": SIZE, "min+1": SIZE, "len-1": SIZE,
        "len": OK, "len+1": SIZE, "0xFFFF": SIZE, "0xFFFFFFFF": TOKEN,
    }, sp_size_patch),
    Field("enum_sessions.password_offset", A2, 44, 32, 50, dp.parse_dp4, {
        "0": OK, "1": OFFSET, "min-1": OFFSET, "min": OK, "min+1": OK, "len-1": STRING,
        "len": STRING, "len+1": OFFSET, "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
    # A name may run to the end of the message without its NUL: at len it is "",
    # at len-1 one byte, which is no UTF-16 code unit.
    Field("enum_sessions_reply.name_offset", B, 108, 92, 114, dp.parse_dp4, {
        "0": OK, "1": OFFSET, "min-1": OFFSET, "min": OK, "min+1": OK, "len-1": STRING,
        "len": OK, "len+1": OFFSET, "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
    Field("session_desc.dwSize", B, 28, 80, 80, dp.parse_dp4, {
        "0": SIZE, "1": SIZE, "min-1": SIZE, "min": OK, "min+1": SIZE, "len-1": SIZE,
        "len": OK, "len+1": SIZE, "0xFFFF": SIZE, "0xFFFFFFFF": SIZE,
    }),
    Field("packet.data_size", FRAGMENT, 48, 0, 20, dp.parse_dp4, {
        "0": OK, "1": OK, "min": OK, "min+1": OK, "len-1": OK, "len": OK, "len+1": OFFSET,
        "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
    Field("packet.packet_offset", FRAGMENT, 64, 48, 68, dp.parse_dp4, {
        "0": OK, "1": OK, "min-1": OK, "min": OK, "min+1": OK, "len-1": OK, "len": OK,
        "len+1": OFFSET, "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
    Field("dp8_response.session_name_offset", D3, 28, 88, 114, dp.parse_dp8_enum_response, {
        "0": OFFSET, "1": OFFSET, "min-1": OFFSET, "min": OK, "min+1": OFFSET, "len-1": OFFSET,
        "len": OFFSET, "len+1": OFFSET, "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
    # "min" (2 bytes) is the name's first character without a NUL: accepted
    Field("dp8_response.session_name_size", D3, 32, 2, 26, dp.parse_dp8_enum_response, {
        "0": OK, "1": STRING, "min-1": STRING, "min": OK, "min+1": STRING,
        "len-1": STRING, "len": OK, "len+1": OFFSET, "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
    # size 0 means "absent", whatever the offset says
    Field("dp8_response.reply_offset(size 0)", D3, 4, 88, 114, dp.parse_dp8_enum_response,
          dict.fromkeys(LABELS, OK)),
    # ReplyOffset 0 means no reply whatever ResponseSize says (docs/protocols.md 2.3)
    Field("dp8_response.reply_size(offset 0)", D3, 8, 0, 26, dp.parse_dp8_enum_response,
          dict.fromkeys(values(0, 26), OK)),
    Field("dp8_response.reply_size(offset 88)", with_reply_offset(88), 8, 0, 26,
          dp.parse_dp8_enum_response, {
        "0": OK, "1": OK, "min": OK, "min+1": OK, "len-1": OK, "len": OK, "len+1": OFFSET,
        "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
    Field("packed_player.size", PLAYER, 0, 48, 129, dp.parse_packed_player, {
        "0": SIZE, "1": SIZE, "min-1": SIZE, "min": SIZE, "min+1": SIZE, "len-1": SIZE,
        "len": OK, "len+1": SIZE, "0xFFFF": SIZE, "0xFFFFFFFF": SIZE,
    }),
    Field("packed_player.fixed_size", PLAYER, 36, 48, 48, dp.parse_packed_player, {
        "0": SIZE, "1": SIZE, "min-1": SIZE, "min": OK, "min+1": SIZE, "len-1": SIZE,
        "len": OK, "len+1": SIZE, "0xFFFF": SIZE, "0xFFFFFFFF": SIZE,
    }),
    Field("super_packed.size", SPP_DATA, 0, 16, 16, parse_spp, {
        "0": SIZE, "1": SIZE, "min-1": SIZE, "min": OK, "min+1": SIZE, "len-1": SIZE,
        "len": OK, "len+1": SIZE, "0xFFFF": SIZE, "0xFFFFFFFF": SIZE,
    }),
    Field("super_packed.player_data_length", SPP_DATA, 20, 0, 10, parse_spp, {
        "0": OK, "1": OK, "min": OK, "min+1": OK, "len-1": OK, "len": OK, "len+1": OFFSET,
        "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
    Field("super_packed.player_count", SPP_COUNT, 20, 0, 3, parse_spp, {
        "0": OK, "1": OK, "min": OK, "min+1": OK, "len-1": OK, "len": OK, "len+1": OFFSET,
        "0xFFFF": OFFSET, "0xFFFFFFFF": OFFSET,
    }),
]  # fmt: skip

# PACKEDPLAYER lengths: (offset of the field, its value in PLAYER, bytes per unit). The rule:
# smaller than the truth -> the parts add up to less than Size (dplay_bad_size); larger ->
# the parts run past the buffer (dplay_bad_offset).
PACKED_LENGTHS: Final = {
    "short_name_length": (12, 10, 1),
    "long_name_length": (16, 28, 1),
    "sp_data_size": (20, 32, 1),
    "player_data_size": (24, 3, 1),
    "number_of_players": (28, 2, 4),
}
for field_name, (at, truth, _unit) in PACKED_LENGTHS.items():
    FIELDS.append(
        Field(
            f"packed_player.{field_name}",
            PLAYER,
            at,
            0,
            truth,
            dp.parse_packed_player,
            {
                label: (OK if value == truth else SIZE if value < truth else OFFSET)
                for label, value in values(0, truth).items()
            },
        )
    )

CASES: Final = [
    pytest.param(f, label, value, id=f"{f.name}={label}")
    for f in FIELDS
    for label, value in values(f.minimum, f.length).items()
]


def test_every_field_has_a_complete_table() -> None:
    for f in FIELDS:
        assert set(f.expect) == set(values(f.minimum, f.length)), f.name
        assert f.patch(f.base, f.at, int.from_bytes(f.base[f.at : f.at + 4], "little")) == f.base
        assert outcome(f.parse, f.base) == OK, f.name
        # labels that land on the same value must agree
        seen: dict[int, str] = {}
        for label, value in values(f.minimum, f.length).items():
            assert seen.setdefault(value, f.expect[label]) == f.expect[label], (f.name, label)


@pytest.mark.parametrize(("field", "label", "value"), CASES)
def test_length_and_offset_fields(field: Field, label: str, value: int) -> None:
    data = field.patch(field.base, field.at, value)
    assert outcome(field.parse, data) == field.expect[label]


def test_what_the_ok_cases_decode_to() -> None:
    """A few of the OK rows, checked for the value they produce."""
    no_password = dp.parse_dp4(put_u32(A2, 44, 0)).parsed
    assert isinstance(no_password, dp.EnumSessions)
    assert no_password.password is None  # the unreferenced bytes are ignored
    no_name = dp.parse_dp4(put_u32(B, 108, 0)).parsed
    assert isinstance(no_name, dp.EnumSessionsReply)
    assert no_name.name is None
    empty = dp.parse_dp4(put_u32(FRAGMENT, 48, 0)).parsed
    assert isinstance(empty, PacketFragment)
    assert (empty.data_size, empty.data) == (0, b"")
    nameless = dp.parse_dp8_enum_response(put_u32(D3, 32, 0))
    assert nameless.session_name is None
    overlap = dp.parse_dp8_enum_response(put_u32(with_reply_offset(88), 8, 26))
    assert overlap.reply_data == "DP8 LAN Game\x00".encode("utf-16-le")
    record, used = dp.parse_super_packed_player(put_u32(SPP_DATA, 20, 4))
    assert (record.player_data, used) == (bytes(range(4)), 28)


# --- single-byte fields ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query_type", "expected"), [(0, VALUE), (1, OK), (2, OK), (3, VALUE), (0xFF, VALUE)]
)
def test_dp8_query_type(query_type: int, expected: str) -> None:
    data = VECTORS["d"].data
    assert outcome(dp.parse_dp8_enum_query, data[:4] + bytes([query_type]) + data[5:]) == expected


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, OK), (1, OK), (9, OK), (10, OK), (11, OFFSET), (0xFF, OFFSET)],
)
def test_super_packed_one_byte_length(length: int, expected: str) -> None:
    mask = 1 << dp.SPP_PLAYER_DATA_SHIFT  # 1-byte player data length
    data = (16).to_bytes(4, "little") + bytes(8) + mask.to_bytes(4, "little") + bytes(4)
    data += bytes([length]) + bytes(range(10))
    assert outcome(parse_spp, data) == expected


# --- TCP stream framing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "size", "expected"),
    [
        ("0", 0, SIZE),
        ("1", 1, SIZE),
        ("min-1", 19, SIZE),
        ("min", 20, TOKEN),  # cuts 20 bytes; the next "header" is 'play': out of sync
        ("min+1", 21, TOKEN),
        ("len-1", 51, "1+1"),  # one message, one byte left over
        ("len", 52, "1+0"),
        ("len+1", 53, "0+52"),  # waits for one more byte
        ("0xFFFF", 0xFFFF, "0+52"),
        ("0xFFFFFFFF", 0xFFFF_FFFF, TOKEN),
    ],
)
def test_stream_size_field(label: str, size: int, expected: str) -> None:
    data = sp_size_patch(A, 0, size)
    got: str
    try:
        messages, rest = dp.split_dp4_stream(data)
    except DPlayError as exc:
        got = exc.reason
    else:
        got = f"{len(messages)}+{len(rest)}"
    assert got == expected, label


# --- truncation at every byte ---------------------------------------------------------------

# (payload, parser, [(end, outcome), ...]): a prefix of length L gets the outcome of the
# first range whose end is > L.
Ranges = list[tuple[int, str]]


def ipx_data(name: str) -> bytes:
    return VECTORS[name].data[30:]


TRUNCATIONS: Final[dict[str, tuple[bytes, Callable[[bytes], object], Ranges]]] = {
    "a": (A, dp.parse_dp4, [(20, TRUNC), (52, SIZE), (53, OK)]),
    "b": (B, dp.parse_dp4, [(20, TRUNC), (134, SIZE), (135, OK)]),
    "c(bare)": (
        ipx_data("c"),
        lambda d: dp.parse_dp4(d, bare=True),
        [(32, TRUNC), (33, OK)],
    ),
    "b(bare)": (
        B[20:],
        lambda d: dp.parse_dp4(d, bare=True),
        # The name may end with the message, NUL or not: whole code units parse
        # (a shorter name), half of one is dplay_bad_string.
        [
            (92, TRUNC),
            *((end + 1, OK if (end - 92) % 2 == 0 else STRING) for end in range(92, 114)),
            (115, OK),
        ],
    ),
    "d": (VECTORS["d"].data, dp.parse_dp8_enum_query, [(21, TRUNC), (27, OK)]),
    "d2": (VECTORS["d2"].data, dp.parse_dp8_enum_query, [(5, TRUNC), (6, OK)]),
    "d3": (D3, dp.parse_dp8_enum_response, [(92, TRUNC), (118, OFFSET), (119, OK)]),
    "e1": (VECTORS["e1"].data, dp.parse_dp8_frame, [(16, TRUNC), (17, OK)]),
    "e4": (VECTORS["e4"].data, dp.parse_dp8_frame, [(4, TRUNC), (9, OK)]),
    "packed_player": (PLAYER, dp.parse_packed_player, [(48, TRUNC), (129, OFFSET), (130, OK)]),
    "fragment": (FRAGMENT, dp.parse_dp4, [(20, TRUNC), (88, SIZE), (89, OK)]),
    "fragment(bare)": (
        FRAGMENT[20:],
        lambda d: dp.parse_dp4(d, bare=True),
        [(48, TRUNC), (68, OFFSET), (69, OK)],
    ),
}


def expected_for(ranges: Ranges, length: int) -> str:
    return next(result for end, result in ranges if length < end)


@pytest.mark.parametrize("name", sorted(TRUNCATIONS))
def test_every_prefix(name: str) -> None:
    data, parse, ranges = TRUNCATIONS[name]
    assert ranges[-1][0] == len(data) + 1
    for length in range(len(data) + 1):
        assert outcome(parse, data[:length]) == expected_for(ranges, length), (name, length)


def test_every_prefix_of_a_full_super_packed_player_fails_cleanly() -> None:
    mask = (
        dp.SPP_SHORT_NAME
        | dp.SPP_LONG_NAME
        | 2 << dp.SPP_PLAYER_DATA_SHIFT
        | 1 << dp.SPP_SP_LENGTH_SHIFT
        | 3 << dp.SPP_PLAYER_COUNT_SHIFT
        | dp.SPP_PARENT_ID
        | 2 << dp.SPP_SHORTCUT_COUNT_SHIFT
    )
    record = dp.SuperPackedPlayer(1, 2, mask, 14, "a", "bc", b"pd", b"sp", (1, 2), 3, (4,))
    data = dp.build_super_packed_player(record)
    assert dp.parse_super_packed_player(data) == (record, len(data))
    for length in range(len(data)):
        assert outcome(parse_spp, data[:length]) in {TRUNC, OFFSET, STRING}, length
