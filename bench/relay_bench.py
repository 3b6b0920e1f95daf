#!/usr/bin/env python3
"""Broadcast relay benchmark: ipxbridge against a naive Python relay and the kernel's nft dup.

Own namespaces (prefix ``rlb<pid>``), created and always removed here (an exception, Ctrl-C,
SIGTERM); no packet leaves them::

    pa   sender 10.76.1.2/24 (eth0)
     |   lanA
    box  10.76.1.1/24 (lanA) | 10.76.2.1/24 (lanB): the relay under test
     |   lanB
    hb   receiver 10.76.2.2/24 (eth0)

The sender broadcasts to 255.255.255.255:PORT (47624, DirectPlay's enumeration port) out of
pa's eth0. The kernel never forwards a broadcast, so whatever reaches hb on PORT was copied by
the relay; before every relay starts, 100 broadcasts with none running check it ("leak" 0).

Relays, started afresh in ``box`` (pinned to ``--relay-cpu``) for every round:

* ``naive``: ``bench/naive_relay.py``, one ``recvfrom`` and one raw-socket ``sendto`` to lanB's
  subnet broadcast per datagram (the sender's address kept), nothing else: the floor a Python
  relay has to beat;
* ``floor``: ``bench/policy_floor_relay.py``, a blocking loop around ipxbridge's own
  per-datagram code (``RelayPolicy.decide``, ``build_ip_udp``, the packet-socket send) with
  nothing else (no asyncio, fair queues, inspector or books), this checkout's code: what no
  Python relay built from those parts can exceed; ``floor_io`` the same without the decision
  (the I/O alone);
* ``nft_dup``: an nftables rule in box that ``dup``s each datagram out of lanB, no process:
  the kernel's ceiling;
* ``ipxbridge``: ``ipxbridge run --source-mode preserve --fast-path on`` (the kernel fast path,
  the default as root);
* ``ipx_python``: ``--source-mode preserve --fast-path off`` (the Python path, raw socket);
* ``ipx_rewrite``: ``--fast-path off --source-mode rewrite`` (Python, copies from box).

Per relay and round: *latency*, ``--lat-count`` datagrams at 1000 pps carrying
``time.time_ns()``; one-way latency is hb's kernel receive time (``SO_TIMESTAMPNS``) minus it
(the namespaces share one clock). Then the *sweep*: every offered rate of ``--rates`` (0 =
unpaced, as fast as this Python sender goes) for ``--seconds`` and at most ``--max-packets``;
hb counts the copies in nftables and drops them before any socket, so no receiver can be the
bottleneck; delivery = copies / sent, relayed pps = copies / sending time. Each round also
measures the kernel forwarding a unicast through box (no relay) as a latency reference.
Rounds alternate the relay order (A..E, E..A) so that drifts hit every relay alike. This
script (the sender) is pinned to ``--sender-cpu``, the relay to ``--relay-cpu``, and so is the
box's receive work (RPS on lanA and lanB), as a real box does its own: over veth it would run
on the CPU that sent each packet, which charges the kernel relays' copying and the delivery to
a relay's socket to the sender (``--no-steer`` measures it that way). hb's receive work is on
the sender's CPU. Steering adds a hop between CPUs to every path, the reference included.

Printed: per relay, medians over rounds of relayed pps / delivery at each rate and of the
median latency; then each relay's ratios to naive.

    python3 bench/relay_bench.py [--rounds 3] [--rates 1000,5000,10000,20000,40000,0]
                                 [--seconds 2] [--lat-count 2000] [--relays naive,...]
                                 [--no-steer] [--root DIR] [--json FILE]
"""

import argparse
import contextlib
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from benchlib import ROOT, BenchError
from benchlib.bridge import READY_RELAY, spawn, start_bridge
from benchlib.metrics import nft_counters
from benchlib.netns import exit_on_signals, nsexec, sh, two_segments
from benchlib.sockets import broadcaster, received_ns, timestamped_receiver

PREFIX: Final = f"rlb{os.getpid() % 100000}"
SENDER, BOX_A, BOX_B, RECEIVER = "10.76.1.2", "10.76.1.1", "10.76.2.1", "10.76.2.2"
B_BROADCAST: Final = "10.76.2.255"
SPORT: Final = 40076
LAT_RATE: Final = 1000  # pps of the latency phase
LEAK_COUNT: Final = 100
SWEEP: Final = struct.Struct("!4sQ")  # b"RLBS", sequence
PROBE: Final = struct.Struct("!4sIQ")  # b"RLBL", sequence, time.time_ns() at the send
MAX_ROUNDS, MAX_SECONDS, MAX_PACKETS = 10, 10.0, 500_000
NAIVE: Final = Path(__file__).resolve().with_name("naive_relay.py")
FAIRNESS: Final = Path(__file__).resolve().with_name("fairness.py")
FLOOR: Final = Path(__file__).resolve().with_name("policy_floor_relay.py")

RELAYS: Final = {
    "naive": "bench/naive_relay.py --from lanA --to lanB (raw socket, source kept)",
    "floor": "bench/policy_floor_relay.py: decide + build + send, a blocking loop",
    "floor_io": "bench/policy_floor_relay.py --no-decide: the floor's I/O alone",
    "nft_dup": f"nft: iifname lanA udp dport PORT dup to {B_BROADCAST} device lanB",
    "ipxbridge": "ipxbridge run --source-mode preserve --fast-path on",
    "ipx_python": "ipxbridge run --source-mode preserve --fast-path off",
    "ipx_rewrite": "ipxbridge run --fast-path off --source-mode rewrite",
}
# Relays that are a script of their own: (script, extra arguments, the line it says when ready)
PLAIN: Final = {
    "naive": (NAIVE, (), "naive relay:"),
    "floor": (FLOOR, (), "floor relay:"),
    "floor_io": (FLOOR, ("--no-decide",), "floor relay:"),
}
IPXBRIDGE_MODES: Final = {
    "ipxbridge": ("--source-mode", "preserve", "--fast-path", "on"),
    "ipx_python": ("--source-mode", "preserve", "--fast-path", "off"),
    "ipx_rewrite": ("--fast-path", "off", "--source-mode", "rewrite"),
}


def rx_nft(port: int) -> str:
    """hb's counters: sweep datagrams (payload starting ``RLBS``) counted and dropped before
    any socket; anything else on the port (the latency probes) counted and let through."""
    return f"""
table ip rlb_rx {{
  chain pre {{
    type filter hook prerouting priority -300; policy accept;
    udp dport {port} @th,64,32 0x524c4253 counter drop comment "sweep"
    udp dport {port} counter comment "other"
  }}
}}
"""


def dup_nft(port: int) -> str:
    """The kernel reference relay: each broadcast from lanA copied out of lanB."""
    return f"""
table ip rlb_dup {{
  chain pre {{
    type filter hook prerouting priority 0; policy accept;
    iifname "lanA" ip daddr 255.255.255.255 udp dport {port} dup to {B_BROADCAST} device "lanB"
  }}
}}
"""


@dataclass(frozen=True, slots=True)
class Settings:
    """What one run measures (from the command line)."""

    rounds: int
    rates: tuple[int, ...]
    seconds: float
    max_packets: int
    lat_count: int
    size: int
    port: int
    relays: tuple[str, ...]
    sender_cpu: int
    relay_cpu: int
    steer: bool  # the box's receive work on the relay's CPU
    root: Path  # the ipxbridge checkout to run
    r13_runs: int = 1  # bench/fairness.py runs on the Python path after the sweep (0: none)
    r13_seconds: float = 8.0
    r13_flood_pps: int = 20_000


# --- the network -------------------------------------------------------------------------------


@contextlib.contextmanager
def topology(s: Settings) -> Iterator[dict[str, str]]:
    with two_segments(
        PREFIX, pa=f"{SENDER}/24", box_a=f"{BOX_A}/24", box_b=f"{BOX_B}/24", hb=f"{RECEIVER}/24"
    ) as names:
        # the unicast reference goes through box like a routed packet
        sh("ip", "-n", names["pa"], "route", "add", "10.76.2.0/24", "via", BOX_A)
        nsexec(names["box"], "sysctl", "-qw", "net.ipv4.ip_forward=1")
        nsexec(names["hb"], "nft", "-f", "-", stdin=rx_nft(s.port))
        if s.steer:
            steer(names["box"], "lanA", s.relay_cpu)
            steer(names["box"], "lanB", s.relay_cpu)
            steer(names["hb"], "eth0", s.sender_cpu)
        yield names


def steer(ns: str, ifname: str, cpu: int) -> None:
    """Receive work for ``ifname`` on ``cpu`` (RPS). Over veth it would otherwise run on the
    CPU that sent the packet: the box's share of every datagram (its nft rules, the kernel
    relays' copies, delivery to a relay's socket) on the sender's CPU, not the relay's."""
    nsexec(ns, "sh", "-c", f"echo {1 << cpu:x} > /sys/class/net/{ifname}/queues/rx-0/rps_cpus")


@contextlib.contextmanager
def relay(name: str, names: dict[str, str], s: Settings) -> Iterator[None]:
    """Relay ``name`` running in box for the length of the block."""
    box, cpus = names["box"], {s.relay_cpu}
    if name == "nft_dup":
        nsexec(box, "nft", "-f", "-", stdin=dup_nft(s.port))
        try:
            yield
        finally:
            nsexec(box, "nft", "delete", "table", "ip", "rlb_dup", check=False)
        return
    if name in PLAIN:
        script, extra, banner = PLAIN[name]
        argv = [
            sys.executable,
            str(script),
            "--port",
            str(s.port),
            "--from",
            "lanA",
            "--to",
            "lanB",
        ]
        log = Path(tempfile.gettempdir()) / f"{PREFIX}-{name}.log"
        proc = spawn([*argv, *extra], log=log, ns=box, cpus=cpus)
        try:
            proc.wait_for(banner, 10)
        except BaseException:
            proc.stop()
            raise
    else:
        proc = start_bridge(
            *("--ipx-listen", "off", "--metrics-listen", "off"),
            *("--iface", "lanA", "--iface", "lanB", "--relay-port", str(s.port)),
            *IPXBRIDGE_MODES[name],
            name=f"{PREFIX}-{name}",
            ns=box,
            ready=READY_RELAY,
            cpus=cpus,
            root=s.root,
        )
    try:
        yield
        if not proc.alive():
            raise BenchError(f"{name} exited during the run: {proc.tail()}")
    finally:
        text = proc.stop()
    if "Traceback" in text:
        raise BenchError(f"{name} logged a traceback:\n{text}")


# --- traffic -----------------------------------------------------------------------------------


class Bench:
    """The sender in pa and the counters and receiver in hb."""

    def __init__(self, names: dict[str, str], s: Settings) -> None:
        self.hb = names["hb"]
        self.s = s
        self.to = ("255.255.255.255", s.port)
        self.tx = broadcaster(names["pa"], "eth0", SENDER, SPORT)
        self.rx = timestamped_receiver(names["hb"], s.port, 16 << 20)
        self.rx.setblocking(False)
        self.pad = bytes(max(0, s.size - SWEEP.size))
        self.probe_pad = bytes(max(0, s.size - PROBE.size))
        self.counted = nft_counters(self.hb, "rlb_rx").get("sweep", 0)

    def new_copies(self) -> int:
        """Sweep copies hb has counted since the last call, once the relay has passed on its
        backlog (two readings 0.2 s apart agree; nothing is sent in between calls)."""
        last = self.counted
        for _ in range(25):
            time.sleep(0.2)
            now = nft_counters(self.hb, "rlb_rx").get("sweep", 0)
            if now == last:
                break
            last = now
        new, self.counted = last - self.counted, last
        return new

    def offer(self, rate: int, count: int, seconds: float) -> tuple[int, float]:
        """Send up to ``count`` sweep datagrams at ``rate`` pps (0: as fast as possible) for
        at most ``seconds``; returns (sent, seconds it took)."""
        send, pack, pad, to = self.tx.sendto, SWEEP.pack, self.pad, self.to
        sent = errors = 0
        start = time.monotonic()
        deadline = start + seconds
        while sent + errors < count:
            now = time.monotonic()
            if now >= deadline:
                break
            due = count if rate == 0 else min(count, int((now - start) * rate) + 1)
            if sent + errors >= due:
                time.sleep(start + (sent + errors) / rate - now)
                continue
            for seq in range(sent + errors, min(due, sent + errors + 64)):
                try:
                    send(pack(b"RLBS", seq) + pad, to)
                    sent += 1
                except OSError:  # ENOBUFS: the sender's own queue, not the relay
                    errors += 1
        if rate:  # the last datagram's interval is part of the sending time
            time.sleep(max(0.0, start + (sent + errors) / rate - time.monotonic()))
        return sent, time.monotonic() - start

    def sweep(self, rate: int) -> dict[str, float]:
        """One offered rate: sent, copies, relayed pps, delivery."""
        count = (
            self.s.max_packets if rate == 0 else min(self.s.max_packets, int(rate * self.s.seconds))
        )
        sent, took = self.offer(rate, count, self.s.seconds)
        copies = self.new_copies()
        return {
            "sent": sent,
            "copies": copies,
            "seconds": round(took, 3),
            "pps": copies / took if took > 0 else 0.0,
            "delivery": copies / sent if sent else 0.0,
        }

    def leak(self) -> int:
        """Copies of broadcasts sent while no relay runs (must be 0)."""
        self.offer(5000, LEAK_COUNT, 1.0)
        return self.new_copies()

    def latency(self, to: tuple[str, int]) -> dict[str, float]:
        """``lat_count`` probes to ``to`` at ``LAT_RATE``: median one-way latency (µs)."""
        self._drain()
        start = time.monotonic()
        for seq in range(self.s.lat_count):
            ahead = start + seq / LAT_RATE - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            with contextlib.suppress(OSError):
                self.tx.sendto(PROBE.pack(b"RLBL", seq, time.time_ns()) + self.probe_pad, to)
        time.sleep(0.3)  # the last copies
        late = sorted(self._drain().values())
        return {
            "median_us": statistics.median(late) / 1000 if late else float("nan"),
            "received": len(late),
            "sent": self.s.lat_count,
        }

    def _drain(self) -> dict[int, int]:
        """Read every probe waiting in hb: sequence -> one-way latency in ns (first copy)."""
        seen: dict[int, int] = {}
        while True:
            try:
                data, anc, _, _ = self.rx.recvmsg(2048, 256)
            except BlockingIOError:
                return seen
            if len(data) >= PROBE.size and data.startswith(b"RLBL"):
                _, seq, sent_ns = PROBE.unpack_from(data)
                seen.setdefault(seq, received_ns(anc) - sent_ns)

    def close(self) -> None:
        self.tx.close()
        self.rx.close()


# --- the run -----------------------------------------------------------------------------------


def run(s: Settings, progress: Callable[[str], None]) -> dict[str, Any]:
    """Every round: the unicast reference, then each relay (order alternating per round)."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in s.relays}
    reference: list[float] = []
    with topology(s) as names:
        bench = Bench(names, s)
        try:
            for round_no in range(s.rounds):
                ref = bench.latency((RECEIVER, s.port))
                reference.append(ref["median_us"])
                progress(f"round {round_no + 1}: kernel forwarding {ref['median_us']:.1f} us")
                order = s.relays if round_no % 2 == 0 else s.relays[::-1]
                for name in order:
                    if leaked := bench.leak():
                        raise BenchError(f"{leaked} broadcasts reached hb with no relay running")
                    with relay(name, names, s):
                        one = {
                            "latency": bench.latency(bench.to),
                            "rates": {rate: bench.sweep(rate) for rate in s.rates},
                        }
                    results[name].append(one)
                    progress(f"round {round_no + 1}: {name:<12} {describe(one, s.rates)}")
        finally:
            bench.close()
    return {"relays": results, "reference_us": reference}


def describe(one: dict[str, Any], rates: tuple[int, ...]) -> str:
    lat = one["latency"]
    cells = [
        f"{rate_name(rate)} {one['rates'][rate]['pps']:,.0f}/{one['rates'][rate]['delivery']:.3f}"
        for rate in rates
    ]
    return f"latency {lat['median_us']:.1f} us ({lat['received']}/{lat['sent']}); " + ", ".join(
        cells
    )


def rate_name(rate: int) -> str:
    return "unpaced" if rate == 0 else f"{rate}"


def summarise(raw: dict[str, Any], s: Settings) -> dict[str, Any]:
    """Medians over rounds per relay: latency, and pps and delivery at each rate."""
    out: dict[str, Any] = {}
    for name, rounds in raw["relays"].items():
        out[name] = {
            "latency_us": statistics.median(r["latency"]["median_us"] for r in rounds),
            "rates": {
                rate: {
                    key: statistics.median(r["rates"][rate][key] for r in rounds)
                    for key in ("pps", "delivery")
                }
                for rate in s.rates
            },
        }
    return out


def render(summary: dict[str, Any], reference: list[float], s: Settings) -> str:
    """The table (medians over rounds), then the ratios to naive."""
    width = 17
    head = f"{'relay':<13}{'latency us':>11}" + "".join(
        f"{rate_name(r) + (' pps' if r else ''):>{width}}" for r in s.rates
    )
    lines = [f"medians over {s.rounds} round(s); each rate: relayed pps / delivery", head]
    for name in s.relays:
        m = summary[name]
        cells = "".join(
            f"{m['rates'][r]['pps']:>{width - 8},.0f} / {m['rates'][r]['delivery']:.3f}"
            for r in s.rates
        )
        lines.append(f"{name:<13}{m['latency_us']:>11.1f}{cells}")
    lines.append(
        f"kernel forwarding (unicast through box, no relay): {statistics.median(reference):.1f} us"
    )
    if 0 in s.rates:
        lines.append(
            "unpaced: delivery 1.000 means the relay kept up with this Python sender (whose CPU "
            "also receives every copy in hb): its own ceiling is higher"
        )
    if "naive" in summary:
        lines.append("")
        lines.append("ratio to naive: relayed pps at each rate; latency (lower is better)")
        base = summary["naive"]
        for name in s.relays:
            if name == "naive":
                continue
            m = summary[name]
            ratios = " ".join(
                f"{rate_name(r)}:{ratio(m['rates'][r]['pps'], base['rates'][r]['pps'])}"
                for r in s.rates
            )
            lat = ratio(m["latency_us"], base["latency_us"])
            lines.append(f"{name:<13}pps {ratios}  latency {lat}")
    return "\n".join(lines)


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}" if base else "n/a"


# --- command line ------------------------------------------------------------------------------


def r13(s: Settings) -> list[dict[str, Any]]:
    """R13 on the Python path (docs/reliability.md): ``bench/fairness.py`` run ``r13_runs``
    times, each in its own namespaces; per run whether it passed and the player's figures."""
    runs = []
    for _ in range(s.r13_runs):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [sys.executable, str(FAIRNESS), "--modes", "python"]
            cmd += ["--seconds", f"{s.r13_seconds:g}", "--flood-pps", str(s.r13_flood_pps)]
            cmd += ["--root", str(s.root), "--json", out.name]
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=s.r13_seconds + 120, check=False
            )
            try:
                (result,) = json.loads(Path(out.name).read_text() or "[]")
            except ValueError:
                msg = f"fairness.py gave no figures:\n{done.stdout}{done.stderr}"
                raise BenchError(msg) from None
        runs.append(
            {
                "pass": done.returncode == 0,
                "sent": result["legit_sent"],
                "delivered": result["legit_delivered"],
                "p99_ms": result["latency_ms"]["p99"],
            }
        )
    return runs


def render_r13(runs: list[dict[str, Any]], s: Settings) -> str:
    """One line: how many R13 runs passed, the player's delivery and p99 latency."""
    delivered = [100 * r["delivered"] / max(1, r["sent"]) for r in runs]
    p99 = [r["p99_ms"] for r in runs]
    return (
        f"R13, Python path (bench/fairness.py --modes python --seconds {s.r13_seconds:g} "
        f"--flood-pps {s.r13_flood_pps}; >= 99 % delivered, p99 <= 50 ms): "
        f"{sum(r['pass'] for r in runs)}/{len(runs)} passed; the 10 pps player "
        f"{min(delivered):.2f}-{max(delivered):.2f} % delivered, "
        f"p99 {min(p99):.1f}-{max(p99):.1f} ms"
    )


def parse_args(argv: list[str]) -> tuple[Settings, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rates", default="1000,5000,10000,20000,40000,0", help="pps; 0 unpaced")
    parser.add_argument("--seconds", type=float, default=2.0, help="per offered rate")
    parser.add_argument("--max-packets", type=int, default=150_000, help="per offered rate")
    parser.add_argument("--lat-count", type=int, default=2000, help="latency probes at 1000 pps")
    parser.add_argument("--size", type=int, default=64, help="UDP payload bytes")
    parser.add_argument("--port", type=int, default=47624)
    parser.add_argument("--relays", default=",".join(RELAYS), help=",".join(RELAYS))
    parser.add_argument("--sender-cpu", type=int, default=0)
    parser.add_argument("--relay-cpu", type=int, default=1)
    parser.add_argument(
        "--no-steer",
        action="store_true",
        help="leave the box's receive work on the sender's CPU (veth's default)",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="ipxbridge checkout to run")
    parser.add_argument("--json", type=Path, help="write every round's figures here too")
    parser.add_argument(
        "--r13",
        type=int,
        default=1,
        help="runs of R13 (bench/fairness.py: a 10 pps player beside a flood) on the Python "
        "path after the sweep, when ipx_python is measured; 0: none",
    )
    parser.add_argument("--r13-seconds", type=float, default=8.0, help="flood duration of each")
    parser.add_argument("--r13-flood-pps", type=int, default=20_000, help="flood rate of each")
    a = parser.parse_args(argv)
    try:
        rates = tuple(int(r) for r in a.rates.split(","))
    except ValueError:
        parser.error("--rates: a comma-separated list of packets per second")
    relays = tuple(a.relays.split(","))
    if unknown := [r for r in relays if r not in RELAYS]:
        parser.error(f"unknown relays {unknown}; known: {', '.join(RELAYS)}")
    if not 1 <= a.rounds <= MAX_ROUNDS or not 0 < a.seconds <= MAX_SECONDS:
        parser.error(f"--rounds must be 1..{MAX_ROUNDS} and --seconds in (0, {MAX_SECONDS:g}]")
    if not 0 <= a.r13 <= MAX_ROUNDS or not 0 < a.r13_seconds <= MAX_SECONDS:
        parser.error(f"--r13 must be 0..{MAX_ROUNDS} and --r13-seconds in (0, {MAX_SECONDS:g}]")
    if not 0 < a.max_packets <= MAX_PACKETS or not 10 <= a.lat_count <= 10_000:
        parser.error(f"--max-packets must be 1..{MAX_PACKETS:,} and --lat-count 10..10,000")
    if any(r < 0 for r in rates) or not PROBE.size <= a.size <= 1400 or len(rates) > 10:
        parser.error(f"rates >= 0 (at most 10 of them), --size {PROBE.size}..1400")
    cpus = os.sched_getaffinity(0)
    if a.sender_cpu == a.relay_cpu or not {a.sender_cpu, a.relay_cpu} <= cpus:
        parser.error(f"--sender-cpu and --relay-cpu: two different CPUs of {sorted(cpus)}")
    return Settings(
        a.rounds,
        rates,
        a.seconds,
        a.max_packets,
        a.lat_count,
        a.size,
        a.port,
        relays,
        a.sender_cpu,
        a.relay_cpu,
        not a.no_steer,
        a.root.resolve(),
        a.r13 if "ipx_python" in relays else 0,
        a.r13_seconds,
        a.r13_flood_pps,
    ), a.json


def main() -> int:
    s, json_path = parse_args(sys.argv[1:])
    if os.geteuid() != 0:
        print("relay_bench.py needs root (network namespaces, nftables)", file=sys.stderr)
        return 2
    exit_on_signals()
    os.sched_setaffinity(0, {s.sender_cpu})  # the relays get theirs when they start
    relay_side = "relay and the box's receive work" if s.steer else "relay"
    print(
        f"relay bench: {s.rounds} round(s) of {', '.join(s.relays)}; rates "
        f"{', '.join(rate_name(r) for r in s.rates)} for {s.seconds:g} s each (at most "
        f"{s.max_packets:,}); latency {s.lat_count} probes at {LAT_RATE} pps; {s.size}-byte "
        f"payloads to 255.255.255.255:{s.port}; sender on CPU {s.sender_cpu}, {relay_side} on "
        f"CPU {s.relay_cpu}; "
        f"ipxbridge from {s.root}; loadavg {os.getloadavg()[0]:.2f}; "
        f"namespaces {PREFIX}_*",
        flush=True,
    )
    for name in s.relays:
        print(f"  {name:<12} {RELAYS[name]}")
    try:
        raw = run(s, lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("\ninterrupted; namespaces removed", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    summary = summarise(raw, s)
    print()
    print(render(summary, raw["reference_us"], s))
    if s.r13_runs:
        summary["r13"] = r13(s)
        print(render_r13(summary["r13"], s))
    if json_path is not None:
        json_path.write_text(json.dumps({"raw": raw, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
