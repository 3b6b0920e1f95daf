"""Session table and inspector: pure, with an injected clock."""

import uuid

import pytest

from ipxbridge.commands.sessions import render_table
from ipxbridge.games import game_table, parse_guid
from ipxbridge.obs.status import render_status
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.reassembly import Reassembler
from ipxbridge.policy.sessions import SessionTable, session_json
from ipxbridge.wire.directplay import (
    EnumSessionsReply,
    PacketFragment,
    SessionDesc,
    SockAddr,
    build_dp8_enum_response,
    build_enum_sessions_reply,
    build_packet_fragment,
)
from tests.factories import armada_user, dp8_response

ARMADA = parse_guid("{76F93801-9340-11D2-AE34-00600895C779}")


def desc(players: int = 2, flags: int = 0, instance: uuid.UUID | None = None) -> SessionDesc:
    return SessionDesc(
        flags=flags,
        instance_guid=instance or uuid.uuid4(),
        application_guid=ARMADA,
        max_players=8,
        current_players=players,
        user=(0, 0, 0, 0),
    )


def reply(d: SessionDesc, name: str = "LAN") -> EnumSessionsReply:
    return EnumSessionsReply(d, name)


def test_builtin_game_table_has_the_documented_titles() -> None:
    games = game_table()
    assert games[ARMADA] == "Star Trek: Armada"
    assert games[parse_guid("{99797420-F5F5-11CF-9827-00A0241496C8}")] == "Total Annihilation"
    extended = game_table({"{01234567-89AB-CDEF-0123-456789ABCDEF}": "My Game"})
    assert extended[parse_guid("01234567-89ab-cdef-0123-456789abcdef")] == "My Game"


def test_session_refresh_and_expiry() -> None:
    table = SessionTable(game_table(), expiry=60.0)
    d = desc()
    table.observe_dp4(reply(d), "10.0.0.5:2300", "dp4-tcp", 0.0)
    table.observe_dp4(
        reply(desc(players=5, instance=d.instance_guid)), "10.0.0.5:2300", "dp4-tcp", 30.0
    )
    (s,) = table.snapshot(30.0)
    assert (s.players, s.first_seen, s.last_seen, s.game) == (5, 0.0, 30.0, "Star Trek: Armada")
    assert len(table.snapshot(90.0)) == 1
    assert table.snapshot(90.1) == []


def test_flags_map_to_password_and_join_disabled() -> None:
    table = SessionTable({})
    s = table.observe_dp4(reply(desc(flags=0x0400 | 0x0020)), "h", "ipx", 0.0)
    assert (s.password, s.join_disabled, s.game) == (True, True, None)


def test_table_is_bounded_least_recently_seen_goes() -> None:
    table = SessionTable({}, max_sessions=3)
    first = desc()
    table.observe_dp4(reply(first), "h", "ipx", 0.0)
    for t in range(1, 4):
        table.observe_dp4(reply(desc()), "h", "ipx", float(t))
    assert len(table) == 3
    assert first.instance_guid not in {s.instance_guid for s in table.snapshot(4.0)}


def test_players_by_game_uses_other_for_unknown() -> None:
    table = SessionTable(game_table())
    table.observe_dp4(reply(desc(players=3)), "h", "ipx", 0.0)
    resp = dp8_response(max_players=4, current_players=2)
    table.observe_dp8(resp, "h:2302", 0.0)
    assert table.players_by_game(0.0) == {"Star Trek: Armada": (1, 3), "other": (1, 2)}


def test_session_json_has_the_issue_keys() -> None:
    table = SessionTable(game_table())
    s = table.observe_dp4(reply(desc(), "Armada LAN"), "10.0.0.5:2300", "dp4-tcp", 100.0)
    out = session_json(s, now=110.0, wall_now=1_800_000_000.0)
    assert out["game"] == "Star Trek: Armada"
    assert out["game_guid"] == "{76F93801-9340-11D2-AE34-00600895C779}"
    assert out["session_name"] == "Armada LAN"
    assert (out["players"], out["max_players"], out["password"]) == (2, 8, False)
    assert (out["host"], out["transport"]) == ("10.0.0.5:2300", "dp4-tcp")
    assert out["last_seen"] == "2027-01-15T07:59:50Z"
    assert out["age_seconds"] == 10.0


def make_inspector() -> Inspector:
    return Inspector(SessionTable(game_table()), Reassembler())


def test_inspector_picks_up_dp4_reply_over_ipx_and_udp_and_counts() -> None:
    ins = make_inspector()
    bare = build_enum_sessions_reply(reply(desc()), bare=True)
    ins.inspect(bare, transport="ipx", host="00000000.0a0000050001:4002", source=1, now=0.0)
    sp = build_enum_sessions_reply(reply(desc()), sockaddr=SockAddr(2, 2300, "0.0.0.0"))
    ins.inspect(sp, transport="tcp", host="10.0.0.5:2300", source=2, now=0.0)
    transports = sorted(s.transport for s in ins.sessions.snapshot(0.0))
    assert transports == ["dp4-tcp", "ipx"]
    assert ins.messages[(4, "EnumSessionsReply")] == 2


def test_inspector_dp8_response_and_non_dplay_ignored() -> None:
    ins = make_inspector()
    resp = dp8_response(cookie=7, flags=0x80, session_name="DP8 game")
    ins.inspect(
        build_dp8_enum_response(resp),
        transport="udp",
        host="10.0.0.6:2302",
        source=3,
        now=0.0,
        dp8_context=True,
    )
    assert (
        ins.inspect(b"hello world, not directplay", transport="ipx", host="h", source=4, now=0.0)
        is None
    )
    (s,) = ins.sessions.snapshot(0.0)
    assert (s.transport, s.password, s.host) == ("dp8", True, "10.0.0.6:2302")
    assert ins.messages[(8, "EnumResponse")] == 1


def test_malformed_dplay_is_counted_not_raised() -> None:
    ins = make_inspector()
    good = build_enum_sessions_reply(reply(desc()), bare=True)
    assert ins.inspect(good[:40], transport="ipx", host="h", source=1, now=0.0) is None
    assert sum(ins.errors.values()) == 1
    assert len(ins.sessions) == 0


def test_fragmented_reply_is_reassembled_then_listed() -> None:
    ins = make_inspector()
    inner = build_enum_sessions_reply(reply(desc(), "Big session"), bare=True)
    guid = uuid.uuid4()
    half = len(inner) // 2
    pieces = [(0, inner[:half]), (half, inner[half:])]
    for i, (offset, data) in enumerate(pieces):
        frag = PacketFragment(
            command=0x15,
            message_guid=guid,
            packet_index=i,
            data_size=len(data),
            offset=offset,
            total_packets=2,
            message_size=len(inner),
            packet_offset=48,
            data=data,
        )
        ins.inspect(
            build_packet_fragment(frag, bare=True),
            transport="ipx",
            host="h",
            source="peer",
            now=float(i),
        )
    (s,) = ins.sessions.snapshot(1.0)
    assert s.session_name == "Big session"
    assert ins.messages[(4, "Packet")] == 2


# --- lobby state: Star Trek: Armada's user fields (docs/protocols.md 1.6.1), DirectPlay flags

WALL = 1_800_000_000.0


def armada(
    user: tuple[int, int, int, int], flags: int = 0, name: str = "Armada LAN"
) -> EnumSessionsReply:
    """An Armada reply as Armada sends it: dwMaxPlayers 0, the real state in the user fields."""
    d = SessionDesc(flags, uuid.uuid4(), ARMADA, 0, 2, user)
    return EnumSessionsReply(d, name)


def test_armada_user_fields_decide_max_players_password_closed_and_map() -> None:
    table = SessionTable(game_table())
    user = armada_user(players=4, flags=0x04 | 0x02, map_name=b"lake.bzn")
    s = table.observe_dp4(armada(user), "10.0.0.5:2300", "dp4-tcp", 0.0)
    assert (s.max_players, s.password, s.join_disabled) == (4, True, False)
    assert (s.started, s.head_to_head, s.map) == (False, True, "lake.bzn")
    assert s.open is False  # password-protected: not listed as open
    out = session_json(s, now=0.0, wall_now=WALL)
    assert {k: out[k] for k in ("max_players", "password", "join_disabled", "started")} == {
        "max_players": 4,
        "password": True,
        "join_disabled": False,
        "started": False,
    }
    assert (out["head_to_head"], out["map"], out["open"]) == (True, "lake.bzn", False)
    # the raw words stay, and the same bytes in wire order
    assert out["user"] == [f"0x{u:08x}" for u in user]
    assert out["user_bytes"] == "00040600 6c616b65 2e627a6e 00000000"


@pytest.mark.parametrize(
    ("user_flags", "session_flags", "password", "join_disabled", "started", "is_open"),
    [
        (0x00, 0x000, False, False, False, True),
        (0x04, 0x000, True, False, False, False),  # Armada's password bit
        (0x40, 0x000, False, True, False, False),  # Armada's closed bit
        (0x20, 0x000, False, False, True, False),  # match started
        (0x02, 0x000, False, False, False, True),  # head-to-head alone is still open
        (0x00, 0x400, True, False, False, False),  # DPSESSION_PASSWORDREQUIRED still counts
        (0x00, 0x020, False, True, False, False),  # DPSESSION_JOINDISABLED still counts
    ],
)
def test_password_or_closed_armada_game_is_not_open(
    user_flags: int,
    session_flags: int,
    password: bool,
    join_disabled: bool,
    started: bool,
    is_open: bool,
) -> None:
    table = SessionTable(game_table())
    s = table.observe_dp4(armada(armada_user(flags=user_flags), session_flags), "h", "ipx", 0.0)
    assert (s.password, s.join_disabled, s.started, s.open) == (
        password,
        join_disabled,
        started,
        is_open,
    )
    assert s.max_players == 8  # byte 73 = 0: all eight slots, although dwMaxPlayers is 0


def test_other_games_fill_the_same_keys_from_their_own_fields() -> None:
    table = SessionTable(game_table())
    ta = parse_guid("{99797420-F5F5-11CF-9827-00A0241496C8}")
    d = SessionDesc(0x0400 | 0x0020, uuid.uuid4(), ta, 4, 1, (0x11111111, 0, 0, 0))
    dp4 = session_json(table.observe_dp4(reply(d), "h", "ipx", 0.0), 0.0, WALL)
    assert (dp4["max_players"], dp4["password"], dp4["join_disabled"]) == (4, True, True)
    # no layout for this game: what it does not announce is unknown, not false
    assert (dp4["started"], dp4["head_to_head"], dp4["map"]) == (None, None, None)
    assert dp4["open"] is False
    dp8 = table.observe_dp8(dp8_response(flags=0x80, max_players=6), "h:2302", 0.0)
    out = session_json(dp8, 0.0, WALL)
    assert (out["max_players"], out["password"], out["join_disabled"]) == (6, True, None)
    assert (out["started"], out["head_to_head"], out["map"], out["open"]) == (
        None,
        None,
        None,
        False,
    )
    assert (out["user"], out["user_bytes"]) == (None, None)


def test_sessions_by_game_and_open_for_the_metrics() -> None:
    table = SessionTable(game_table())
    table.observe_dp4(armada(armada_user()), "h", "ipx", 0.0)
    table.observe_dp4(armada(armada_user(flags=0x04)), "h", "ipx", 0.0)
    table.observe_dp4(armada(armada_user(flags=0x40)), "h", "ipx", 0.0)
    table.observe_dp8(dp8_response(), "h:2302", 0.0)
    assert table.sessions_by_game_and_open(0.0) == {
        ("Star Trek: Armada", True): 1,
        ("Star Trek: Armada", False): 2,
        ("other", True): 1,
    }


def status_rows(html: str) -> list[str]:
    return [row for row in html.split("<tr>")[2:] if "</td>" in row]


def test_status_page_lists_password_and_closed_armada_games_as_not_open() -> None:
    table = SessionTable(game_table())
    games = [
        (armada_user(players=4, map_name=b"<b>lake"), "Open game"),
        (armada_user(flags=0x04), "Locked game"),
        (armada_user(flags=0x40 | 0x02), "Closed duel"),
    ]
    for user, name in games:
        table.observe_dp4(armada(user, name=name), "h", "ipx", 0.0)
    html = render_status({"sessions": [session_json(s, 0.0, WALL) for s in table.snapshot(0.0)]})
    assert "<th>Status</th>" in html
    assert "<th>Map</th>" in html
    rows = {name: row for row in status_rows(html) for _, name in games if name in row}
    assert "<td>open</td>" in rows["Open game"]
    assert "<td>2/4</td>" in rows["Open game"]
    assert "&lt;b&gt;lake" in rows["Open game"]  # remote input is escaped
    assert "<b>lake" not in html
    assert "<td>password</td>" in rows["Locked game"]
    assert "<td>closed, head-to-head</td>" in rows["Closed duel"]
    assert "<td>2/8</td>" in rows["Locked game"]


def test_sessions_text_table_shows_map_and_status() -> None:
    table = SessionTable(game_table())
    table.observe_dp4(armada(armada_user(flags=0x04, map_name=b"lake.bzn")), "h", "ipx", 0.0)
    text = render_table([session_json(s, 0.0, WALL) for s in table.snapshot(0.0)])
    head, row = text.splitlines()
    assert head.split() == [
        "GAME", "SESSION", "MAP", "PLAYERS", "STATUS", "HOST", "TRANSPORT", "LAST", "SEEN",
    ]  # fmt: skip
    assert "lake.bzn" in row
    assert " 2/8 " in row
    assert " password " in row
    assert " open " not in row


# --- decoder leniency as the game list sees it -----------------------------------------------


@pytest.mark.parametrize("version", [1, 7, 8])  # DX3, DX5, DX5a
def test_sessions_from_pre_dx6_hosts_are_listed(version: int) -> None:
    ins = make_inspector()
    sp = build_enum_sessions_reply(
        reply(desc(), "DX5 host"), version=version, sockaddr=SockAddr(2, 2300, "0.0.0.0")
    )
    ins.inspect(sp, transport="tcp", host="10.0.0.5:2300", source=1, now=0.0)
    assert not ins.errors
    (s,) = ins.sessions.snapshot(0.0)
    assert s.session_name == "DX5 host"


@pytest.mark.parametrize("transport", ["ipx", "udp"])
def test_reliable_protocol_frames_are_counted_as_such_not_as_errors(transport: str) -> None:
    ins = make_inspector()
    frame = b"play\xff" + bytes.fromhex("00 07 01 00 de ad")
    if transport == "udp":
        frame = (
            (len(frame) + 20 | 0xFAB << 20).to_bytes(4, "little") + b"\x02\x00" + bytes(14) + frame
        )
    for _ in range(3):
        assert ins.inspect(frame, transport=transport, host="h", source=1, now=0.0) is None
    assert ins.messages == {(4, "Reliable"): 3}
    assert not ins.errors


def test_dp8_max_players_zero_is_unlimited_not_n_of_0() -> None:
    table = SessionTable(game_table())
    s = table.observe_dp8(dp8_response(max_players=0, current_players=3), "h:2302", 0.0)
    out = session_json(s, 0.0, WALL)
    assert out["max_players"] is None  # no limit
    assert "3/unlimited" in render_table([out])
    assert "<td>3/unlimited</td>" in render_status({"sessions": [out]})
    assert "3/0" not in render_table([out]) + render_status({"sessions": [out]})
