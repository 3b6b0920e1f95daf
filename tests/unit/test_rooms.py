"""Browser players in the pure layers: rooms, the switch's connections, frames, forwarded addresses.

The listener itself is tested on real sockets (tests/integration/test_websocket_bounds.py,
test_browser_players.py); here the decisions it relies on, with an injected clock.
"""

import ipaddress
import struct

import pytest

from ipxbridge.io.websocket import client_ip
from ipxbridge.policy.connections import CONNECTION_PORT_BASE, connection_address, is_connection
from ipxbridge.policy.rooms import RoomLimits, RoomTable, room_name
from ipxbridge.policy.switch import (
    IpxSwitch,
    Outcome,
    SwitchSettings,
)
from ipxbridge.wire import ipx
from ipxbridge.wire import websocket as ws
from ipxbridge.wire.ipx import address_node, keyed_nodes
from ipxbridge.wire.websocket import binary_frame
from tests.fuzz.targets import client_frame

KEY = bytes(range(32))
BROWSER = connection_address("10.0.0.21", 50000)
UDP_SAME_PORT = ("10.0.0.21", 50000)  # a DOSBox client at the same IP and port number


def make(**kw: object) -> IpxSwitch:
    return IpxSwitch(SwitchSettings(**kw), node_for=keyed_nodes(KEY))  # type: ignore[arg-type]


# --- rooms -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "a", "Game_1", "x.y-z~", "a" * 64])
def test_room_names_people_type_are_rooms(name: str) -> None:
    assert room_name(name) == name


@pytest.mark.parametrize("name", ["", "a" * 65, "a b", "a/b", "é", "a\nb", "a%20b", "<x>"])
def test_other_names_are_refused(name: str) -> None:
    assert room_name(name) is None


def test_each_bound_refuses_with_its_reason() -> None:
    table = RoomTable(RoomLimits(5, 1, 3, 2), bridge_room="default")
    assert table.admit("default", "a") is None
    assert table.admit("default", "a") is None
    assert table.admit("r1", "a") == "address_full"
    assert table.admit("r1", "b") is None
    assert table.admit("r2", "c") == "rooms_full"
    assert table.admit("default", "c") is None  # the bridge's room is not one of max_rooms
    assert table.admit("default", "d") == "room_full"
    assert table.admit("r1", "d") is None
    assert table.admit("r1", "e") == "connections_full"
    assert (table.total, table.others()) == (5, 1)


def test_a_room_goes_with_its_last_connection_and_its_place_is_free() -> None:
    table = RoomTable(RoomLimits(10, 1, 10, 10), bridge_room="default")
    assert table.admit("r1", "a") is None
    assert table.admit("r1", "b") is None
    assert table.release("r1", "a") is False
    assert table.admit("r2", "c") == "rooms_full"
    assert table.release("r1", "b") is True
    assert table.rooms == {}
    assert table.admit("r2", "c") is None


def test_releases_leave_no_zero_counts_behind() -> None:
    """A stranger opening and closing connections from many addresses leaves nothing."""
    table = RoomTable(RoomLimits(), bridge_room="default")
    for n in range(1000):
        ip = f"10.1.{n // 256}.{n % 256}"
        assert table.admit(f"room{n % 50}", ip) is None
        table.release(f"room{n % 50}", ip)
    assert (table.total, len(table.rooms), len(table._by_address)) == (0, 0, 0)


# --- the switch's connections -------------------------------------------------------------


def test_a_connection_address_is_never_a_udp_one() -> None:
    assert BROWSER == ("10.0.0.21", CONNECTION_PORT_BASE + 50000)
    assert is_connection(BROWSER)
    assert not is_connection(UDP_SAME_PORT)
    assert not is_connection(("10.0.0.21", 65535))


def test_a_connection_registers_verified_and_is_not_limited() -> None:
    """Its address is proven by the TCP handshake: verified at once, even with the
    reflection limit at 0 (which refuses every UDP newcomer)."""
    sw = make(unverified_address_bytes_per_second=0.0, unverified_address_byte_burst=0)
    assert sw.handle(ipx.build_registration(), UDP_SAME_PORT, 0.0).detail == "unverified_rate"
    sw.connect(BROWSER)
    d = sw.handle(ipx.build_registration(), BROWSER, 0.0)
    assert d.outcome is Outcome.CONTROL
    ((reply, to),) = d.replies
    assert to == BROWSER
    assert ipx.parse_header(reply).dst_node == keyed_nodes(KEY)(BROWSER)
    assert sw.clients[BROWSER].verified
    assert [e.kind for e in sw.pop_events()] == ["registered"]


def test_a_connection_that_only_listens_gets_no_keepalive_and_never_expires() -> None:
    """js-dos sends nothing after registering; the listener's pings say it is alive."""
    sw = make(idle_timeout=10.0, keepalive_interval=1.0)
    sw.connect(BROWSER)
    sw.handle(ipx.build_registration(), BROWSER, 0.0)
    for now in range(1, 100):
        assert [to for _, to in sw.tick(float(now))] == []
    assert BROWSER in sw.clients
    sw.disconnect(BROWSER)
    assert BROWSER not in sw.clients
    assert [e.kind for e in sw.pop_events()][-1] == "left"


def test_a_connection_gets_broadcasts_and_its_own_are_forwarded() -> None:
    sw = make()
    sw.connect(BROWSER)
    browser_node = ipx.parse_header(
        sw.handle(ipx.build_registration(), BROWSER, 0.0).replies[0][0]
    ).dst_node
    udp = ("10.0.0.30", 40000)
    udp_node = ipx.parse_header(sw.handle(ipx.build_registration(), udp, 0.0).replies[0][0])
    game = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=0x4545,
        src_node=udp_node.dst_node,
        src_socket=0x4545,
        payload=b"hello",
    )
    assert sw.handle(game, udp, 0.1).targets == (BROWSER,)
    answer = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=0x4545,
        src_node=browser_node,
        src_socket=0x4545,
        payload=b"hi",
    )
    assert sw.handle(answer, BROWSER, 0.2).targets == (udp,)


def test_a_connection_must_register_and_its_packets_carry_its_node() -> None:
    sw = make()
    sw.connect(BROWSER)
    stray = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=0x4545,
        src_node=keyed_nodes(KEY)(BROWSER),
        src_socket=0x4545,
    )
    assert sw.handle(stray, BROWSER, 0.0).detail == "unregistered"  # no rejoin: it registers
    sw.handle(ipx.build_registration(), BROWSER, 0.0)
    forged = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE, dst_socket=0x4545, src_node=b"\x02" * 6, src_socket=0x4545
    )
    assert sw.handle(forged, BROWSER, 0.1).detail == "spoofed_source"


def test_clients_allow_holds_for_connections_and_refuses_ipv6() -> None:
    settings = SwitchSettings(clients_allow=(ipaddress.IPv4Network("10.0.0.0/8"),))
    assert settings.allows("10.0.0.21")
    assert not settings.allows("192.0.2.1")
    assert not settings.allows("2001:db8::1")
    sw = IpxSwitch(settings, node_for=keyed_nodes(KEY))
    outsider = connection_address("192.0.2.1", 1000)
    sw.connect(outsider)
    assert sw.handle(ipx.build_registration(), outsider, 0.0).detail == "not_allowed"


def test_address_nodes_of_connections_are_ip_and_tcp_port() -> None:
    """As the reference server gives them (docs/protocols.md 4.10); IPv6 gets a hash."""
    assert address_node(BROWSER) == ipx.dosbox_node("10.0.0.21", 50000)
    v6 = address_node(connection_address("2001:db8::1", 50000))
    assert len(v6) == 6
    assert v6[0] == 2


# --- frames and forwarded addresses --------------------------------------------------------


def read_frame(frame: bytes) -> tuple[bool, int, bool, bytes]:
    """(FIN, opcode, masked, payload) of one frame, as RFC 6455 §5.2 lays it out."""
    fin, opcode = bool(frame[0] & 0x80), frame[0] & 0x0F
    masked, size, at = bool(frame[1] & 0x80), frame[1] & 0x7F, 2
    if size == 126:
        size, at = struct.unpack("!H", frame[2:4])[0], 4
    elif size == 127:
        size, at = struct.unpack("!Q", frame[2:10])[0], 10
    assert len(frame) == at + size
    return fin, opcode, masked, frame[at:]


@pytest.mark.parametrize("size", [0, 1, 30, 125, 126, 127, 1424, 65535, 65536, 70000])
def test_a_copy_is_one_unmasked_binary_frame(size: int) -> None:
    """Server frames are never masked (§5.1), a message is one frame (FIN), binary (opcode
    2), with the shortest length encoding; real clients reading them are tested in
    tests/integration (js-dos, aiohttp)."""
    payload = bytes(i % 251 for i in range(size))
    assert read_frame(binary_frame(payload)) == (True, 2, False, payload)
    header = 2 if size < 126 else 4 if size < 65536 else 10
    assert len(binary_frame(payload)) == header + size


TRUSTED = (ipaddress.ip_network("10.9.0.1/32"), ipaddress.ip_network("10.9.1.0/24"))


@pytest.mark.parametrize(
    ("peer", "header", "expected"),
    [
        ("198.51.100.7", ["203.0.113.1"], "198.51.100.7"),  # not a proxy: header ignored
        ("10.9.0.1", ["203.0.113.1"], "203.0.113.1"),
        ("10.9.0.1", ["6.6.6.6, 203.0.113.1"], "203.0.113.1"),  # the nearest only
        ("10.9.0.1", ["6.6.6.6, 203.0.113.1, 10.9.1.5"], "203.0.113.1"),  # two proxies
        ("10.9.0.1", ["6.6.6.6", "203.0.113.1"], "203.0.113.1"),  # two header lines
        ("10.9.0.1", [], "10.9.0.1"),
        ("10.9.0.1", ["not an address"], "10.9.0.1"),
        ("10.9.0.1", ["10.9.1.5"], "10.9.0.1"),  # only proxies: the proxy itself
        ("::ffff:198.51.100.7", [], "198.51.100.7"),
        ("10.9.0.1", ["2001:db8::7"], "2001:db8::7"),
    ],
)
def test_the_player_address_behind_proxies(peer: str, header: list[str], expected: str) -> None:
    assert client_ip(peer, header, TRUSTED) == expected


# --- the opening handshake and client frames (wire/websocket.py) ---------------------------

CHROMIUM = (
    b"GET /ipx/default HTTP/1.1\r\nHost: 10.62.1.1:1900\r\nConnection: Upgrade\r\n"
    b"Pragma: no-cache\r\nUpgrade: websocket\r\nOrigin: http://jsdos.localhost\r\n"
    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
)


def test_a_browsers_handshake_is_taken_and_answered_as_rfc_6455_says() -> None:
    shake = ws.parse_handshake(CHROMIUM)
    assert shake.path == "/ipx/default"
    assert shake.header("origin") == "http://jsdos.localhost"
    assert shake.protocols() == []  # js-dos asks for none (docs/protocols.md 4.10)
    # §1.3's worked example
    assert ws.accept_key(shake.key) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    answer = ws.handshake_response(shake.key, None)
    assert answer.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in answer
    assert b"Sec-WebSocket-Extensions" not in answer  # no compression: frames as they are
    assert answer.endswith(b"\r\n\r\n")
    assert ws.handshake_end(CHROMIUM + b"\x81\x80") == len(CHROMIUM)
    assert ws.handshake_end(CHROMIUM[:-2]) == -1


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ((b"GET /ipx/default HTTP/1.1", b"POST /ipx/default HTTP/1.1"), 400),
        ((b"HTTP/1.1\r\n", b"HTTP/1.0\r\n"), 400),
        ((b"Upgrade: websocket", b"Upgrade: h2c"), 400),
        ((b"Connection: Upgrade", b"Connection: keep-alive"), 400),
        ((b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8"), 426),
        ((b"dGhlIHNhbXBsZSBub25jZQ==", b"c2hvcnQ="), 400),
        ((b"Pragma: no-cache", b"Pragma no-cache"), 400),
    ],
)
def test_other_requests_are_refused_with_a_status(change: tuple[bytes, bytes], status: int) -> None:
    with pytest.raises(ws.WebSocketError) as info:
        ws.parse_handshake(CHROMIUM.replace(*change))
    assert info.value.code == status


def test_a_refusal_is_a_short_http_answer_that_closes() -> None:
    answer = ws.http_refusal(503, "room_full")
    head, body = answer.split(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable")
    assert b"Connection: close" in head
    assert body == b"refused: room_full\n"
    assert b"Sec-WebSocket-Version: 13" in ws.http_refusal(426, "not_websocket")


def test_frames_come_out_whole_however_the_bytes_are_cut() -> None:
    stream = b"".join(
        (
            client_frame(ws.OP_BINARY, ipx.build_registration()),
            client_frame(ws.OP_BINARY, b"first ", fin=False),
            client_frame(ws.OP_PING, b"ping"),  # a control frame between fragments (§5.4)
            client_frame(ws.OP_CONTINUATION, b"second"),
            client_frame(ws.OP_BINARY, bytes(70_000)[:1424]),
            client_frame(ws.OP_CLOSE, b"\x03\xe8"),
        )
    )
    expected = [
        (ws.OP_BINARY, ipx.build_registration()),
        (ws.OP_PING, b"ping"),
        (ws.OP_BINARY, b"first second"),
        (ws.OP_BINARY, bytes(1424)),
        (ws.OP_CLOSE, b"\x03\xe8"),
    ]
    for cut in (1, 2, 5, len(stream)):
        reader = ws.FrameReader()
        got = []
        for at in range(0, len(stream), cut):
            got += reader.feed(stream[at : at + cut])
        assert got == expected, cut
    assert ws.close_code(b"\x03\xe8") == 1000
    assert ws.close_code(b"") is None


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (bytes((0x82, 5)) + b"hello", ws.CLOSE_PROTOCOL_ERROR),  # unmasked (§5.1)
        (bytes((0xC2, 0x80)) + bytes(4), ws.CLOSE_PROTOCOL_ERROR),  # RSV1: no extension
        (bytes((0x83, 0x80)) + bytes(4), ws.CLOSE_PROTOCOL_ERROR),  # reserved opcode
        (bytes((0x09, 0x80)) + bytes(4), ws.CLOSE_PROTOCOL_ERROR),  # a fragmented ping
        (bytes((0x89, 0xFE, 0, 200)) + bytes(4 + 200), ws.CLOSE_PROTOCOL_ERROR),  # long ping
        (bytes((0x80, 0x80)) + bytes(4), ws.CLOSE_PROTOCOL_ERROR),  # continuation of nothing
        (bytes((0x82, 0xFF)) + (1 << 40).to_bytes(8, "big"), ws.CLOSE_TOO_BIG),  # header only
    ],
)
def test_protocol_errors_close_with_the_rfc_code(frame: bytes, code: int) -> None:
    with pytest.raises(ws.WebSocketError) as info:
        ws.FrameReader().feed(frame)
    assert info.value.code == code


def test_a_message_over_the_limit_in_fragments_is_too_big() -> None:
    reader = ws.FrameReader(max_message=100)
    reader.feed(client_frame(ws.OP_BINARY, bytes(60), fin=False))
    with pytest.raises(ws.WebSocketError) as info:
        reader.feed(client_frame(ws.OP_CONTINUATION, bytes(60)))
    assert info.value.code == ws.CLOSE_TOO_BIG
