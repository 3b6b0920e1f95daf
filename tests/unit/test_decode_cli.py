"""``ipxbridge decode``: hex auto-detection, pcap link types, JSON keys, clean errors."""

import json
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ipxbridge.commands.decode import decode_hex, decode_pcap
from ipxbridge.games import game_table, parse_guid
from ipxbridge.wire import ipx
from ipxbridge.wire.directplay import (
    EnumSessionsReply,
    SessionDesc,
    SockAddr,
    build_enum_sessions_reply,
)
from ipxbridge.wire.pcap import PcapError, read_pcap
from tests.factories import armada_user
from tests.unit.vectors import VECTORS_PCAP, load_vectors

GAMES = game_table()
ARMADA = "{76F93801-9340-11D2-AE34-00600895C779}"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ipxbridge", "decode", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_hex_ipx_with_dplay_inside_is_auto_detected() -> None:
    vec = load_vectors()
    (item,) = decode_hex(vec["c"].data.hex(" "), GAMES)
    assert item["ok"] is True
    assert item["ipx"]["dst_socket"] == 0xA57F
    dp = item["directplay"]
    assert (dp["version"], dp["command"], dp["command_name"]) == (4, 2, "EnumSessions")
    assert (dp["game_guid"], dp["game"]) == (ARMADA, "Star Trek: Armada")


def test_hex_dplay_reply_fields() -> None:
    vec = load_vectors()
    (item,) = decode_hex(vec["b"].data.hex(), GAMES)
    dp = item["directplay"]
    assert item["ipx"] is None
    assert dp["command_name"] == "EnumSessionsReply"
    assert (dp["session_name"], dp["current_players"]) == ("Armada LAN", 1)
    # Armada: the maximum comes from byte 73 (0x11 & 7 = 1), not dwMaxPlayers (8) - the
    # vector's user words are placeholders (docs/protocols.md 1.6.1)
    assert (dp["max_players"], dp["max_players_wire"]) == (1, 8)
    assert dp["flags"] == 0x44


def armada_reply_hex(user: tuple[int, int, int, int], flags: int = 0) -> str:
    desc = SessionDesc(flags, uuid.UUID(int=7), parse_guid(ARMADA), 0, 3, user)
    reply = EnumSessionsReply(desc, "Armada LAN")
    return build_enum_sessions_reply(reply, sockaddr=SockAddr(2, 2300, "0.0.0.0")).hex()


def test_armada_user_fields_in_decode_json() -> None:
    """docs/protocols.md 1.6.1: the lobby keys decoded from dwUser1..4, the raw bytes kept."""
    user = armada_user(players=5, flags=0x04 | 0x20, map_name=b"lake.bzn")
    (item,) = decode_hex(armada_reply_hex(user), GAMES)
    dp = item["directplay"]
    assert (dp["max_players"], dp["max_players_wire"]) == (5, 0)  # dwMaxPlayers is 0
    assert (dp["password"], dp["join_disabled"], dp["started"], dp["head_to_head"]) == (
        True,
        False,
        True,
        False,
    )
    assert (dp["map"], dp["open"]) == ("lake.bzn", False)
    assert dp["user"] == [f"0x{u:08x}" for u in user]
    assert dp["user_bytes"] == "00052400 6c616b65 2e627a6e 00000000"  # wire order


def test_cli_json_and_text_show_a_closed_armada_game() -> None:
    hexdata = armada_reply_hex(armada_user(flags=0x40 | 0x02, map_name=b"duel.bzn"))
    res = run("--hex", hexdata, "--json")
    assert res.returncode == 0, res.stderr
    (item,) = json.loads(res.stdout)
    dp = item["directplay"]
    assert (dp["join_disabled"], dp["head_to_head"], dp["max_players"]) == (True, True, 8)
    assert (dp["password"], dp["open"], dp["map"]) == (False, False, "duel.bzn")
    res = run("--hex", hexdata)
    assert res.returncode == 0, res.stderr
    assert "players=3/8 status=closed, head-to-head map='duel.bzn'" in res.stdout


def test_other_games_get_the_lobby_keys_from_their_flags() -> None:
    ta = parse_guid("{99797420-F5F5-11CF-9827-00A0241496C8}")
    desc = SessionDesc(0x0400, uuid.UUID(int=8), ta, 4, 1, (0, 0, 0, 0))
    data = build_enum_sessions_reply(EnumSessionsReply(desc, "TA"), bare=True)
    (item,) = decode_hex(data.hex(), GAMES)
    dp = item["directplay"]
    assert (dp["max_players"], dp["password"], dp["join_disabled"], dp["open"]) == (
        4,
        True,
        False,
        False,
    )
    assert (dp["started"], dp["head_to_head"], dp["map"]) == (None, None, None)


def test_hex_dp8_response() -> None:
    vec = load_vectors()
    (item,) = decode_hex(vec["d3"].data.hex(), GAMES)
    dp = item["directplay"]
    assert (dp["version"], dp["command_name"], dp["session_name"]) == (
        8,
        "EnumResponse",
        "DP8 LAN Game",
    )


def test_hex_dp8_response_with_no_player_limit() -> None:
    data = bytearray(load_vectors()["d3"].data)
    data[20:24] = bytes(4)  # MaxPlayers 0: no limit
    data[4:12] = (0).to_bytes(4, "little") + (5).to_bytes(4, "little")  # ReplyOffset 0, size 5
    (item,) = decode_hex(data.hex(), GAMES)
    assert item["ok"], item
    dp = item["directplay"]
    assert (dp["max_players"], dp["max_players_wire"], dp["current_players"]) == (None, 0, 2)
    res = run("--hex", data.hex())
    assert res.returncode == 0, res.stderr
    assert "players=2/unlimited" in res.stdout
    assert "2/0" not in res.stdout


def test_hex_reliable_protocol_frame_is_not_a_bad_version() -> None:
    frame = b"play\xff" + bytes.fromhex("00 07 01 00 de ad")
    data = (len(frame) + 20 | 0xFAB << 20).to_bytes(4, "little") + b"\x02\x00" + bytes(14)
    (item,) = decode_hex((data + frame).hex(), GAMES)
    assert (item["ok"], item["error"]) == (True, None)
    assert item["directplay"]["command_name"] == "Reliable"
    assert item["directplay"]["reliable_protocol"] is True


def test_hex_dx5_reply_decodes() -> None:
    data = bytearray(load_vectors()["b"].data)
    data[26:28] = (7).to_bytes(2, "little")  # DX5
    (item,) = decode_hex(data.hex(), GAMES)
    assert item["ok"], item
    assert (item["directplay"]["dialect_version"], item["directplay"]["session_name"]) == (
        7,
        "Armada LAN",
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("zz", "bad_hex"),
        ("00 00 00 00", "not_dplay"),
        ("ff ff 00 1e", "dplay_truncated"),  # could be a DirectPlay 8 frame: too short
        (
            "34 00 b0 fa 02 00 08 fc 00 00 00 00 00 00 00 00 00 00 00 00 70 6c 61 79 02 00 0e 00",
            "dplay_bad_size",
        ),
    ],
)
def test_hex_errors_are_reasons(text: str, error: str) -> None:
    (item,) = decode_hex(text, GAMES)
    assert (item["ok"], item["error"]) == (False, error)


def test_hex_ipx_length_mismatch_is_an_error_with_the_reason() -> None:
    """A 32-byte IPX packet whose Length says 30 is reported as such, not as DirectPlay."""
    packet = ipx.build_packet(
        dst_node=b"\xff" * 6, dst_socket=0x4002, src_node=b"\x02" + bytes(5), src_socket=0x4002
    )
    data = packet[:2] + (30).to_bytes(2, "big") + packet[4:] + b"\xab\xcd"
    assert len(data) == 32
    (item,) = decode_hex(data.hex(" "), GAMES)
    assert (item["ok"], item["error"], item["directplay"]) == (False, "bad_length", None)
    assert item["detail"] == "length field 30 but datagram is 32"
    res = run("--hex", data.hex())
    assert res.returncode == 1
    assert res.stdout == "#1: ERROR bad_length (length field 30 but datagram is 32)\n"
    # longer than the packet (a capture cut short) is the same error
    (item,) = decode_hex((data[:2] + (40).to_bytes(2, "big") + data[4:]).hex(), GAMES)
    assert (item["error"], item["detail"]) == ("bad_length", "length field 40 but datagram is 32")


def test_cli_json_for_shipped_pcap() -> None:
    res = run("--pcap", str(VECTORS_PCAP), "--json")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)
    assert len(items) == 15
    for item in items:
        assert {"ok", "error", "ipx", "directplay"} <= set(item)
    reply = next(
        i
        for i in items
        if i["directplay"] and i["directplay"]["command_name"] == "EnumSessionsReply"
    )
    assert reply["directplay"]["session_name"] == "Armada LAN"
    ipx_items = [i for i in items if i["ipx"]]
    assert len(ipx_items) == 2
    assert all(i["directplay"]["game"] == "Star Trek: Armada" for i in ipx_items)


def test_cli_malformed_input_is_a_reason_not_a_traceback(tmp_path: Path) -> None:
    res = run("--hex", "ff ff 00 40 00")
    assert res.returncode == 1
    assert "ERROR" in res.stdout
    assert "Traceback" not in res.stdout + res.stderr
    bogus = tmp_path / "x.pcap"
    bogus.write_bytes(b"not a pcap at all, definitely not")
    res = run("--pcap", str(bogus))
    assert res.returncode == 2
    assert res.stderr.strip() == f"ipxbridge: {bogus}: not a pcap file (bad magic)"
    res = run("--pcap", str(tmp_path / "missing.pcap"))
    assert res.returncode == 2
    assert "cannot read" in res.stderr


def pcap(linktype: int, frames: list[bytes]) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    for f in frames:
        out += struct.pack("<IIII", 1, 0, len(f), len(f)) + f
    return out


def ipv4(proto: int, body: bytes) -> bytes:
    head = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(body),
        0,
        0,
        64,
        proto,
        0,
        bytes([10, 0, 0, 1]),
        bytes([10, 0, 0, 2]),
    )
    return head + body


def ipv4_udp(payload: bytes, sport: int, dport: int) -> bytes:
    return ipv4(17, struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload)


def ipv6(next_header: int, body: bytes) -> bytes:
    return struct.pack("!IHBB", 6 << 28, len(body), next_header, 64) + bytes(32) + body


def ethernet(ethertype: int, body: bytes) -> bytes:
    return b"\xff" * 6 + b"\x02" * 6 + ethertype.to_bytes(2, "big") + body


@pytest.mark.parametrize("linktype", [1, 113, 101])
def test_pcap_link_types(linktype: int) -> None:
    vec = load_vectors()
    ip = ipv4_udp(vec["a"].data, 50000, 47624)
    if linktype == 1:
        frame = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x00" + ip
    elif linktype == 113:
        frame = b"\x00\x01\x00\x01\x00\x06" + b"\x02" * 8 + b"\x08\x00" + ip
    else:
        frame = ip
    (item,) = decode_pcap(pcap(linktype, [frame]), GAMES)
    assert item["ok"], item
    assert item["directplay"]["command_name"] == "EnumSessions"
    assert item["src"] == "10.0.0.1:50000"


def test_pcap_truncated_record_and_unknown_link() -> None:
    frames = list(read_pcap(pcap(1, [b"\x00" * 10])))
    assert frames[0].error == "truncated Ethernet header"
    assert next(read_pcap(pcap(999, [b"x"]))).error == "unsupported link type 999"
    data = pcap(101, [ipv4_udp(b"x", 1, 2)])
    assert next(read_pcap(data[:-3])).error == "truncated record"
    with pytest.raises(PcapError, match="pcapng"):
        list(read_pcap(b"\x0a\x0d\x0d\x0a" + b"\x00" * 40))


def test_pcap_frames_that_are_not_udp_or_tcp_are_skipped_and_counted(tmp_path: Path) -> None:
    """A capture of a LAN party holds ICMP, ARP and ICMPv6 beside the games: not failures."""
    echo = b"\x08\x00\x00\x00\x00\x01\x00\x01"  # ICMP echo request
    hop_by_hop_then_icmpv6 = bytes([58, 0]) + bytes(6) + b"\x83\x00\x00\x00"  # MLD
    frames = [
        ethernet(0x0800, ipv4(1, echo)),
        ethernet(0x0800, ipv4_udp(load_vectors()["a"].data, 50000, 47624)),
        ethernet(0x0806, bytes(28)),  # ARP
        ethernet(0x86DD, ipv6(0, hop_by_hop_then_icmpv6)),
        ethernet(0x0800, ipv4(1, echo)),
        ethernet(0x0800, ipv4(2, bytes(8))),  # IGMP
    ]
    capture = tmp_path / "party.pcap"
    capture.write_bytes(pcap(1, frames))
    res = run("--pcap", str(capture))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("#2 udp 10.0.0.1:50000 -> 10.0.0.2:47624: DirectPlay 4 EnumSessions")
    assert lines[1] == "skipped 5 frames that are not UDP or TCP: ARP 1, ICMP 2, ICMPv6 1, IGMP 1"
    res = run("--pcap", str(capture), "--json")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)
    assert [i.get("skipped") for i in items] == ["ICMP", None, "ARP", "ICMPv6", "ICMP", "IGMP"]
    assert all(i["ok"] and i["error"] is None for i in items)

    # a real decode failure still fails the run, and the count is still given
    bad_ipx = ethernet(0x0800, ipv4_udp(b"\xff\xff\x00\x40" + bytes(28), 50000, 213))
    ipv6_udp = ethernet(0x86DD, ipv6(17, bytes(8)))  # may hold a game; IPv6 is not decoded
    capture.write_bytes(pcap(1, [*frames, bad_ipx, ipv6_udp]))
    res = run("--pcap", str(capture))
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert lines[1].endswith(": ERROR bad_length (length field 64 but datagram is 32)")
    assert lines[2].endswith("ERROR undecodable_frame (IPv6 UDP or TCP: only IPv4 is decoded)")
    assert lines[3].startswith("skipped 5 frames")
    (single,) = decode_pcap(pcap(1, [frames[0]]), GAMES)
    assert (single["ok"], single["skipped"]) == (True, "ICMP")
