"""Properties of the DirectPlay codec (Hypothesis).

* Totality: any bytes, and mutations of every vector, make each parser return or raise
  ``DPlayError``; nothing else ever escapes (module contract, Rule 3).
* Identity: whenever a parse succeeds on a layout-preserving format, re-encoding gives the
  input back (DP4 bodies are kept raw; DP8 frames, queries and player records are exact).
* Round trip: ``parse(build(x)) == x`` for every record type, and ``classify`` names the
  kind the builder produced.

Example counts are sized so the module runs in a few seconds; the atheris target in
``tests/fuzz`` is the place for long runs.
"""

import uuid
from collections.abc import Callable
from typing import Final

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipxbridge.wire import directplay as dp
from ipxbridge.wire.directplay import (
    DP4Message,
    DP8DataFrame,
    DP8EnumQuery,
    DP8EnumResponse,
    DP8Frame,
    DP8Sack,
    DPlayError,
    DPlayKind,
    EnumSessions,
    EnumSessionsReply,
    PackedPlayer,
    PacketFragment,
    SessionDesc,
    SockAddr,
    SPHeader,
    SuperPackedPlayer,
)
from tests.unit.vectors import load_vectors

FAST: Final = settings(max_examples=100, deadline=None)
u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
guids = st.uuids(allow_nil=True)
# DirectPlay strings: no NUL (it terminates them) and no lone surrogate code points (two of
# them would re-encode as a pair and read back as one character).
names = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=24)
optional_names = st.none() | names
blobs = st.binary(max_size=48)
sockaddrs = st.builds(SockAddr, st.just(dp.AF_INET_WIRE), u16, st.ip_addresses(v=4).map(str))
tokens = st.sampled_from([dp.TOKEN_REMOTE, dp.TOKEN_FORWARD, dp.TOKEN_SERVER])
versions = st.integers(dp.VERSION_MIN, dp.VERSION_MAX)


def parses(parse: Callable[[bytes], object], data: bytes) -> object | None:
    """The parse result, or None for a DPlayError; anything else propagates and fails."""
    try:
        return parse(data)
    except DPlayError as exc:
        assert exc.reason in dp.DPLAY_REASONS
        return None


# --- totality on arbitrary bytes and on mutated vectors ------------------------------------


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=160), st.booleans())
def test_parse_dplay_is_total_on_any_bytes(data: bytes, dp8_context: bool) -> None:
    kind = dp.classify(data, dp8_context=dp8_context)
    result = parses(lambda d: dp.parse_dplay(d, dp8_context=dp8_context), data)
    if kind is DPlayKind.NONE:
        assert result is None


def _seeds() -> list[bytes]:
    vectors = load_vectors()
    seeds = [v.data for v in vectors.values()]
    seeds += [vectors["c"].data[30:], vectors["c2"].data[30:], vectors["b"].data[20:]]
    player = PackedPlayer(1, 2, "Kirk", "James", b"\x01" * 32, b"pd", 2, 14, 0, (7, 8))
    seeds.append(dp.build_packed_player(player))
    mask = 0x7FF
    spp = SuperPackedPlayer(1, 2, mask, 14, "a", "b", b"pd", b"sp", (1, 2), 3, (4, 5))
    seeds.append(dp.build_super_packed_player(spp))
    frag = PacketFragment(0x15, uuid.UUID(int=1), 0, 4, 0, 1, 4, 48, b"play")
    seeds.append(dp.build_packet_fragment(frag))
    seeds.append(bytes.fromhex("88 06 1f 01 02 03 0000 44332211") + bytes(range(16)))
    seeds.append(bytes.fromhex("3f f0 01 02") + bytes(range(24)))
    return seeds


SEEDS: Final = _seeds()
PARSERS: Final[dict[str, Callable[[bytes], object]]] = {
    "dplay": dp.parse_dplay,
    "dplay_dp8": lambda d: dp.parse_dplay(d, dp8_context=True),
    "dp4": dp.parse_dp4,
    "dp4_bare": lambda d: dp.parse_dp4(d, bare=True),
    "dp4_player": dp.parse_dp4_player,
    "dp8_query": dp.parse_dp8_enum_query,
    "dp8_response": dp.parse_dp8_enum_response,
    "dp8_frame": dp.parse_dp8_frame,
    "packed_player": dp.parse_packed_player,
    "super_packed": dp.parse_super_packed_player,
    "session_desc": dp.parse_session_desc,
    "winsock_sp_data": dp.parse_winsock_sp_data,
    "stream": dp.split_dp4_stream,
}


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A seed with a few bytes, u32 fields or lengths changed: reaches deep code paths."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["byte", "u32", "cut", "grow"]))
        if op == "cut" or not data:
            del data[draw(st.integers(0, len(data))) :]
        elif op == "grow":
            data += draw(st.binary(min_size=1, max_size=8))
        elif op == "byte":
            data[draw(st.integers(0, len(data) - 1))] = draw(u8)
        else:
            at = draw(st.integers(0, max(0, len(data) - 4)))
            value = draw(st.sampled_from([0, 1, 2, 20, 28, 32, 48, 88, 92, 0xFFFF, 0xFFFF_FFFF]))
            data[at : at + 4] = value.to_bytes(4, "little")[: len(data) - at]
    return bytes(data)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.sampled_from(sorted(PARSERS)))
def test_every_parser_is_total_on_mutated_vectors(data: bytes, parser: str) -> None:
    parses(PARSERS[parser], data)


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_successful_parses_re_encode_exactly(data: bytes) -> None:
    msg = parses(dp.parse_dp4, data) or parses(lambda d: dp.parse_dp4(d, bare=True), data)
    if isinstance(msg, DP4Message):
        assert dp.build_dp4_message(msg) == data
    player_msg = parses(dp.parse_dp4_player, data)
    if isinstance(player_msg, DP4Message):
        assert dp.build_dp4_message(player_msg) == data
    frame = parses(dp.parse_dp8_frame, data)
    if isinstance(frame, DP8Frame):
        assert dp.build_dp8_frame(frame) == data
    query = parses(dp.parse_dp8_enum_query, data)
    if isinstance(query, DP8EnumQuery):
        assert dp.build_dp8_enum_query(query) == data
    response = parses(dp.parse_dp8_enum_response, data)
    if isinstance(response, DP8EnumResponse):  # canonical form is a fixed point
        assert dp.parse_dp8_enum_response(dp.build_dp8_enum_response(response)) == response
    player = parses(dp.parse_packed_player, data)
    if isinstance(player, PackedPlayer):
        rebuilt = dp.build_packed_player(player)
        assert data.startswith(rebuilt)
    spp = parses(dp.parse_super_packed_player, data)
    if isinstance(spp, tuple):
        record, used = spp
        assert dp.build_super_packed_player(record) == data[:used]


# --- round trips -------------------------------------------------------------------------------


@st.composite
def wrapping(draw: st.DrawFn) -> dict[str, object]:
    """Keyword arguments of the DP4 builders: bare (IPX) or SP header with token/sockaddr."""
    if draw(st.booleans()):
        return {"version": draw(versions), "bare": True}
    return {"version": draw(versions), "sockaddr": draw(sockaddrs), "token": draw(tokens)}


def check_dp4(data: bytes, kwargs: dict[str, object]) -> DP4Message:
    bare = bool(kwargs.get("bare"))
    assert dp.classify(data) is (DPlayKind.DP4_BARE if bare else DPlayKind.DP4)
    msg = dp.parse_dplay(data)
    assert isinstance(msg, DP4Message)
    assert msg.version == kwargs["version"]
    if bare:
        assert msg.header is None
    else:
        assert msg.header == SPHeader(len(data), kwargs["token"], kwargs["sockaddr"])  # type: ignore[arg-type]
    assert dp.build_dp4_message(msg) == data
    return msg


@FAST
@given(st.builds(EnumSessions, guids, u32, optional_names), wrapping())
def test_enum_sessions_round_trip(msg: EnumSessions, kwargs: dict[str, object]) -> None:
    data = dp.build_enum_sessions(msg, **kwargs)  # type: ignore[arg-type]
    assert check_dp4(data, kwargs).parsed == msg


session_descs = st.builds(
    SessionDesc,
    flags=u32,
    instance_guid=guids,
    application_guid=guids,
    max_players=u32,
    current_players=u32,
    user=st.tuples(u32, u32, u32, u32),
    reserved=st.tuples(u32, u32),
    pointers=st.tuples(u32, u32),
)


@FAST
@given(st.builds(EnumSessionsReply, session_descs, optional_names), wrapping())
def test_enum_sessions_reply_round_trip(msg: EnumSessionsReply, kwargs: dict[str, object]) -> None:
    data = dp.build_enum_sessions_reply(msg, **kwargs)  # type: ignore[arg-type]
    assert check_dp4(data, kwargs).parsed == msg
    assert dp.parse_session_desc(dp.build_session_desc(msg.desc)) == msg.desc


@st.composite
def fragments(draw: st.DrawFn) -> PacketFragment:
    data = draw(blobs)
    return PacketFragment(
        command=draw(st.sampled_from([0x15, 0x30])),
        message_guid=draw(guids),
        packet_index=draw(u32),
        data_size=len(data),
        offset=draw(u32),
        total_packets=draw(u32),
        message_size=draw(u32),
        packet_offset=draw(st.integers(0, 48 + len(data))),  # within the message
        data=data,
    )


@FAST
@given(fragments(), wrapping())
def test_packet_fragment_round_trip(frag: PacketFragment, kwargs: dict[str, object]) -> None:
    data = dp.build_packet_fragment(frag, **kwargs)  # type: ignore[arg-type]
    assert check_dp4(data, kwargs).parsed == frag


@FAST
@given(sockaddrs, tokens, st.binary(max_size=64).filter(lambda b: not b.startswith(b"play")))
def test_player_message_round_trip(addr: SockAddr, token: int, body: bytes) -> None:
    data = dp.build_dp4_player(SPHeader(0, token, addr), body)
    assert dp.classify(data) is DPlayKind.DP4_PLAYER
    msg = dp.parse_dplay(data)
    assert msg == DP4Message(SPHeader(len(data), token, addr), 0x0A, 0, body, None, False)
    assert dp.build_dplay(msg) == data
    assert dp.split_dp4_stream(data + data[:7]) == ([data], data[:7])


packed_players = st.builds(
    PackedPlayer,
    flags=u32,
    player_id=u32,
    short_name=optional_names,
    long_name=optional_names,
    sp_data=blobs,
    player_data=blobs,
    system_player_id=u32,
    player_version=u32,
    parent_id=u32,
    player_ids=st.lists(u32, max_size=6).map(tuple),
)


@FAST
@given(packed_players, st.binary(max_size=8))
def test_packed_player_round_trip(player: PackedPlayer, tail: bytes) -> None:
    data = dp.build_packed_player(player)
    assert dp.parse_packed_player(data + tail) == player


def _width_for(length: int, draw: st.DrawFn) -> int:
    """A length-field width code (1, 2, 3 -> 1, 2, 4 bytes) able to hold ``length``."""
    fits = [code for code, limit in ((1, 0xFF), (2, 0xFFFF), (3, 0xFFFF_FFFF)) if length <= limit]
    return draw(st.sampled_from(fits))


@st.composite
def super_packed_players(draw: st.DrawFn) -> SuperPackedPlayer:
    mask = draw(st.integers(0, (1 << 21) - 1)) << 11  # the ignored bits are kept as sent
    short_name, long_name = draw(optional_names), draw(optional_names)
    mask |= dp.SPP_SHORT_NAME if short_name is not None else 0
    mask |= dp.SPP_LONG_NAME if long_name is not None else 0
    player_data, sp_data = draw(st.none() | blobs), draw(st.none() | blobs)
    player_ids = draw(st.none() | st.lists(u32, max_size=5).map(tuple))
    shortcut_ids = draw(st.none() | st.lists(u32, max_size=5).map(tuple))
    parent_id = draw(st.none() | u32)
    for shift, value in (
        (dp.SPP_PLAYER_DATA_SHIFT, player_data),
        (dp.SPP_SP_LENGTH_SHIFT, sp_data),
        (dp.SPP_PLAYER_COUNT_SHIFT, player_ids),
        (dp.SPP_SHORTCUT_COUNT_SHIFT, shortcut_ids),
    ):
        if value is not None:
            mask |= _width_for(len(value), draw) << shift
    mask |= dp.SPP_PARENT_ID if parent_id is not None else 0
    return SuperPackedPlayer(
        draw(u32), draw(u32), mask, draw(u32), short_name, long_name, player_data, sp_data,
        player_ids, parent_id, shortcut_ids,
    )  # fmt: skip


@FAST
@given(super_packed_players(), st.binary(max_size=8))
def test_super_packed_player_round_trip(player: SuperPackedPlayer, tail: bytes) -> None:
    data = dp.build_super_packed_player(player)
    assert dp.parse_super_packed_player(data + tail) == (player, len(data))


@st.composite
def queries(draw: st.DrawFn) -> DP8EnumQuery:
    guid = draw(st.none() | guids)
    return DP8EnumQuery(draw(u16), 2 if guid is None else 1, guid, draw(blobs))


@FAST
@given(queries())
def test_dp8_query_round_trip(query: DP8EnumQuery) -> None:
    data = dp.build_dp8_enum_query(query)
    assert dp.classify(data) is DPlayKind.DP8_ENUM_QUERY
    assert dp.parse_dplay(data) == query


responses = st.builds(
    DP8EnumResponse,
    cookie=u16,
    flags=u32,
    max_players=u32,
    current_players=u32,
    session_name=optional_names,
    password=blobs,
    reserved_data=blobs,
    app_reserved_data=blobs,
    instance_guid=guids,
    application_guid=guids,
    reply_data=blobs,
    app_desc_size=u32,
)


@FAST
@given(responses)
def test_dp8_response_round_trip(resp: DP8EnumResponse) -> None:
    data = dp.build_dp8_enum_response(resp)
    assert dp.classify(data) is DPlayKind.DP8_ENUM_RESPONSE
    assert dp.parse_dplay(data) == resp


masks = st.none() | u32


@st.composite
def frames(draw: st.DrawFn) -> DP8Frame:
    form = draw(st.sampled_from(["connect", "sack", "dframe"]))
    if form == "connect":
        return DP8Frame(
            draw(st.sampled_from([0x80, 0x88])), draw(st.sampled_from([1, 2, 3, 4])),
            draw(u8), draw(u8), draw(u32), draw(u32), draw(u32), trailer=draw(blobs),
        )  # fmt: skip
    m1, m2, m3, m4 = values = (draw(masks), draw(masks), draw(masks), draw(masks))
    if form == "sack":
        flags = draw(st.sampled_from([0, 1]))  # RESPONSE bit
        flags |= sum(
            bit for bit, v in zip(dp.DP8_SACK_MASK_BITS, values, strict=True) if v is not None
        )
        sack = DP8Sack(flags, draw(u8), draw(u8), draw(u8), m1, m2, m3, m4, padding=draw(u16))
        command = draw(st.sampled_from([0x80, 0x88]))
        return DP8Frame(command, 6, 0, 0, 0, 0, draw(u32), trailer=draw(blobs), sack=sack)
    control = draw(st.integers(0, 0x0F))
    control |= sum(
        bit for bit, v in zip(dp.DP8_CONTROL_MASK_BITS, values, strict=True) if v is not None
    )
    data = DP8DataFrame(control, draw(u8), draw(u8), m1, m2, m3, m4, payload=draw(blobs))
    command = draw(u8.filter(lambda c: c & 1))
    return DP8Frame(command, 0, 0, 0, 0, data.keepalive_session_id or 0, 0, data=data)


@FAST
@given(frames())
def test_dp8_frame_round_trip(frame: DP8Frame) -> None:
    data = dp.build_dp8_frame(frame)
    kind = DPlayKind.DP8_DFRAME if frame.data is not None else DPlayKind.DP8_CFRAME
    assert dp.classify(data, dp8_context=True) is kind
    assert dp.parse_dplay(data, dp8_context=True) == frame
    assert dp.build_dplay(frame) == data


@settings(max_examples=60, deadline=None)
@given(st.lists(st.builds(EnumSessions, guids, u32, optional_names), max_size=6), st.data())
def test_stream_split_is_independent_of_chunking(
    messages: list[EnumSessions], chunking: st.DataObject
) -> None:
    encoded = [dp.build_enum_sessions(m, sockaddr=SockAddr(2, 2300, "0.0.0.0")) for m in messages]
    stream = b"".join(encoded)
    cuts = sorted(chunking.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    buffer, out = b"", []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got, buffer = dp.split_dp4_stream(buffer + stream[start:end])
        out += got
    assert out == encoded
    assert buffer == b""
