#!/usr/bin/env python3
"""Receive overload and per-source fairness on the broadcast relay (docs/reliability.md R13).

One flooder at ``--flood-pps`` (one process pinned to one core) and one legitimate player at
10 pps broadcast to 255.255.255.255:47624 on the same segment; the bridge relays to the other
segment, where a receiver measures what the player got through and how late. Own namespaces
(prefix ``frn<pid>``), created and always deleted here; no packet leaves them::

    pa  flooder 10.75.1.66/24, player 10.75.1.10/24 (eth0)
     |  lanA
    box 10.75.1.1/24 (lanA) | 10.75.2.1/24 (lanB): python -m ipxbridge run --source-mode
     |  lanB                                        preserve --fast-path off|on
    hb  receiver 10.75.2.20/24 (eth0)

Flood payload ``FLOOD`` + sequence (not DirectPlay: no enumeration limit applies); player
payload ``LEGIT`` + sequence + ``time.time_ns()`` at the send (the namespaces share one
clock). In ``hb`` a UDP socket on 47624 with ``SO_TIMESTAMPNS`` takes each player datagram's
kernel receive time, so its one-way latency does not depend on when Python reads it. The
flood's copies are counted and dropped by an nft rule in ``hb`` (table ``ip frn_rx``) before
any socket, so the receiver costs no CPU the bridge needs on a small machine.

Books (table ``ip frn_books`` in ``box``, prerouting priority -400: counts, never drops, and
runs before the bridge's own table at -300): every datagram to 47624 arriving at the box —
on lanA from ``pa``, and the relayed copies the kernel loops back on lanB — must be either
received by the bridge, dropped by the kernel at its socket
(``ipxbridge_kernel_dropped_packets_total{path="relay"}``) or dropped by the fast path
(``ipxbridge_fastpath_dropped_packets_total``), within 0.1 %.

CPUs: the flooder is pinned to ``--flood-cpu`` (the last core), this script's own threads
to the same core and the bridge to the others (``--bridge-cpus auto``): the attacker has one
core, the bridge the rest. Unpinned (``--bridge-cpus any``) on a 2-core machine the scheduler
moves the bridge onto the flooder's core now and then. Note on veth: the box's receive work
for the flood (softirq: nft, the fast path's copies, socket delivery) runs on the *sender's*
core, so it is charged to the attacker's core; in fast mode that caps the flood this one core
can send (about 57-60k pps on the 2-core test machine), and the output says so when the
achieved rate falls short. Printed per mode: the bridge's CPU time, how long it waited for a
CPU, and how busy every core was, so interference from other work on the machine shows.

Modes: ``python`` (``--fast-path off``) and ``fast`` (``--fast-path on``), both preserve.
The bridge is run from ``--root`` (this checkout by default) with that directory as cwd and
PYTHONPATH, so another tree (e.g. the commit before the fairness change) can be measured.

Exit 0 only when R13 holds in every mode: the player's datagrams >= 99 % delivered, p99
latency <= 50 ms, books within 0.1 %, the bridge alive with no traceback in its log.

    python3 bench/fairness.py [--seconds 60] [--flood-pps 80000] [--modes python,fast]
                              [--flood-cpu N] [--bridge-cpus auto|any|LIST]
                              [--harness-cpu auto|any|N] [--root DIR] [--json FILE]
"""

import argparse
import contextlib
import json
import math
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Final

from benchlib import ROOT
from benchlib.bridge import READY_RELAY, start_bridge
from benchlib.metrics import by_label, kernel_counters, nft_counters, scrape
from benchlib.netns import nsexec, sh, two_segments
from benchlib.procstat import cpu_seconds
from benchlib.sockets import broadcaster, received_ns, timestamped_receiver

from ipxbridge.app.relay import KERNEL_READ_SECONDS

PREFIX: Final = f"frn{os.getpid() % 100000}"
FLOODER, PLAYER = "10.75.1.66", "10.75.1.10"
BOX_A, BOX_B, HOST = "10.75.1.1", "10.75.2.1", "10.75.2.20"
PORT: Final = 47624
FLOOD_SPORT, PLAYER_SPORT = 40066, 40010
LEGIT_PPS: Final = 10
FLOOD: Final = struct.Struct("!5sQ")
LEGIT: Final = struct.Struct("!5sIQ")
MODES: Final = {
    "python": ("--source-mode", "preserve", "--fast-path", "off"),
    "fast": ("--source-mode", "preserve", "--fast-path", "on"),
}
# R13 targets (docs/reliability.md)
MIN_DELIVERED_PCT: Final = 99.0
MAX_P99_MS: Final = 50.0
MAX_BOOKS_PCT: Final = 0.1


# --- namespaces ------------------------------------------------------------------------------


BOOKS_NFT: Final = f"""
table ip frn_books {{
  chain pre {{
    type filter hook prerouting priority -400; policy accept;
    iifname "lanA" ip saddr {FLOODER} udp dport {PORT} counter comment "lanA_flood"
    iifname "lanA" ip saddr {PLAYER} udp dport {PORT} counter comment "lanA_legit"
    iifname "lanA" udp dport {PORT} counter comment "lanA"
    iifname "lanB" udp dport {PORT} counter comment "lanB"
    udp dport {PORT} counter comment "all"
  }}
}}
"""
RX_NFT: Final = f"""
table ip frn_rx {{
  chain pre {{
    type filter hook prerouting priority -400; policy accept;
    ip saddr {FLOODER} udp dport {PORT} counter drop comment "flood"
    ip saddr {PLAYER} udp dport {PORT} counter comment "legit"
  }}
}}
"""


@contextlib.contextmanager
def topology() -> Iterator[dict[str, str]]:
    with two_segments(
        PREFIX, pa=f"{PLAYER}/24", box_a=f"{BOX_A}/24", box_b=f"{BOX_B}/24", hb=f"{HOST}/24"
    ) as names:
        sh("ip", "-n", names["pa"], "addr", "add", f"{FLOODER}/24", "brd", "+", "dev", "eth0")
        nsexec(names["box"], "nft", "-f", "-", stdin=BOOKS_NFT)
        nsexec(names["hb"], "nft", "-f", "-", stdin=RX_NFT)
        yield names


def snmp(ns: str) -> dict[str, int]:
    """Udp: counters of ``ns`` (RcvbufErrors, InErrors, ...)."""
    return kernel_counters(ns).get("Udp", {})


def softnet_dropped() -> int:
    """Packets dropped at the per-CPU backlog (host-wide; column 2 of softnet_stat)."""
    text = Path("/proc/net/softnet_stat").read_text(encoding="ascii")
    return sum(int(line.split()[1], 16) for line in text.splitlines() if line.strip())


def link_drops(ns: str, ifname: str) -> tuple[int, int]:
    """(rx_dropped, tx_dropped) of one interface."""
    data = json.loads(sh("ip", "-n", ns, "-j", "-s", "link", "show", ifname))[0]["stats64"]
    return int(data["rx"]["dropped"]), int(data["tx"]["dropped"])


# --- traffic ---------------------------------------------------------------------------------


def flood(pps: int, seconds: float, cpu: int) -> int:
    """Runs inside ``pa`` (hidden ``--flood``): broadcasts from one source at ``pps``."""
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {cpu})
    sock = broadcaster(None, "eth0", FLOODER, FLOOD_SPORT)
    send, pack, to = sock.sendto, FLOOD.pack, ("255.255.255.255", PORT)
    total = int(pps * seconds)
    errors = 0
    print("start", flush=True)
    start = time.monotonic()
    deadline = start + seconds
    sent = 0
    while sent < total:
        for seq in range(sent, min(sent + 64, total)):
            try:
                send(pack(b"FLOOD", seq), to)
            except OSError:
                errors += 1
        sent = min(sent + 64, total)
        now = time.monotonic()
        if now >= deadline:
            break
        ahead = start + sent / pps - now
        if ahead > 0:
            time.sleep(ahead)
    elapsed = time.monotonic() - start
    affinity = sorted(os.sched_getaffinity(0))
    print(
        json.dumps({"sent": sent - errors, "errors": errors, "seconds": elapsed, "cpus": affinity})
    )
    return 0


class Player(threading.Thread):
    """The legitimate source in ``pa``: ``LEGIT_PPS`` broadcasts with sequence and send time."""

    def __init__(self, ns: str) -> None:
        super().__init__(daemon=True)
        self.sock = broadcaster(ns, "eth0", PLAYER, PLAYER_SPORT)
        self.sent = 0
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            try:
                self.sock.sendto(
                    LEGIT.pack(b"LEGIT", self.sent, time.time_ns()), ("255.255.255.255", PORT)
                )
            except OSError:
                self.errors += 1
            self.sent += 1
            self.stop.wait(max(0.0, start + self.sent / LEGIT_PPS - time.monotonic()))


class Receiver(threading.Thread):
    """The host in ``hb``: kernel receive time of each player datagram (``SO_TIMESTAMPNS``)."""

    def __init__(self, ns: str) -> None:
        super().__init__(daemon=True)
        self.sock = timestamped_receiver(ns, PORT, 1 << 20)
        self.sock.settimeout(0.2)
        self.latency_ns: dict[int, int] = {}  # seq -> one-way latency (first copy)
        self.duplicates = 0
        self.other = 0  # anything else that reached the socket (the flood is dropped by nft)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                data, anc, _, _ = self.sock.recvmsg(2048, 256)
            except TimeoutError:
                continue
            rx_ns = received_ns(anc)
            if len(data) != LEGIT.size or not data.startswith(b"LEGIT"):
                self.other += 1
                continue
            _, seq, sent_ns = LEGIT.unpack(data)
            if seq in self.latency_ns:
                self.duplicates += 1
            else:
                self.latency_ns[seq] = rx_ns - sent_ns


# --- the bridge --------------------------------------------------------------------------------


def run_wait_seconds(pid: int) -> float:
    """Seconds ``pid`` spent runnable but waiting for a CPU (/proc/PID/schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def cpu_times() -> dict[str, list[int]]:
    """Per-CPU jiffies from /proc/stat: user, nice, system, idle, iowait, irq, softirq."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            out[name] = [int(v) for v in values[:7]]
    return out


def cpu_shares(then: dict[str, list[int]], now: dict[str, list[int]]) -> dict[str, str]:
    """Per CPU: busy % and its softirq part % over an interval."""
    out = {}
    for cpu, values in now.items():
        d = [a - b for a, b in zip(values, then.get(cpu, values), strict=True)]
        total = max(1, sum(d))
        out[cpu] = (
            f"busy {100 * (total - d[3] - d[4]) / total:.0f} % (softirq {100 * d[6] / total:.0f} %)"
        )
    return out


def busy_seconds(
    then: dict[str, list[int]], now: dict[str, list[int]], cpus: set[int], seconds: float
) -> float:
    """CPU seconds ``cpus`` were busy (not idle or iowait) over an interval of ``seconds``.

    From the busy share of the jiffies counted, times the wall-clock interval (a virtual
    machine's jiffies do not always add up to the wall clock).
    """
    busy = 0.0
    for cpu in cpus:
        d = [a - b for a, b in zip(now[f"cpu{cpu}"], then[f"cpu{cpu}"], strict=True)]
        busy += (sum(d) - d[3] - d[4]) / max(1, sum(d))
    return busy * seconds


def books_of(m: dict[str, float]) -> dict[str, Any]:
    received = by_label(m, "ipxbridge_received_packets_total", "interface", 'path="relay"')
    kernel = by_label(m, "ipxbridge_kernel_dropped_packets_total", "path").get("relay", -1)
    return {
        "received": received,
        "kernel_drops": kernel,
        "fastpath_drops": by_label(m, "ipxbridge_fastpath_dropped_packets_total", "reason"),
        "relay_drops": {
            k: v
            for k, v in by_label(
                m, "ipxbridge_dropped_packets_total", "reason", 'path="relay"'
            ).items()
            if v
        },
        "relayed": int(m.get('ipxbridge_forwarded_packets_total{path="relay"}', 0)),
    }


def settle(box: str, hold: float) -> dict[str, Any]:
    """The bridge's books once it has read everything: unchanged for ``hold`` seconds.

    The fast path's counters are read from nft every KERNEL_READ_SECONDS (app/relay.py), so
    there two scrapes 0.5 s apart agree long before the last read: wait past one period.
    """
    last: dict[str, Any] = {}
    steady_since = time.monotonic()
    deadline = steady_since + 30
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = books_of(scrape(box))
        if now != last:
            last, steady_since = now, time.monotonic()
        elif time.monotonic() - steady_since >= hold:
            break
    return last


def run_mode(mode: str, names: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    # pinned to --bridge-cpus, not to this script's own CPUs
    bridge = start_bridge(
        *("--ipx-listen", "off", "--metrics-listen", "127.0.0.1:9213"),
        *("--iface", "lanA", "--iface", "lanB", *MODES[mode]),
        name=f"{PREFIX}-{mode}-bridge",
        ns=names["box"],
        root=args.root,
        cpus=args.bridge_cpus,
    )
    receiver: Receiver | None = None
    player: Player | None = None
    flooder: subprocess.Popen[str] | None = None
    try:
        bridge.wait_for(READY_RELAY, 20)
        time.sleep(0.5)
        arrived0 = nft_counters(names["box"], "frn_books")  # cumulative over the modes
        at_hb0 = nft_counters(names["hb"], "frn_rx")
        before = books_of(scrape(names["box"]))
        snmp0, softnet0 = snmp(names["box"]), softnet_dropped()
        links0 = link_drops(names["box"], "lanA"), link_drops(names["pa"], "eth0")
        receiver = Receiver(names["hb"])
        receiver.start()
        player = Player(names["pa"])
        flooder = subprocess.Popen(
            [
                *("ip", "netns", "exec", names["pa"], sys.executable, __file__, "--flood"),
                *(f"--flood-pps={args.flood_pps}", f"--seconds={args.seconds}"),
                f"--flood-cpu={args.flood_cpu}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        if flooder.stdout is None or flooder.stdout.readline().strip() != "start":
            raise RuntimeError("the flooder did not start")
        cpu0, wait0, stat0 = cpu_seconds(bridge.pid), run_wait_seconds(bridge.pid), cpu_times()
        flood_began = time.monotonic()
        player.start()
        flood_deadline = time.monotonic() + args.seconds + 60
        while flooder.poll() is None and time.monotonic() < flood_deadline:
            time.sleep(0.2)  # short waits: a signal to this process is handled promptly
        flood_out = json.loads(flooder.communicate(timeout=5)[0].splitlines()[-1])
        cpu1, wait1, stat1 = cpu_seconds(bridge.pid), run_wait_seconds(bridge.pid), cpu_times()
        flood_wall = time.monotonic() - flood_began
        load = Path("/proc/loadavg").read_text().split()[:3]
        player.stop.set()
        player.join(2)
        time.sleep(1.0)  # the last copies
        books = settle(names["box"], KERNEL_READ_SECONDS + 1.0 if mode == "fast" else 0.5)
        cpu2 = cpu_seconds(bridge.pid)
        alive = bridge.alive()
        receiver.stop.set()
        receiver.join(2)
        arrived = delta(nft_counters(names["box"], "frn_books"), arrived0)
        at_hb = delta(nft_counters(names["hb"], "frn_rx"), at_hb0)
        snmp1, softnet1 = snmp(names["box"]), softnet_dropped()
        links1 = link_drops(names["box"], "lanA"), link_drops(names["pa"], "eth0")
    finally:
        for p in (player, receiver):
            if p is not None:
                p.stop.set()
        if flooder is not None and flooder.poll() is None:
            flooder.kill()
        text = bridge.stop()
    lat = sorted(receiver.latency_ns.values())
    received = sum(books["received"].values()) - sum(before["received"].values())
    kernel = books["kernel_drops"] - before["kernel_drops"]
    fastpath = delta(books["fastpath_drops"], before["fastpath_drops"])
    accounted = received + kernel + sum(fastpath.values())
    diff = arrived["all"] - accounted
    return {
        "mode": mode,
        "root": str(args.root),
        "flood_target_pps": args.flood_pps,
        "flood_sent": flood_out["sent"],
        "flood_send_errors": flood_out["errors"],
        "flood_seconds": round(flood_out["seconds"], 3),
        "flood_pps": round(flood_out["sent"] / flood_out["seconds"]),
        "flood_cpus": flood_out["cpus"],
        "legit_sent": player.sent,
        "legit_send_errors": player.errors,
        "legit_delivered": len(lat),
        "legit_duplicates": receiver.duplicates,
        "legit_at_hb_nft": at_hb.get("legit", 0),
        "latency_ms": {
            "p50": pct(lat, 50) / 1e6,
            "p99": pct(lat, 99) / 1e6,
            "max": (lat[-1] if lat else math.nan) / 1e6,
        },
        "flood_at_hb": at_hb.get("flood", 0),
        "arrived": arrived,
        "bridge_received": delta(books["received"], before["received"]),
        "kernel_drops": kernel,
        "fastpath_drops": fastpath,
        "relay_drops": delta(books["relay_drops"], before["relay_drops"]),
        "relayed": books["relayed"] - before["relayed"],
        "books_diff": diff,
        "books_diff_pct": 100 * diff / max(1, arrived["all"]),
        "box_udp": {k: snmp1[k] - snmp0.get(k, 0) for k in ("RcvbufErrors", "InErrors")},
        "softnet_dropped": softnet1 - softnet0,
        "lanA_rx_dropped": links1[0][0] - links0[0][0],
        "pa_tx_dropped": links1[1][1] - links0[1][1],
        "bridge_cpu_s": {
            "flood": round(sum(cpu1) - sum(cpu0), 2),
            "user_total": cpu2[0],
            "system_total": cpu2[1],
            "runqueue_wait": round(wait1 - wait0, 2),
        },
        "cpus": cpu_shares(stat0, stat1),
        # what else ran on the bridge's cores (other processes, interrupts) during the flood
        "others_on_bridge_cpus_s": round(
            busy_seconds(stat0, stat1, args.bridge_cpus, flood_wall) - (sum(cpu1) - sum(cpu0)),
            2,
        ),
        "loadavg": load,
        "alive": alive,
        "traceback": "Traceback" in text,
        "log_tail": text.splitlines()[-20:] if "Traceback" in text else [],
        "bridge_cpus": sorted(args.bridge_cpus),
        "harness_cpus": sorted(os.sched_getaffinity(0)),
    }


def delta(now: dict[str, int], then: dict[str, int]) -> dict[str, int]:
    return {k: v - then.get(k, 0) for k, v in now.items()}


def pct(values: list[int], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of sorted ``values``; NaN when empty."""
    if not values:
        return math.nan
    return float(values[max(0, math.ceil(p / 100 * len(values)) - 1)])


def verdict(r: dict[str, Any]) -> list[str]:
    bad = []
    delivered = 100 * r["legit_delivered"] / max(1, r["legit_sent"])
    if delivered < MIN_DELIVERED_PCT:
        bad.append(f"legitimate delivered {delivered:.2f} % < {MIN_DELIVERED_PCT} %")
    p99 = r["latency_ms"]["p99"]
    if not p99 <= MAX_P99_MS:
        bad.append(f"legitimate p99 latency {p99:.1f} ms > {MAX_P99_MS} ms")
    if not abs(r["books_diff_pct"]) <= MAX_BOOKS_PCT:
        bad.append(f"books differ by {r['books_diff_pct']:+.3f} % (limit ±{MAX_BOOKS_PCT} %)")
    if r["kernel_drops"] < 0:
        bad.append("kernel drops not exported")
    if not r["alive"]:
        bad.append("bridge died")
    if r["traceback"]:
        bad.append("Traceback in the bridge log")
    return bad


def fmt(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}={v:,}" for k, v in sorted(counts.items())) or "none"


def report(r: dict[str, Any]) -> None:
    print(f"\n== mode {r['mode']} ({' '.join(MODES[r['mode']])}), root {r['root']} ==")
    short = r["flood_pps"] < 0.98 * r["flood_target_pps"]
    print(
        f"flood: target {r['flood_target_pps']:,} pps, achieved {r['flood_pps']:,} pps "
        f"({r['flood_sent']:,} sent in {r['flood_seconds']:.2f} s, send errors "
        f"{r['flood_send_errors']:,}, flooder on CPU {r['flood_cpus']})"
        + (" -- SHORT OF THE TARGET: this machine could not send faster" if short else "")
    )
    lat = r["latency_ms"]
    print(
        f"legitimate: sent {r['legit_sent']}, delivered {r['legit_delivered']} "
        f"({100 * r['legit_delivered'] / max(1, r['legit_sent']):.2f} %), latency p50 "
        f"{lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, max {lat['max']:.2f} ms "
        f"(arrived at lanA {r['arrived'].get('lanA_legit', 0)}, copies at hb "
        f"{r['legit_at_hb_nft']}, duplicates {r['legit_duplicates']})"
    )
    print(
        f"flood copies at hb: {r['flood_at_hb']:,} "
        f"({100 * r['flood_at_hb'] / max(1, r['flood_sent']):.1f} % of sent); bridge relayed "
        f"{r['relayed']:,}"
    )
    fp = sum(r["fastpath_drops"].values())
    arrived = r["arrived"]
    print(
        f"books: arrived {arrived['all']:,} (lanA {arrived['lanA']:,} [flood "
        f"{arrived['lanA_flood']:,}], lanB looped-back copies {arrived['lanB']:,}) vs bridge "
        f"received {sum(r['bridge_received'].values()):,} ({fmt(r['bridge_received'])}) + kernel "
        f"drops {r['kernel_drops']:,} + fast-path drops {fp:,} ({fmt(r['fastpath_drops'])}): "
        f"difference {r['books_diff']:+,} ({r['books_diff_pct']:+.3f} %)"
    )
    print(f"relay drops: {fmt(r['relay_drops'])}")
    print(
        f"box: Udp RcvbufErrors {r['box_udp']['RcvbufErrors']:,}, InErrors "
        f"{r['box_udp']['InErrors']:,}; backlog drops (softnet) {r['softnet_dropped']:,}; "
        f"lanA rx_dropped {r['lanA_rx_dropped']:,}; pa eth0 tx_dropped {r['pa_tx_dropped']:,}"
    )
    cpu = r["bridge_cpu_s"]
    print(
        f"bridge: CPU {cpu['flood']:.2f} s during the {r['flood_seconds']:.1f} s flood "
        f"({100 * cpu['flood'] / max(0.001, r['flood_seconds']):.0f} % of a core), "
        f"waited {cpu['runqueue_wait']:.2f} s for a CPU; "
        f"{cpu['user_total']:.2f} s user + {cpu['system_total']:.2f} s system in all; "
        f"alive {'yes' if r['alive'] else 'NO'}, Traceback in its log "
        f"{'YES' if r['traceback'] else 'no'}; loadavg at the end of the flood "
        f"{' '.join(r['loadavg'])}"
    )
    print(
        "machine during the flood: "
        + "; ".join(f"{k} {v}" for k, v in r["cpus"].items())
        + f"; the bridge's CPUs {r['bridge_cpus']} were busy with something else for about "
        f"{r['others_on_bridge_cpus_s']:.2f} s"
    )
    for line in r["log_tail"]:
        print(f"  bridge log: {line}")
    bad = verdict(r)
    print(f"R13 {r['mode']}: " + ("PASS" if not bad else "FAIL: " + "; ".join(bad)))


def cpu_list(text: str) -> set[int]:
    """``"0,2-3"`` -> {0, 2, 3}; ``""`` -> empty (not pinned).

    Raises:
        ValueError: not a CPU list.
    """
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="flood duration")
    parser.add_argument("--flood-pps", type=int, default=80_000, help="flood target rate")
    parser.add_argument("--modes", default="python,fast", help="python,fast")
    parser.add_argument(
        "--flood-cpu",
        type=int,
        default=(os.cpu_count() or 1) - 1,
        help="the core the flooder is pinned to (default: the last)",
    )
    parser.add_argument(
        "--bridge-cpus",
        default="auto",
        help="cores the bridge may run on: a list such as 0 or 0-3, 'any' (not pinned), or "
        "'auto' (default: every core but the flooder's, so the attacker has one core and "
        "the bridge the rest)",
    )
    parser.add_argument(
        "--harness-cpu",
        default="auto",
        help="core for this script's own threads (player, receiver): a number, 'any', or "
        "'auto' (default: the flooder's core, so the harness takes no time from the bridge)",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="ipxbridge checkout to run")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--flood", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 0 < args.seconds <= 600 or not 0 < args.flood_pps <= 1_000_000:
        parser.error("--seconds must be in (0, 600] and --flood-pps in 1..1,000,000")
    if args.flood:
        return flood(args.flood_pps, args.seconds, args.flood_cpu)
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"unknown modes {unknown}; known: {', '.join(MODES)}")
    cpus = set(range(os.cpu_count() or 1))
    if args.flood_cpu not in cpus:
        parser.error(f"--flood-cpu: no CPU {args.flood_cpu} (this machine has {sorted(cpus)})")
    try:
        if args.bridge_cpus == "auto":
            args.bridge_cpus = (cpus - {args.flood_cpu}) or cpus
        elif args.bridge_cpus == "any":
            args.bridge_cpus = cpus
        else:
            args.bridge_cpus = cpu_list(args.bridge_cpus) & cpus
        harness = {
            "auto": {args.flood_cpu},
            "any": cpus,
        }.get(args.harness_cpu) or {int(args.harness_cpu)} & cpus
    except ValueError:
        parser.error("--bridge-cpus / --harness-cpu: not a CPU list")
    if not args.bridge_cpus or not harness:
        parser.error("--bridge-cpus / --harness-cpu: no such CPU here")
    os.sched_setaffinity(0, harness)  # the bridge's own is set when it starts
    if os.geteuid() != 0:
        print("fairness.py needs root (network namespaces, nftables)", file=sys.stderr)
        return 2
    args.root = args.root.resolve()
    print(
        f"R13 fairness bench: root {args.root}; {args.seconds:g} s flood at "
        f"{args.flood_pps:,} pps from {FLOODER} (CPU {args.flood_cpu}) + {LEGIT_PPS} pps from "
        f"{PLAYER}; bridge on CPUs {sorted(args.bridge_cpus)}, this script on CPUs "
        f"{sorted(harness)}; "
        f"{os.cpu_count()} CPUs, loadavg before "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}; namespaces {PREFIX}_*"
    )

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    try:
        with topology() as names:
            for mode in modes:
                result = run_mode(mode, names, args)
                report(result)
                failures += [f"{mode}: {f}" for f in verdict(result)]
                results.append(result)
    except KeyboardInterrupt:
        print("\ninterrupted; namespaces removed", file=sys.stderr)
        return 130
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print("\nR13:", "PASS" if not failures else "FAIL\n  " + "\n  ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
