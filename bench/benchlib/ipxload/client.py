"""The load generator: synthetic DOSBox-protocol clients that measure one scenario.

It runs inside the bench's namespace as ``ipx_bench.py _client --spec JSON`` (pinned to its own
CPU by the orchestrator) and prints exactly one JSON line: unicast round trips between two
clients, or every client broadcasting at a rate while all of them count what arrives.
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
from typing import Any, Final

from benchlib import BenchError
from benchlib.metrics import kernel_counters
from benchlib.procstat import cpu_seconds
from benchlib.sockets import set_buffer
from ipxbridge.wire import ipx
from ipxbridge.wire.errors import WireError

JsonDict = dict[str, Any]

HOST: Final = "127.0.0.1"

RTT_SOCKET: Final = 0x4545
BCAST_SOCKET: Final = 0x869B
_RTT_SOCKET_BYTES: Final = RTT_SOCKET.to_bytes(2, "big")
_BCAST_SOCKET_BYTES: Final = BCAST_SOCKET.to_bytes(2, "big")
_ECHO_SOCKET_BYTES: Final = ipx.SOCKET_ECHO.to_bytes(2, "big")
_DST_SOCKET: Final = slice(16, 18)  # destination socket inside the 30-byte IPX header
_DST_NODE: Final = slice(10, 16)
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


class Station:
    """One synthetic DOSBox-protocol client: a connected UDP socket and its assigned node."""

    __slots__ = ("node", "port", "sock")

    def __init__(self, server: tuple[str, int]) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        set_buffer(sock, SOCKET_BUFFER)
        sock.connect(server)
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.node = ipx.ZERO_NODE

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


def _wait_for(station: Station, accept: Callable[[bytes], bool], deadline_ns: int) -> bool:
    """Read from a blocking station until ``accept`` says yes, a timeout, or too much noise."""
    sock = station.sock
    for _ in range(MAX_STRAY):
        left = (deadline_ns - time.perf_counter_ns()) / 1e9
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            data = sock.recv(ipx.MAX_DATAGRAM)
        except (TimeoutError, ConnectionRefusedError):
            return False
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


def measure_rtt(stations: Sequence[Station], spec: ClientSpec) -> JsonDict:
    """Unicast ping-pong between stations 0 and 1; percentiles in microseconds."""
    pinger, echoer = stations[0], stations[1]
    pad = bytes(spec.size - _RTT_ID.size)
    to_echoer = _header(echoer.node, pinger.node, RTT_SOCKET, spec.size)
    to_pinger = _header(pinger.node, echoer.node, RTT_SOCKET, spec.size)
    timeout_ns = int(RTT_TIMEOUT * 1e9)
    total = RTT_WARMUP + spec.rtt_count
    budget_end = time.perf_counter_ns() + int((5.0 + RTT_BUDGET_PER_EXCHANGE * total) * 1e9)

    def echo(data: bytes) -> bool:
        if data[_DST_SOCKET] != _RTT_SOCKET_BYTES:
            return False
        echoer.sock.send(to_pinger + data[ipx.HEADER_LEN :])
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
        packet = to_echoer + seq_bytes + pad

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

    def __init__(self, stations: Sequence[Station]) -> None:
        self.stations = stations
        self.seen: list[set[int]] = [set() for _ in stations]
        self.delivered = 0
        self.duplicates = 0
        self.own_copies = 0
        self.other = 0
        self.recv_errors = 0

    def drain(self, index: int) -> None:
        """Read up to ``RECV_BURST`` datagrams from one non-blocking station."""
        station = self.stations[index]
        sock = station.sock
        seen = self.seen[index]
        unpack = _BCAST_ID.unpack_from
        for _ in range(RECV_BURST):
            try:
                data = sock.recv(ipx.MAX_DATAGRAM)
            except BlockingIOError:
                return
            except OSError:
                self.recv_errors += 1
                return
            if len(data) >= ipx.HEADER_LEN + MIN_SIZE and data[_DST_SOCKET] == _BCAST_SOCKET_BYTES:
                sender, seq = unpack(data, ipx.HEADER_LEN)
                if sender == index:
                    self.own_copies += 1
                    continue
                key = sender << 32 | seq
                if key in seen:
                    self.duplicates += 1
                else:
                    seen.add(key)
                    self.delivered += 1
            elif not station.answer_if_ping(data):
                self.other += 1


def measure_bcast(stations: Sequence[Station], spec: ClientSpec) -> JsonDict:
    """Every station broadcasts at ``spec.rate`` per second, staggered; count deliveries."""
    count = len(stations)
    per_station = max(1, round(spec.rate * spec.secs))
    planned = per_station * count
    interval_ns = 1e9 / (spec.rate * count)
    pad = bytes(spec.size - _BCAST_ID.size)
    headers = [_header(ipx.BROADCAST_NODE, s.node, BCAST_SOCKET, spec.size) for s in stations]
    socks = [s.sock for s in stations]
    receiver = BroadcastReceiver(stations)
    by_fd: dict[int, int] = {}
    poller = select.epoll()
    for index, sock in enumerate(socks):
        sock.setblocking(False)
        poller.register(sock.fileno(), select.EPOLLIN)
        by_fd[sock.fileno()] = index

    sent = eagain = send_errors = 0
    max_lag_ns = 0
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
                    socks[index].send(headers[index] + _BCAST_ID.pack(index, slot // count) + pad)
                except BlockingIOError:
                    eagain += 1
                except OSError:
                    send_errors += 1
                else:
                    sent += 1
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
    expected = sent * (count - 1)
    send_secs = (send_end - start) / 1e9
    wall = (end - start) / 1e9
    server_cpu = _delta(cpu0, cpu1)
    return {
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
        "client_socket_drops": sum(drops.get(s.port, 0) for s in stations),
        "udp_snmp_delta": {
            k: snmp1[k] - snmp0.get(k, 0) for k in snmp1 if snmp1[k] != snmp0.get(k, 0)
        },
    }


def _delta(before: float | None, after: float | None) -> float | None:
    if before is None or after is None:
        return None
    return round(after - before, 3)


def run_client(spec: ClientSpec) -> JsonDict:
    """Register the stations and run one scenario."""
    if spec.size < MIN_SIZE:
        raise BenchError(f"payload size must be at least {MIN_SIZE} bytes")
    stations, resent = register_all(spec.port, spec.clients)
    try:
        if spec.scenario == "rtt":
            result = measure_rtt(stations, spec)
        elif spec.scenario == "bcast":
            result = measure_bcast(stations, spec)
        else:
            raise BenchError(f"unknown scenario {spec.scenario!r}")
    finally:
        for station in stations:
            station.sock.close()
    result["registration_resends"] = resent
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
