#!/usr/bin/env python3
"""Benchmark ipxbridge's WebSocket listener against js-dos's own IPX server, side by side.

Usage (as root)::

    python3 bench/ws_bench.py --ref /path/to/dosbox-ipx-server      # 3 rounds, both servers
    python3 bench/ws_bench.py --ref BIN --skip-bridge --rounds 1     # the reference alone
    python3 bench/ws_bench.py --ref BIN --json /tmp/ws_bench.json --idle 500 1000
    python3 bench/ws_bench.py --bridge-cmd "python3 -m ipxbridge run --config {config}"

The reference is caiiiycuk/dosbox-ipx-server (Go, gorilla/websocket), the relay js-dos players
connect to: ``ws://HOST:1900/ipx/ROOM``, one binary message per IPX packet, every room its own
network. It binds ``:1900`` on every address and has no flag to change that, so everything here
runs in the network namespace ``--netns`` (default ``ipxb_wsbench``), made and deleted by this
script: servers and clients talk over that namespace's loopback, nothing leaves it.

What it does, every round (the server order alternating A B, B A, ...):

* broadcast run, on a fresh server pinned to CPU 1 (``taskset``): ``--clients`` WebSocket
  clients (this process, pinned to CPU 0; one thread, epoll, its own client-side framing)
  connect to ``/ipx/ROOM`` from the ``--source-ips`` in turn, each registers as DOSBox does (the
  30-byte packet to socket 2, node 0; its node and network are the reply's destination node and
  network), sends one probe broadcast and answers keepalives for up to ``--warmup`` seconds
  (until each has answered one), then every client broadcasts a lobby-sized packet (destination
  node ff:ff:ff:ff:ff:ff, socket 0x4545; the payload carries sender, sequence number and send
  time) at ``--rate`` per second for ``--secs`` seconds, paced against a fixed schedule (no
  drift; epoll's millisecond timer). Every client counts what reaches it per (sender, seq).
  Delivery = distinct (sender, seq) received / (sent x (clients - 1)). The server's CPU seconds
  per second (/proc utime + stime of its process tree over the send window), its RSS at the end
  of the window, the latency (send to receive, one clock) and the generator's own CPU are
  reported;
* idle run, on another fresh server: ``--idle`` K1 K2 ... registered connections opened in
  steps (``--idle-room-size`` per room, spread over ``--source-ips``, keepalives answered),
  the server's RSS read ``--idle-settle`` seconds after each step: (RSS after - RSS before) / K.

The tables give medians over the rounds, [min-max] beside them, and the ratio
ipxbridge / reference. ``--json FILE`` writes every figure. A broadcast run in which the
generator fell behind its schedule (send lag p99 over ``LAG_LIMIT_MS``: other work on CPU 0;
``other_cpu_s`` says how much) is flagged, kept in the JSON as discarded and run again
(``--retries``, 1). The generator itself needs about a third of a core at 16 x 250/s.

The reference, pinned to one CPU, runs with GOMAXPROCS 1. It writes each copy from the
sender's own goroutine with no lock, which gorilla/websocket forbids: when two senders write
to one connection at once it panics ("concurrent write to websocket connection"), net/http
recovers, and that sender's connection stays open but is never read again. Its delivery
therefore varies from round to round (it panics sooner given more cores); the notes under
the table count the panics in its log.

The bridge's configuration is written by ``bridge_config`` (one place, to follow its schema);
``--bridge-cmd`` is a template with ``{config}`` (that file), ``{port}`` (the WebSocket port)
and ``{udp_port}`` (its IPX tunnel port). Without ``--ref`` the reference is skipped with a
note; ``--skip-bridge`` leaves ipxbridge out.
"""

import argparse
import base64
import contextlib
import hashlib
import ipaddress
import json
import os
import re
import resource
import select
import shlex
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from benchlib import ROOT, BenchError
from benchlib.bridge import Process, spawn
from benchlib.netns import exit_on_signals, inside, namespaces
from benchlib.procstat import CLK_TCK, cpu_seconds, rss_kib

from ipxbridge.wire.ipx import HEADER_LEN, build_packet

JsonDict = dict[str, Any]

HOST: Final = "127.0.0.1"
DEFAULT_NETNS: Final = "ipxb_wsbench"
REF_PORT: Final = 1900  # dosbox-ipx-server's port, fixed in its source
DEFAULT_UDP_PORT: Final = 31213
SERVER_CPU: Final = 1
CLIENT_CPU: Final = 0
REF: Final = "reference"
BRIDGE: Final = "ipxbridge"
SERVERS: Final = (BRIDGE, REF)  # table order

READY_TIMEOUT: Final = 30.0  # a server accepts TCP connections within this
CONNECT_TIMEOUT: Final = 5.0  # one connection: TCP, WebSocket handshake, registration
STOP_TIMEOUT: Final = 5.0
LAG_LIMIT_MS: Final = 5.0  # a send lag p99 above this: the generator fell behind (CPU 0 busy)
MAX_OUT: Final = 1 << 20  # bytes a client queues when the server stops reading; then unsent
RECV_CHUNK: Final = 1 << 18
MAX_HEADERS: Final = 16384  # bytes of a handshake response
MAX_SKIPPED: Final = 1000  # messages ignored while waiting for a registration reply
IDLE_FAIL_LIMIT: Final = 20  # consecutive failed idle connections end the step
WS_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# ---------------------------------------------------------------------------------------------
# IPX packets (docs/protocols.md 4): a 30-byte header, big-endian
# ---------------------------------------------------------------------------------------------
IPX_LEN: Final = HEADER_LEN
ECHO_SOCKET: Final = 2
GAME_SOCKET: Final = 0x4545
BROADCAST_NODE: Final = b"\xff" * 6
ZERO_NODE: Final = b"\x00" * 6
ZERO_NET: Final = b"\x00" * 4
GAME_PACKET_TYPE: Final = 4
# The body of a bench packet: magic, sender index, sequence number, send time (monotonic ns).
BODY: Final = struct.Struct(">4sHIq")
MAGIC: Final = b"WSB1"
PROBE_MAGIC: Final = b"WSBp"
MIN_PAYLOAD: Final = BODY.size
# The destination fields of a keepalive (a ping: socket 2, broadcast node).
_DST_NODE: Final = slice(10, 16)
_DST_SOCKET: Final = slice(16, 18)
_SRC_NODE: Final = slice(22, 28)
_ECHO_BYTES: Final = ECHO_SOCKET.to_bytes(2, "big")


def ipx_packet(
    dst_node: bytes,
    dst_socket: int,
    src_node: bytes,
    src_socket: int,
    payload: bytes = b"",
    *,
    dst_net: bytes = ZERO_NET,
    src_net: bytes = ZERO_NET,
    ptype: int = 0,
) -> bytes:
    """An IPX packet, checksum 0xffff, length covering header and payload (the bridge's own
    codec, ``ipxbridge.wire.ipx.build_packet``)."""
    return build_packet(
        dst_net=dst_net,
        dst_node=dst_node,
        dst_socket=dst_socket,
        src_net=src_net,
        src_node=src_node,
        src_socket=src_socket,
        packet_type=ptype,
        payload=payload,
    )


REGISTRATION: Final = ipx_packet(ZERO_NODE, ECHO_SOCKET, ZERO_NODE, ECHO_SOCKET)


# ---------------------------------------------------------------------------------------------
# The bridge's configuration: the one place to follow its schema
# ---------------------------------------------------------------------------------------------
def bridge_config(ws_port: int, udp_port: int, connections: int, rooms: int) -> str:
    """ipxbridge's YAML for this bench: the WebSocket listener on ``HOST:ws_port`` with room
    for ``connections`` connections in ``rooms`` rooms (per address and per room too), the IPX
    tunnel on loopback, no HTTP endpoint."""
    return (
        f'ipx: {{listen: "{HOST}:{udp_port}"}}\n'
        'http: {listen: "off"}\n'
        f'websocket: {{listen: "{HOST}:{ws_port}", max_connections: {connections}, '
        f"max_rooms: {rooms}, max_connections_per_address: {connections}, "
        f"max_connections_per_room: {connections}}}\n"
    )


def default_bridge_cmd() -> str:
    """This checkout's venv's ``ipxbridge`` if there is one, else this interpreter's module."""
    exe = ROOT / ".venv" / "bin" / "ipxbridge"
    prog = shlex.quote(str(exe)) if exe.exists() else f"{shlex.quote(sys.executable)} -m ipxbridge"
    return f"{prog} run --config {{config}}"


# ---------------------------------------------------------------------------------------------
# WebSocket, client side (RFC 6455): masked frames out, unmasked frames in
# ---------------------------------------------------------------------------------------------
OP_CONT: Final = 0x0
OP_TEXT: Final = 0x1
OP_BINARY: Final = 0x2
OP_CLOSE: Final = 0x8
OP_PING: Final = 0x9
OP_PONG: Final = 0xA


def client_frame(payload: bytes, mask: bytes, opcode: int = OP_BINARY) -> bytes:
    """One final frame, masked with ``mask`` (4 bytes) as a client must send it."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 1 << 16:
        head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    key = (mask * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(
        n, "little"
    )
    return head + mask + masked


def next_frame(buf: bytearray, pos: int) -> tuple[int, int, int] | None:
    """The frame at ``pos``: (first byte, payload start, payload end), or None if incomplete.

    Raises:
        BenchError: the server masked a frame (servers must not).
    """
    avail = len(buf) - pos
    if avail < 2:
        return None
    second = buf[pos + 1]
    if second & 0x80:
        raise BenchError("masked frame from the server")
    length = second & 0x7F
    start = pos + 2
    if length == 126:
        if avail < 4:
            return None
        length = (buf[pos + 2] << 8) | buf[pos + 3]
        start = pos + 4
    elif length == 127:
        if avail < 10:
            return None
        length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
        start = pos + 10
    end = start + length
    if end > len(buf):
        return None
    return buf[pos], start, end


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept a server must answer ``key`` with."""
    return base64.b64encode(
        hashlib.sha1(key.encode("ascii") + WS_GUID, usedforsecurity=False).digest()
    ).decode("ascii")


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how the clients connect."""

    port: int
    subprotocol: str  # "" sends none
    origin: str  # "" sends none


class Conn:
    """One client: its socket, its assigned address, its buffers and what it received."""

    __slots__ = (
        "closed",
        "counts",
        "echoes",
        "fd",
        "frag",
        "frag_op",
        "idx",
        "keepalives",
        "mask",
        "net",
        "node",
        "other",
        "out",
        "rbuf",
        "sock",
    )

    def __init__(self, sock: socket.socket, idx: int) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.idx = idx
        self.mask = os.urandom(4)  # one key for the connection's life: servers cannot tell
        self.node = ZERO_NODE
        self.net = ZERO_NET
        self.rbuf = bytearray()
        self.out = bytearray()
        self.frag = bytearray()
        self.frag_op = -1
        self.counts = bytearray()
        self.echoes = 0  # its own broadcasts coming back
        self.other = 0  # messages that are neither bench packets nor keepalives
        self.keepalives = 0  # keepalives answered
        self.closed = ""  # why it ended, if it did

    def send_blocking(self, payload: bytes, opcode: int = OP_BINARY) -> None:
        """Send one message (blocking mode only: handshake and registration)."""
        self.sock.sendall(client_frame(payload, self.mask, opcode))

    def recv_message_blocking(self, deadline: float) -> tuple[int, bytes]:
        """The next data message (pings answered); blocking, until ``deadline``.

        Raises:
            BenchError: the server closed or ``deadline`` passed.
        """
        while True:
            frame = next_frame(self.rbuf, 0)
            if frame is not None:
                first, start, end = frame
                payload = bytes(self.rbuf[start:end])
                del self.rbuf[:end]
                opcode = first & 0x0F
                if opcode == OP_PING:
                    self.send_blocking(payload, OP_PONG)
                elif opcode == OP_CLOSE:
                    raise BenchError("server closed the connection")
                elif opcode in (OP_BINARY, OP_TEXT) and first & 0x80:
                    return opcode, payload
                continue  # pongs; fragments are not expected here
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError("timed out")
            self.sock.settimeout(left)
            data = self.sock.recv(RECV_CHUNK)
            if not data:
                raise BenchError("server closed the connection")
            self.rbuf += data


def handshake(sock: socket.socket, target: Target, room: str, deadline: float) -> bytes:
    """The client's upgrade to a WebSocket on ``/ipx/ROOM``; returns the bytes that came
    after the response's headers.

    Raises:
        BenchError: refused, malformed, or not done by ``deadline``.
    """
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    lines = [
        f"GET /ipx/{room} HTTP/1.1",
        f"Host: {HOST}:{target.port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if target.subprotocol:
        lines.append(f"Sec-WebSocket-Protocol: {target.subprotocol}")
    if target.origin:
        lines.append(f"Origin: {target.origin}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
    response = bytearray()
    while b"\r\n\r\n" not in response:
        if len(response) > MAX_HEADERS or time.monotonic() > deadline:
            raise BenchError("no complete handshake response")
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        data = sock.recv(4096)
        if not data:
            raise BenchError(f"closed during the handshake: {bytes(response[:200])!r}")
        response += data
    head, _, rest = bytes(response).partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    status = text.split("\r\n", 1)[0]
    if " 101 " not in f"{status} ":
        raise BenchError(f"handshake refused: {status}")
    accept = re.search(r"(?im)^sec-websocket-accept:\s*(\S+)", text)
    if accept is None or accept.group(1) != accept_key(key):
        raise BenchError("bad Sec-WebSocket-Accept")
    return rest


def register(conn: Conn, deadline: float) -> None:
    """Send the registration and take the node and network the reply assigns.

    Raises:
        BenchError: no reply by ``deadline`` (or the server closed).
    """
    conn.send_blocking(REGISTRATION)
    for _ in range(MAX_SKIPPED):
        _, msg = conn.recv_message_blocking(deadline)
        if len(msg) >= IPX_LEN and msg[_DST_SOCKET] == _ECHO_BYTES:
            conn.net, conn.node = msg[6:10], msg[_DST_NODE]
            return
    raise BenchError("no registration reply")


def open_conn(target: Target, source: str, room: str, idx: int) -> Conn:
    """Connect from ``source``, upgrade to a WebSocket on ``/ipx/ROOM`` and register; returns
    the connection, non-blocking, with its node and network.

    Raises:
        BenchError: any step failed or took over ``CONNECT_TIMEOUT`` seconds.
        OSError: the socket failed.
    """
    deadline = time.monotonic() + CONNECT_TIMEOUT
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((source, 0))
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect((HOST, target.port))
        conn = Conn(sock, idx)
        conn.rbuf += handshake(sock, target, room, deadline)
        register(conn, deadline)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return conn


# ---------------------------------------------------------------------------------------------
# The load generator: one thread, epoll
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Window:
    """CPU and memory around the send window."""

    start: float = 0.0
    end: float = 0.0
    server_cpu: float = 0.0
    gen_cpu: float = 0.0
    steal: float = 0.0
    busy: float = 0.0  # the whole machine's
    server_rss_kib: int = 0


@dataclass(slots=True)
class Loop:
    """The clients of one run and the epoll set they live in."""

    server_pid: int
    conns: list[Conn] = field(default_factory=list)
    ep: select.epoll = field(default_factory=select.epoll)
    by_fd: dict[int, Conn] = field(default_factory=dict)
    senders: int = 0  # clients of the broadcast run (counts' first dimension)
    seqs: int = 0  # sequence numbers per sender (counts' second dimension)
    unique: int = 0  # distinct (sender, seq) deliveries, all receivers
    latencies: "array[int]" = field(default_factory=lambda: array("q"))
    unsent: int = 0

    def add(self, conn: Conn) -> None:
        """Watch ``conn``."""
        self.conns.append(conn)
        self.by_fd[conn.fd] = conn
        self.ep.register(conn.fd, select.EPOLLIN)
        if conn.rbuf:
            self._parse(conn, time.monotonic_ns())

    def close(self) -> None:
        """Close every socket and the epoll set."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.sock.close()
        self.ep.close()

    def drop(self, conn: Conn, why: str) -> None:
        """Stop watching ``conn`` (the server closed it, or it failed)."""
        if conn.closed:
            return
        conn.closed = why
        self.by_fd.pop(conn.fd, None)
        with contextlib.suppress(OSError, ValueError):
            self.ep.unregister(conn.fd)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def send(self, conn: Conn, message: bytes) -> bool:
        """Queue one frame; False if it could not be (closed, or the queue is full)."""
        if conn.closed or len(conn.out) > MAX_OUT:
            return False
        if conn.out:
            conn.out += message
            return True
        try:
            sent = conn.sock.send(message)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self.drop(conn, f"send: {exc.strerror or exc}")
            return False
        if sent < len(message):
            conn.out += message[sent:]
            self.ep.modify(conn.fd, select.EPOLLIN | select.EPOLLOUT)
        return True

    def _flush(self, conn: Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except BlockingIOError:
            return
        except OSError as exc:
            self.drop(conn, f"send: {exc.strerror or exc}")
            return
        del conn.out[:sent]
        if not conn.out:
            self.ep.modify(conn.fd, select.EPOLLIN)

    def poll(self, timeout: float) -> None:
        """One wait of at most ``timeout`` seconds, then every ready socket served once."""
        for fd, events in self.ep.poll(max(timeout, 0.0)):
            conn = self.by_fd.get(fd)
            if conn is None:
                continue
            if events & select.EPOLLOUT:
                self._flush(conn)
            if events & (select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP) and not conn.closed:
                self._readable(conn)

    def pump(self, seconds: float, done: Callable[[], bool] | None = None) -> None:
        """Serve the sockets for ``seconds`` (less once ``done()`` is true)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if done is not None and done():
                return
            self.poll(min(left, 0.05))

    def _readable(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(RECV_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            self.drop(conn, f"recv: {exc.strerror or exc}")
            return
        if not data:
            self.drop(conn, "closed by the server")
            return
        conn.rbuf += data
        self._parse(conn, time.monotonic_ns())

    def _parse(self, conn: Conn, now_ns: int) -> None:
        """Every complete frame in ``conn.rbuf``; bench packets counted on the fast path."""
        buf = conn.rbuf
        pos = 0
        unpack = BODY.unpack_from
        counts = conn.counts
        senders, seqs, me = self.senders, self.seqs, conn.idx
        lat = self.latencies
        min_len = IPX_LEN + MIN_PAYLOAD
        try:
            while (frame := next_frame(buf, pos)) is not None:
                first, start, end = frame
                pos = end
                if first == 0x80 | OP_BINARY and end - start >= min_len:
                    magic, sender, seq, sent_ns = unpack(buf, start + IPX_LEN)
                    if magic == MAGIC:
                        if sender == me:
                            conn.echoes += 1
                        elif sender < senders and seq < seqs:
                            slot = sender * seqs + seq
                            hits = counts[slot]
                            if hits == 0:
                                self.unique += 1
                                lat.append(now_ns - sent_ns)
                            if hits < 255:
                                counts[slot] = hits + 1
                        else:
                            conn.other += 1
                        continue
                self._slow(conn, first, bytes(buf[start:end]))
                if conn.closed:
                    return
        except BenchError as exc:
            self.drop(conn, str(exc))
            return
        del buf[:pos]

    def _slow(self, conn: Conn, first: int, payload: bytes) -> None:
        """Control frames, fragments, keepalives and anything unexpected."""
        opcode = first & 0x0F
        if opcode == OP_PING:
            self.send(conn, client_frame(payload, conn.mask, OP_PONG))
            return
        if opcode == OP_CLOSE:
            self.send(conn, client_frame(payload[:2], conn.mask, OP_CLOSE))
            self.drop(conn, f"close frame {int.from_bytes(payload[:2], 'big') or ''}".strip())
            return
        if opcode == OP_PONG:
            return
        if opcode == OP_CONT:
            conn.frag += payload
            if not first & 0x80 or conn.frag_op < 0:
                return
            opcode, payload = conn.frag_op, bytes(conn.frag)
            conn.frag_op, conn.frag = -1, bytearray()
        elif not first & 0x80:
            conn.frag_op, conn.frag = opcode, bytearray(payload)
            return
        self._message(conn, payload)

    def _message(self, conn: Conn, data: bytes) -> None:
        """A whole message off the fast path: a keepalive is answered as DOSBox does."""
        if (
            len(data) >= IPX_LEN
            and data[_DST_SOCKET] == _ECHO_BYTES
            and data[_DST_NODE] == BROADCAST_NODE
        ):
            reply = ipx_packet(data[_SRC_NODE], ECHO_SOCKET, conn.node, ECHO_SOCKET)
            if self.send(conn, client_frame(reply, conn.mask)):
                conn.keepalives += 1
            return
        conn.other += 1


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants (bounded walk of /proc/PID/task/*/children)."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 256:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants."""
    total = 0.0
    for each in tree_pids(pid):
        with contextlib.suppress(OSError):
            total += sum(cpu_seconds(each))
    return total


def tree_rss(pid: int) -> int:
    """Resident KiB of ``pid`` and its descendants."""
    total = 0
    for each in tree_pids(pid):
        with contextlib.suppress(OSError):
            total += rss_kib(each)
    return total


def machine_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine, all CPUs (/proc/stat): busy is user,
    nice, system, irq and softirq; steal what the hypervisor took."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        line = Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0]
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, line.split()[1:9])
        return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK
    return 0.0, 0.0


def own_cpu() -> float:
    """This process's user + system CPU seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of sorted ``values``, nearest rank."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """One broadcast run."""

    clients: int
    rate: float
    secs: float
    size: int
    room: str
    warmup: float
    drain: float


def connect_all(
    loop: Loop, target: Target, sources: Sequence[str], count: int, room: Callable[[int], str]
) -> list[str]:
    """Open ``count`` clients into ``loop``, ``room(i)`` each; returns the failures' reasons
    (``IDLE_FAIL_LIMIT`` in a row end it)."""
    failures: list[str] = []
    in_a_row = 0
    base = len(loop.conns)
    for i in range(count):
        idx = base + i
        try:
            conn = open_conn(target, sources[idx % len(sources)], room(idx), idx)
        except (BenchError, OSError) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
            in_a_row += 1
            if in_a_row >= IDLE_FAIL_LIMIT:
                failures.append(f"stopped after {IDLE_FAIL_LIMIT} failures in a row")
                break
            continue
        in_a_row = 0
        loop.add(conn)
    return failures


def broadcast_run(loop: Loop, target: Target, sources: Sequence[str], spec: LoadSpec) -> JsonDict:
    """Connect, register, warm up, broadcast on schedule, drain; returns the figures."""
    failures = connect_all(loop, target, sources, spec.clients, lambda _i: spec.room)
    conns = [c for c in loop.conns if not c.closed]
    if len(conns) < 2:
        return {"error": f"only {len(conns)} clients registered: {failures[:3]}"}
    n = len(conns)
    for i, conn in enumerate(conns):
        conn.idx = i
    pad = bytes(spec.size - MIN_PAYLOAD)
    # Each client's IPX header (its length field covering the payload to come).
    prefix = [
        ipx_packet(
            BROADCAST_NODE,
            GAME_SOCKET,
            c.node,
            GAME_SOCKET,
            bytes(spec.size),
            dst_net=c.net,
            src_net=c.net,
            ptype=GAME_PACKET_TYPE,
        )[:IPX_LEN]
        for c in conns
    ]
    # Warm-up: one probe broadcast each (as a joining station announces itself), keepalives
    # answered, until every client has answered one or ``warmup`` seconds pass.
    for i, conn in enumerate(conns):
        probe = prefix[i] + BODY.pack(PROBE_MAGIC, i, 0, 0) + pad
        loop.send(conn, client_frame(probe, conn.mask))
    loop.pump(spec.warmup, lambda: all(c.keepalives or c.closed for c in conns))
    keepalives_warmup = sum(c.keepalives for c in conns)
    others_warmup = sum(c.other for c in conns)
    seqs = max(1, round(spec.rate * spec.secs))
    loop.senders, loop.seqs = n, seqs
    for conn in conns:
        conn.counts = bytearray(n * seqs)
        conn.echoes = conn.other = 0
    total = n * seqs
    interval = 1.0 / (spec.rate * n)
    sent = [0] * n
    lags = array("d")
    window = Window()
    start = time.monotonic() + 0.05
    hard_end = start + spec.secs + spec.drain + 10.0
    drain_end = 0.0
    expected_of = 0
    idx = 0
    while True:
        now = time.monotonic()
        if now > hard_end:
            break
        if idx < total:
            due = start + idx * interval
            if now >= due:
                if idx == 0:
                    window.start = now
                    window.server_cpu = tree_cpu(loop.server_pid)
                    window.gen_cpu = own_cpu()
                    window.busy, window.steal = machine_cpu()
                while idx < total and start + idx * interval <= now:
                    i, seq = idx % n, idx // n
                    conn = conns[i]
                    body = BODY.pack(MAGIC, i, seq, time.monotonic_ns())
                    if loop.send(conn, client_frame(prefix[i] + body + pad, conn.mask)):
                        sent[i] += 1
                    else:
                        loop.unsent += 1
                    lags.append(now - (start + idx * interval))
                    idx += 1
                if idx == total:
                    after = time.monotonic()
                    window.end = after
                    window.server_cpu = tree_cpu(loop.server_pid) - window.server_cpu
                    window.gen_cpu = own_cpu() - window.gen_cpu
                    busy, steal = machine_cpu()
                    window.busy, window.steal = busy - window.busy, steal - window.steal
                    window.server_rss_kib = tree_rss(loop.server_pid)
                    drain_end = after + spec.drain
                    expected_of = sum(sent) * (n - 1)
                    continue
            loop.poll(start + idx * interval - time.monotonic())
            continue
        if loop.unique >= expected_of or now >= drain_end:
            break
        loop.poll(drain_end - now)
    offered = total
    sent_total = sum(sent)
    expected = sum(sent) * (n - 1) if idx == total else 0
    duplicates = sum(sum(c.counts) for c in conns) - loop.unique
    lat_sorted = sorted(loop.latencies)
    lag_sorted = sorted(lags)
    span = window.end - window.start if window.end > window.start else None
    dropped = [c.closed for c in conns if c.closed]
    result: JsonDict = {
        "clients": n,
        "connect_failures": failures,
        "offered": offered,
        "sent": sent_total,
        "unsent": loop.unsent,
        "expected": expected,
        "delivered": loop.unique,
        "delivery": round(loop.unique / expected, 6) if expected else None,
        "delivery_of_offered": round(loop.unique / (offered * (n - 1)), 6),
        "duplicates": duplicates,
        "echoes": sum(c.echoes for c in conns),
        "other_messages": sum(c.other for c in conns),
        "keepalives_answered": sum(c.keepalives for c in conns),
        "keepalives_warmup": keepalives_warmup,
        "other_warmup": others_warmup,
        "clients_dropped": len(dropped),
        "drop_reasons": sorted(set(dropped)),
        "window_s": round(span, 4) if span else None,
        "server_cpu_s": round(window.server_cpu, 3) if span else None,
        "server_cpu_per_s": round(window.server_cpu / span, 4) if span else None,
        "server_rss_kib": window.server_rss_kib if span else None,
        "server_us_per_copy": (
            round(1e6 * window.server_cpu / loop.unique, 3) if span and loop.unique else None
        ),
        "gen_cpu_per_s": round(window.gen_cpu / span, 4) if span else None,
        "steal_s": round(window.steal, 3) if span else None,
        # Busy CPU time of the machine beyond the server's and the generator's: other work, and
        # softirq time of the bench's own traffic not charged to either (about 1 s per 10 s
        # at 16 x 250/s on an otherwise idle machine); a rough gauge of contention only.
        "other_cpu_s": (
            round(window.busy - window.server_cpu - window.gen_cpu, 3) if span else None
        ),
        "latency_ms": {
            q: _ms(percentile(lat_sorted, v))
            for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        },
        "send_lag_ms": {
            q: _ms(percentile(lag_sorted, v), scale=1e3)
            for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
        },
    }
    if idx < total:
        result["error"] = f"send schedule not finished ({idx}/{total}) by the hard deadline"
    return result


def _ms(value: float | None, scale: float = 1e-6) -> float | None:
    return None if value is None else round(value * scale, 3)


def idle_run(
    loop: Loop,
    target: Target,
    sources: Sequence[str],
    *,
    steps: Sequence[int],
    room_size: int,
    settle: float,
) -> JsonDict:
    """Open idle registered connections in steps; the server's RSS after each."""
    loop.pump(settle)
    before = tree_rss(loop.server_pid)
    rows: list[JsonDict] = []
    opened = 0
    for k in steps:
        started = time.monotonic()
        failures = connect_all(loop, target, sources, k - opened, lambda i: f"idle{i // room_size}")
        connect_s = time.monotonic() - started
        loop.pump(settle)
        opened = k
        alive = sum(1 for c in loop.conns if not c.closed)
        rss = tree_rss(loop.server_pid)
        rows.append(
            {
                "k": k,
                "alive": alive,
                "failures": len(failures),
                "failure_examples": failures[:3],
                "connect_s": round(connect_s, 2),
                "rss_kib": rss,
                "kib_per_conn": round((rss - before) / alive, 2) if alive else None,
                "keepalives_answered": sum(c.keepalives for c in loop.conns),
            }
        )
        if failures:
            break
    return {"rss_before_kib": before, "steps": rows}


# ---------------------------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Servers:
    """How to start each server; the ones running now."""

    netns: str
    workdir: Path
    ref: Path | None
    bridge_cmd: str | None
    port: int
    udp_port: int
    connections: int  # the most the bench opens at once, with a margin
    rooms: int
    running: list[Process] = field(default_factory=list)

    def kinds(self) -> tuple[str, ...]:
        """The servers this run compares, in table order."""
        wanted = {BRIDGE: self.bridge_cmd is not None, REF: self.ref is not None}
        return tuple(kind for kind in SERVERS if wanted[kind])

    def port_of(self, kind: str) -> int:
        """The WebSocket port ``kind`` listens on."""
        return REF_PORT if kind == REF else self.port

    def argv(self, kind: str) -> list[str]:
        """The command line of ``kind``."""
        if kind == REF:
            if self.ref is None:
                raise BenchError("no --ref binary")
            return [str(self.ref)]
        if self.bridge_cmd is None:
            raise BenchError("ipxbridge is skipped")
        config = self.workdir / "ipxbridge.yaml"
        config.write_text(
            bridge_config(self.port, self.udp_port, self.connections, self.rooms),
            encoding="utf-8",
        )
        return shlex.split(
            self.bridge_cmd.format(config=config, port=self.port, udp_port=self.udp_port)
        )

    def start(self, kind: str, tag: str) -> Process:
        """A fresh ``kind`` on CPU ``SERVER_CPU``, once it accepts TCP connections.

        Raises:
            BenchError: it exited or stayed deaf for ``READY_TIMEOUT`` seconds.
        """
        argv = ["taskset", "-c", str(SERVER_CPU), *self.argv(kind)]
        env = dict(os.environ)
        server = spawn(
            argv, log=self.workdir / f"{tag}.log", ns=self.netns, cpus={SERVER_CPU}, env=env
        )
        self.running.append(server)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if not server.alive():
                raise BenchError(f"{kind} exited: {server.tail()}")
            with inside(self.netns), socket.socket() as probe:
                probe.settimeout(0.5)
                if probe.connect_ex((HOST, self.port_of(kind))) == 0:
                    return server
            if time.monotonic() > deadline:
                raise BenchError(f"{kind} not listening after {READY_TIMEOUT:.0f} s")
            time.sleep(0.1)

    def stop(self, server: Process) -> str:
        """Stop ``server``; returns its output."""
        text = server.stop(STOP_TIMEOUT)
        if server in self.running:
            self.running.remove(server)
        return text

    def stop_all(self) -> None:
        """Stop whatever still runs (from ``finally``)."""
        for server in list(self.running):
            with contextlib.suppress(Exception):
                self.stop(server)


PANIC: Final = re.compile(r"http: panic serving|^panic:|Traceback \(most recent call last\)")


def one_run(
    servers: Servers,
    kind: str,
    tag: str,
    body: Callable[[Loop, Target], JsonDict],
    target_of: Callable[[int], Target],
) -> JsonDict:
    """Fresh ``kind``, ``body`` run with clients inside the namespace, server stopped."""
    try:
        server = servers.start(kind, tag)
    except BenchError as exc:
        return {"error": str(exc)}
    loop = Loop(server.pid)
    try:
        with inside(servers.netns):
            result = body(loop, target_of(servers.port_of(kind)))
    except (BenchError, OSError) as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        loop.close()
        exit_code = server.proc.poll()
        log = servers.stop(server)
    result["server_exited"] = exit_code
    panics = [line for line in log.splitlines() if PANIC.search(line)]
    result["log_panic_lines"] = len(panics)
    if panics:
        result["log_panic_example"] = panics[0][:300]
    return result


# ---------------------------------------------------------------------------------------------
# Rounds, medians, tables
# ---------------------------------------------------------------------------------------------
def run_rounds(
    args: argparse.Namespace, servers: Servers, sources: Sequence[str]
) -> list[JsonDict]:
    """Every round: each server's broadcast run and idle run, the order alternating."""
    spec = LoadSpec(
        args.clients, args.rate, args.secs, args.size, args.room, args.warmup, args.drain
    )

    def target_of(port: int) -> Target:
        return Target(port, args.subprotocol, args.origin)

    runs: list[JsonDict] = []
    kinds = servers.kinds()
    for round_no in range(args.rounds):
        order = kinds if round_no % 2 == 0 else kinds[::-1]
        for kind in order:
            for attempt in range(1 + args.retries):
                result = one_run(
                    servers,
                    kind,
                    f"r{round_no}-bcast-{kind}",
                    lambda loop, target: broadcast_run(loop, target, sources, spec),
                    target_of,
                )
                run = {"round": round_no, "run": "bcast", "server": kind, **result}
                runs.append(run)
                print(describe_bcast(run), flush=True)
                if not lagging(run) or attempt == args.retries:
                    break
                run["discarded"] = True
                print(f"  (discarded: run again, {args.retries - attempt} retries left)")
            if args.idle:
                result = one_run(
                    servers,
                    kind,
                    f"r{round_no}-idle-{kind}",
                    lambda loop, target: idle_run(
                        loop,
                        target,
                        sources,
                        steps=args.idle,
                        room_size=args.idle_room_size,
                        settle=args.idle_settle,
                    ),
                    target_of,
                )
                runs.append({"round": round_no, "run": "idle", "server": kind, **result})
                print(describe_idle(runs[-1]), flush=True)
    return runs


def lagging(run: JsonDict) -> bool:
    """Whether the generator fell behind its schedule in this broadcast run."""
    lag = (run.get("send_lag_ms") or {}).get("p99")
    return lag is not None and bool(lag > LAG_LIMIT_MS)


def describe_bcast(run: JsonDict) -> str:
    """One line per broadcast run, as it finishes."""
    head = f"round {run['round']} {run['server']:<10} broadcast:"
    if "error" in run and "delivered" not in run:
        return f"{head} ERROR {run['error']}"
    lat = run["latency_ms"]
    text = (
        f"{head} {run['delivered']}/{run['expected']} delivered ({_pct(run['delivery'])}), "
        f"server CPU {_num(run['server_cpu_per_s'], '.3f')} s/s, "
        f"RSS {_mib(run['server_rss_kib'])}, latency p50/p99 {_num(lat['p50'], '.2f')}/"
        f"{_num(lat['p99'], '.2f')} ms, generator CPU {_num(run['gen_cpu_per_s'], '.3f')} s/s, "
        f"send lag p99 {_num(run['send_lag_ms']['p99'], '.2f')} ms"
    )
    lag = run["send_lag_ms"]["p99"]
    if lag is not None and lag > LAG_LIMIT_MS:
        text += (
            f"; GENERATOR FELL BEHIND (send lag p99 {lag:.1f} ms > {LAG_LIMIT_MS:g}; "
            f"other CPU {_num(run['other_cpu_s'], '.2f')} s, steal {_num(run['steal_s'], '.2f')}"
            " s): figures unreliable"
        )
    if run["unsent"] or run["clients_dropped"] or run["duplicates"]:
        text += (
            f"; unsent {run['unsent']}, clients dropped {run['clients_dropped']} "
            f"{run['drop_reasons'][:2]}, duplicates {run['duplicates']}"
        )
    if run.get("log_panic_lines"):
        text += f"; {run['log_panic_lines']} panic lines in its log"
    if "error" in run:
        text += f"; ERROR {run['error']}"
    return text


def describe_idle(run: JsonDict) -> str:
    """One line per idle run."""
    head = f"round {run['round']} {run['server']:<10} idle:"
    if "error" in run:
        return f"{head} ERROR {run['error']}"
    steps = ", ".join(
        f"{s['alive']} conns {_mib(s['rss_kib'])} ({_num(s['kib_per_conn'], '.1f')} KiB each"
        + (f", {s['failures']} failed)" if s["failures"] else ")")
        for s in run["steps"]
    )
    return f"{head} RSS before {_mib(run['rss_before_kib'])}; {steps}"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def _mib(kib: float | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f} MiB"


# Each figure of the table: (key, label, how to read it from a run, format)
Figure = tuple[str, str, Callable[[JsonDict], float | None], Callable[[float | None], str]]


def _idle_step(k: int) -> Callable[[JsonDict], float | None]:
    def get(run: JsonDict) -> float | None:
        for step in run.get("steps", []):
            if step["k"] == k and not step["failures"]:
                value: float | None = step["kib_per_conn"]
                return value
        return None

    return get


def _idle_slope(run: JsonDict) -> float | None:
    steps = [s for s in run.get("steps", []) if not s["failures"]]
    if len(steps) < 2:
        return None
    first, last = steps[0], steps[-1]
    grown = float(last["rss_kib"] - first["rss_kib"])
    return grown / max(1, int(last["alive"]) - int(first["alive"]))


def figures(args: argparse.Namespace) -> list[tuple[str, Figure]]:
    """(run kind, figure) rows of the table."""

    def num(fmt: str) -> Callable[[float | None], str]:
        return lambda v: _num(v, fmt)

    rows: list[tuple[str, Figure]] = [
        ("bcast", ("delivery", "delivery", lambda r: r.get("delivery"), _pct)),
        (
            "bcast",
            ("server_cpu_per_s", "server CPU s/s", lambda r: r.get("server_cpu_per_s"), num(".3f")),
        ),
        (
            "bcast",
            (
                "server_rss_kib",
                "server RSS (end of window)",
                lambda r: r.get("server_rss_kib"),
                _mib,
            ),
        ),
        (
            "bcast",
            ("latency_p50_ms", "latency p50 ms", lambda r: r["latency_ms"]["p50"], num(".2f")),
        ),
        (
            "bcast",
            ("latency_p99_ms", "latency p99 ms", lambda r: r["latency_ms"]["p99"], num(".2f")),
        ),
        (
            "bcast",
            (
                "server_us_per_copy",
                "server CPU us per delivered copy",
                lambda r: r.get("server_us_per_copy"),
                num(".2f"),
            ),
        ),
        (
            "bcast",
            (
                "gen_cpu_per_s",
                "generator CPU s/s",
                lambda r: r.get("gen_cpu_per_s"),
                num(".3f"),
            ),
        ),
    ]
    for k in args.idle:
        rows.append(
            (
                "idle",
                (f"idle_kib_per_conn_{k}", f"KiB per idle conn, {k}", _idle_step(k), num(".1f")),
            )
        )
    if len(args.idle) > 1:
        label = f"KiB per idle conn, {args.idle[0]} -> {args.idle[-1]}"
        rows.append(("idle", ("idle_kib_per_conn_slope", label, _idle_slope, num(".1f"))))
    return rows


def summarise(args: argparse.Namespace, runs: Sequence[JsonDict], kinds: Sequence[str]) -> JsonDict:
    """Per figure and server: median, min, max, rounds; ratio ipxbridge / reference."""
    summary: JsonDict = {}
    for run_kind, (key, _label, get, _fmt) in figures(args):
        entry: JsonDict = {}
        for kind in kinds:
            values = []
            for run in runs:
                if run["server"] != kind or run["run"] != run_kind or run.get("discarded"):
                    continue
                with contextlib.suppress(KeyError, TypeError):
                    value = get(run)
                    if value is not None:
                        values.append(float(value))
            if values:
                entry[kind] = {
                    "median": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                    "n": len(values),
                }
        bridge, ref = entry.get(BRIDGE), entry.get(REF)
        if bridge and ref and ref["median"]:
            entry["ratio_bridge_over_ref"] = round(bridge["median"] / ref["median"], 3)
        summary[key] = entry
    return summary


def render(args: argparse.Namespace, summary: JsonDict, kinds: Sequence[str]) -> str:
    """The figures table (Markdown): median [min-max] per server, the ratio."""
    head = ["figure", *kinds]
    if BRIDGE in kinds and REF in kinds:
        head.append("ratio ipxbridge/ref")
    lines = [
        f"{args.clients} clients x {args.rate:g} broadcasts/s, {args.secs:g} s, "
        f"{args.size}-byte payload; medians over {args.rounds} rounds [min-max]",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for _run_kind, (key, label, _get, fmt) in figures(args):
        entry = summary.get(key, {})
        cells = [label]
        for kind in kinds:
            m = entry.get(kind)
            cells.append(
                "-" if m is None else f"{fmt(m['median'])} [{fmt(m['min'])}-{fmt(m['max'])}]"
            )
        if len(head) > len(kinds) + 1:
            ratio = entry.get("ratio_bridge_over_ref")
            cells.append("-" if ratio is None else f"{ratio:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_notes(runs: Sequence[JsonDict], kinds: Sequence[str]) -> str:
    """Per server, over its broadcast runs: what qualifies the medians."""
    lines = []
    for kind in kinds:
        mine = [
            r
            for r in runs
            if r["server"] == kind and r["run"] == "bcast" and not r.get("discarded")
        ]
        discarded = sum(
            1 for r in runs if r["server"] == kind and r["run"] == "bcast" and r.get("discarded")
        )
        lines.append(
            f"{kind}: {len(mine)} broadcast runs counted ({discarded} discarded and run again), "
            f"{sum('error' in r for r in mine)} with errors, "
            f"{sum(lagging(r) for r in mine)} with the generator behind schedule, "
            f"{sum(r.get('log_panic_lines', 0) for r in mine)} panics/tracebacks in its logs, "
            f"{sum(r.get('clients_dropped', 0) for r in mine)} clients dropped, "
            f"{sum(r.get('unsent', 0) for r in mine)} broadcasts unsent (server not reading)"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
def parse_sources(text: str) -> list[str]:
    """``A-B`` (an inclusive range) or ``A,B,C``: addresses, all in 127.0.0.0/8.

    Raises:
        ValueError: malformed, outside 127.0.0.0/8, or more than 65536 addresses.
    """
    loopback = ipaddress.ip_network("127.0.0.0/8")
    if "-" in text:
        first_s, _, last_s = text.partition("-")
        first, last = ipaddress.IPv4Address(first_s.strip()), ipaddress.IPv4Address(last_s.strip())
        if int(last) < int(first) or int(last) - int(first) >= 1 << 16:
            raise ValueError(f"bad range {text}")
        found = [ipaddress.IPv4Address(a) for a in range(int(first), int(last) + 1)]
    else:
        found = [ipaddress.IPv4Address(a.strip()) for a in text.split(",") if a.strip()]
    if not found or any(a not in loopback for a in found):
        raise ValueError(f"{text}: source addresses must be in 127.0.0.0/8")
    return [str(a) for a in found]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--clients", type=int, default=16, help="broadcasting clients (16)")
    parser.add_argument("--rate", type=float, default=250.0, help="broadcasts/s per client (250)")
    parser.add_argument("--secs", type=float, default=10.0, help="send window, seconds (10)")
    parser.add_argument(
        "--size", type=int, default=64, help=f"IPX payload bytes ({MIN_PAYLOAD}-1400; 64)"
    )
    parser.add_argument("--room", default="bench", help="room of the broadcast run (bench)")
    parser.add_argument(
        "--warmup",
        type=float,
        default=3.0,
        help="after the probes, wait until every client answered a keepalive, at most this (3)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=1,
        help="broadcast runs where the generator fell behind its schedule (send lag p99 > "
        f"{LAG_LIMIT_MS:g} ms: other work on CPU 0) are discarded and run again, this many "
        "times at most (1)",
    )
    parser.add_argument(
        "--drain", type=float, default=1.0, help="seconds to wait for stragglers (1)"
    )
    parser.add_argument(
        "--idle",
        type=int,
        nargs="*",
        default=[500, 1000],
        help="idle registered connections, cumulative steps (500 1000); none: no idle run",
    )
    parser.add_argument(
        "--idle-room-size", type=int, default=8, help="idle connections per room (8)"
    )
    parser.add_argument(
        "--idle-settle", type=float, default=2.0, help="seconds before each RSS reading (2)"
    )
    parser.add_argument(
        "--source-ips",
        default="127.0.0.2-127.0.0.65",
        help="client source addresses, A-B or A,B,... in 127.0.0.0/8 (127.0.0.2-127.0.0.65)",
    )
    parser.add_argument(
        "--subprotocol",
        default="binary",
        help="Sec-WebSocket-Protocol the clients ask for, as js-dos does (binary; '' for none)",
    )
    parser.add_argument("--origin", default="http://127.0.0.1", help="Origin header ('' for none)")
    parser.add_argument(
        "--ref", type=Path, metavar="PATH", help="the dosbox-ipx-server binary (skipped if absent)"
    )
    parser.add_argument(
        "--bridge-cmd",
        default=default_bridge_cmd(),
        help="ipxbridge command; {config}, {port} and {udp_port} are replaced",
    )
    parser.add_argument("--skip-bridge", action="store_true", help="do not run ipxbridge")
    parser.add_argument("--port", type=int, default=REF_PORT, help="ipxbridge's WebSocket port")
    parser.add_argument(
        "--udp-port", type=int, default=DEFAULT_UDP_PORT, help="ipxbridge's IPX tunnel port"
    )
    parser.add_argument("--netns", default=DEFAULT_NETNS, help="namespace to create and delete")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.clients < 2 or args.secs <= 0 or args.rate <= 0:
        parser.error("need --rounds >= 1, --clients >= 2, --secs > 0, --rate > 0")
    if args.clients > 1000 or args.rate * args.secs > 1_000_000:
        parser.error("at most 1000 clients and 1,000,000 broadcasts each")
    if not MIN_PAYLOAD <= args.size <= 1400:
        parser.error(f"--size must be between {MIN_PAYLOAD} and 1400")
    if not 0 <= args.retries <= 5:
        parser.error("--retries: 0 to 5")
    if args.warmup < 0 or args.drain < 0 or args.idle_settle < 0 or args.idle_room_size < 1:
        parser.error("--warmup, --drain, --idle-settle >= 0; --idle-room-size >= 1")
    if any(k < 1 for k in args.idle) or list(args.idle) != sorted(set(args.idle)):
        parser.error("--idle takes increasing positive counts")
    if args.idle and args.idle[-1] > 20000:
        parser.error("--idle: at most 20000 connections")
    try:
        args.sources = parse_sources(args.source_ips)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def raise_fd_limit(needed: int) -> None:
    """Soft descriptor limit up to the hard one (the servers inherit it).

    Raises:
        BenchError: the hard limit is below ``needed``.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise BenchError(f"descriptor limit {hard} < {needed} needed")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def preflight() -> None:
    """Root, the tools, both CPUs.

    Raises:
        BenchError: something is missing.
    """
    if os.geteuid() != 0:
        raise BenchError("must run as root (network namespaces)")
    for tool in ("ip", "taskset"):
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} not found")
    if not {CLIENT_CPU, SERVER_CPU} <= os.sched_getaffinity(0):
        raise BenchError(f"needs CPUs {CLIENT_CPU} and {SERVER_CPU}")


@contextlib.contextmanager
def pinned(cpus: set[int]) -> Iterator[None]:
    """This process (the load generator) on ``cpus`` for the block."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def main(argv: Sequence[str]) -> int:
    """Orchestrate all runs; returns the exit code."""
    args = parse_args(argv)
    exit_on_signals()
    ref = args.ref
    if ref is None or not os.access(ref, os.X_OK):
        print(
            f"note: reference server {'not given (--ref)' if ref is None else f'{ref} missing'}"
            ": skipped"
        )
        ref = None
    bridge_cmd = None if args.skip_bridge else args.bridge_cmd
    if ref is None and bridge_cmd is None:
        print("error: nothing to run", file=sys.stderr)
        return 2
    try:
        preflight()
        raise_fd_limit((args.idle[-1] if args.idle else 0) + args.clients + 256)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    load_start = os.getloadavg()[0]
    if load_start > 0.5:
        print(f"warning: load average {load_start:.2f}: other work will disturb the figures")
    workdir = Path(tempfile.mkdtemp(prefix="ipxb_wsbench_"))
    servers = Servers(
        args.netns,
        workdir,
        ref,
        bridge_cmd,
        args.port,
        args.udp_port,
        connections=max(args.idle, default=0) + args.clients + 64,
        rooms=-(-max(args.idle, default=0) // args.idle_room_size) + 8,
    )
    started = time.time()
    try:
        with namespaces(args.netns), pinned({CLIENT_CPU}):
            runs = run_rounds(args, servers, args.sources)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        servers.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    kinds = servers.kinds()
    summary = summarise(args, runs, kinds)
    print()
    print(render(args, summary, kinds))
    print()
    print(render_notes(runs, kinds))
    load_end = os.getloadavg()[0]
    print(
        f"\nload average (1 min) {load_start:.2f} at the start, {load_end:.2f} at the end; "
        f"server on CPU {SERVER_CPU}, generator on CPU {CLIENT_CPU}"
    )
    if args.json is not None:
        report = {
            "config": {
                key: (str(value) if isinstance(value, Path) else value)
                for key, value in vars(args).items()
            }
            | {
                "bridge_config": bridge_config(
                    args.port, args.udp_port, servers.connections, servers.rooms
                )
            },
            "elapsed_s": round(time.time() - started, 1),
            "loadavg_1min": {"start": load_start, "end": load_end},
            "summary": summary,
            "runs": runs,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
