"""DirectPlay codec: the test vectors decode to their documented fields and re-encode
byte-exact; classification (the 512/768-byte trap); builders; stream framing; error reasons.

Vectors: ``tests/unit/vectors/vectors.txt`` (docs/protocols.md 9, 4.2).
"""

import dataclasses
import typing
import uuid
from typing import Final

import pytest

from ipxbridge.wire import directplay as dp
from ipxbridge.wire import errors, ipx
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
from tests.unit.vectors import Vector, load_vectors

VECTORS: Final = load_vectors()
ARMADA: Final = uuid.UUID("76F93801-9340-11D2-AE34-00600895C779")  # docs/protocols.md 8
# [MC-DPL4CS] 4.1 sample: the wire bytes a0 52 a5 0b ff e0 cf 11 ... read as a Windows GUID.
SAMPLE_APP: Final = uuid.UUID("0BA552A0-E0FF-11CF-9C4E-00A0C905425E")
DP8_APP: Final = uuid.UUID("01234567-89AB-4CDE-8F01-23456789ABCD")
CLIENT_2300: Final = SockAddr(dp.AF_INET_WIRE, 2300, "0.0.0.0")


def payload(name: str) -> bytes:
    """The DirectPlay bytes of a vector: c and c2 are whole IPX packets (UDP 213)."""
    vec = VECTORS[name]
    if name in ("c", "c2"):
        _, data = ipx.parse_packet(vec.data)
        return bytes(data)
    return vec.data


def dp4(name: str) -> DP4Message:
    msg = dp.parse_dplay(payload(name))
    assert isinstance(msg, DP4Message)
    return msg


# --- every vector: decode, check the documented fields, re-encode byte-exact --------------


def test_vector_file_is_complete() -> None:
    assert set(VECTORS) == {"a", "a2", "b", "c", "c2", "d", "d2", "d3", "e1", "e2", "e3", "e4"}


def test_a_enum_sessions_armada() -> None:
    msg = dp4("a")
    assert msg.header == SPHeader(52, dp.TOKEN_REMOTE, CLIENT_2300)
    assert (msg.command, msg.command_name, msg.version) == (0x02, "EnumSessions", 0x0E)
    assert msg.parsed == EnumSessions(ARMADA, dp.ENUM_SESSIONS_AVAILABLE, None)
    assert dp.format_guid(ARMADA) == "{76F93801-9340-11D2-AE34-00600895C779}"
    assert dp.build_enum_sessions(msg.parsed, sockaddr=CLIENT_2300) == VECTORS["a"].data


def test_a2_enum_sessions_with_password_from_the_spec_sample() -> None:
    msg = dp4("a2")
    assert msg.header is not None
    assert msg.header.size == 70
    assert msg.parsed == EnumSessions(SAMPLE_APP, dp.ENUM_SESSIONS_ALL, "Password")
    # PasswordOffset 32 counted from 'play' = absolute byte 52 (docs/protocols.md 1.2 trap).
    assert VECTORS["a2"].data[44:48] == (32).to_bytes(4, "little")
    assert VECTORS["a2"].data[52:54] == "P".encode("utf-16-le")
    rebuilt = dp.build_enum_sessions(msg.parsed, sockaddr=CLIENT_2300)
    assert rebuilt == VECTORS["a2"].data


def test_b_enum_sessions_reply_armada_lan() -> None:
    msg = dp4("b")
    assert msg.header == SPHeader(134, dp.TOKEN_REMOTE, SockAddr(2, 2301, "0.0.0.0"))
    assert msg.command_name == "EnumSessionsReply"
    reply = msg.parsed
    assert isinstance(reply, EnumSessionsReply)
    assert reply.name == "Armada LAN"
    desc = reply.desc
    assert desc == SessionDesc(
        flags=0x44,  # KEEPALIVE | MIGRATEHOST
        instance_guid=uuid.UUID("12345678-9ABC-4DEF-8123-456789ABCDEF"),
        application_guid=ARMADA,
        max_players=8,
        current_players=1,
        user=(0x11111111, 0x22222222, 0, 0),
    )
    assert not desc.password_required
    assert not desc.join_disabled
    assert not desc.new_players_disabled
    assert VECTORS["b"].data[108:112] == (92).to_bytes(4, "little")  # NameOffset from 'play'
    sockaddr = SockAddr(2, 2301, "0.0.0.0")
    assert dp.build_enum_sessions_reply(reply, sockaddr=sockaddr) == VECTORS["b"].data


def test_c_enum_sessions_over_ipx_has_no_sp_header() -> None:
    header, _ = ipx.parse_packet(VECTORS["c"].data)
    assert header.dst_socket == ipx.SOCKET_DPLAY_DISCOVERY
    data = payload("c")
    assert dp.classify(data) is DPlayKind.DP4_BARE
    msg = dp.parse_dplay(data)
    assert isinstance(msg, DP4Message)
    assert msg.header is None
    assert msg.parsed == EnumSessions(ARMADA, 1, None)
    assert dp.build_enum_sessions(msg.parsed, bare=True) == data
    assert dp.parse_dp4(data, bare=True) == msg


def test_c2_enum_sessions_over_ipx_with_sp_header() -> None:
    data = payload("c2")
    assert dp.classify(data) is DPlayKind.DP4
    msg = dp4("c2")
    assert msg.header == SPHeader(52, dp.TOKEN_REMOTE, CLIENT_2300)
    assert msg.parsed == EnumSessions(ARMADA, 1, None)
    assert dp.build_enum_sessions(msg.parsed, sockaddr=CLIENT_2300) == data
    assert data == VECTORS["a"].data  # the same message, only the transport differs


def test_d_dp8_enum_query_with_guid() -> None:
    msg = dp.parse_dplay(payload("d"))
    assert msg == DP8EnumQuery(0x1234, 1, DP8_APP, b"HELLO")
    assert dp.build_dp8_enum_query(msg) == VECTORS["d"].data
    keywords = dp.build_dp8_enum_query(cookie=0x1234, application_guid=DP8_APP, app_data=b"HELLO")
    assert keywords == VECTORS["d"].data


def test_d2_dp8_enum_query_all_applications() -> None:
    msg = dp.parse_dplay(payload("d2"))
    assert msg == DP8EnumQuery(0xBEEF, 2, None, b"")
    assert dp.build_dp8_enum_query(msg) == VECTORS["d2"].data
    assert dp.build_dp8_enum_query(cookie=0xBEEF) == VECTORS["d2"].data


def test_d3_dp8_enum_response() -> None:
    msg = dp.parse_dplay(payload("d3"))
    assert msg == DP8EnumResponse(
        cookie=0x1234,
        flags=dp.DP8_SESSION_MIGRATE_HOST,
        max_players=8,
        current_players=2,
        session_name="DP8 LAN Game",
        password=b"",
        reserved_data=b"",
        app_reserved_data=b"",
        instance_guid=uuid.UUID("FEDCBA98-7654-4321-8FED-CBA987654321"),
        application_guid=DP8_APP,
        reply_data=b"",
        app_desc_size=0x50,
    )
    assert isinstance(msg, DP8EnumResponse)
    assert not msg.password_required
    # SessionNameOffset 88 counts from byte 4: the name is at absolute byte 92.
    assert VECTORS["d3"].data[28:36] == (88).to_bytes(4, "little") + (26).to_bytes(4, "little")
    assert dp.build_dp8_enum_response(msg) == VECTORS["d3"].data


SESSION: Final = 0x79C9AEC6  # dwSessID shared by the four [MC-DPL8R] 4.1 frames
KEEPALIVE: Final = SESSION.to_bytes(4, "little")  # a keep-alive DFRAME's payload


@pytest.mark.parametrize(
    ("name", "frame"),
    [
        ("e1", DP8Frame(0x88, dp.DP8ExtOpcode.CONNECT, 0, 0, 0x00010006, SESSION, 593966749)),
        ("e2", DP8Frame(0x88, dp.DP8ExtOpcode.CONNECTED, 0, 0, 0x00010006, SESSION, 319457)),
        ("e3", DP8Frame(0x80, dp.DP8ExtOpcode.CONNECTED, 1, 0, 0x00010006, SESSION, 593966749)),
        (
            "e4",
            DP8Frame(
                0x3F, 0, 0, 0, 0, SESSION, 0,
                data=DP8DataFrame(0x02, 0, 0, None, None, None, None, KEEPALIVE),
            ),
        ),
    ],
)  # fmt: skip
def test_e_dp8_connection_frames(name: str, frame: DP8Frame) -> None:
    data = payload(name)
    assert dp.classify(data) is DPlayKind.NONE  # frames need the DP8 port context
    kind = DPlayKind.DP8_DFRAME if name == "e4" else DPlayKind.DP8_CFRAME
    assert dp.classify(data, dp8_context=True) is kind
    assert dp.parse_dplay(data, dp8_context=True) == frame
    assert dp.parse_dp8_frame(data) == frame
    assert dp.build_dp8_frame(frame) == data
    if frame.data is not None:
        assert frame.data.keepalive_session_id == SESSION
        assert frame.is_dframe


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_every_vector_re_encodes_byte_exact(name: str) -> None:
    data = payload(name)
    msg = dp.parse_dplay(data, dp8_context=name.startswith("e"))
    assert dp.build_dplay(msg) == data


# --- classification ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "plain", "dp8_port"),
    [
        ("a", DPlayKind.DP4, DPlayKind.DP4),
        ("a2", DPlayKind.DP4, DPlayKind.DP4),
        ("b", DPlayKind.DP4, DPlayKind.DP4),
        ("c", DPlayKind.DP4_BARE, DPlayKind.DP4_BARE),
        ("c2", DPlayKind.DP4, DPlayKind.DP4),
        ("d", DPlayKind.DP8_ENUM_QUERY, DPlayKind.DP8_ENUM_QUERY),
        ("d2", DPlayKind.DP8_ENUM_QUERY, DPlayKind.DP8_ENUM_QUERY),
        ("d3", DPlayKind.DP8_ENUM_RESPONSE, DPlayKind.DP8_ENUM_RESPONSE),
        ("e1", DPlayKind.NONE, DPlayKind.DP8_CFRAME),
        ("e4", DPlayKind.NONE, DPlayKind.DP8_DFRAME),
    ],
)
def test_classify_vectors(name: str, plain: DPlayKind, dp8_port: DPlayKind) -> None:
    data = payload(name)
    assert dp.classify(data) is plain
    assert dp.classify(data, dp8_context=True) is dp8_port
    assert dp.classify(memoryview(data)) is plain


def reply_of_size(total: int) -> bytes:
    """An EnumSessionsReply whose whole UDP payload is exactly ``total`` bytes."""
    name_bytes = total - dp.DP4_HEADER_LEN - 80 - 4
    assert name_bytes % 2 == 0
    desc = SessionDesc(0, uuid.UUID(int=1), ARMADA, 8, 1, (0, 0, 0, 0))
    reply = EnumSessionsReply(desc, "x" * (name_bytes // 2 - 1))
    data = dp.build_enum_sessions_reply(reply, sockaddr=CLIENT_2300)
    assert len(data) == total
    return data


@pytest.mark.parametrize(("total", "lead"), [(512, b"\x00\x02"), (768, b"\x00\x03")])
def test_512_and_768_byte_dp4_messages_are_not_dp8(total: int, lead: bytes) -> None:
    """docs/protocols.md 2.5: the little-endian size makes these start like DP8 enumeration."""
    data = reply_of_size(total)
    assert data[:4] == lead + b"\xb0\xfa"
    assert data[0] == 0  # what the DP8 test alone would accept ...
    assert data[1] in (2, 3)  # ... as an EnumQuery / EnumResponse
    for context in (False, True):
        assert dp.classify(data, dp8_context=context) is DPlayKind.DP4
        msg = dp.parse_dplay(data, dp8_context=context)
        assert isinstance(msg, DP4Message)
        assert isinstance(msg.parsed, EnumSessionsReply)


def test_512_byte_player_message_is_not_dp8() -> None:
    header = SPHeader(0, dp.TOKEN_REMOTE, SockAddr(2, 2350, "0.0.0.0"))
    data = dp.build_dp4_player(header, bytes(range(256)) + bytes(236))
    assert len(data) == 512
    assert data[:2] == b"\x00\x02"
    assert dp.classify(data) is DPlayKind.DP4_PLAYER
    msg = dp.parse_dplay(data)
    assert isinstance(msg, DP4Message)
    assert (msg.signature, msg.command_name, msg.version) == (False, "PlayerMessage", 0)
    assert dp.build_dplay(msg) == data


CFRAME_CONNECT: Final = VECTORS["e1"].data
SACK_12: Final = bytes.fromhex("80 06 01 00 05 04 0000 78563412")


@pytest.mark.parametrize(
    ("data", "context", "kind"),
    [
        (b"", True, DPlayKind.NONE),
        (b"play", False, DPlayKind.NONE),  # shorter than play + command + version
        (b"play\x02\x00\x0e\x00", False, DPlayKind.DP4_BARE),
        (b"play\x29\x00\x0e\x00", False, DPlayKind.DP4_BARE),
        (bytes.fromhex("00 02 34 12 03"), False, DPlayKind.NONE),  # query type 3
        (bytes.fromhex("00 02 34 12 01") + bytes(15), False, DPlayKind.NONE),  # type 1, no GUID
        (bytes.fromhex("00 02 34 12 01") + bytes(16), False, DPlayKind.DP8_ENUM_QUERY),
        (bytes.fromhex("00 02 34 12 02"), False, DPlayKind.DP8_ENUM_QUERY),
        (bytes.fromhex("00 04 34 12 02"), True, DPlayKind.NONE),
        (VECTORS["d3"].data[:91], True, DPlayKind.NONE),  # response shorter than 92
        (CFRAME_CONNECT, False, DPlayKind.NONE),
        (CFRAME_CONNECT[:15], True, DPlayKind.NONE),
        (b"\x90" + CFRAME_CONNECT[1:], True, DPlayKind.NONE),  # 0x90: not a clean CFRAME
        (b"\x88\x05" + CFRAME_CONNECT[2:], True, DPlayKind.NONE),  # opcode 5
        (SACK_12, True, DPlayKind.DP8_CFRAME),
        (SACK_12[:11], True, DPlayKind.NONE),
        (b"\x81\x02\x00\x00", True, DPlayKind.DP8_DFRAME),  # DATA wins over the 0x80 bit
        (b"\x3f\x02\x00", True, DPlayKind.NONE),
        (b"\x70" * 40, True, DPlayKind.NONE),  # neither DATA nor CFRAME
        # 'play' at 20 with a bad token is not DP4 (and not DP8 either: byte 0 != 0)
        (b"\x34\x00\xb0\xfb" + VECTORS["a"].data[4:], False, DPlayKind.NONE),
        # player message shape but non-zero sin_zero
        (VECTORS["a"].data[:12] + b"\x01" + bytes(7) + b"data", False, DPlayKind.NONE),
        (VECTORS["a"].data[:20] + b"data", False, DPlayKind.DP4_PLAYER),
    ],
)
def test_classify_table(data: bytes, context: bool, kind: DPlayKind) -> None:
    assert dp.classify(data, dp8_context=context) is kind


def test_parse_dplay_refuses_what_classify_rejects() -> None:
    with pytest.raises(DPlayError) as info:
        dp.parse_dplay(b"\x70" * 40, dp8_context=True)
    assert info.value.reason == "not_dplay"


# --- DP4 messages that are kept raw, and version / signature checks ---------------------------


def test_unknown_and_undecoded_commands_are_kept_raw() -> None:
    header = SPHeader(0, dp.TOKEN_REMOTE, CLIENT_2300)
    for command, name in ((0x16, "Ping"), (0x29, "SuperEnumPlayersReply"), (0x33, "Unknown0x33")):
        data = dp.build_dp4(command, 0x0B, b"\x01\x02\x03", header=header)
        msg = dp.parse_dplay(data)
        assert isinstance(msg, DP4Message)
        assert (msg.command_name, msg.parsed, msg.body) == (name, None, b"\x01\x02\x03")
        assert dp.build_dp4_message(msg) == data
    assert dp.command_name(0x1234) == "Unknown0x1234"


def test_command_names_follow_the_protocols_table() -> None:
    names = {c: dp.command_name(c) for c in dp.DP4Command}
    assert names[dp.DP4Command.PACKET2_DATA] == "Packet2Data"
    assert names[dp.DP4Command.IAMNAMESERVER] == "IAmNameServer"
    assert names[dp.DP4Command.ASK4MULTICASTGUARANTEED] == "Ask4MulticastGuaranteed"
    for command, name in names.items():  # CamelCase of the upper-case table name
        assert name.upper() == command.name.replace("_", ""), command
    for unassigned in (0x14, 0x23, 0x2A, 0x32, 0x33, 0x34):
        assert dp.command_name(unassigned).startswith("Unknown0x")


@pytest.mark.parametrize("version", [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E])
def test_every_documented_version_is_accepted(version: int) -> None:
    data = dp.build_enum_sessions(EnumSessions(ARMADA, 1, None), version=version, bare=True)
    assert dp.parse_dp4(data, bare=True).version == version


@pytest.mark.parametrize("version", [dp.VERSION_DX3, 0x02, 0x06, dp.VERSION_DX5, dp.VERSION_DX5A])
def test_versions_below_dx6_are_decoded(version: int) -> None:
    """Old versions: DX3 = 1, DX5 = 7, DX5a = 8 (and what lies between) decode like DX6+."""
    assert (dp.VERSION_DX3, dp.VERSION_DX5, dp.VERSION_DX5A) == (1, 7, 8)
    desc = SessionDesc(0, uuid.UUID(int=5), ARMADA, 8, 1, (0, 0, 0, 0))
    reply = EnumSessionsReply(desc, "DX5 host")
    wire = dp.build_enum_sessions_reply(reply, version=version, sockaddr=CLIENT_2300)
    assert wire[26:28] == version.to_bytes(2, "little")
    msg = dp.parse_dplay(wire)
    assert isinstance(msg, DP4Message)
    assert (msg.version, msg.parsed) == (version, reply)
    handmade = b"play" + (2).to_bytes(2, "little") + version.to_bytes(2, "little") + bytes(24)
    assert dp.parse_dp4(handmade, bare=True).version == version


@pytest.mark.parametrize("version", [0x00, 0x0F, 0xFFFF])
def test_other_versions_are_refused(version: int) -> None:
    data = b"play" + (2).to_bytes(2, "little") + version.to_bytes(2, "little") + bytes(24)
    with pytest.raises(DPlayError) as info:
        dp.parse_dp4(data, bare=True)
    assert info.value.reason == "dplay_bad_version"
    with pytest.raises(ValueError, match="version"):
        dp.build_enum_sessions(EnumSessions(ARMADA, 1, None), version=version)


@pytest.mark.parametrize(
    ("data", "bare", "reason"),
    [
        (b"", True, "dplay_truncated"),
        (b"pla", True, "dplay_truncated"),
        (b"plax\x02\x00\x0e\x00", True, "dplay_bad_signature"),
        (b"xlay", True, "dplay_bad_signature"),
        (VECTORS["a"].data[:19], False, "dplay_truncated"),
        (VECTORS["a"].data[:20] + b"Xlay" + VECTORS["a"].data[24:], False, "dplay_bad_signature"),
        (b"\x34\x00\xb0\xfa\x06\x00" + VECTORS["a"].data[6:], False, "dplay_bad_sockaddr"),
        (VECTORS["a"].data[:19] + b"\x01" + VECTORS["a"].data[20:], False, "dplay_bad_sockaddr"),
        (b"\x34\x00\xb0\xfc" + VECTORS["a"].data[4:], False, "dplay_bad_token"),
    ],
)
def test_dp4_header_errors(data: bytes, bare: bool, reason: str) -> None:
    with pytest.raises(DPlayError) as info:
        dp.parse_dp4(data, bare=bare)
    assert info.value.reason == reason


def test_all_three_tokens_are_accepted() -> None:
    msg = EnumSessions(ARMADA, 1, None)
    for token in (dp.TOKEN_REMOTE, dp.TOKEN_FORWARD, dp.TOKEN_SERVER):
        data = dp.build_enum_sessions(msg, sockaddr=CLIENT_2300, token=token)
        parsed = dp.parse_dp4(data)
        assert parsed.header is not None
        assert parsed.header.token == token
    with pytest.raises(ValueError, match="token"):
        dp.build_enum_sessions(msg, token=0xFAC)


# --- PACKET / PACKET2_DATA ---------------------------------------------------------------------


def test_packet_fragment_round_trip_and_position() -> None:
    inner = dp.build_enum_sessions(EnumSessions(ARMADA, 1, None), bare=True)
    frag = PacketFragment(0x15, uuid.UUID(int=7), 0, len(inner), 0, 1, len(inner), 48, inner)
    data = dp.build_packet_fragment(frag, sockaddr=CLIENT_2300)
    assert data[68:72] == b"play"  # Wireshark's fixed inner position (docs/protocols.md 1.7)
    msg = dp.parse_dplay(data)
    assert isinstance(msg, DP4Message)
    assert (msg.command_name, msg.parsed) == ("Packet", frag)
    bare = dp.build_packet_fragment(dataclasses.replace(frag, command=0x30), bare=True)
    parsed = dp.parse_dp4(bare, bare=True)
    assert parsed.command_name == "Packet2Data"
    assert isinstance(parsed.parsed, PacketFragment)
    assert parsed.parsed.data == inner
    assert dp.parse_dp4(inner, bare=True).parsed == EnumSessions(ARMADA, 1, None)


def test_packet_fragment_builder_refuses_inconsistent_records() -> None:
    frag = PacketFragment(0x15, uuid.UUID(int=7), 0, 3, 0, 1, 3, 48, b"abc")
    with pytest.raises(ValueError, match="PACKET"):
        dp.build_packet_fragment(dataclasses.replace(frag, command=0x31))
    with pytest.raises(ValueError, match="data_size"):
        dp.build_packet_fragment(PacketFragment(0x15, frag.message_guid, 0, 4, 0, 1, 3, 48, b"abc"))


# --- player records ------------------------------------------------------------------------------

SP_DATA: Final = dp.build_winsock_sp_data(
    SockAddr(2, 2300, "0.0.0.0"), SockAddr(2, 2350, "0.0.0.0")
)


def test_packed_player_layout() -> None:
    player = PackedPlayer(
        flags=dp.PLAYER_SYSTEM | dp.PLAYER_NAME_SERVER,
        player_id=0x01F2A3B4,
        short_name="Kirk",
        long_name="James T. Kirk",
        sp_data=SP_DATA,
        player_data=b"\x01\x02\x03",
        system_player_id=0x01F2A3B4,
        player_version=0x0E,
        parent_id=0,
        player_ids=(7, 8),
    )
    data = dp.build_packed_player(player)
    size = 48 + 10 + 28 + 32 + 3 + 8
    assert len(data) == size
    fields = [int.from_bytes(data[i : i + 4], "little") for i in range(0, 48, 4)]
    assert fields == [size, 3, 0x01F2A3B4, 10, 28, 32, 3, 2, 0x01F2A3B4, 48, 0x0E, 0]
    assert data[48:58] == "Kirk\x00".encode("utf-16-le")
    assert dp.parse_packed_player(data) == player
    assert dp.parse_packed_player(data + b"next record") == player
    stream, datagram = dp.parse_winsock_sp_data(player.sp_data)
    assert (stream.port, datagram.port, stream.address) == (2300, 2350, "0.0.0.0")


def test_packed_player_without_names() -> None:
    player = PackedPlayer(0x8, 5, None, None, b"", b"", 1, 0x0B, 0, ())
    data = dp.build_packed_player(player)
    assert len(data) == 48
    assert dp.parse_packed_player(data) == player


def test_super_packed_player_layout() -> None:
    mask = (
        dp.SPP_SHORT_NAME
        | (3 << dp.SPP_SP_LENGTH_SHIFT)  # SP data length: 4 bytes
        | (1 << dp.SPP_PLAYER_DATA_SHIFT)  # player data length: 1 byte
        | (2 << dp.SPP_PLAYER_COUNT_SHIFT)  # player count: 2 bytes
        | dp.SPP_PARENT_ID
        | (1 << dp.SPP_SHORTCUT_COUNT_SHIFT)
        | (1 << 20)  # an "ignored" bit: kept as sent
    )
    player = SuperPackedPlayer(
        flags=dp.PLAYER_IN_GROUP,
        player_id=0x0197FDAD,
        info_mask=mask,
        version_or_system_player_id=14,
        short_name="Bones",
        long_name=None,
        player_data=b"\xaa\xbb",
        sp_data=SP_DATA,
        player_ids=(1, 2, 3),
        parent_id=9,
        shortcut_ids=(4,),
    )
    data = dp.build_super_packed_player(player)
    expected = (
        (16).to_bytes(4, "little")
        + dp.PLAYER_IN_GROUP.to_bytes(4, "little")
        + (0x0197FDAD).to_bytes(4, "little")
        + mask.to_bytes(4, "little")
        + (14).to_bytes(4, "little")
        + "Bones\x00".encode("utf-16-le")
        + b"\x02\xaa\xbb"  # player data first, with its 1-byte length
        + (32).to_bytes(4, "little")
        + SP_DATA
        + (3).to_bytes(2, "little")
        + b"".join(i.to_bytes(4, "little") for i in (1, 2, 3))
        + (9).to_bytes(4, "little")
        + b"\x01"
        + (4).to_bytes(4, "little")
    )
    assert data == expected
    assert dp.parse_super_packed_player(data + b"tail") == (player, len(data))


def test_super_packed_player_builder_checks_the_mask() -> None:
    base = SuperPackedPlayer(0, 1, 0, 14, None, None, None, None, None, None, None)
    assert dp.build_super_packed_player(base) == dp.build_super_packed_player(base)
    bad = [
        SuperPackedPlayer(0, 1, dp.SPP_SHORT_NAME, 14, None, None, None, None, None, None, None),
        SuperPackedPlayer(0, 1, 0, 14, "x", None, None, None, None, None, None),
        SuperPackedPlayer(0, 1, 0, 14, None, None, b"x", None, None, None, None),
        SuperPackedPlayer(0, 1, 1 << 4, 14, None, None, b"x" * 256, None, None, None, None),
        SuperPackedPlayer(0, 1, 0, 14, None, None, None, None, None, 3, None),
        SuperPackedPlayer(0, 1, 1 << 9, 14, None, None, None, None, None, None, None),
    ]
    for record in bad:
        with pytest.raises(ValueError, match="info_mask"):
            dp.build_super_packed_player(record)


# --- DP8 frames beyond the vectors -------------------------------------------------------------


def test_sack_frame_with_masks() -> None:
    flags = dp.DP8_SACK_RESPONSE | 0x02 | 0x10  # retry valid, SACK mask 1, send mask 2
    data = bytes.fromhex("88 06") + bytes([flags, 1, 5, 4]) + bytes(2)
    data += (1234).to_bytes(4, "little") + (0xF0).to_bytes(4, "little") + (3).to_bytes(4, "little")
    frame = dp.parse_dplay(data, dp8_context=True)
    assert frame == DP8Frame(
        0x88, dp.DP8ExtOpcode.SACK, 0, 0, 0, 0, 1234,
        sack=DP8Sack(flags, 1, 5, 4, sack_mask1=0xF0, send_mask2=3),
    )  # fmt: skip
    assert dp.build_dplay(frame) == data


def test_signed_frames_keep_their_trailer() -> None:
    signed = bytes.fromhex("88 03 00 00 06000100 c6aec979 00000000") + bytes(range(32))
    frame = dp.parse_dp8_frame(signed)
    assert frame.ext_opcode == dp.DP8ExtOpcode.CONNECTED_SIGNED
    assert frame.trailer == bytes(range(32))
    assert dp.build_dp8_frame(frame) == signed


def test_dframe_masks_and_payload() -> None:
    data = bytes([0x07, 0x30, 9, 8]) + (1).to_bytes(4, "little") + (2).to_bytes(4, "little")
    frame = dp.parse_dp8_frame(data + b"user data")
    assert frame.data == DP8DataFrame(0x30, 9, 8, 1, 2, None, None, b"user data")
    assert frame.session_id == 0
    assert frame.data.keepalive_session_id is None
    assert dp.build_dp8_frame(frame) == data + b"user data"


@pytest.mark.parametrize(
    "frame",
    [
        DP8Frame(0x90, 1, 0, 0, 0, 0, 0),  # not a clean CFRAME command byte
        DP8Frame(0x88, 5, 0, 0, 0, 0, 0),  # unknown opcode
        DP8Frame(0x88, 6, 0, 0, 0, 0, 0),  # SACK without its fields
        DP8Frame(0x88, 1, 0, 0, 0, 0, 0, sack=DP8Sack(0, 0, 0, 0)),
        DP8Frame(0x88, 6, 1, 0, 0, 0, 0, sack=DP8Sack(0, 0, 0, 0)),
        DP8Frame(0x88, 6, 0, 0, 0, 0, 0, sack=DP8Sack(0x02, 0, 0, 0)),  # flag without mask
        DP8Frame(0x88, 6, 0, 0, 0, 0, 0, sack=DP8Sack(0, 0, 0, 0, sack_mask1=1)),
        DP8Frame(0x3E, 0, 0, 0, 0, 0, 0, data=DP8DataFrame(0, 0, 0, None, None, None, None, b"")),
        DP8Frame(0x3F, 0, 0, 0, 0, 5, 0, data=DP8DataFrame(0, 0, 0, None, None, None, None, b"")),
        DP8Frame(0x3F, 1, 0, 0, 0, 0, 0, data=DP8DataFrame(0, 0, 0, None, None, None, None, b"")),
        DP8Frame(0x88, 1, 256, 0, 0, 0, 0),  # msg_id does not fit a byte
    ],
)
def test_dp8_frame_builder_refuses_contradictions(frame: DP8Frame) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        dp.build_dp8_frame(frame)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "dplay_truncated"),
        (b"\x00\x02", "dplay_bad_value"),
        (b"\x40\x01", "dplay_bad_value"),
        (b"\x88", "dplay_truncated"),
        (b"\x88\x07" + bytes(14), "dplay_bad_value"),
        (bytes.fromhex("80 06 02 00 00 00 0000 00000000"), "dplay_truncated"),  # mask 1 missing
        (bytes([0x01, 0x80, 0, 0, 1, 2, 3]), "dplay_truncated"),  # send mask 2 cut off
    ],
)
def test_dp8_frame_errors(data: bytes, reason: str) -> None:
    with pytest.raises(DPlayError) as info:
        dp.parse_dp8_frame(data)
    assert info.value.reason == reason


# --- DP8 enumeration beyond the vectors ---------------------------------------------------------


def test_dp8_enum_response_with_every_field() -> None:
    resp = DP8EnumResponse(
        cookie=0xBEEF,
        flags=dp.DP8_SESSION_REQUIRE_PASSWORD | dp.DP8_SESSION_CLIENT_SERVER,
        max_players=16,
        current_players=3,
        session_name="Armada II",
        password=b"pw\x00\x00",
        reserved_data=b"\x01" * 8,
        app_reserved_data=b"app",
        instance_guid=uuid.UUID(int=42),
        application_guid=DP8_APP,
        reply_data=b"reply!",
    )
    data = dp.build_dp8_enum_response(resp)
    name_len = len("Armada II\x00".encode("utf-16-le"))
    offsets = [int.from_bytes(data[i : i + 4], "little") for i in range(4, 60, 4)]
    # ReplyOffset/Size, desc size, flags, max, current, then (offset, size) x 4
    assert offsets == [
        88 + name_len + 4 + 8 + 3, 6, 0x50, 0x81, 16, 3,
        88, name_len, 88 + name_len, 4, 88 + name_len + 4, 8, 88 + name_len + 12, 3,
    ]  # fmt: skip
    assert data[92 : 92 + name_len] == "Armada II\x00".encode("utf-16-le")
    parsed = dp.parse_dp8_enum_response(data)
    assert parsed == resp
    assert parsed.password_required


def test_dp8_enum_response_follows_offsets_in_any_order() -> None:
    """A sender may lay the data out differently; offsets are followed, not positions."""
    name = "Back\x00".encode("utf-16-le")
    head = bytearray(dp.build_dp8_enum_response(DP8EnumResponse(
        1, 0, 4, 1, None, b"", b"", b"", uuid.UUID(int=1), DP8_APP, b"")))  # fmt: skip
    head[4:12] = (88).to_bytes(4, "little") + (3).to_bytes(4, "little")  # reply data first
    head[28:36] = (91).to_bytes(4, "little") + len(name).to_bytes(4, "little")
    data = bytes(head) + b"RRR" + name
    parsed = dp.parse_dp8_enum_response(data)
    assert (parsed.reply_data, parsed.session_name) == (b"RRR", "Back")


def test_dp8_query_builder_forms() -> None:
    with pytest.raises(ValueError, match="not both"):
        dp.build_dp8_enum_query(DP8EnumQuery(1, 2, None, b""), cookie=1)
    with pytest.raises(ValueError, match="GUID"):
        dp.build_dp8_enum_query(DP8EnumQuery(1, 1, None, b""))
    with pytest.raises(ValueError, match="GUID"):
        dp.build_dp8_enum_query(DP8EnumQuery(1, 2, DP8_APP, b""))
    with pytest.raises(ValueError, match="1 or 2"):
        dp.build_dp8_enum_query(DP8EnumQuery(1, 3, None, b""))
    with pytest.raises(ValueError, match="out of range"):
        dp.build_dp8_enum_query(cookie=0x10000)


# --- SP header helpers ---------------------------------------------------------------------------


def test_rewrite_sockaddr_puts_the_real_player_ip_in_place() -> None:
    data = VECTORS["a"].data
    rewritten = dp.rewrite_sockaddr(data, "192.0.2.10")
    assert rewritten[8:12] == bytes([192, 0, 2, 10])
    assert rewritten[:8] + rewritten[12:] == data[:8] + data[12:]
    msg = dp.parse_dp4(rewritten)
    assert msg.header == SPHeader(52, dp.TOKEN_REMOTE, SockAddr(2, 2300, "192.0.2.10"))
    assert msg.parsed == dp4("a").parsed
    player = VECTORS["a"].data[:20] + b"data"
    assert dp.rewrite_sockaddr(player, "10.0.0.1")[8:12] == bytes([10, 0, 0, 1])
    with pytest.raises(DPlayError) as info:
        dp.rewrite_sockaddr(VECTORS["d3"].data, "10.0.0.1")
    assert info.value.reason == "dplay_bad_token"
    with pytest.raises(ValueError):  # noqa: PT011 - ipaddress's own message
        dp.rewrite_sockaddr(data, "not-an-ip")


def test_split_dp4_stream_cuts_whole_messages() -> None:
    a, b = VECTORS["a"].data, VECTORS["b"].data
    player = dp.build_dp4_player(SPHeader(0, dp.TOKEN_REMOTE, CLIENT_2300), b"hi")
    stream = b + a + player + b[:50]
    messages, rest = dp.split_dp4_stream(stream)
    assert messages == [b, a, player]
    assert rest == b[:50]
    assert dp.split_dp4_stream(memoryview(b[:3])) == ([], b[:3])
    assert dp.split_dp4_stream(b"") == ([], b"")
    # fed one byte at a time, the same messages come out
    buffer, seen = b"", []
    for i in range(len(stream)):
        out, buffer = dp.split_dp4_stream(buffer + stream[i : i + 1])
        seen += out
    assert seen == [b, a, player]
    assert buffer == b[:50]


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (b"\x13\x00\xb0\xfa", "dplay_bad_size"),  # 19: smaller than the SP header
        (b"\x00\x00\xb0\xfa", "dplay_bad_size"),
        (b"GET ", "dplay_bad_token"),
        (b"\xff\xff\xff\xff", "dplay_bad_token"),
    ],
)
def test_split_dp4_stream_errors(head: bytes, reason: str) -> None:
    with pytest.raises(DPlayError) as info:
        dp.split_dp4_stream(VECTORS["a"].data + head + bytes(40))
    assert info.value.reason == reason


def test_stream_size_is_bounded_by_the_20_bit_field() -> None:
    huge = (dp.TOKEN_REMOTE << 20 | 0xFFFFF).to_bytes(4, "little") + bytes(100)
    assert dp.split_dp4_stream(huge) == ([], huge)  # waits; never more than 1 MiB - 1
    assert dp.MAX_STREAM_MESSAGE == 0xFFFFF < 1 << 20


# --- builders refuse local misuse ------------------------------------------------------------


def test_builders_raise_value_error_for_misuse() -> None:
    desc = SessionDesc(0, uuid.UUID(int=1), ARMADA, 8, 1, (0, 0, 0, 0))
    with pytest.raises(ValueError, match="NUL"):
        dp.build_enum_sessions(EnumSessions(ARMADA, 1, "a\x00b"))
    with pytest.raises(ValueError, match="NUL"):
        dp.build_enum_sessions_reply(EnumSessionsReply(desc, "\x00"))
    with pytest.raises(ValueError, match="out of range"):
        dp.build_enum_sessions(EnumSessions(ARMADA, 1 << 32, None))
    with pytest.raises(ValueError, match="SOCKADDR"):
        dp.build_enum_sessions(EnumSessions(ARMADA, 1, None), sockaddr=CLIENT_2300, bare=True)
    with pytest.raises(ValueError, match="out of range"):
        dp.build_sockaddr(SockAddr(2, 65536, "0.0.0.0"))
    with pytest.raises(ValueError, match="20-bit"):
        dp.build_dp4(0x16, 0x0E, bytes(0x100000), header=SPHeader(0, 0xFAB, CLIENT_2300))
    with pytest.raises(ValueError, match="play"):
        dp.build_dp4_player(SPHeader(0, 0xFAB, CLIENT_2300), b"play...")
    with pytest.raises(ValueError, match="SP header"):
        dp.build_dp4_message(DP4Message(None, 0x0A, 0, b"x", None, signature=False))
    with pytest.raises(ValueError, match="16 bytes"):
        dp.guid_from_wire(b"short")


def test_default_sockaddr_is_any_address_port_zero() -> None:
    data = dp.build_enum_sessions(EnumSessions(ARMADA, 1, None))
    assert data[4:20] == b"\x02\x00" + bytes(14)
    assert data[:4] == (52 | 0xFAB << 20).to_bytes(4, "little")


# --- the closed set of reasons ----------------------------------------------------------------


def test_reason_sets_are_closed_and_consistent() -> None:
    assert typing.get_args(errors.DPlayReason) == errors.DPLAY_REASONS
    flat = tuple(r for part in typing.get_args(errors.WireReason) for r in typing.get_args(part))
    assert flat == errors.WIRE_REASONS
    assert set(errors.DPLAY_REASONS) <= set(errors.WIRE_REASONS)
    error = DPlayError("dplay_bad_offset", "x")
    assert isinstance(error, errors.WireError)
    assert isinstance(error, ValueError)
    assert str(error) == "dplay_bad_offset: x"


def test_vector_titles_match_what_we_decode() -> None:
    """Cheap guard that the copied vectors are the documented ones."""
    titles: dict[str, Vector] = VECTORS
    assert "Armada" in titles["a"].title
    assert "'Password'" in titles["a2"].title
    assert "'Armada LAN'" in titles["b"].title
    assert "'DP8 LAN Game'" in titles["d3"].title


@pytest.mark.parametrize(
    ("name", "label"),
    [("e1", "Connect"), ("e2", "Connected"), ("e3", "Connected"), ("e4", "KeepAlive")],
)
def test_dp8_frame_names(name: str, label: str) -> None:
    assert dp.dp8_frame_name(dp.parse_dp8_frame(payload(name))) == label


def test_dp8_frame_names_beyond_the_vectors() -> None:
    assert dp.dp8_frame_name(dp.parse_dp8_frame(SACK_12)) == "Sack"
    signed = dp.parse_dp8_frame(bytes.fromhex("88 03 00 00") + bytes(44))
    assert dp.dp8_frame_name(signed) == "ConnectedSigned"
    assert dp.dp8_frame_name(dp.parse_dp8_frame(bytes.fromhex("80 04") + bytes(14))) == (
        "HardDisconnect"
    )
    assert dp.dp8_frame_name(dp.parse_dp8_frame(b"\x07\x00\x01\x02data")) == "Data"
    assert dp.dp8_frame_name(DP8Frame(0x88, 0x09, 0, 0, 0, 0, 0)) == "Unknown0x09"


# --- leniency where the layout allows it ---------------------------------------------------


def test_dp8_reply_offset_zero_with_a_response_size_has_no_reply() -> None:
    """docs/protocols.md 2.3: ReplyOffset 0 = no reply data, whatever ResponseSize says."""
    data = bytearray(VECTORS["d3"].data)
    data[4:12] = (0).to_bytes(4, "little") + (6).to_bytes(4, "little")
    msg = dp.parse_dplay(bytes(data))
    assert isinstance(msg, DP8EnumResponse)
    assert (msg.reply_data, msg.session_name) == (b"", "DP8 LAN Game")


def test_dp8_session_name_without_its_nul_is_accepted() -> None:
    """SessionNameSize bounds the name; the terminating NUL adds nothing."""
    data = bytearray(VECTORS["d3"].data[:-2])  # drop the NUL: the name is the last field
    data[32:36] = (24).to_bytes(4, "little")  # SessionNameSize without it
    msg = dp.parse_dp8_enum_response(bytes(data))
    assert msg.session_name == "DP8 LAN Game"
    with pytest.raises(DPlayError) as info:  # an embedded NUL is still refused
        dp.parse_dp8_enum_response(bytes(data[:94]) + b"\x00\x00" + bytes(data[96:]))
    assert info.value.reason == "dplay_bad_string"


def test_dp4_session_name_without_its_nul_is_accepted() -> None:
    """The message size bounds the name, which may end with the message."""
    with_nul = VECTORS["b"].data
    data = (len(with_nul) - 2 | dp.TOKEN_REMOTE << 20).to_bytes(4, "little") + with_nul[4:-2]
    msg = dp.parse_dp4(data)
    assert isinstance(msg.parsed, EnumSessionsReply)
    assert msg.parsed.name == "Armada LAN"
    assert dp.build_dp4_message(msg) == data  # the raw body is kept: re-encodes exactly
    bare = dp.parse_dp4(with_nul[20:-2], bare=True).parsed
    assert isinstance(bare, EnumSessionsReply)
    assert bare.name == "Armada LAN"
    with pytest.raises(DPlayError) as info:  # half a code unit is still not a string
        dp.parse_dp4(with_nul[20:-3], bare=True)
    assert info.value.reason == "dplay_bad_string"


RELIABLE_BODY: Final = bytes.fromhex("00 07 01 00 de ad be ef")  # after play + 0xFF, kept raw


@pytest.mark.parametrize("bare", [False, True])
def test_play_then_ff_is_the_reliable_protocol_not_a_bad_version(bare: bool) -> None:
    """DirectPlay's reliable protocol puts 0xFF where a DPSP message has its command; what
    follows is not a version (here 0x0001 at the version's place, then garbage)."""
    frame = b"play\xff" + RELIABLE_BODY
    if bare:
        data = frame
        assert dp.classify(data) is DPlayKind.DP4_BARE
    else:
        header = (len(frame) + 20 | dp.TOKEN_REMOTE << 20).to_bytes(4, "little")
        data = header + VECTORS["a"].data[4:20] + frame
        assert dp.classify(data) is DPlayKind.DP4
    msg = dp.parse_dplay(data)
    assert isinstance(msg, DP4Message)
    assert (msg.reliable, msg.command, msg.command_name, msg.version) == (
        True,
        dp.RELIABLE_MARK,
        "Reliable",
        0,
    )
    assert (msg.body, msg.parsed, msg.header is None) == (RELIABLE_BODY, None, bare)
    assert dp.build_dplay(msg) == data


def test_shortest_reliable_frames_are_recognised() -> None:
    assert dp.classify(b"play\xff") is DPlayKind.DP4_BARE  # shorter than a DPSP header
    assert dp.parse_dp4(b"play\xff", bare=True).reliable
    assert dp.classify(b"play\x02") is DPlayKind.NONE  # a DPSP message needs 8 bytes


def test_builders_keep_the_reliable_mark_apart() -> None:
    with pytest.raises(ValueError, match="reliable"):
        dp.build_dp4(0x01FF, 0x0E, b"", header=None)
    with pytest.raises(ValueError, match="reliable"):
        dp.build_dp4_message(DP4Message(None, 0x01, 0x0E, b"", None, reliable=True))


def test_the_lead_bytes_and_the_command_word_are_read_where_the_codec_writes_them() -> None:
    """has_dplay_lead and dp4_command_of: the cheap reads policy/ makes instead of slicing."""
    enum = EnumSessions(ARMADA, 1, None)
    over_udp = dp.build_enum_sessions(enum)  # SP header: 'play' at byte 20
    over_ipx = dp.build_enum_sessions(enum, bare=True)  # no SP header: 'play' at byte 0
    query = dp.build_dp8_enum_query(dp.DP8EnumQuery(7, 2, None, b""))
    assert dp.has_dplay_lead(over_udp)
    assert dp.has_dplay_lead(query)
    assert not dp.has_dplay_lead(over_ipx)  # never arrives at a relay port: UDP carries the header
    assert not dp.has_dplay_lead(b"\x00\x03" + bytes(30))  # a DP8 EnumResponse is not handed over
    assert not dp.has_dplay_lead(b"")
    assert dp.dp4_command_of(over_udp, bare=False) == dp.DP4Command.ENUMSESSIONS
    assert dp.dp4_command_of(over_ipx, bare=True) == dp.DP4Command.ENUMSESSIONS
    reliable = over_ipx[:4] + bytes((dp.RELIABLE_MARK,)) + over_ipx[5:]
    assert dp.dp4_command_of(reliable, bare=True) is None  # Rule 7: not a command
