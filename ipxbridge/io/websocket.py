"""The WebSocket listener for browser players (js-dos): an I/O adapter beside the UDP socket.

js-dos, DOSBox compiled to WebAssembly, cannot send UDP, so it speaks the DOSBox IPX protocol
over a WebSocket to ``ws[s]://HOST:1900/ipx/<room>``: one binary message is one IPX packet,
the registration included (docs/protocols.md 4.10). Each connection is a client of a room's
switch like a DOSBox client's UDP address (``policy/connections.connection_address``); the room
(``app/websocket.py``) switches what it sends and hands back the copies for it.

A plain asyncio protocol on the codecs of ``wire/websocket.py``: the handshake, then every
message switched as it is read (no coroutine per message), every copy a frame made once for
all players and written with the others of its turn (``Outbox``).

What a stranger can make this do, and what bounds it (docs/reliability.md, R27):

* open connections: bounded in all, per room, per address and in rooms
  (``policy/rooms.RoomTable``), and handshakes under way (``MAX_HANDSHAKES``, each at most
  ``MAX_HANDSHAKE`` bytes within ``HANDSHAKE_SECONDS``); refused ones are counted by reason,
  with a short HTTP answer;
* send junk: text frames, messages larger than DOSBox takes (1424 bytes) and malformed
  packets are received and dropped with a reason, like a bad datagram; a frame that breaks
  the protocol, or a message over ``MAX_MESSAGE``, closes that connection (1002, 1009);
* read slowly: the copies toward a connection wait in its transport's buffer, at most
  ``max_buffer`` bytes, above a kernel send buffer held to ``KERNEL_SEND_BUFFER``; past that
  a copy is dropped and counted (``queue_full``) and nobody else waits. Only a connection
  still behind after ``behind_seconds`` is closed (js-dos never reconnects, so a close is the
  last resort, never the answer to a burst);
* vanish: the listener pings every ``ping_interval`` (js-dos answers within milliseconds and
  sends no keepalives of its own), and a connection that leaves a ping unanswered for a whole
  interval is closed.
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

from ipxbridge.errors import StartupError
from ipxbridge.obs.logging import RateLimiter
from ipxbridge.policy.connections import connection_address
from ipxbridge.policy.ports import Address
from ipxbridge.policy.rooms import room_name
from ipxbridge.wire.websocket import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    DOSBOX_MAX_PACKET,
    MAX_HANDSHAKE,
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameReader,
    WebSocketError,
    close_frame,
    handshake_end,
    handshake_response,
    http_refusal,
    parse_handshake,
    server_frame,
)

logger = logging.getLogger(__name__)

PATH_PREFIX: Final = "/ipx/"
KERNEL_SEND_BUFFER: Final = 65_536
MAX_HANDSHAKES: Final = 256  # connections still in their opening handshake, at most
HANDSHAKE_SECONDS: Final = 10.0  # to send the handshake (and finish TLS's before it)
FLUSH_GAP: Final = 0.001  # between two writes of the copies toward players (``Outbox``)
CLOSE_SECONDS: Final = 5.0  # a closed connection's last frames get this long to leave
_PING: Final = server_frame(OP_PING, b"ipxbridge")
_UNREAD: Final = frozenset(("behind", "ping_timeout"))  # closed by aborting: it does not read


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
    max_handshakes: int = MAX_HANDSHAKES
    handshake_seconds: float = HANDSHAKE_SECONDS


class Outbox:
    """Copies toward the players, one write per connection at most every ``FLUSH_GAP``.

    A copy is made per packet and per player: 16 players broadcasting 250 a second make
    60,000 copies a second, and a write per copy is a ``send()`` system call per copy (the
    largest single cost in the profile, docs/benchmarks.md "Players in a browser"). The
    frames for one connection go out together: at the end of the turn that made them when
    the last write was ``FLUSH_GAP`` ago or more (light traffic waits for nothing), else
    when that gap is over. Under load a copy waits 1 ms at most, plus the loop's timer
    resolution, as the UDP side's timed reads do (``ipx.coalesce_ms``); DOSBox itself looks
    at its socket once a millisecond.
    """

    __slots__ = ("_dirty", "_last", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._dirty: list[Connection] = []
        self._last = 0.0  # when the last flush ran

    def add(self, conn: "Connection") -> None:
        """``conn`` has frames waiting: write them at the next flush."""
        if not self._dirty:
            loop = self._loop
            due = self._last + FLUSH_GAP
            if loop.time() >= due:
                loop.call_soon(self.flush)
            else:
                loop.call_at(due, self.flush)
        self._dirty.append(conn)

    def flush(self) -> None:
        """Write every waiting connection's frames."""
        self._last = self._loop.time()
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            conn.flush()


class Connection:
    """One browser player's WebSocket: its address in the switch and the copies toward it."""

    __slots__ = (
        "addr",
        "behind_since",
        "client",
        "max_buffer",
        "outbox",
        "overflowed",
        "pending",
        "pending_size",
        "ping_sent",
        "queue_dropped",
        "room",
        "transport",
        "unanswered",
    )

    def __init__(
        self,
        transport: asyncio.Transport,
        client: tuple[str, int],
        room: str,
        *,
        outbox: Outbox,
        max_buffer: int,
        now: float,
    ) -> None:
        self.transport = transport
        self.outbox = outbox
        self.max_buffer = max_buffer  # bytes waiting toward it, at most
        self.pending: list[bytes] = []  # frames made this turn (``Outbox``)
        self.pending_size = 0
        self.client = client  # the player's IP and TCP port (through a proxy: the proxy's)
        self.addr: Address = connection_address(*client)
        self.room = room
        self.queue_dropped = 0  # copies dropped: its buffer was full
        self.overflowed = False  # since the last tick
        self.behind_since: float | None = None
        self.ping_sent = now  # when the last ping went (none yet: as if at the start)
        self.unanswered = False  # that ping has had no pong yet

    def __str__(self) -> str:
        return f"{self.client[0]}:{self.client[1]} (room {self.room})"

    def send(self, frame: bytes) -> bool:
        """One copy, as a frame, written at the end of this turn (``Outbox``).

        The frame is ``wire/websocket.binary_frame``'s, made once for every player. False
        (and counted) if its buffer already holds ``max_buffer`` bytes, or it closed.
        """
        transport = self.transport
        waiting = self.pending_size + transport.get_write_buffer_size()
        if waiting > self.max_buffer or transport.is_closing():
            self.queue_dropped += 1
            self.overflowed = True
            return False
        if not self.pending:
            self.outbox.add(self)
        self.pending.append(frame)
        self.pending_size += len(frame)
        return True

    def flush(self) -> None:
        """Write the frames made this turn, in one piece."""
        pending = self.pending
        if pending and not self.transport.is_closing():
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        self.pending = []
        self.pending_size = 0


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
        self.handshakes = 0  # connections in their opening handshake now
        self.refused: Counter[str] = Counter()
        self.closed: Counter[str] = Counter()
        self.opened = 0
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbox: Outbox | None = None
        self._log = RateLimiter(rate=2.0, burst=20)  # refusals
        self._all_gone = asyncio.Event()  # set when the last connection has gone

    @property
    def scheme(self) -> str:
        """``ws`` or ``wss``."""
        return "ws" if self.ssl_context is None else "wss"

    async def start(self) -> None:
        """Listen.

        Raises:
            StartupError: the address is taken or needs privileges.
        """
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._outbox = Outbox(loop)
        try:
            self._server = await loop.create_server(
                lambda: _Link(self),
                self.settings.host,
                self.settings.port,
                ssl=self.ssl_context,
                ssl_handshake_timeout=self.settings.handshake_seconds if self.ssl_context else None,
                reuse_address=True,
            )
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {self.settings.host}:{self.settings.port}/tcp for browser "
                f"players (websocket.listen): {exc.strerror}"
            ) from None

    async def stop(self) -> None:
        """Close every connection (going away, 1001) and stop listening."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections.values()):
            self.close(conn, "shutdown", "server shutdown", code=CLOSE_GOING_AWAY, quiet=True)
        if self.connections:  # their close frames go, and their rooms hear it (1 s at most)
            self._all_gone.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_gone.wait(), 1.0)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    def close(
        self,
        conn: Connection,
        reason: str,
        message: str,
        *,
        code: int | None = None,
        quiet: bool = False,
    ) -> None:
        """Close ``conn`` from the bridge's side (``reason`` from ``CLOSE_REASONS``)."""
        link = conn.transport.get_protocol()
        if not isinstance(link, _Link) or link.reason:
            return
        link.reason = reason
        if not quiet:
            logger.info("browser player %s closed: %s", conn, message)
        transport = conn.transport
        if reason in _UNREAD:
            transport.abort()  # it reads nothing: a close frame would wait for ever
            return
        conn.flush()
        if code is None:
            code = CLOSE_POLICY if reason == "not_allowed" else CLOSE_INTERNAL
        transport.write(close_frame(code, message))
        transport.close()  # after what is buffered (RFC 6455 §7.1.1: the server closes)
        if self._loop is not None:  # and not later than CLOSE_SECONDS, read or not
            self._loop.call_later(CLOSE_SECONDS, transport.abort)

    def tick(self, now: float) -> None:
        """Pings, and their answers; connections that stayed behind."""
        behind_limit = self.settings.behind_seconds
        interval = self.settings.ping_interval
        for conn in list(self.connections.values()):
            if now - conn.ping_sent >= interval:
                if conn.unanswered:
                    self.close(conn, "ping_timeout", f"no pong within {interval:.0f} s")
                    continue
                conn.ping_sent = now
                conn.unanswered = True
                conn.flush()
                conn.transport.write(_PING)
            if not conn.overflowed:
                conn.behind_since = None
                continue
            conn.overflowed = False
            if conn.behind_since is None:
                conn.behind_since = now
            elif now - conn.behind_since >= behind_limit:
                self.close(
                    conn,
                    "behind",
                    f"its copies overflowed {behind_limit:.0f} s in a row ({conn.queue_dropped} "
                    "dropped): it reads too slowly or its link is too slow for this game",
                )

    def refuse(self, reason: str, who: str, room: str) -> None:
        """Count a refusal, and say it in the log (rate-limited)."""
        self.refused[reason] += 1
        if self._loop is not None and self._log.allow(self._loop.time()):
            logger.info("browser player %s refused for room %s: %s", who, room[:64], reason)

    def accept(self, link: "_Link", text: bytes) -> tuple[int, str] | Connection:
        """Judge an opening handshake: a new connection, or (HTTP status, refusal reason)."""
        transport = link.transport
        assert transport is not None  # noqa: S101 - the handshake came over it
        peer = transport.get_extra_info("peername") or ("", 0)
        try:
            shake = parse_handshake(text)
        except WebSocketError as exc:
            self.refuse("not_websocket", str(peer[0]), "?")
            return exc.code, "not_websocket"
        settings = self.settings
        forwarded = shake.headers.get("x-forwarded-for", [])
        ip = client_ip(str(peer[0]), forwarded, settings.trusted_proxies)
        who = f"{ip}:{peer[1]}"
        path = shake.path.split("?", 1)[0]
        room = room_name(path[len(PATH_PREFIX) :]) if path.startswith(PATH_PREFIX) else None
        if room is None:
            self.refuse("bad_room", who, path)
            return 404, "bad_room"
        origin = shake.header("origin")
        if settings.origins and origin is not None and origin not in settings.origins:
            self.refuse("origin", who, room)
            return 403, "origin"
        if not self.allows(ip):
            self.refuse("not_allowed", who, room)
            return 403, "not_allowed"
        refused = self.rooms.admit(room, ip)
        if refused is not None:
            self.refuse(refused, who, room)
            return 503, refused
        assert self._outbox is not None  # noqa: S101 - started
        assert self._loop is not None  # noqa: S101 - started
        protocol = "binary" if "binary" in shake.protocols() else None
        transport.write(handshake_response(shake.key, protocol))
        _bound_kernel_buffer(transport)
        conn = Connection(
            transport,
            (ip, int(peer[1])),
            room,
            outbox=self._outbox,
            max_buffer=settings.max_buffer,
            now=self._loop.time(),
        )
        self.connections[conn.addr] = conn
        self.opened += 1
        self.rooms.join(conn)
        return conn

    def gone(self, conn: Connection, reason: str) -> None:
        """``conn``'s TCP connection ended: it leaves its room."""
        if self.connections.pop(conn.addr, None) is None:
            return
        self.closed[reason] += 1
        self.rooms.leave(conn, reason)
        if not self.connections:
            self._all_gone.set()


class _Link(asyncio.Protocol):
    """One TCP connection: its opening handshake, then its frames (``FrameReader``)."""

    def __init__(self, listener: WebSocketListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.conn: Connection | None = None
        self.reader = FrameReader()
        self.head = b""  # the opening handshake, as it arrives
        self.shaking = False  # counted in the listener's handshakes under way
        self.reason = ""  # why it was closed, by the bridge or the client ("" while open)
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # noqa: S101 - a stream server's
        self.transport = transport
        listener = self.listener
        if listener.handshakes >= listener.settings.max_handshakes:
            listener.refuse("handshakes_full", "?", "?")
            self.reason = "refused"
            transport.abort()
            return
        listener.handshakes += 1
        self.shaking = True
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(listener.settings.handshake_seconds, self._too_slow)

    def _too_slow(self) -> None:
        self._timer = None
        self.listener.refuse("handshake_timeout", "?", "?")
        self._end_handshake()
        self.reason = "refused"
        if self.transport is not None:
            self.transport.abort()

    def _end_handshake(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.head = b""
        if self.shaking:
            self.shaking = False
            self.listener.handshakes -= 1

    def data_received(self, data: bytes) -> None:
        if self.conn is not None:
            self._frames(data)
            return
        if self.reason:
            return
        self.head += data
        end = handshake_end(self.head)
        if end < 0:
            if len(self.head) > MAX_HANDSHAKE:
                self._refuse(431, "not_websocket")
            return
        if end > MAX_HANDSHAKE:
            self._refuse(431, "not_websocket")
            return
        head, rest = self.head[:end], self.head[end:]
        self._end_handshake()
        accepted = self.listener.accept(self, head)
        if isinstance(accepted, tuple):
            self._refuse(*accepted, counted=True)
            return
        self.conn = accepted
        if rest:
            self._frames(rest)

    def _refuse(self, status: int, reason: str, *, counted: bool = False) -> None:
        if not counted:
            self.listener.refuse(reason, "?", "?")
        self._end_handshake()
        self.reason = "refused"
        assert self.transport is not None  # noqa: S101 - data came over it
        self.transport.write(http_refusal(status, reason))
        self.transport.close()

    def _frames(self, data: bytes) -> None:
        conn = self.conn
        assert conn is not None  # noqa: S101 - called once the handshake is done
        if self.reason:
            return  # closing: what it still sends is not read
        listener = self.listener
        rooms = listener.rooms
        try:
            messages = self.reader.feed(data)
        except WebSocketError as exc:
            listener.close(conn, "error", exc.why, code=exc.code)
            return
        for opcode, payload in messages:
            conn.unanswered = False  # anything it sends says it is there
            if opcode == OP_BINARY:
                if len(payload) > DOSBOX_MAX_PACKET:
                    rooms.reject(conn, len(payload), "too_large")
                else:
                    rooms.ingest(conn, payload)
            elif opcode == OP_TEXT:
                rooms.reject(conn, len(payload), "text_frame")
            elif opcode == OP_PING:
                conn.flush()
                conn.transport.write(server_frame(OP_PONG, payload))
            elif opcode == OP_CLOSE:
                self.reason = "client"
                conn.flush()
                conn.transport.write(close_frame(CLOSE_NORMAL))  # §5.5.1: answered, then closed
                conn.transport.close()
                return
            if self.closing():
                return  # the bridge closed it while handling this message

    def closing(self) -> bool:
        """Whether it is being closed (by either side)."""
        return bool(self.reason)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_handshake()
        conn = self.conn
        if conn is not None:
            reason = self.reason or ("error" if exc is not None else "client")
            self.listener.gone(conn, reason)


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
