"""The load generator: synthetic DOSBox-protocol clients that measure one scenario.

It runs inside the bench's namespace as ``ipx_bench.py _client --spec JSON`` (pinned to its own
CPU by the orchestrator) and prints exactly one JSON line: unicast round trips between two
clients, or every client broadcasting at a rate while all of them count what arrives.

With ``native`` > 0 (mixed ports) native IPX stations on an Ethernet segment (``native``
module) take part too: the round trip is then native station -> DOSBox client -> native
station, and the broadcasters are the DOSBox clients and the native stations together.
"""

import argparse
import contextlib
import json
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from benchlib import BenchError
from benchlib.ipxload.native import DEFAULT_FRAMING, NativeStation
from benchlib.metrics import kernel_counters, scrape
from benchlib.procstat import cpu_seconds
from benchlib.sockets import set_buffer
from ipxbridge.wire import ipx
from ipxbridge.wire.errors import WireError

JsonDict = dict[str, Any]

HOST: Final = "127.0.0.1"

RTT_SOCKET: Final = 0x4545
BCAST_SOCKET: Final = 0x869B
PROBE_SOCKET: Final = 0x4546  # mixed ports: "is the bridge's Ethernet port up" probes
_PROBE_SOCKET_BYTES: Final = PROBE_SOCKET.to_bytes(2, "big")
_RTT_SOCKET_BYTES: Final = RTT_SOCKET.to_bytes(2, "big")
_BCAST_SOCKET_BYTES: Final = BCAST_SOCKET.to_bytes(2, "big")
_ECHO_SOCKET_BYTES: Final = ipx.SOCKET_ECHO.to_bytes(2, "big")
_DST_SOCKET: Final = slice(16, 18)  # destination socket inside the 30-byte IPX header
_DST_NODE: Final = slice(10, 16)
_SRC_NODE: Final = slice(22, 28)
_BCAST_ID: Final = struct.Struct("!HI")  # sender index, sequence number
_RTT_ID: Final = struct.Struct("!I")  # sequence number
MIN_SIZE: Final = _BCAST_ID.size

READY_TIMEOUT: Final = 10.0  # seconds for a fresh server to answer the first registration
READY_POLL: Final = 0.05  # pause after "connection refused" (port not bound yet)
REPLY_WAIT: Final = 2.0  # silence this long before a registration is sent again
REGISTER_TIMEOUT: Final = 6.0  # per further client
MAX_REG_ATTEMPTS: Final = 400
RECV_BURST: Final = 64  # datagrams read per socket per wake-up
MAX_STRAY: Final = 32  # unrelated datagrams tolerated while waiting for one answer
RTT_TIMEOUT: Final = 0.5  # one leg of a round trip
RTT_WARMUP: Final = 50
RTT_BUDGET_PER_EXCHANGE: Final = 0.01  # seconds; total RTT time bound = 5 s + this * count
SEND_GRACE: Final = 1.0  # a late generator may spend this much past SECS, then stops
DRAIN_SECONDS: Final = 1.0
SOCKET_BUFFER: Final = 4 << 20
PROBE_INTERVAL: Final = 0.05  # seconds between readiness probes
MAX_DRAIN: Final = 100_000  # datagrams read at most when emptying the sockets after the probes


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(fraction * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (None if it is gone)."""
    try:
        return sum(cpu_seconds(pid))
    except OSError:
        return None


def udp_socket_drops() -> dict[int, int]:
    """Per local UDP port: the kernel's drop count (/proc/net/udp, last column)."""
    drops: dict[int, int] = {}
    for line in Path("/proc/net/udp").read_text(encoding="ascii").splitlines()[1:]:
        cols = line.split()
        if len(cols) < 13:
            continue
        port = int(cols[1].rsplit(":", 1)[1], 16)
        drops[port] = drops.get(port, 0) + int(cols[-1])
    return drops


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """What one ``_client`` child measures; passed as JSON on its command line."""

    scenario: str  # "rtt" or "bcast"
    port: int
    clients: int
    rate: float
    secs: float
    rtt_count: int
    size: int
    server_pid: int
    native: int = 0  # native stations (mixed ports); ``clients`` counts the DOSBox clients
    native_ns: str = ""  # the segment's namespace
    framing: str = DEFAULT_FRAMING
    # > 0: wait up to this long for the server's first keepalive to every DOSBox-protocol
    # client and answer it (ipxbridge verifies a client by that answer: warm_up).
    keepalive_wait: float = 0.0
    # False (the soak): count copies without remembering each broadcast seen, so a run of
    # minutes does not grow the load generator by millions of set entries.
    dedupe: bool = True


class Endpoint(Protocol):
    """What the measurements need of a station, DOSBox-protocol client or native station."""

    @property
    def sock(self) -> socket.socket:
        """Its socket."""

    @property
    def node(self) -> bytes:
        """Its IPX node."""

    @property
    def port(self) -> int:
        """Its UDP port (-1 for a native station)."""

    @property
    def kind(self) -> str:
        """``dosbox`` or ``native``."""

    def frame_parts(self, dst_node: bytes, ipx_len: int) -> tuple[bytes, bytes]:
        """What goes before and after an IPX packet it sends to ``dst_node``."""

    def recv_ipx(self) -> bytes | None:
        """One read: an IPX packet for it, or None (socket errors propagate)."""

    def answer_if_ping(self, data: bytes) -> bool:
        """Answer a DOSBox keepalive; True if ``data`` was one."""


class Station:
    """One synthetic DOSBox-protocol client: a connected UDP socket and its assigned node."""

    kind = "dosbox"
    __slots__ = ("node", "pings_answered", "port", "sock")

    def __init__(self, server: tuple[str, int]) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        set_buffer(sock, SOCKET_BUFFER)
        sock.connect(server)
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.node = ipx.ZERO_NODE
        self.pings_answered = 0

    def frame_parts(self, _dst_node: bytes, _ipx_len: int) -> tuple[bytes, bytes]:
        """The UDP payload is the bare IPX packet (docs/protocols.md section 4.1)."""
        return b"", b""

    def recv_ipx(self) -> bytes:
        """One datagram (socket errors propagate)."""
        return self.sock.recv(ipx.MAX_DATAGRAM)

    def answer_if_ping(self, data: bytes) -> bool:
        """Reply to a keepalive/broadcast ping as a DOSBox client would; True if it was one."""
        if data[_DST_SOCKET] != _ECHO_SOCKET_BYTES or data[_DST_NODE] != ipx.BROADCAST_NODE:
            return False
        try:
            header = ipx.parse_header(data)
        except WireError:
            return False
        with contextlib.suppress(OSError):
            self.sock.send(ipx.build_ping_reply(header.src_node, self.node))
        self.pings_answered += 1
        return True


def _assigned_node(data: bytes) -> bytes | None:
    """The node a registration reply assigns (its destination node), or None."""
    try:
        header = ipx.parse_header(data)
    except WireError:
        return None
    if header.dst_socket != ipx.SOCKET_ECHO or header.src_socket != ipx.SOCKET_ECHO:
        return None
    if header.dst_node in (ipx.ZERO_NODE, ipx.BROADCAST_NODE):
        return None
    return header.dst_node


def register(station: Station, timeout: float) -> int:
    """Register ``station``; returns the number of registrations sent.

    "Connection refused" means the server has not bound its port yet: retry quickly. A
    registration that was sent without error is only repeated after ``REPLY_WAIT`` seconds
    of silence, because DOSBox gives every registration a new slot.

    Raises:
        BenchError: no reply within ``timeout`` seconds.
    """
    sock = station.sock
    registration = ipx.build_registration()
    deadline = time.monotonic() + timeout
    for attempt in range(1, MAX_REG_ATTEMPTS + 1):
        if time.monotonic() >= deadline:
            break
        refused = False
        try:
            sock.send(registration)
        except ConnectionRefusedError:
            refused = True
        wait_until = min(deadline, time.monotonic() + REPLY_WAIT)
        for _ in range(MAX_STRAY):
            if refused:
                break
            left = wait_until - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                break
            try:
                data = sock.recv(ipx.MAX_DATAGRAM)
            except ConnectionRefusedError:
                refused = True
                break
            node = _assigned_node(data)
            if node is not None:
                station.node = node
                return attempt
        if refused:
            time.sleep(READY_POLL)
    raise BenchError(
        f"no registration reply from {HOST}:{sock.getpeername()[1]} within {timeout:.0f} s"
    )


def register_all(port: int, count: int) -> tuple[list[Station], int]:
    """Create and register ``count`` stations; returns them and the number of re-sends."""
    stations: list[Station] = []
    resent = 0
    for index in range(count):
        station = Station((HOST, port))
        stations.append(station)
        attempts = register(station, READY_TIMEOUT if index == 0 else REGISTER_TIMEOUT)
        # Only re-sends after silence count; "refused" retries never reached a server.
        resent += max(0, attempts - 1) if index > 0 else 0
    return stations, resent


def _wait_for(station: Endpoint, accept: Callable[[bytes], bool], deadline_ns: int) -> bool:
    """Read from a blocking station until ``accept`` says yes, a timeout, or too much noise."""
    sock = station.sock
    for _ in range(MAX_STRAY):
        left = (deadline_ns - time.perf_counter_ns()) / 1e9
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            data = station.recv_ipx()
        except (TimeoutError, ConnectionRefusedError):
            return False
        if data is None:
            continue  # a frame the native station's card or stack would not take
        if accept(data):
            return True
        station.answer_if_ping(data)
    return False


def _header(dst_node: bytes, src_node: bytes, sock: int, size: int) -> bytes:
    """The 30-byte IPX header of a packet of ``size`` payload bytes (the payload follows it)."""
    packet = ipx.build_packet(
        dst_node=dst_node, dst_socket=sock, src_node=src_node, src_socket=sock, payload=bytes(size)
    )
    return packet[: ipx.HEADER_LEN]


def _wire_bytes(station: Endpoint, dst_node: bytes, sock: int, payload: bytes) -> bytes:
    """What ``station`` writes to its socket for an IPX packet to ``dst_node`` on ``sock``."""
    packet = ipx.build_packet(
        dst_node=dst_node, dst_socket=sock, src_node=station.node, src_socket=sock, payload=payload
    )
    head, tail = station.frame_parts(dst_node, len(packet))
    return head + packet + tail


def measure_rtt(pinger: Endpoint, echoer: Endpoint, spec: ClientSpec) -> JsonDict:
    """Unicast ping-pong, pinger -> echoer -> pinger; percentiles in microseconds."""
    pad = bytes(spec.size - _RTT_ID.size)
    ipx_len = ipx.HEADER_LEN + spec.size
    ping_head, ping_tail = pinger.frame_parts(echoer.node, ipx_len)
    echo_head, echo_tail = echoer.frame_parts(pinger.node, ipx_len)
    to_echoer = ping_head + _header(echoer.node, pinger.node, RTT_SOCKET, spec.size)
    to_pinger = echo_head + _header(pinger.node, echoer.node, RTT_SOCKET, spec.size)
    timeout_ns = int(RTT_TIMEOUT * 1e9)
    total = RTT_WARMUP + spec.rtt_count
    budget_end = time.perf_counter_ns() + int((5.0 + RTT_BUDGET_PER_EXCHANGE * total) * 1e9)

    def echo(data: bytes) -> bool:
        if data[_DST_SOCKET] != _RTT_SOCKET_BYTES:
            return False
        echoer.sock.send(to_pinger + data[ipx.HEADER_LEN :] + echo_tail)
        return True

    samples: list[int] = []
    lost = 0
    attempted = 0
    cpu0 = process_cpu_seconds(spec.server_pid)
    wall0 = time.perf_counter()
    for seq in range(total):
        if time.perf_counter_ns() >= budget_end:
            break
        attempted += 1
        seq_bytes = _RTT_ID.pack(seq)
        packet = to_echoer + seq_bytes + pad + ping_tail

        def is_answer(data: bytes, seq_bytes: bytes = seq_bytes) -> bool:
            return (
                data[_DST_SOCKET] == _RTT_SOCKET_BYTES
                and data[ipx.HEADER_LEN : ipx.HEADER_LEN + _RTT_ID.size] == seq_bytes
            )

        start = time.perf_counter_ns()
        pinger.sock.send(packet)
        ok = _wait_for(echoer, echo, start + timeout_ns) and _wait_for(
            pinger, is_answer, start + 2 * timeout_ns
        )
        elapsed = time.perf_counter_ns() - start
        if not ok:
            lost += 1
        elif seq >= RTT_WARMUP:
            samples.append(elapsed)
    wall = time.perf_counter() - wall0
    cpu1 = process_cpu_seconds(spec.server_pid)
    samples.sort()
    micros = [value / 1000 for value in samples]
    return {
        "exchanges": attempted,
        "warmup": RTT_WARMUP,
        "samples": len(samples),
        "lost": lost,
        "p50_us": round(percentile(micros, 0.50), 1),
        "p90_us": round(percentile(micros, 0.90), 1),
        "p99_us": round(percentile(micros, 0.99), 1),
        "max_us": round(micros[-1], 1) if micros else None,
        "wall_s": round(wall, 3),
        "server_cpu_s": _delta(cpu0, cpu1),
    }


class BroadcastReceiver:
    """Counts distinct benchmark broadcasts per receiving station."""

    def __init__(self, stations: Sequence[Endpoint], *, dedupe: bool = True) -> None:
        self.stations = stations
        self.dedupe = dedupe
        self.seen: list[set[int]] = [set() for _ in stations]
        self.delivered = 0
        self.duplicates = 0
        self.own_copies = 0
        self.other = 0
        self.recv_errors = 0

    def drain(self, index: int) -> None:
        """Read up to ``RECV_BURST`` datagrams (or frames) from one non-blocking station."""
        station = self.stations[index]
        recv = station.recv_ipx
        seen = self.seen[index]
        unpack = _BCAST_ID.unpack_from
        for _ in range(RECV_BURST):
            try:
                data = recv()
            except BlockingIOError:
                return
            except OSError:
                self.recv_errors += 1
                return
            if data is None:
                continue  # not for this native station (counted by the station)
            if len(data) >= ipx.HEADER_LEN + MIN_SIZE and data[_DST_SOCKET] == _BCAST_SOCKET_BYTES:
                sender, seq = unpack(data, ipx.HEADER_LEN)
                if sender == index:
                    self.own_copies += 1
                    continue
                if not self.dedupe:
                    self.delivered += 1
                    continue
                key = sender << 32 | seq
                if key in seen:
                    self.duplicates += 1
                else:
                    seen.add(key)
                    self.delivered += 1
            elif not station.answer_if_ping(data):
                self.other += 1


def direction_books(
    stations: Sequence[Endpoint], sent_by: Sequence[int], seen: Sequence[set[int]]
) -> JsonDict:
    """Delivered and expected copies per direction (``dosbox->native``...), from what each
    station sent and the broadcasts each one counted."""
    kinds = [station.kind for station in stations]
    population = {kind: kinds.count(kind) for kind in set(kinds)}
    books: dict[str, dict[str, int]] = {}
    for sender, count in enumerate(sent_by):
        for kind, members in population.items():
            receivers = members - (kinds[sender] == kind)
            entry = books.setdefault(f"{kinds[sender]}->{kind}", {"delivered": 0, "expected": 0})
            entry["expected"] += count * receivers
    for receiver, keys in enumerate(seen):
        for key in keys:
            sender = key >> 32
            if sender < len(kinds):
                books[f"{kinds[sender]}->{kinds[receiver]}"]["delivered"] += 1
    out: JsonDict = {}
    for name in sorted(books):
        entry = books[name]
        ratio = entry["delivered"] / entry["expected"] if entry["expected"] else None
        out[name] = {**entry, "ratio": None if ratio is None else round(ratio, 5)}
    return out


def measure_bcast(stations: Sequence[Endpoint], spec: ClientSpec) -> JsonDict:
    """Every station broadcasts at ``spec.rate`` per second, staggered; count deliveries."""
    count = len(stations)
    per_station = max(1, round(spec.rate * spec.secs))
    planned = per_station * count
    interval_ns = 1e9 / (spec.rate * count)
    pad = bytes(spec.size - _BCAST_ID.size)
    ipx_len = ipx.HEADER_LEN + spec.size
    parts = [s.frame_parts(ipx.BROADCAST_NODE, ipx_len) for s in stations]
    headers = [
        head + _header(ipx.BROADCAST_NODE, s.node, BCAST_SOCKET, spec.size)
        for s, (head, _) in zip(stations, parts, strict=True)
    ]
    trailers = [pad + tail for _, tail in parts]
    natives = [s for s in stations if isinstance(s, NativeStation)]
    socks = [s.sock for s in stations]
    receiver = BroadcastReceiver(stations, dedupe=spec.dedupe)
    by_fd: dict[int, int] = {}
    poller = select.epoll()
    for index, sock in enumerate(socks):
        sock.setblocking(False)
        poller.register(sock.fileno(), select.EPOLLIN)
        by_fd[sock.fileno()] = index

    sent = eagain = send_errors = 0
    sent_by = [0] * count
    max_lag_ns = 0
    for native in natives:
        native.drops()  # reset its kernel drop count
        native.ignored = 0
    books0 = bridge_ipx_books()  # before the CPU reading: the scrape costs the bridge a little
    snmp0 = kernel_counters().get("Udp", {})
    cpu0 = process_cpu_seconds(spec.server_pid)
    client_cpu0 = time.process_time()
    start = time.perf_counter_ns()
    hard_end = start + int((spec.secs + SEND_GRACE) * 1e9)
    slot = 0
    try:
        while slot < planned:
            now = time.perf_counter_ns()
            if now >= hard_end:
                break
            while slot < planned and start + int(slot * interval_ns) <= now:
                index = slot % count
                max_lag_ns = max(max_lag_ns, now - start - int(slot * interval_ns))
                try:
                    socks[index].send(
                        headers[index] + _BCAST_ID.pack(index, slot // count) + trailers[index]
                    )
                except BlockingIOError:
                    eagain += 1
                except OSError:
                    send_errors += 1
                else:
                    sent += 1
                    sent_by[index] += 1
                slot += 1
            wait_s = max(0.0, (start + slot * interval_ns - time.perf_counter_ns()) / 1e9)
            for fd, _ in poller.poll(wait_s if slot < planned else 0.0):
                receiver.drain(by_fd[fd])
        send_end = time.perf_counter_ns()
        drain_end = send_end + int(DRAIN_SECONDS * 1e9)
        while (now := time.perf_counter_ns()) < drain_end:
            for fd, _ in poller.poll(min(0.05, (drain_end - now) / 1e9)):
                receiver.drain(by_fd[fd])
    finally:
        poller.close()
    end = time.perf_counter_ns()
    cpu1 = process_cpu_seconds(spec.server_pid)
    client_cpu = time.process_time() - client_cpu0
    snmp1 = kernel_counters().get("Udp", {})
    drops = udp_socket_drops()
    native_drops = sum(native.drops() for native in natives)
    books1 = bridge_ipx_books()
    expected = sent * (count - 1)
    send_secs = (send_end - start) / 1e9
    wall = (end - start) / 1e9
    server_cpu = _delta(cpu0, cpu1)
    result: JsonDict = {
        "clients": count,
        "rate_per_client": spec.rate,
        "secs": spec.secs,
        "payload": spec.size,
        "planned": planned,
        "sent": sent,
        "send_eagain": eagain,
        "send_errors": send_errors,
        "send_secs": round(send_secs, 3),
        "max_send_lag_ms": round(max_lag_ns / 1e6, 2),
        "expected": expected,
        "delivered": receiver.delivered,
        "delivery_ratio": round(receiver.delivered / expected, 5) if expected else None,
        "duplicates": receiver.duplicates,
        "own_copies": receiver.own_copies,
        "other_packets": receiver.other,
        "recv_errors": receiver.recv_errors,
        "in_pps": round(sent / send_secs) if send_secs > 0 else None,
        "out_pps": round(receiver.delivered / send_secs) if send_secs > 0 else None,
        "wall_s": round(wall, 3),
        "server_cpu_s": server_cpu,
        "server_cpu_share": round(server_cpu / wall, 3) if server_cpu is not None else None,
        "client_cpu_share": round(client_cpu / wall, 3),
        "server_socket_drops": drops.get(spec.port, 0),
        "client_socket_drops": sum(drops.get(s.port, 0) for s in stations if s.port >= 0)
        + native_drops,
        "udp_snmp_delta": {
            k: snmp1[k] - snmp0.get(k, 0) for k in snmp1 if snmp1[k] != snmp0.get(k, 0)
        },
    }
    if natives:
        result["native"] = len(natives)
        result["native_socket_drops"] = native_drops
        result["native_ignored_frames"] = sum(native.ignored for native in natives)
        result["directions"] = direction_books(stations, sent_by, receiver.seen)
        result["native_sent"] = sum(
            sent_by[i] for i, s in enumerate(stations) if s.kind == "native"
        )
    if books0 is not None and books1 is not None:
        result["bridge_ipx_books"] = {
            k: v - books0.get(k, 0) for k, v in books1.items() if v != books0.get(k, 0)
        }
    return result


_IPX_BOOKS: Final = (
    "ipxbridge_ipx_port_received_packets_total",
    "ipxbridge_ipx_port_packets_total",
    "ipxbridge_ipx_port_dropped_copies_total",
    "ipxbridge_ipx_reads_total",  # reads of the tunnel socket by mode, and their datagrams
    "ipxbridge_ipx_read_datagrams_total",
)
_IPX_COPIES: Final = (  # the IPX path's samples of these (path="ipx")
    "ipxbridge_sent_copies_total",
    "ipxbridge_held_copies_total",
    "ipxbridge_send_errors_total",
    "ipxbridge_kernel_dropped_packets_total",
)


def bridge_ipx_books() -> dict[str, int] | None:
    """The bridge's own IPX books from its /metrics (127.0.0.1:9213 in this namespace): per
    port what it received and did with it, and its copies sent, held (unverified clients) or
    refused by the kernel. None if nothing answers (DOSBox's server, or ``--metrics-listen
    off`` in ``--bridge-cmd``)."""
    try:
        samples = scrape()
    except OSError:
        return None
    return {
        key.removeprefix("ipxbridge_"): int(value)
        for key, value in samples.items()
        if key.startswith(_IPX_BOOKS) or (key.startswith(_IPX_COPIES) and 'path="ipx"' in key)
    }


def _delta(before: float | None, after: float | None) -> float | None:
    if before is None or after is None:
        return None
    return round(after - before, 3)


def open_natives(spec: ClientSpec, count: int) -> list[NativeStation]:
    """Native stations 0 .. count-1 on the segment (closed again if one fails)."""
    natives: list[NativeStation] = []
    try:
        natives.extend(NativeStation(spec.native_ns, i, spec.framing) for i in range(count))
    except BaseException:
        for native in natives:
            native.sock.close()
        raise
    return natives


def _read_ready(station: Endpoint, seconds: float) -> list[bytes]:
    """IPX packets for ``station`` arriving within ``seconds`` (keepalives answered)."""
    got: list[bytes] = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0 and select.select([station.sock], [], [], left)[0]:
        try:
            data = station.recv_ipx()
        except OSError:
            break
        if data is not None and not station.answer_if_ping(data):
            got.append(data)
    return got


def _probe(station: Endpoint) -> None:
    station.sock.send(_wire_bytes(station, ipx.BROADCAST_NODE, PROBE_SOCKET, b"probe"))


def warm_up(dosbox: Sequence[Endpoint], natives: Sequence[NativeStation]) -> int:
    """Before anything is counted, every station announces itself with one probe broadcast,
    as a game's stations do when they join; returns the probes sent.

    Until a DOSBox-protocol client has sent something since registering, ipxbridge sends it
    broadcasts only within a small budget (policy/switch.py rule 2, against reflection); the
    bench measures a game in progress, not that start-up rule. The probes are repeated until
    client 0, which sends first, has heard every other station's: then the bridge has read
    them all (and with native stations: has its Ethernet port open and knows every station
    and its framing). With native stations, client 0's probe must also reach native station
    0 (the way back). The copies are drained before counting starts.

    Raises:
        BenchError: not within ``READY_TIMEOUT`` seconds.
    """
    deadline = time.monotonic() + READY_TIMEOUT
    first, others = dosbox[0], [*dosbox[1:], *natives]
    _probe(first)
    probes = 1
    missing = {station.node for station in others}
    while missing:
        if time.monotonic() > deadline:
            raise BenchError(
                f"{len(missing)} of {len(others)} stations' broadcasts never reached client 0 "
                f"through the server within {READY_TIMEOUT:.0f} s"
            )
        for station in others:
            if station.node in missing:
                _probe(station)
                probes += 1
        for data in _read_ready(first, PROBE_INTERVAL):
            if data[_DST_SOCKET] == _PROBE_SOCKET_BYTES:
                missing.discard(bytes(data[_SRC_NODE]))
    while natives:
        if any(
            data[_DST_SOCKET] == _PROBE_SOCKET_BYTES and data[_SRC_NODE] == first.node
            for data in _read_ready(natives[0], PROBE_INTERVAL)
        ):
            break
        if time.monotonic() > deadline:
            raise BenchError(
                f"no broadcast from DOSBox client 0 reached a native station within "
                f"{READY_TIMEOUT:.0f} s"
            )
        _probe(first)
        probes += 1
    return probes


def await_keepalives(stations: Sequence[Station], timeout: float) -> int:
    """Answer keepalives until every station has answered one (now or before), or ``timeout``
    seconds; returns how many stations have not been asked (0: all answered).

    ipxbridge sends a new client its first keepalive about a second after it registered
    (``FIRST_PROBE_DELAY``) and counts the client as verified once it answers; until then it
    sends the client only a budget (policy/switch.py rule 2). Real players are verified long
    before the game starts, so the broadcast runs wait for it.
    """
    waiting = {s.sock.fileno(): s for s in stations if not s.pings_answered}
    deadline = time.monotonic() + timeout
    while waiting and (left := deadline - time.monotonic()) > 0:
        for fd in select.select(list(waiting), [], [], left)[0]:
            station = waiting[fd]
            try:
                data = station.recv_ipx()
            except OSError:
                continue
            if station.answer_if_ping(data):
                del waiting[fd]
    if not waiting:
        time.sleep(PROBE_INTERVAL)  # the last answers reach the bridge before anything else
    return len(waiting)


def drain_all(stations: Sequence[Endpoint]) -> int:
    """Empty every station's socket (the probes' copies); returns what was read."""
    read = 0
    for station in stations:
        station.sock.setblocking(False)
        try:
            while read < MAX_DRAIN:
                try:
                    data = station.recv_ipx()
                except OSError:  # BlockingIOError: empty
                    break
                read += 1
                if data is not None:
                    station.answer_if_ping(data)
        finally:
            station.sock.setblocking(True)
    return read


def run_client(spec: ClientSpec) -> JsonDict:
    """Register the stations and run one scenario."""
    if spec.size < MIN_SIZE:
        raise BenchError(f"payload size must be at least {MIN_SIZE} bytes")
    stations, resent = register_all(spec.port, spec.clients)
    natives: list[NativeStation] = []
    try:
        if spec.native:
            natives = open_natives(spec, spec.native)
        probes = warm_up(stations, natives)
        unasked = await_keepalives(stations, spec.keepalive_wait) if spec.keepalive_wait else 0
        drain_all([*stations, *natives])
        if spec.scenario == "rtt":
            if natives:
                result = measure_rtt(natives[0], stations[0], spec)
            else:
                result = measure_rtt(stations[0], stations[1], spec)
        elif spec.scenario == "bcast":
            result = measure_bcast([*stations, *natives], spec)
        else:
            raise BenchError(f"unknown scenario {spec.scenario!r}")
    finally:
        everyone: list[Endpoint] = [*stations, *natives]
        for station in everyone:
            station.sock.close()
    result["registration_resends"] = resent
    result["warm_up_probes"] = probes
    if spec.keepalive_wait:
        result["clients_without_keepalive"] = unasked
    return result


def client_main(argv: Sequence[str]) -> int:
    """Entry point of the ``_client`` child: prints exactly one JSON line."""
    parser = argparse.ArgumentParser(prog="ipx_bench.py _client")
    parser.add_argument("--spec", required=True, help="ClientSpec as JSON")
    args = parser.parse_args(argv)
    try:
        result = run_client(ClientSpec(**json.loads(args.spec)))
    except (BenchError, OSError) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0
