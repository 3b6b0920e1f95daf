"""The WebSocket listener for browser players (js-dos): an I/O adapter beside the UDP socket.

js-dos, DOSBox compiled to WebAssembly, cannot send UDP, so it speaks the DOSBox IPX protocol
over a WebSocket to ``ws[s]://HOST:1900/ipx/<room>``: one binary message is one IPX packet,
the registration included (docs/protocols.md 3.10). Each connection is a client of a room's
switch like a DOSBox client's UDP address (``policy/ports.connection_address``); the room
(``app/websocket.py``) switches what it sends and hands back the copies for it.

What a stranger can make this do, and what bounds it (docs/reliability.md, R27):

* open connections: bounded in all, per room, per address and in rooms
  (``policy/rooms.RoomTable``); refused ones are counted by reason, with a short HTTP answer;
* send junk: text frames, messages larger than DOSBox takes (1424 bytes) and malformed
  packets are received and dropped with a reason, like a bad datagram; a message over
  ``MAX_MESSAGE`` is a protocol error aiohttp answers by closing (no DOS program sends one);
* read slowly: the copies toward a connection wait in its transport's buffer, at most
  ``max_buffer`` bytes; past that a copy is dropped and counted (``queue_full``) and nobody
  else waits. Only a connection still behind after ``behind_seconds`` is closed (js-dos
  never reconnects, so a close is the last resort, never the answer to a burst);
* vanish: the listener pings every ``ping_interval`` (js-dos answers within milliseconds and
  sends no keepalives of its own), and a connection with no pong is closed.

Copies are written as whole frames to the transport (``wire/websocket.binary_frame``) on
the switch's synchronous path; aiohttp reads, answers pings and closes.
"""

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from aiohttp import WSMsgType, web

from ipxbridge.errors import StartupError
from ipxbridge.obs.logging import RateLimiter
from ipxbridge.policy.ports import Address, connection_address
from ipxbridge.policy.rooms import room_name
from ipxbridge.wire.websocket import DOSBOX_MAX_PACKET, binary_frame

logger = logging.getLogger(__name__)

# aiohttp closes (1009) on a message larger than this: far past any IPX packet, so only
# junk meets it. Between DOSBOX_MAX_PACKET and this, a message is dropped as too_large.
MAX_MESSAGE: Final = 1 << 16
PATH: Final = "/ipx/{room}"
KERNEL_SEND_BUFFER: Final = 65_536


@dataclass(frozen=True)
class ListenerSettings:
    """The ``websocket`` section, as the listener takes it."""

    host: str
    port: int
    origins: tuple[str, ...] = ()  # empty: any Origin (js-dos pages are served anywhere)
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    ping_interval: float = 10.0
    max_buffer: int = 262_144
    behind_seconds: float = 10.0


class Connection:
    """One browser player's WebSocket: its address in the switch and the copies toward it."""

    __slots__ = (
        "addr",
        "behind_since",
        "client",
        "overflowed",
        "queue_dropped",
        "room",
        "transport",
        "ws",
    )

    def __init__(
        self,
        ws: web.WebSocketResponse,
        transport: asyncio.Transport,
        client: tuple[str, int],
        room: str,
    ) -> None:
        self.ws = ws
        self.transport = transport
        self.client = client  # the player's IP and TCP port (through a proxy: the proxy's)
        self.addr: Address = connection_address(*client)
        self.room = room
        self.queue_dropped = 0  # copies dropped: its buffer was full
        self.overflowed = False  # since the last tick
        self.behind_since: float | None = None

    def __str__(self) -> str:
        return f"{self.client[0]}:{self.client[1]} (room {self.room})"

    def send(self, packet: bytes, max_buffer: int) -> bool:
        """One copy as a binary frame; False (counted) if its buffer is full or it closed."""
        transport = self.transport
        if transport.is_closing() or transport.get_write_buffer_size() > max_buffer:
            self.queue_dropped += 1
            self.overflowed = True
            return False
        transport.write(binary_frame(packet))
        return True


class Rooms(Protocol):
    """What the listener asks of the rooms (``app/websocket.py``)."""

    def admit(self, room: str, ip: str) -> str | None:
        """Take a connection from ``ip`` into ``room``, or say why not (``REFUSALS``)."""

    def join(self, conn: Connection) -> None:
        """The handshake is done: ``conn`` is a client of its room's switch from now on."""

    def ingest(self, conn: Connection, data: bytes) -> None:
        """One binary message from ``conn``: switched, counted."""

    def reject(self, conn: Connection, size: int, reason: str) -> None:
        """A message that is no IPX packet to switch: received and dropped with ``reason``."""

    def leave(self, conn: Connection, reason: str) -> None:
        """``conn`` is closed (``reason`` from ``CLOSE_REASONS``); it leaves its room."""

    def release(self, room: str, ip: str) -> None:
        """An admitted connection whose handshake failed: it never joined."""


def client_ip(
    peer: str,
    forwarded_for: Sequence[str],
    trusted: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
) -> str:
    """The player's address: the TCP peer's, or the nearest untrusted one a proxy saw.

    When the TCP peer is a trusted proxy, the nearest address in ``X-Forwarded-For`` that
    is not one: each proxy appends the one it saw, so only entries added by trusted proxies
    can be believed (docs/ipx.md, "Behind a reverse proxy").
    """
    ip = _plain(peer)
    if not trusted or not _within(ip, trusted):
        return ip
    hops = [h.strip() for line in forwarded_for for h in line.split(",") if h.strip()]
    for hop in reversed(hops):
        candidate = _plain(hop)
        try:
            ipaddress.ip_address(candidate)
        except ValueError:
            return ip  # a mangled header: the proxy itself is all that is known
        if not _within(candidate, trusted):
            return candidate
    return ip


def _plain(ip: str) -> str:
    """``ip`` in canonical form; an IPv4-mapped IPv6 address as IPv4."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _within(ip: str, nets: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(address in net for net in nets)


def tls_context(certificate: str, key: str) -> ssl.SSLContext:
    """A server context for ``wss://``; ``reload_tls`` loads a renewed pair into it.

    Raises:
        StartupError: the certificate or key cannot be read or do not match.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    reload_tls(context, certificate, key)
    return context


def reload_tls(context: ssl.SSLContext, certificate: str, key: str) -> None:
    """Load a certificate and key into ``context``.

    New handshakes use them; open connections keep theirs.

    Raises:
        StartupError: they cannot be read or do not match (``context`` keeps the old pair).
    """
    try:
        context.load_cert_chain(certificate, key)
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(
            f"websocket TLS: cannot load certificate {certificate} with key {key}: {exc}"
        ) from None


class WebSocketListener:
    """``/ipx/<room>`` on one TCP address, ``ws://`` or ``wss://``."""

    def __init__(
        self,
        settings: ListenerSettings,
        rooms: Rooms,
        *,
        ssl_context: ssl.SSLContext | None = None,
        allows: Callable[[str], bool] = lambda _ip: True,
    ) -> None:
        self.settings = settings
        self.rooms = rooms
        self.allows = allows  # ipx.clients_allow
        self.ssl_context = ssl_context
        self.connections: dict[Address, Connection] = {}
        self.refused: Counter[str] = Counter()
        self.closed: Counter[str] = Counter()
        self.opened = 0
        self._runner: web.AppRunner | None = None
        self._log = RateLimiter(rate=2.0, burst=20)  # joins, leaves, refusals
        self._closing: dict[Address, str] = {}  # why the bridge closes a connection

    @property
    def scheme(self) -> str:
        """``ws`` or ``wss``."""
        return "ws" if self.ssl_context is None else "wss"

    async def start(self) -> None:
        """Listen.

        Raises:
            StartupError: the address is taken or needs privileges.
        """
        app = web.Application()
        app.router.add_get(PATH, self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(
            runner,
            self.settings.host,
            self.settings.port,
            ssl_context=self.ssl_context,
            reuse_address=True,
        )
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise StartupError(
                f"cannot listen on {self.settings.host}:{self.settings.port}/tcp for browser "
                f"players (websocket.listen): {exc.strerror}"
            ) from None
        self._runner = runner

    async def stop(self) -> None:
        """Close every connection (going away, 1001) and stop listening."""
        for conn in list(self.connections.values()):
            self._closing[conn.addr] = "shutdown"
            with contextlib.suppress(Exception):
                await conn.ws.close(code=1001, message=b"server shutdown")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def close(self, conn: Connection, reason: str, message: str) -> None:
        """Close ``conn`` from the bridge's side (``reason`` from ``CLOSE_REASONS``)."""
        if conn.addr in self._closing:
            return
        self._closing[conn.addr] = reason
        logger.info("browser player %s closed: %s", conn, message)
        asyncio.get_running_loop().create_task(
            conn.ws.close(code=1008 if reason == "not_allowed" else 1011, message=message.encode())
        )

    def tick(self, now: float) -> None:
        """Close connections that stayed behind; count the others' overflows."""
        limit = self.settings.behind_seconds
        for conn in list(self.connections.values()):
            if not conn.overflowed:
                conn.behind_since = None
                continue
            conn.overflowed = False
            if conn.behind_since is None:
                conn.behind_since = now
            elif now - conn.behind_since >= limit:
                self.close(
                    conn,
                    "behind",
                    f"its copies overflowed {limit:.0f} s in a row ({conn.queue_dropped} "
                    "dropped): it reads too slowly or its link is too slow for this game",
                )

    def _refuse(self, reason: str, status: int, who: str, room: str) -> web.Response:
        self.refused[reason] += 1
        if self._log.allow(asyncio.get_running_loop().time()):
            logger.info("browser player %s refused for room %s: %s", who, room, reason)
        return web.Response(status=status, text=f"refused: {reason}\n")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw_room = request.match_info.get("room", "")
        transport = request.transport
        peername = transport.get_extra_info("peername") if transport is not None else None
        if transport is None or not peername:
            return web.Response(status=400)
        settings = self.settings
        ip = client_ip(
            str(peername[0]),
            request.headers.getall("X-Forwarded-For", []),
            settings.trusted_proxies,
        )
        who = f"{ip}:{peername[1]}"
        room = room_name(raw_room)
        if room is None:
            return self._refuse("bad_room", 404, who, raw_room[:64])
        ws = web.WebSocketResponse(
            protocols=("binary",),  # the reference server offers it; js-dos asks for none
            compress=False,  # frames are written as they are (wire/websocket.py)
            heartbeat=settings.ping_interval,
            max_msg_size=MAX_MESSAGE,
        )
        if not ws.can_prepare(request).ok:
            return self._refuse("not_websocket", 400, who, room)
        origin = request.headers.get("Origin")
        if settings.origins and origin is not None and origin not in settings.origins:
            return self._refuse("origin", 403, who, room)
        if not self.allows(ip):
            return self._refuse("not_allowed", 403, who, room)
        refused = self.rooms.admit(room, ip)
        if refused is not None:
            return self._refuse(refused, 503, who, room)
        conn: Connection | None = None
        try:
            await ws.prepare(request)
            _bound_kernel_buffer(transport)
            conn = Connection(ws, transport, (ip, int(peername[1])), room)
            self.connections[conn.addr] = conn
            self.opened += 1
            self.rooms.join(conn)
            await self._read(conn)
        finally:
            if conn is None:  # the handshake failed: admitted, never joined
                self.rooms.release(room, ip)
            else:
                self.connections.pop(conn.addr, None)
                reason = self._closing.pop(conn.addr, "") or _why_closed(ws)
                self.closed[reason] += 1
                self.rooms.leave(conn, reason)
        return ws

    async def _read(self, conn: Connection) -> None:
        rooms = self.rooms
        async for msg in conn.ws:
            if msg.type is WSMsgType.BINARY:
                data = msg.data
                if len(data) > DOSBOX_MAX_PACKET:
                    rooms.reject(conn, len(data), "too_large")
                else:
                    rooms.ingest(conn, data)
            elif msg.type is WSMsgType.TEXT:
                rooms.reject(conn, len(msg.data), "text_frame")
            elif msg.type is WSMsgType.ERROR:
                break


def _bound_kernel_buffer(transport: asyncio.BaseTransport) -> None:
    """Hold the kernel's send buffer of a connection to ``KERNEL_SEND_BUFFER``.

    Left to autotuning it grows to ``tcp_wmem``'s maximum (4 MiB by default) toward a player
    who stopped reading, before ``max_buffer`` even starts to count: per connection, that is
    kernel memory a stranger holds. 64 KiB (the kernel doubles it) carries what a LAN game
    sends to one player over a 200 ms path.
    """
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, KERNEL_SEND_BUFFER)


def _why_closed(ws: web.WebSocketResponse) -> str:
    """How a connection the bridge did not close ended (``CLOSE_REASONS``)."""
    exc = ws.exception()
    if isinstance(exc, asyncio.TimeoutError):  # aiohttp's heartbeat: no pong
        return "ping_timeout"
    return "client" if exc is None else "error"
