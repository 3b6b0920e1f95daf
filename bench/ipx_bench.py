#!/usr/bin/env python3
"""Benchmark ipxbridge against DOSBox's built-in IPX server, side by side, in a private netns.

Usage (as root)::

    python3 bench/ipx_bench.py                 # 3 interleaved rounds, both servers
    python3 bench/ipx_bench.py --rounds 1 --skip-baseline --json /tmp/ipx_bench.json

What it does:

* creates the network namespace ``--netns`` (default ``ipxb_bench``), brings ``lo`` up and
  puts every server and client inside it on 127.0.0.1; the namespace is deleted on exit;
* starts a fresh server process for every scenario run (DOSBox never frees a server slot),
  pinned to CPU 1 with ``taskset``; the load generator is this script re-executed as
  ``_client`` inside the same namespace, pinned to CPU 0, printing one JSON line;
* scenarios: unicast round trip (client 0 -> client 1 -> client 0) and broadcast fan-out
  (every client broadcasts at RATE per second for SECS, all clients count what arrives);
* rounds alternate the server order (A B, B A, ...) so drifts hit both servers alike.

DOSBox 0.74's ``ipxnet startserver`` connects DOSBox's own IPX client to its server, which
takes one of the 16 slots: only 15 synthetic clients fit. In broadcast scenarios DOSBox is
therefore driven with ``min(clients, 15)`` synthetic clients plus its own client, so each
broadcast still fans out to the same number of ports (clients - 1) as on ipxbridge; its
delivery ratio is measured over the synthetic clients.
"""

import argparse
import contextlib
import json
import os
import select
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Final

from ipxbridge.wire import ipx
from ipxbridge.wire.errors import WireError

JsonDict = dict[str, Any]

HOST: Final = "127.0.0.1"
DEFAULT_NETNS: Final = "ipxb_bench"
DEFAULT_PORT: Final = 31213
SERVER_CPU: Final = 1
CLIENT_CPU: Final = 0

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

DOSBOX_SLOTS: Final = 16
DOSBOX_FREE_SLOTS: Final = DOSBOX_SLOTS - 1  # ipxnet startserver registers DOSBox itself

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
STOP_TIMEOUT: Final = 3.0
SOCKET_BUFFER: Final = 4 << 20
SO_RCVBUFFORCE: Final = 33
SO_SNDBUFFORCE: Final = 32
CLK_TCK: Final = os.sysconf("SC_CLK_TCK")

SERVERS: Final = ("ipxbridge", "dosbox")


class BenchError(Exception):
    """A run could not be completed (server not answering, bad setup...)."""


# --- small helpers shared by both sides ----------------------------------------------------


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(fraction * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process from /proc/PID/stat (None if it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def udp_snmp() -> dict[str, int]:
    """The Udp counters of /proc/net/snmp for the current network namespace."""
    lines = [
        line.split()
        for line in Path("/proc/net/snmp").read_text(encoding="ascii").splitlines()
        if line.startswith("Udp:")
    ]
    if len(lines) < 2:
        return {}
    return {name: int(value) for name, value in zip(lines[0][1:], lines[1][1:], strict=True)}


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


def set_buffer(sock: socket.socket, size: int) -> None:
    """Large socket buffers; the FORCE variants pass rmem_max/wmem_max as root."""
    for opt, force in ((socket.SO_RCVBUF, SO_RCVBUFFORCE), (socket.SO_SNDBUF, SO_SNDBUFFORCE)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, opt, size)


# --- load generator (runs inside the namespace as the ``_client`` child) -----------------


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


def measure_rtt(stations: Sequence[Station], spec: ClientSpec) -> JsonDict:
    """Unicast ping-pong between stations 0 and 1; percentiles in microseconds."""
    pinger, echoer = stations[0], stations[1]
    pad = bytes(spec.size - _RTT_ID.size)
    sizing = bytes(spec.size)
    to_echoer = ipx.build_packet(
        dst_node=echoer.node,
        dst_socket=RTT_SOCKET,
        src_node=pinger.node,
        src_socket=RTT_SOCKET,
        payload=sizing,
    )[: ipx.HEADER_LEN]
    to_pinger = ipx.build_packet(
        dst_node=pinger.node,
        dst_socket=RTT_SOCKET,
        src_node=echoer.node,
        src_socket=RTT_SOCKET,
        payload=sizing,
    )[: ipx.HEADER_LEN]
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
    sizing = bytes(spec.size)
    headers = [
        ipx.build_packet(
            dst_node=ipx.BROADCAST_NODE,
            dst_socket=BCAST_SOCKET,
            src_node=s.node,
            src_socket=BCAST_SOCKET,
            payload=sizing,
        )[: ipx.HEADER_LEN]
        for s in stations
    ]
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
    snmp0 = udp_snmp()
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
    snmp1 = udp_snmp()
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


# --- orchestration (runs in the initial namespace) -----------------------------------------


def run_checked(argv: Sequence[str]) -> None:
    """Run a short setup command; raise BenchError with its stderr on failure."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        raise BenchError(f"{shlex.join(argv)} failed: {proc.stderr.strip()}")


@contextlib.contextmanager
def network_namespace(name: str) -> Iterator[str]:
    """Create a namespace with ``lo`` up; always deleted afterwards."""
    if Path("/var/run/netns", name).exists():
        raise BenchError(
            f"network namespace {name} already exists (another run, or a stale "
            f"one: 'ip netns del {name}'); not touching it"
        )
    run_checked(["ip", "netns", "add", name])
    try:
        run_checked(["ip", "-n", name, "link", "set", "lo", "up"])
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30, check=False)


@dataclass(slots=True)
class Server:
    """A running server process and where its output goes."""

    kind: str
    proc: "subprocess.Popen[bytes]"
    log_path: Path
    log_file: IO[bytes]

    def log_tail(self, lines: int = 8) -> str:
        """The last lines of its output, for error messages."""
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
            return " | ".join(text.strip().splitlines()[-lines:])
        return ""


@dataclass(slots=True)
class Bench:
    """Configuration and live state of the orchestrator."""

    netns: str
    port: int
    bridge_cmd: str
    workdir: Path
    script: Path = field(default_factory=lambda: Path(__file__).resolve())
    running: list[Server] = field(default_factory=list)
    dosbox_ok: bool = True

    def _launch(self, kind: str, argv: list[str], env: dict[str, str] | None, tag: str) -> Server:
        log_path = self.workdir / f"{tag}.log"
        log_file = log_path.open("wb")
        wrapped = ["ip", "netns", "exec", self.netns, "taskset", "-c", str(SERVER_CPU), *argv]
        try:
            # ip netns exec and taskset both exec(): the pid is the server's own.
            proc = subprocess.Popen(
                wrapped,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError:
            log_file.close()
            raise
        server = Server(kind, proc, log_path, log_file)
        self.running.append(server)
        return server

    def start_bridge(self, tag: str) -> Server:
        """Start ipxbridge from the ``--bridge-cmd`` template."""
        argv = shlex.split(self.bridge_cmd.format(port=self.port))
        return self._launch("ipxbridge", argv, None, tag)

    def start_dosbox(self, tag: str) -> Server:
        """Start a headless DOSBox whose autoexec runs ``ipxnet startserver PORT``."""
        home = self.workdir / "dosbox-home"
        drive = self.workdir / "dosbox-c"
        home.mkdir(exist_ok=True)
        drive.mkdir(exist_ok=True)
        conf = self.workdir / "dosbox.conf"
        conf.write_text(
            "[sdl]\noutput=surface\n"
            "[cpu]\ncycles=fixed 3000\n"
            "[mixer]\nnosound=true\n"
            "[ipx]\nipx=true\n"
            f"[autoexec]\nmount c {drive}\nc:\nipxnet startserver {self.port}\n",
            encoding="ascii",
        )
        env = dict(os.environ, SDL_VIDEODRIVER="dummy", SDL_AUDIODRIVER="dummy", HOME=str(home))
        return self._launch("dosbox", ["dosbox", "-conf", str(conf)], env, tag)

    def stop(self, server: Server) -> float | None:
        """Terminate a server by pid (kill after a grace period); returns its CPU seconds."""
        cpu = process_cpu_seconds(server.proc.pid)
        if server.proc.poll() is None:
            server.proc.terminate()
            try:
                server.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait(STOP_TIMEOUT)
        server.log_file.close()
        if server in self.running:
            self.running.remove(server)
        return cpu

    def stop_all(self) -> None:
        """Stop whatever is still running (used from ``finally``)."""
        for server in list(self.running):
            with contextlib.suppress(Exception):
                self.stop(server)

    def run_client(self, spec: ClientSpec) -> JsonDict:
        """Run the load generator child inside the namespace on CPU 0."""
        argv = [
            "ip",
            "netns",
            "exec",
            self.netns,
            "taskset",
            "-c",
            str(CLIENT_CPU),
            sys.executable,
            str(self.script),
            "_client",
            "--spec",
            json.dumps(asdict(spec)),
        ]
        limit = (
            READY_TIMEOUT
            + REGISTER_TIMEOUT * spec.clients
            + spec.secs
            + SEND_GRACE
            + DRAIN_SECONDS
            + 5.0
            + RTT_BUDGET_PER_EXCHANGE * (spec.rtt_count + RTT_WARMUP)
            + 30.0
        )
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"load generator exceeded {limit:.0f} s"}
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if not lines:
            return {"error": f"load generator exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
        try:
            result: JsonDict = json.loads(lines[-1])
        except json.JSONDecodeError:
            return {"error": f"unparsable load generator output: {lines[-1][:200]}"}
        return result

    def run_once(self, kind: str, spec: ClientSpec, tag: str) -> JsonDict:
        """Fresh server, one scenario, server stopped; returns the result with metadata."""
        server = self.start_bridge(tag) if kind == "ipxbridge" else self.start_dosbox(tag)
        try:
            result = self.run_client(ClientSpec(**{**asdict(spec), "server_pid": server.proc.pid}))
            exit_code = server.proc.poll()
            if "error" in result and exit_code is not None:
                result["error"] += f" (server exited with {exit_code}: {server.log_tail()})"
        finally:
            total_cpu = self.stop(server)
        result["server_total_cpu_s"] = round(total_cpu, 3) if total_cpu is not None else None
        return result


@dataclass(frozen=True, slots=True)
class Scenario:
    """One measured situation."""

    name: str
    kind: str  # rtt | bcast
    rate: float = 0.0


def fmt_rate(rate: float) -> str:
    """250.0 -> '250'."""
    return f"{rate:g}"


def build_scenarios(rates: Sequence[float], clients: int) -> list[Scenario]:
    """The RTT scenario then one broadcast scenario per rate."""
    return [Scenario("rtt", "rtt")] + [
        Scenario(f"bcast_{clients}x{fmt_rate(rate)}", "bcast", rate) for rate in rates
    ]


def clients_for(kind: str, scenario: Scenario, clients: int) -> int:
    """How many synthetic clients a server gets in a scenario."""
    if scenario.kind == "rtt":
        return 2
    if kind == "dosbox":
        return min(clients, DOSBOX_FREE_SLOTS)
    return clients


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(runs: Sequence[JsonDict], scenarios: Sequence[Scenario]) -> JsonDict:
    """Medians per scenario and server, and the ipxbridge/DOSBox ratios."""
    summary: JsonDict = {}
    for scenario in scenarios:
        entry: JsonDict = {}
        for kind in SERVERS:
            good = [
                r
                for r in runs
                if r["scenario"] == scenario.name and r["server"] == kind and "error" not in r
            ]
            failed = sum(
                1
                for r in runs
                if r["scenario"] == scenario.name and r["server"] == kind and "error" in r
            )
            if not good:
                if failed:
                    entry[kind] = {"runs": 0, "failed": failed}
                continue
            keys = (
                ("p50_us", "p90_us", "p99_us", "max_us", "lost")
                if scenario.kind == "rtt"
                else (
                    "delivery_ratio",
                    "sent",
                    "expected",
                    "delivered",
                    "server_socket_drops",
                    "client_socket_drops",
                    "client_cpu_share",
                    "server_cpu_share",
                )
            )
            medians: JsonDict = {
                "runs": len(good),
                "failed": failed,
                "clients": good[0].get("clients", 2),
            }
            for key in (*keys, "server_cpu_s"):
                medians[key] = _median([r.get(key) for r in good])
            entry[kind] = medians
        bridge, dosbox = entry.get("ipxbridge", {}), entry.get("dosbox", {})
        if scenario.kind == "rtt":
            num, den = dosbox.get("p50_us"), bridge.get("p50_us")
            entry["ratio_dosbox_over_ipxbridge_rtt_p50"] = (
                round(num / den, 2) if num and den else None
            )
        else:
            num, den = bridge.get("delivery_ratio"), dosbox.get("delivery_ratio")
            entry["ratio_ipxbridge_over_dosbox_delivery"] = (
                round(num / den, 2) if num and den else None
            )
        summary[scenario.name] = entry
    return summary


def check_targets(summary: JsonDict, clients: int, secs: float) -> JsonDict:
    """The two acceptance targets, evaluated on the ipxbridge medians."""
    targets: JsonDict = {}
    rtt = summary.get("rtt", {}).get("ipxbridge", {}).get("p50_us")
    targets["rtt_p50_le_150us"] = {"value_us": rtt, "pass": rtt is not None and rtt <= 150.0}
    name = f"bcast_{clients}x250"
    ratio = summary.get(name, {}).get("ipxbridge", {}).get("delivery_ratio")
    if clients == 16 and secs == 4.0 and name in summary:
        targets["bcast_16x250_4s_delivery_ge_0.99"] = {
            "value": ratio,
            "pass": ratio is not None and ratio >= 0.99,
        }
    else:
        targets["bcast_16x250_4s_delivery_ge_0.99"] = {
            "value": None,
            "pass": None,
            "note": "not measured with this configuration",
        }
    return targets


def _num(value: Any, spec: str) -> str:  # noqa: ANN401 - JSON value
    return "-" if value is None else format(value, spec)


def render_table(summary: JsonDict, scenarios: Sequence[Scenario]) -> str:
    """Human-readable summary: medians over the successful runs."""
    out: list[str] = []
    out.append("Unicast RTT (client0 -> client1 -> client0), medians over runs, microseconds")
    out.append(
        f"  {'server':<11}{'runs':>5}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"
        f"{'lost':>6}{'srv cpu s':>11}"
    )
    for scenario in scenarios:
        entry = summary.get(scenario.name, {})
        if scenario.kind != "rtt":
            continue
        for kind in SERVERS:
            m = entry.get(kind)
            if m is None:
                continue
            out.append(
                f"  {kind:<11}{m['runs']:>5}{_num(m.get('p50_us'), '.1f'):>10}"
                f"{_num(m.get('p90_us'), '.1f'):>10}{_num(m.get('p99_us'), '.1f'):>10}"
                f"{_num(m.get('max_us'), '.1f'):>10}{_num(m.get('lost'), '.0f'):>6}"
                f"{_num(m.get('server_cpu_s'), '.3f'):>11}"
            )
        ratio = entry.get("ratio_dosbox_over_ipxbridge_rtt_p50")
        out.append(f"  ratio dosbox/ipxbridge (p50 RTT): {_num(ratio, '.2f')}x")
    out.append("")
    out.append("Broadcast fan-out, medians over runs (ratio = delivered / (sent x (clients-1)))")
    out.append(
        f"  {'scenario':<15}{'server':<11}{'cli':>4}{'runs':>5}{'sent':>8}{'expected':>10}"
        f"{'delivered':>11}{'ratio':>9}{'srv drop':>9}{'cli drop':>9}"
        f"{'srv cpu':>9}{'cpu%':>6}"
    )
    for scenario in scenarios:
        if scenario.kind != "bcast":
            continue
        entry = summary.get(scenario.name, {})
        for kind in SERVERS:
            m = entry.get(kind)
            if m is None:
                continue
            share = m.get("server_cpu_share")
            out.append(
                f"  {scenario.name:<15}{kind:<11}{_num(m.get('clients'), 'd'):>4}{m['runs']:>5}"
                f"{_num(m.get('sent'), '.0f'):>8}{_num(m.get('expected'), '.0f'):>10}"
                f"{_num(m.get('delivered'), '.0f'):>11}{_num(m.get('delivery_ratio'), '.4f'):>9}"
                f"{_num(m.get('server_socket_drops'), '.0f'):>9}"
                f"{_num(m.get('client_socket_drops'), '.0f'):>9}"
                f"{_num(m.get('server_cpu_s'), '.2f'):>9}"
                f"{_num(None if share is None else 100 * share, '.0f'):>6}"
            )
        ratio = entry.get("ratio_ipxbridge_over_dosbox_delivery")
        out.append(f"  {scenario.name}: ratio ipxbridge/dosbox (delivery): {_num(ratio, '.2f')}x")
    return "\n".join(out)


def describe_run(run: JsonDict) -> str:
    """One progress line per run."""
    head = f"  round {run['round']} {run['scenario']:<14} {run['server']:<10}"
    if "error" in run:
        return f"{head} ERROR {run['error']}"
    if "p50_us" in run:
        return (
            f"{head} p50 {run['p50_us']} us  p90 {run['p90_us']}  p99 {run['p99_us']}  "
            f"lost {run['lost']}  srv cpu {run['server_cpu_s']} s"
        )
    return (
        f"{head} clients {run['clients']} sent {run['sent']} delivered {run['delivered']}"
        f"/{run['expected']} ratio {run['delivery_ratio']}  srv drops "
        f"{run['server_socket_drops']} cli drops {run['client_socket_drops']}  "
        f"srv cpu {run['server_cpu_s']} s ({run['server_cpu_share']})  "
        f"gen cpu {run['client_cpu_share']} lag {run['max_send_lag_ms']} ms"
    )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Command line of the orchestrator."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="repetitions per server (3)")
    parser.add_argument(
        "--clients", type=int, default=16, help="clients of the broadcast scenarios (16)"
    )
    parser.add_argument(
        "--rates",
        type=float,
        nargs="+",
        default=[250.0, 500.0],
        help="broadcasts per second per client, one scenario each (250 500)",
    )
    parser.add_argument("--secs", type=float, default=4.0, help="broadcast duration (4)")
    parser.add_argument("--rtt-count", type=int, default=2000, help="round trips (2000)")
    parser.add_argument("--size", type=int, default=64, help="IPX payload bytes (64)")
    parser.add_argument("--skip-baseline", action="store_true", help="do not run DOSBox")
    parser.add_argument(
        "--bridge-cmd",
        default=(
            f"{shlex.quote(sys.executable)} -m ipxbridge run "
            f"--ipx-listen {HOST}:{{port}} --log-level warning"
        ),
        help="ipxbridge command; {port} is replaced",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="server UDP port")
    parser.add_argument("--netns", default=DEFAULT_NETNS, help="namespace to create and delete")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.clients < 2 or args.secs <= 0 or args.rtt_count < 1:
        parser.error("need --rounds >= 1, --clients >= 2, --secs > 0, --rtt-count >= 1")
    if any(rate <= 0 for rate in args.rates):
        parser.error("--rates must be positive")
    if args.size < MIN_SIZE or args.size + ipx.HEADER_LEN > 1400:
        parser.error(f"--size must be between {MIN_SIZE} and {1400 - ipx.HEADER_LEN}")
    return args


def preflight(skip_baseline: bool) -> bool:
    """Check privileges and tools; returns whether the DOSBox baseline can run."""
    if os.geteuid() != 0:
        raise BenchError("must run as root (network namespaces)")
    for tool in ("ip", "taskset"):
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} not found")
    if not {CLIENT_CPU, SERVER_CPU} <= os.sched_getaffinity(0):
        raise BenchError(f"needs CPUs {CLIENT_CPU} and {SERVER_CPU}")
    if skip_baseline:
        return False
    if shutil.which("dosbox") is None:
        print("dosbox not found: continuing with ipxbridge alone")
        return False
    return True


def loadavg() -> float:
    """The 1-minute load average (the bench itself adds about 1)."""
    return os.getloadavg()[0]


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str]) -> int:
    """Orchestrate all runs; returns the exit code."""
    if argv and argv[0] == "_client":
        return client_main(argv[1:])
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
    try:
        baseline = preflight(args.skip_baseline)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    scenarios = build_scenarios(args.rates, args.clients)
    if baseline and args.clients > DOSBOX_FREE_SLOTS:
        print(
            f"note: DOSBox's server has {DOSBOX_SLOTS} slots and its own client takes one: "
            f"broadcast runs give it {DOSBOX_FREE_SLOTS} synthetic clients + its own "
            f"(same fan-out of {args.clients - 1} copies per broadcast)"
        )
    load_start = loadavg()
    if load_start > 0.5:
        print(
            f"warning: load average {load_start:.2f} before starting; other work on this "
            "2-core box will disturb the figures"
        )
    runs: list[JsonDict] = []
    workdir = Path(tempfile.mkdtemp(prefix="ipxb_bench_"))
    bench = Bench(args.netns, args.port, args.bridge_cmd, workdir, dosbox_ok=baseline)
    started = time.time()
    try:
        with network_namespace(args.netns):
            for round_no in range(args.rounds):
                order = SERVERS if round_no % 2 == 0 else SERVERS[::-1]
                for scenario in scenarios:
                    for kind in order:
                        if kind == "dosbox" and not bench.dosbox_ok:
                            continue
                        spec = ClientSpec(
                            scenario.kind,
                            args.port,
                            clients_for(kind, scenario, args.clients),
                            scenario.rate,
                            args.secs,
                            args.rtt_count,
                            args.size,
                            0,
                        )
                        result = bench.run_once(kind, spec, f"r{round_no}-{scenario.name}-{kind}")
                        run: JsonDict = {
                            "round": round_no,
                            "scenario": scenario.name,
                            "server": kind,
                            **result,
                        }
                        runs.append(run)
                        print(describe_run(run), flush=True)
                        if (
                            kind == "dosbox"
                            and "error" in run
                            and not any(r["server"] == "dosbox" and "error" not in r for r in runs)
                        ):
                            print(
                                "DOSBox baseline failed to start: continuing with ipxbridge alone",
                                flush=True,
                            )
                            bench.dosbox_ok = False
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        bench.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = summarise(runs, scenarios)
    report: JsonDict = {
        "config": {
            "rounds": args.rounds,
            "clients": args.clients,
            "rates": args.rates,
            "secs": args.secs,
            "rtt_count": args.rtt_count,
            "rtt_warmup": RTT_WARMUP,
            "size": args.size,
            "baseline": baseline,
            "bridge_cmd": args.bridge_cmd,
            "port": args.port,
            "server_cpu": SERVER_CPU,
            "client_cpu": CLIENT_CPU,
            "dosbox_clients_max": DOSBOX_FREE_SLOTS,
        },
        "elapsed_s": round(time.time() - started, 1),
        "loadavg_1min": {"start": load_start, "end": loadavg()},
        "summary": summary,
        "targets": check_targets(summary, args.clients, args.secs),
        "runs": runs,
    }
    print()
    print(render_table(summary, scenarios))
    print()
    for name, target in report["targets"].items():
        print(
            f"target {name}: value {target['value' if 'value' in target else 'value_us']} "
            f"-> {'PASS' if target['pass'] else 'FAIL' if target['pass'] is False else 'n/a'}"
        )
    print(json.dumps(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
