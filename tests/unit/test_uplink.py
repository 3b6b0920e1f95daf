"""ipxbox's uplink protocol (docs/protocols.md 3.9): codec, both state machines, the switch.

Byte vectors are derived from the protocol facts (ipxbox ``server/uplink/protocol.go`` and
``client/uplink/client.go`` at 38dc341, seen on the wire): a 30-byte IPX header that is zero
but for the destination node ``UpLiNK`` (checksum 0, Length 0), then compact JSON with
``null`` for an absent field; a 64-byte challenge is 88 base64 characters, a solution 44.
"""

import base64
import hashlib
import itertools
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.app.ipx import uplink_client_passwords, uplink_server_password
from ipxbridge.config import ConfigError, load_config
from ipxbridge.errors import StartupError
from ipxbridge.policy.switch import Address, IpxSwitch, Outcome, SwitchSettings
from ipxbridge.policy.uplink import (
    ClientState,
    UplinkClient,
    UplinkServer,
    UplinkServerSettings,
)
from ipxbridge.wire import ipx
from ipxbridge.wire.errors import WireError
from ipxbridge.wire.ipx import keyed_nodes
from ipxbridge.wire.uplink import (
    UplinkMessage,
    build_control,
    is_uplink_control,
    normalise_data,
    parse_control,
    solve,
)

PASSWORD = b"hunter2"
CLIENT: Address = ("198.51.100.7", 40000)
HEAD = bytes(10) + b"UpLiNK" + bytes(14)  # checksum 0, Length 0, only the destination node
REQUEST = HEAD + b'{"message-type":"get-challenge-request","challenge":null,"solution":null}'


def randoms(seed: int = 0):  # type: ignore[no-untyped-def]
    """Deterministic 'random' bytes: each call a different fill byte."""
    counter = itertools.count(seed)
    return lambda n: bytes([next(counter) % 256]) * n


# --- codec -----------------------------------------------------------------------------


def test_request_is_byte_for_byte_what_ipxbox_sends() -> None:
    assert build_control(UplinkMessage("get-challenge-request")) == REQUEST
    assert REQUEST[10:16].hex() == "55704c694e4b"
    assert REQUEST[:4] == b"\x00\x00\x00\x00"  # checksum 0x0000, Length 0x0000
    assert len(REQUEST) == 103


def test_header_matches_an_independent_struct_encoding() -> None:
    """scapy 2.8 has no IPX layer (see test_ethernet_wire.py), so the header is packed field by
    field here: checksum, Length, transport control, type, dst net/node/socket, src ..."""
    fields = struct.pack(
        "!HHBB4s6sH4s6sH", 0, 0, 0, 0, bytes(4), b"UpLiNK", 0, bytes(4), bytes(6), 0
    )
    assert fields == HEAD
    assert build_control(UplinkMessage("keepalive"))[:30] == fields


def test_challenge_response_and_rejected_shapes() -> None:
    challenge = bytes(range(64))
    packet = build_control(UplinkMessage("get-challenge-response", challenge))
    body = json.loads(packet[30:])
    assert list(body) == ["message-type", "challenge", "solution"]
    assert len(body["challenge"]) == 88
    assert body["solution"] is None
    assert base64.b64decode(body["challenge"]) == challenge
    rejected = build_control(UplinkMessage("submit-solution-rejected"))
    assert rejected[30:] == (
        b'{"message-type":"submit-solution-rejected","challenge":null,"solution":null}'
    )


def test_submit_solution_lengths_and_round_trip() -> None:
    msg = UplinkMessage("submit-solution", bytes(64), solve("client", PASSWORD, b"\x01" * 64))
    packet = build_control(msg)
    body = json.loads(packet[30:])
    assert (len(body["challenge"]), len(body["solution"])) == (88, 44)
    assert is_uplink_control(packet)
    assert parse_control(packet) == msg


def test_solutions_are_sha256_of_side_challenge_password_challenge() -> None:
    ch = b"\xaa" * 64
    assert solve("client", PASSWORD, ch) == hashlib.sha256(b"client" + ch + PASSWORD + ch).digest()
    assert solve("server", PASSWORD, ch) == hashlib.sha256(b"server" + ch + PASSWORD + ch).digest()
    assert solve("client", PASSWORD, ch) != solve("server", PASSWORD, ch)


def test_control_recognised_whatever_network_socket_and_checksum() -> None:
    odd = b"\xff\xff\x00\x67\x05\x04" + b"\x01\x02\x03\x04" + b"UpLiNK" + b"\x12\x34" + bytes(12)
    assert is_uplink_control(odd + REQUEST[30:])
    assert parse_control(odd + REQUEST[30:]).type == "get-challenge-request"
    assert not is_uplink_control(ipx.build_registration())
    assert not is_uplink_control(HEAD[:20])


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1,2]",
        b'{"challenge":null}',
        b'{"message-type":5}',
        b'{"message-type":"submit-solution","challenge":"***"}',
        b'{"message-type":"submit-solution","solution":12}',
        b'{"message-type":"x","challenge":"' + b"A" * 2000 + b'"}',
        b"[" * 5000,
    ],
)
def test_malformed_control_is_a_wire_error(body: bytes) -> None:
    with pytest.raises(WireError) as info:
        parse_control(HEAD + body)
    assert info.value.reason == "uplink_malformed"


def test_normalise_data_trims_padding_and_takes_ipxbox_mark() -> None:
    good = ipx.build_packet(
        dst_node=b"\xff" * 6,
        dst_socket=0x4545,
        src_node=b"\x02" * 6,
        src_socket=0x4545,
        payload=b"hi",
        hops=3,
    )
    assert normalise_data(good) == (good, "")
    padded = good + bytes(14)  # Ethernet minimum frame padding kept by a pcap bridge
    assert normalise_data(padded) == (good, "padding")
    marked = b"\x00\x00" + good[2:4] + b"\x7f" + good[5:] + bytes(6)
    packet, what = normalise_data(marked)
    assert what == "ipxbox_mark"
    assert packet == ipx.with_hops(good, 0)
    zero = b"\x00\x00" + good[2:]
    assert normalise_data(zero) == (good, "checksum_zero")
    for bad, reason in (
        (good[:29], "truncated"),
        (b"\x12\x34" + good[2:], "bad_checksum"),
        (good[:2] + b"\x00\x1d" + good[4:], "bad_length"),
        (good[:2] + b"\x01\x00" + good[4:], "bad_length"),
    ):
        with pytest.raises(WireError) as info:
            normalise_data(bad)
        assert info.value.reason == reason


# --- the server side -------------------------------------------------------------------


def handshake(server: UplinkServer, src: Address, password: bytes, now: float = 0.0) -> bytes:
    """Run a client's handshake against ``server``; returns the server's last reply."""
    result = server.handle(REQUEST, src, now)
    (reply,) = result.replies
    challenge = parse_control(reply).challenge
    assert challenge is not None
    assert len(challenge) == 64
    submit = UplinkMessage("submit-solution", b"\x5a" * 64, solve("client", password, challenge))
    result = server.handle(build_control(submit), src, now)
    (answer,) = result.replies
    return answer


def test_server_accepts_the_right_password_and_proves_it_knows_it() -> None:
    server = UplinkServer(PASSWORD, randoms())
    answer = parse_control(handshake(server, CLIENT, PASSWORD))
    assert answer.type == "submit-solution-accepted"
    assert answer.solution == solve("server", PASSWORD, b"\x5a" * 64)
    assert server.authenticated == [CLIENT]
    assert server.handshakes["accepted"] == 1


def test_server_rejects_a_wrong_password_and_forgets_the_address() -> None:
    server = UplinkServer(PASSWORD, randoms())
    answer = handshake(server, CLIENT, b"wrong")
    assert answer[30:] == (
        b'{"message-type":"submit-solution-rejected","challenge":null,"solution":null}'
    )
    assert server.authenticated == []
    assert server.pending == 0
    assert server.handshakes["rejected"] == 1


def test_short_client_challenge_gets_no_answer_at_all() -> None:
    server = UplinkServer(PASSWORD, randoms())
    (reply,) = server.handle(REQUEST, CLIENT, 0).replies
    challenge = parse_control(reply).challenge
    assert challenge is not None
    submit = UplinkMessage("submit-solution", b"\x01" * 63, solve("client", PASSWORD, challenge))
    result = server.handle(build_control(submit), CLIENT, 0.1)
    assert (result.detail, result.replies) == ("uplink_short_challenge", ())
    assert server.authenticated == []


def test_nothing_but_a_request_opens_a_handshake() -> None:
    server = UplinkServer(PASSWORD, randoms())
    for kind in ("submit-solution", "keepalive", "close-connection", "get-challenge-response"):
        result = server.handle(build_control(UplinkMessage(kind, bytes(64), bytes(32))), CLIENT, 0)
        assert (result.detail, result.replies) == ("uplink_unexpected", ())
    assert server.pending == 0


def test_pending_table_is_bounded_overall_and_per_address() -> None:
    settings = UplinkServerSettings(max_pending=8, max_pending_per_ip=2)
    server = UplinkServer(PASSWORD, randoms(), settings)
    for i in range(100):
        server.handle(REQUEST, (f"203.0.113.{i}", 1000 + i), i * 0.001)
    assert server.pending == 8
    for port in range(50):
        server.handle(REQUEST, ("192.0.2.1", 2000 + port), 1.0)
    assert sum(1 for a in server.sessions if a[0] == "192.0.2.1") == 2
    assert server.evictions[("uplink_pending", "oldest")] > 0
    assert server.evictions[("uplink_pending", "per_ip")] > 0


def test_spoofed_request_flood_draws_bounded_replies_and_counts_them() -> None:
    settings = UplinkServerSettings(global_reply_rate=50, global_reply_burst=100)
    server = UplinkServer(PASSWORD, randoms(), settings)
    replies = 0
    for i in range(10_000):  # 10,000 spoofed requests in one second, from 10,000 addresses
        src = (f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", 5000)
        replies += len(server.handle(REQUEST, src, i / 10_000).replies)
    assert replies <= 100 + 50 + 1
    assert server.held["uplink_rate_limited"] == 10_000 - replies


def test_one_address_gets_a_few_replies_a_second() -> None:
    server = UplinkServer(PASSWORD, randoms())
    replies = sum(len(server.handle(REQUEST, CLIENT, i / 100).replies) for i in range(300))
    assert replies <= 6 + 2 * 3 + 1  # burst, then 2/s for 3 s
    assert server.held["uplink_rate_limited"] == 300 - replies


def test_no_reply_is_over_twice_the_request() -> None:
    server = UplinkServer(PASSWORD, randoms())
    small = HEAD + b'{"message-type":"get-challenge-request"}'  # 70 bytes; answer 190
    result = server.handle(small, CLIENT, 0)
    assert (result.detail, result.replies) == ("uplink_amplification", ())
    (reply,) = server.handle(REQUEST, CLIENT, 0).replies
    assert len(reply) <= 2 * len(REQUEST)


def test_authenticated_uplink_keepalive_and_expiry() -> None:
    server = UplinkServer(PASSWORD, randoms())
    handshake(server, CLIENT, PASSWORD, now=0.0)
    assert server.tick(4.0) == ([], [])
    keepalives, expired = server.tick(5.5)
    assert [parse_control(p).type for p, _ in keepalives] == ["keepalive"]
    server.sent(CLIENT, 6.0)
    assert server.tick(10.0) == ([], [])
    _, expired = server.tick(600.0)
    assert expired == [CLIENT]
    assert server.authenticated == []


def test_spoofed_wrong_solution_does_not_end_a_working_uplink() -> None:
    server = UplinkServer(PASSWORD, randoms())
    handshake(server, CLIENT, PASSWORD)
    bad = UplinkMessage("submit-solution", bytes(64), bytes(32))
    server.handle(build_control(bad), CLIENT, 1.0)
    assert server.authenticated == [CLIENT]
    result = server.handle(build_control(UplinkMessage("close-connection")), CLIENT, 2.0)
    assert result.closed
    assert server.authenticated == []


# --- the client side -------------------------------------------------------------------


def connect(client: UplinkClient, server: UplinkServer, now: float = 0.0) -> None:
    """Carry packets between a client and a server state machine until both settle."""
    out = client.tick(now)
    for _ in range(4):
        replies: list[bytes] = []
        for packet in out:
            replies += server.handle(packet, CLIENT, now).replies
        out = [p for reply in replies for p in client.on_control(reply, now)]


def test_client_connects_to_the_server_state_machine() -> None:
    client = UplinkClient(PASSWORD, randoms(100))
    server = UplinkServer(PASSWORD, randoms())
    connect(client, server)
    assert client.connected
    assert server.authenticated == [CLIENT]
    assert client.pop_events() == [("connected", 0.0)]


def test_client_with_wrong_password_is_rejected_and_clears_its_state() -> None:
    client = UplinkClient(b"wrong", randoms(100))
    server = UplinkServer(PASSWORD, randoms())
    connect(client, server)
    assert client.state is ClientState.REJECTED
    assert (client.challenge, client.request, client.reason) == (b"", b"", "password rejected")
    assert client.pop_events() == [("rejected", 60.0)]
    assert client.handshakes["rejected"] == 1
    assert client.tick(59.0) == []
    assert parse_control(client.tick(60.0)[0]).type == "get-challenge-request"


def test_client_checks_the_servers_solution() -> None:
    client = UplinkClient(PASSWORD, randoms(100))
    server = UplinkServer(b"impostor", randoms())
    (request,) = client.tick(0)
    (response,) = server.handle(request, CLIENT, 0).replies
    (submit,) = client.on_control(response, 0)
    # The impostor cannot check our solution, but answers "accepted" with its own.
    body = parse_control(submit)
    assert body.challenge is not None
    fake = UplinkMessage(
        "submit-solution-accepted", solution=solve("server", b"impostor", body.challenge)
    )
    assert client.on_control(build_control(fake), 0.1) == []
    assert not client.connected
    assert client.handshakes["bad_server_solution"] == 1


def test_client_resends_each_step_five_times_then_backs_off() -> None:
    client = UplinkClient(PASSWORD, randoms())
    sent = [len(client.tick(t / 10)) for t in range(0, 60)]  # 6 s, ticking every 0.1 s
    assert sum(sent) == 5
    events = client.pop_events()
    assert events == [("no_answer", 1.0)]
    waits = []
    now = 6.0
    for _ in range(9):
        while not client.tick(now):
            now += 0.1
        for _ in range(60):
            now += 0.1
            client.tick(now)
        waits += [wait for kind, wait in client.pop_events() if kind == "no_answer"]
    assert waits == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0, 60.0]


def test_client_ignores_forwarded_control_packets_once_connected() -> None:
    client = UplinkClient(PASSWORD, randoms(100))
    connect(client, UplinkServer(PASSWORD, randoms()))
    for kind in ("close-connection", "submit-solution-rejected", "get-challenge-response"):
        assert client.on_control(build_control(UplinkMessage(kind, bytes(64))), 1.0) == []
        assert client.connected
    assert client.ignored["close-connection"] == 1


def test_client_ignores_answers_to_a_step_it_is_not_at() -> None:
    client = UplinkClient(PASSWORD, randoms(100))
    client.tick(0)  # challenge requested
    reject = build_control(UplinkMessage("submit-solution-rejected"))
    assert client.on_control(reject, 0.1) == []
    assert client.state is ClientState.CHALLENGE
    short = build_control(UplinkMessage("get-challenge-response", bytes(63)))
    assert client.on_control(short, 0.2) == []
    assert client.state is ClientState.CHALLENGE


def test_client_liveness_reconnects_after_server_silence() -> None:
    client = UplinkClient(PASSWORD, randoms(100))
    connect(client, UplinkServer(PASSWORD, randoms()))
    client.on_control(build_control(UplinkMessage("keepalive")), 20.0)
    assert client.tick(49.0) == []
    before = client.connected
    client.tick(50.0)
    assert (before, client.connected) == (True, False)
    assert client.pop_events()[-1] == ("lost", 1.0)


def test_client_unreachable_fails_the_attempt_at_once() -> None:
    client = UplinkClient(PASSWORD, randoms())
    client.tick(0)
    client.unreachable(0.01)
    assert client.state is ClientState.WAITING
    assert client.pop_events() == [("no_answer", 1.0)]


# --- the switch ------------------------------------------------------------------------


DOS: Address = ("10.0.0.11", 40001)


def switch_with_server(password: bytes = PASSWORD) -> IpxSwitch:
    sw = IpxSwitch(SwitchSettings(), (), node_for=keyed_nodes(bytes(32)))
    sw.uplink_server = UplinkServer(password, randoms())
    return sw


def join(sw: IpxSwitch, addr: Address) -> bytes:
    ((reply, _),) = sw.handle(ipx.build_registration(), addr, 0).replies
    node = ipx.parse_header(reply).dst_node
    sw.handle(
        ipx.build_packet(
            dst_node=ipx.BROADCAST_NODE, dst_socket=0x4545, src_node=node, src_socket=0x4545
        ),
        addr,
        0,
    )
    return node


def switch_handshake(sw: IpxSwitch, src: Address, password: bytes) -> None:
    d = sw.handle(REQUEST, src, 0)
    ((reply, to),) = d.replies
    assert to == src
    assert d.outcome is Outcome.CONTROL
    challenge = parse_control(reply).challenge
    assert challenge is not None
    submit = UplinkMessage("submit-solution", b"\x33" * 64, solve("client", password, challenge))
    sw.handle(build_control(submit), src, 0)


def data_from(node: bytes, dst: bytes = ipx.BROADCAST_NODE, payload: bytes = b"x") -> bytes:
    return ipx.build_packet(
        dst_node=dst, dst_socket=0x4545, src_node=node, src_socket=0x4545, payload=payload
    )


def test_switch_relays_nothing_before_authentication() -> None:
    sw = switch_with_server()
    dos = join(sw, DOS)
    d = sw.handle(REQUEST, CLIENT, 0)
    assert d.outcome is Outcome.CONTROL
    assert CLIENT not in sw.uplinks
    d = sw.handle(data_from(b"\x02\x00\x00\x00\x00\x09"), CLIENT, 0.1)
    assert d.detail == "unregistered"
    assert CLIENT not in sw.handle(data_from(dos), DOS, 0.2).targets


def test_switch_wrong_password_leaves_no_port() -> None:
    sw = switch_with_server()
    switch_handshake(sw, CLIENT, b"wrong")
    assert sw.uplinks == {}
    assert sw.handle(data_from(b"\x02" * 6), CLIENT, 1).outcome is Outcome.DROPPED


def test_switch_uplink_is_a_port_like_a_peer() -> None:
    sw = switch_with_server()
    dos = join(sw, DOS)
    switch_handshake(sw, CLIENT, PASSWORD)
    assert sw.uplinks == {CLIENT: "server"}
    behind = b"\x02\x00\x00\x00\x00\x09"
    # An ipxbox-marked frame with padding, from a station behind the uplink: broadcast.
    raw = data_from(behind)
    marked = b"\x00\x00" + raw[2:4] + b"\x7f" + raw[5:] + bytes(10)
    d = sw.handle(marked, CLIENT, 1)
    assert (d.outcome, d.targets) == (Outcome.FORWARDED, (DOS,))
    assert d.packet == ipx.with_hops(raw, 1)
    assert sw.uplink_normalised["ipxbox_mark"] == 1
    # Broadcast from the DOSBox client goes to the uplink; a unicast to the learned node too.
    assert sw.handle(data_from(dos, payload=b"b"), DOS, 2).targets == (CLIENT,)
    assert sw.handle(data_from(dos, behind, b"u"), DOS, 3).targets == (CLIENT,)
    # An unknown unicast may be behind the uplink (rule 7, as for peers).
    d = sw.handle(data_from(dos, b"\x02" * 6, b"?"), DOS, 4)
    assert (d.detail, d.targets) == ("flooded", (CLIENT,))
    # Control packets are consumed, never switched; close-connection ends the port.
    d = sw.handle(build_control(UplinkMessage("keepalive")), CLIENT, 5)
    assert (d.outcome, d.targets) == (Outcome.CONTROL, ())
    sw.handle(build_control(UplinkMessage("close-connection")), CLIENT, 6)
    assert sw.uplinks == {}
    assert sw.learned_on(CLIENT) == 0


def test_switch_without_password_drops_uplink_requests() -> None:
    sw = IpxSwitch(SwitchSettings(), ())
    d = sw.handle(REQUEST, CLIENT, 0)
    assert (d.outcome, d.detail, d.replies) == (Outcome.DROPPED, "uplink_disabled", ())


def test_switch_sends_keepalives_to_idle_uplinks() -> None:
    sw = switch_with_server()
    switch_handshake(sw, CLIENT, PASSWORD)
    out = sw.tick(6.0)
    assert [(parse_control(p).type, to) for p, to in out if to == CLIENT] == [("keepalive", CLIENT)]


def test_client_role_uplink_control_packets_are_left_to_its_socket() -> None:
    sw = IpxSwitch(SwitchSettings(), ())
    server: Address = ("192.0.2.9", 213)
    sw.add_uplink(server, "client")
    d = sw.handle(build_control(UplinkMessage("close-connection")), server, 0)
    assert (d.outcome, d.detail) == (Outcome.CONTROL, "uplink")
    assert sw.uplinks == {server: "client"}
    d = sw.handle(data_from(b"\x02" * 6), server, 0)
    assert d.outcome is Outcome.DROPPED
    assert d.detail == "no_destination"


# --- configuration ---------------------------------------------------------------------


def test_config_names_the_key_of_a_bad_password_file(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(
        "ipx:\n"
        f"  uplink_password_file: {tmp_path / 'missing'}\n"
        "  uplinks:\n"
        "    - server: 192.0.2.1:213\n"
        f"      password_file: {tmp_path / 'empty'}\n"
        "    - server: 192.0.2.2\n"
    )
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError) as info:
        load_config(conf, environ={})
    errors = info.value.errors
    assert errors[0].startswith(f"{conf}:2: ipx.uplink_password_file: cannot read")
    assert errors[1].startswith(f"{conf}:5: ipx.uplinks.0.password_file:")
    assert "is empty" in errors[1]
    assert errors[2] == (
        f"{conf}:6: ipx.uplinks.1: an uplink needs password_file or password_env (never the "
        "password)"
    )


def test_run_exits_2_on_a_bad_password_file(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(f"ipx:\n  uplink_password_file: {tmp_path / 'missing'}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ipxbridge", "run", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "ipx.uplink_password_file" in proc.stderr + proc.stdout


def test_passwords_come_from_files_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\nignored second line\n")
    conf = tmp_path / "c.yaml"
    conf.write_text(
        "ipx:\n  uplinks:\n"
        f"    - server: 192.0.2.1\n      password_file: {secret}\n"
        "    - server: 192.0.2.2:10000\n      password_env: SITE_PW\n"
    )
    config = load_config(conf, environ={})
    monkeypatch.delenv("IPXBRIDGE_UPLINK_PASSWORD", raising=False)
    assert uplink_server_password(config) is None
    monkeypatch.setenv("IPXBRIDGE_UPLINK_PASSWORD", "srv")
    assert uplink_server_password(config) == b"srv"
    monkeypatch.delenv("SITE_PW", raising=False)
    with pytest.raises(StartupError, match=r"ipx.uplinks\[1\].password_env: .*SITE_PW is not set"):
        uplink_client_passwords(config)
    monkeypatch.setenv("SITE_PW", "other")
    assert uplink_client_passwords(config) == [
        ("192.0.2.1:213", b"s3cret"),
        ("192.0.2.2:10000", b"other"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=40))
def test_arbitrary_bytes_never_raise(body: bytes, header: bytes) -> None:
    """Malformed input is a counted drop, never a traceback: server, client and switch."""
    sw = switch_with_server()
    for data in (HEAD + body, header + body, REQUEST[:30] + body):
        sw.handle(data, CLIENT, 0)
        UplinkClient(PASSWORD, randoms()).on_control(data, 0)
    sw.add_uplink(("192.0.2.9", 213), "client")
    sw.handle(header + body, ("192.0.2.9", 213), 0)
