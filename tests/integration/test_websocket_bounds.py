"""What a stranger on the browser players' port can make the bridge do (docs/reliability.md R27).

The real bridge (``ipxbridge run``) on loopback, its WebSocket listener reached by real TCP
connections: aiohttp clients that behave as js-dos does (register with the first message,
answer pings, docs/protocols.md 4.10), and raw sockets that misbehave in ways a library will
not: a client that stops reading (its copies pile up, its pings go unanswered). Each test
names the bound it checks; each fails without that bound.
"""

import asyncio
import base64
import json
import os
import re
import signal
import socket
import ssl
import struct
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from ipxbridge.io.websocket import Connection, ListenerSettings, WebSocketListener
from ipxbridge.wire import directplay as dp
from ipxbridge.wire import ipx
from scripts.harness import ROOT, STARTED, LoggedProcess
from tests.integration.test_browser_players import make_tls

HEADER = struct.Struct("!HHBB4s6sH4s6sH")
REGISTRATION = HEADER.pack(0xFFFF, 30, 0, 0, bytes(4), bytes(6), 2, bytes(4), bytes(6), 2)
GAME_SOCKET = 0x4545


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LoopbackBridge(LoggedProcess):
    """``ipxbridge run --config FILE`` on loopback, its listener and HTTP on free ports."""

    name = "bridge"

    def __init__(self, workdir: Path, websocket: dict[str, Any]) -> None:
        self.ws_port, self.http_port, udp = free_port(), free_port(), free_port()
        config = {
            "ipx": {"listen": f"127.0.0.1:{udp}", "node_key_file": str(workdir / "node.key")},
            "http": {"listen": f"127.0.0.1:{self.http_port}"},
            "websocket": {"listen": f"127.0.0.1:{self.ws_port}", **websocket},
        }
        path = workdir / "config.yaml"
        path.write_text(json.dumps(config))  # JSON is YAML
        self._start(
            [sys.executable, "-m", "ipxbridge", "run", "--config", str(path)],
            workdir / "bridge.log",
            cwd=ROOT,
        )
        self.wait_for(STARTED, 15)

    def url(self, room: str) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/ipx/{room}"

    def get(self, path: str, port: int | None = None) -> str:
        """``GET`` from the HTTP endpoint (or the given port), the body."""
        url = f"http://127.0.0.1:{port or self.http_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as response:
            body: bytes = response.read()
        return body.decode()

    def metric(self, sample: str) -> float:
        """The value of one sample, e.g. ``ipxbridge_ws_refused_total{reason="origin"}``."""
        for line in self.get("/metrics").splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
        raise AssertionError(f"no sample {sample}")

    def wait_metric(self, sample: str, at_least: float, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while (value := self.metric(sample)) < at_least:
            if time.monotonic() > deadline:
                raise AssertionError(f"{sample} = {value} after {timeout}s, not {at_least}")
            time.sleep(0.1)
        return value


@contextmanager
def running(workdir: Path, **websocket: Any) -> Iterator[LoopbackBridge]:
    bridge = LoopbackBridge(workdir, websocket)
    try:
        yield bridge
    finally:
        bridge.stop()


def broadcast(node: bytes, payload: bytes) -> bytes:
    """A DOS game's broadcast from ``node`` on the game socket (docs/protocols.md 4.4)."""
    size = 30 + len(payload)
    header = HEADER.pack(
        0xFFFF, size, 0, 4, bytes(4), b"\xff" * 6, GAME_SOCKET, bytes(4), node, GAME_SOCKET
    )
    return header + payload


@asynccontextmanager
async def player(
    url: str, source: str = "127.0.0.1", headers: dict[str, str] | None = None
) -> AsyncIterator[tuple[aiohttp.ClientWebSocketResponse, bytes]]:
    """A client as js-dos behaves: registers with its first message, takes the first
    message back as its address (docs/protocols.md 4.10), answers pings while it reads."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.ws_connect(url, headers=headers, autoping=True) as ws,
    ):
        await ws.send_bytes(REGISTRATION)
        reply = await asyncio.wait_for(ws.receive(), 5)
        assert reply.type is aiohttp.WSMsgType.BINARY, reply
        yield ws, reply.data[10:16]


async def refused(url: str, source: str = "127.0.0.1", **headers: str) -> int:
    """Try a handshake; the HTTP status it was refused with (0: it was accepted)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as session:
        try:
            async with session.ws_connect(url, headers=headers):
                return 0
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


class StalledClient:
    """A raw WebSocket client that registers, then never reads again (RFC 6455 §4.1, §5.3):
    it answers no ping and its receive window fills."""

    def __init__(self, port: int, room: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /ipx/{room} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += self.sock.recv(1)  # byte by byte: nothing after the headers is taken
        assert answer.startswith(b"HTTP/1.1 101"), answer
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(REGISTRATION))
        self.sock.sendall(bytes((0x82, 0x80 | len(REGISTRATION))) + mask + masked)

    def close(self) -> None:
        self.sock.close()


def test_a_player_who_stops_reading_loses_copies_and_nobody_else_does(workdir: Path) -> None:
    """Bound: ``websocket.max_buffer`` per connection, then ``behind_seconds``. A stalled
    reader's copies are dropped and counted (queue_full) while a reading player gets all
    of them, and the stalled one is closed as ``behind``; without the bound its buffer
    would grow with every copy and nothing would be dropped or closed."""
    with running(workdir, max_buffer=16384, behind_seconds=1, ping_interval=600) as bridge:
        stalled = StalledClient(bridge.ws_port, "default")
        try:
            received = asyncio.run(_flood_past_a_stalled_reader(bridge))
            assert received == 1500, received
            dropped = 'ipxbridge_ipx_port_dropped_copies_total{interface="bridge",kind="websocket",reason="queue_full"}'  # noqa: E501
            assert bridge.metric(dropped) > 0
            bridge.wait_metric('ipxbridge_ws_connections_closed_total{reason="behind"}', 1, 10)
            assert re.search(r"closed: its copies overflowed 1 s in a row", bridge.log())
        finally:
            stalled.close()


async def _flood_past_a_stalled_reader(bridge: LoopbackBridge) -> int:
    """1,500 broadcasts of 1,000 bytes at about 1,000 a second; what the reader got."""
    async with (
        player(bridge.url("default")) as (tx, node),
        player(bridge.url("default")) as (
            rx,
            _,
        ),
    ):
        got = 0

        async def read() -> None:
            nonlocal got
            while got < 1500:
                msg = await rx.receive()
                if msg.type is not aiohttp.WSMsgType.BINARY:
                    return
                if msg.data[30:34] == b"FLD:":
                    got += 1

        reader = asyncio.create_task(read())
        for n in range(1500):
            await tx.send_bytes(broadcast(node, b"FLD:" + n.to_bytes(4, "big") + bytes(992)))
            if n % 10 == 9:
                await asyncio.sleep(0.01)
        try:
            await asyncio.wait_for(reader, 15)
        except TimeoutError:
            reader.cancel()
        return got


def test_pings_close_a_player_who_vanished_and_keep_one_who_answers(workdir: Path) -> None:
    """Bound: ``websocket.ping_interval``. A connection that stops answering is closed
    (ping_timeout) within a couple of intervals; a player who answers pings (js-dos does,
    and sends no keepalives of its own) stays. Without pings the silent one stays open."""
    with running(workdir, ping_interval=1) as bridge:
        stalled = StalledClient(bridge.ws_port, "quiet")
        try:

            async def answer_pings_for(seconds: float) -> bool:
                async with player(bridge.url("default")) as (ws, _):
                    try:
                        await asyncio.wait_for(ws.receive(), seconds)  # pings are answered
                    except TimeoutError:
                        return not ws.closed
                    return False

            assert asyncio.run(answer_pings_for(4.0))
            bridge.wait_metric('ipxbridge_ws_connections_closed_total{reason="ping_timeout"}', 1, 6)
            assert bridge.metric('ipxbridge_ws_connections_closed_total{reason="client"}') == 1
        finally:
            stalled.close()


def test_junk_is_dropped_with_a_reason_and_the_player_stays(workdir: Path) -> None:
    """A text frame, a message longer than DOSBox takes and a truncated packet are received
    and dropped, counted by reason, and the player's next broadcast still goes through; a
    frame over 64 KiB is a protocol error that closes that connection only."""
    with running(workdir) as bridge:

        async def scenario() -> tuple[bytes, int | None]:
            async with (
                player(bridge.url("default")) as (tx, node),
                player(bridge.url("default")) as (rx, _),
            ):
                await tx.send_str("hello")
                await tx.send_bytes(broadcast(node, bytes(1500)))
                await tx.send_bytes(b"\xff\xff\x00")
                await tx.send_bytes(broadcast(node, b"STILL-HERE"))
                got = await asyncio.wait_for(rx.receive(), 5)
                await tx.send_bytes(bytes(70_000))
                closing = await asyncio.wait_for(tx.receive(), 5)
                assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
                return got.data[30:], tx.close_code

        payload, code = asyncio.run(scenario())
        assert payload == b"STILL-HERE"
        assert code == 1009  # message too big
        port = 'interface="bridge",kind="websocket"'
        for reason in ("text_frame", "too_large", "truncated"):
            sample = (
                f'ipxbridge_ipx_port_packets_total{{{port},outcome="dropped",reason="{reason}"}}'
            )
            assert bridge.metric(sample) == 1, reason
        assert bridge.metric('ipxbridge_ws_connections_closed_total{reason="error"}') == 1
        assert "Traceback" not in bridge.log()


def test_connection_bounds_refuse_with_a_reason(workdir: Path) -> None:
    """Bounds: per client address, rooms (the bridge's room does not count toward them),
    per room, in all, the room name, the Origin, a plain HTTP request. Each refusal is an
    HTTP answer and a counted reason; without the bounds every one would be accepted."""
    settings = {
        "max_connections": 5,
        "max_rooms": 1,
        "max_connections_per_room": 3,
        "max_connections_per_address": 2,
        "origins": ["https://games.example.org"],
    }
    with running(workdir, **settings) as bridge:
        url = bridge.url

        async def scenario() -> dict[str, int]:
            out: dict[str, int] = {}
            async with (
                player(url("default"), "127.0.0.2"),
                player(url("default"), "127.0.0.2"),
            ):
                out["address_full"] = await refused(url("x1"), "127.0.0.2")
                async with player(url("r1"), "127.0.0.3"):
                    out["rooms_full"] = await refused(url("r2"), "127.0.0.4")
                    async with player(url("default"), "127.0.0.4"):  # not a room of max_rooms
                        out["room_full"] = await refused(url("default"), "127.0.0.5")
                        async with player(url("r1"), "127.0.0.5"):
                            out["connections_full"] = await refused(url("r1"), "127.0.0.6")
            out["bad_room"] = await refused(url("no!such"), "127.0.0.6")
            elsewhere = {"Origin": "https://elsewhere.example"}
            out["origin"] = await refused(url("default"), "127.0.0.6", **elsewhere)
            listed = {"Origin": "https://games.example.org"}
            out["listed origin"] = await refused(url("default"), "127.0.0.6", **listed)
            return out

        statuses = asyncio.run(scenario())
        try:
            bridge.get("/ipx/default", bridge.ws_port)  # no WebSocket handshake
            plain = 200
        except urllib.error.HTTPError as exc:
            plain = exc.code
        assert plain == 400
        assert statuses == {
            "address_full": 503,
            "rooms_full": 503,
            "room_full": 503,
            "connections_full": 503,
            "bad_room": 404,
            "origin": 403,
            "listed origin": 0,
        }
        for reason in (*statuses.keys() - {"listed origin"}, "not_websocket"):
            assert bridge.metric(f'ipxbridge_ws_refused_total{{reason="{reason}"}}') == 1, reason


def test_forwarded_for_is_believed_only_from_a_listed_proxy(workdir: Path) -> None:
    """``trusted_proxies``: from a listed proxy the player is the address it forwarded
    (status page, clients_allow); from anyone else the header is ignored."""
    with running(workdir, trusted_proxies=["127.0.0.7/32"]) as bridge:

        async def scenario() -> list[dict[str, Any]]:
            forwarded = {"X-Forwarded-For": "198.51.100.7"}
            async with (
                player(bridge.url("default"), "127.0.0.7", forwarded),
                player(bridge.url("default"), "127.0.0.8", forwarded),
            ):
                clients: list[dict[str, Any]] = json.loads(bridge.get("/api/clients"))
                return clients

        addresses = sorted(c["address"].split(":")[0] for c in asyncio.run(scenario()))
    assert addresses == ["127.0.0.8", "198.51.100.7"]


def _served_certificate(port: int, ca: Path) -> str:
    """The subject of the certificate a ``wss://`` handshake on ``port`` presents."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    names = [pair[1] for rdn in cert["subject"] for pair in rdn if pair[0] == "commonName"]
    return str(names[0])


def test_wss_certificate_is_reloaded_on_sighup(workdir: Path) -> None:
    """``websocket.certificate`` and ``key``: new handshakes get the renewed pair after
    SIGHUP, a player connected before keeps playing; a broken pair leaves the old one."""
    chain, key, ca = make_tls(workdir, "127.0.0.1")
    with running(workdir, certificate=str(chain), key=str(key)) as bridge:
        assert _served_certificate(bridge.ws_port, ca) == "127.0.0.1"

        async def before_and_after() -> bytes:
            context = ssl.create_default_context(cafile=str(ca))
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(bridge.url("default").replace("ws:", "wss:"), ssl=context) as ws,
            ):
                await ws.send_bytes(REGISTRATION)
                reply = await asyncio.wait_for(ws.receive(), 5)
                renewed = make_tls(workdir / "renewed", "127.0.0.1", name="renewed")
                chain.write_bytes(renewed[0].read_bytes())
                key.write_bytes(renewed[1].read_bytes())
                ca.write_bytes(renewed[2].read_bytes())  # whom the next handshake trusts
                bridge.proc.send_signal(signal.SIGHUP)
                bridge.wait_for(r"websocket TLS: certificate .* loaded", 10)
                await ws.send_bytes(REGISTRATION)  # registered again: answered as before
                again = await asyncio.wait_for(ws.receive(), 5)
                assert again.data == reply.data
                return bytes(reply.data)

        assert len(asyncio.run(before_and_after())) == 30
        assert _served_certificate(bridge.ws_port, ca) == "renewed"
        key.write_text("not a key\n")
        bridge.proc.send_signal(signal.SIGHUP)
        bridge.wait_for(r"the old certificate stays", 10)
        assert _served_certificate(bridge.ws_port, ca) == "renewed"


class _Rooms:
    """Rooms that admit everyone and remember what they were told."""

    def __init__(self) -> None:
        self.joined: list[Connection] = []
        self.left: list[str] = []

    def admit(self, room: str, ip: str) -> str | None:
        return None

    def join(self, conn: Connection) -> None:
        self.joined.append(conn)

    def ingest(self, conn: Connection, data: bytes) -> None:
        """Not reached here."""

    def reject(self, conn: Connection, size: int, reason: str) -> None:
        """Not reached here."""

    def leave(self, conn: Connection, reason: str) -> None:
        self.left.append(reason)


def test_handshakes_are_bounded_in_number_size_and_time() -> None:
    """Connections that never finish the opening handshake: at most ``max_handshakes`` at
    once (the next is dropped at once), each given ``handshake_seconds``; a handshake over
    8 KiB is answered 431. Without these bounds each would hold a socket for ever."""

    async def scenario() -> tuple[list[bytes], Counter[str], int]:
        port = free_port()
        settings = ListenerSettings("127.0.0.1", port, max_handshakes=2, handshake_seconds=0.5)
        rooms = _Rooms()
        listener = WebSocketListener(settings, rooms)
        await listener.start()
        try:
            loop = asyncio.get_running_loop()
            silent = []
            for _ in range(3):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                silent.append((reader, writer))
                await asyncio.sleep(0.05)  # accepted in order
            started = loop.time()
            # the third is dropped at once; the first two when their time is up
            ends = [await asyncio.wait_for(r.read(), 3) for r, _ in silent]
            elapsed = loop.time() - started
            assert 0.3 < elapsed < 2.0, elapsed
            huge_reader, huge_writer = await asyncio.open_connection("127.0.0.1", port)
            huge_writer.write(b"GET /ipx/a HTTP/1.1\r\n" + b"X-Pad: " + b"x" * 9000 + b"\r\n")
            answer = await asyncio.wait_for(huge_reader.read(), 3)
            for _, writer in [*silent, (huge_reader, huge_writer)]:
                writer.close()
            return [*ends, answer], listener.refused, listener.handshakes
        finally:
            await listener.stop()

    ends, refused, left = asyncio.run(scenario())
    assert ends[:3] == [b"", b"", b""]
    assert ends[3].startswith(b"HTTP/1.1 431 ")
    assert refused == Counter({"handshake_timeout": 2, "handshakes_full": 1, "not_websocket": 1})
    assert left == 0


def test_a_game_hosted_in_a_browser_is_on_the_game_list(workdir: Path) -> None:
    """A browser player is inspected like any client (docs/ipx.md, "Players in a browser"):
    a DirectPlay host in the bridge's room answering an enumeration, as a DirectPlay game
    over IPX does (a bare EnumSessionsReply to the asker, docs/protocols.md 1.9), shows on
    the game list with its name and players."""
    armada = uuid.UUID("76F93801-9340-11D2-AE34-00600895C779")
    with running(workdir) as bridge:

        async def host_answers() -> None:
            async with (
                player(bridge.url("default")) as (host, host_node),
                player(bridge.url("default")) as (_, asker_node),
            ):
                desc = dp.SessionDesc(
                    flags=0,
                    instance_guid=uuid.uuid4(),
                    application_guid=armada,
                    max_players=8,
                    current_players=3,
                    user=(0, 0, 0, 0),
                )
                body = dp.build_enum_sessions_reply(
                    dp.EnumSessionsReply(desc, "Browser LAN"), bare=True
                )
                reply = ipx.build_packet(
                    dst_node=asker_node,
                    dst_socket=0x4545,
                    src_node=host_node,
                    src_socket=0x4545,
                    payload=body,
                )
                await host.send_bytes(reply)
                deadline = time.monotonic() + 5
                while "Browser LAN" not in bridge.get("/api/sessions"):
                    assert time.monotonic() < deadline, bridge.get("/api/sessions")
                    await asyncio.sleep(0.1)

        asyncio.run(host_answers())
        sessions = json.loads(bridge.get("/api/sessions"))
    (session,) = sessions
    assert session["session_name"] == "Browser LAN"
    assert (session["players"], session["max_players"]) == (3, 8)
