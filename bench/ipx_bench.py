#!/usr/bin/env python3
"""Benchmark ipxbridge against DOSBox's built-in IPX server, side by side, in a private netns.

Usage (as root)::

    python3 bench/ipx_bench.py                 # 3 interleaved rounds, both servers, mixed ports
    python3 bench/ipx_bench.py --rounds 1 --skip-baseline --json /tmp/ipx_bench.json
    python3 bench/ipx_bench.py --rounds 1 --skip-baseline --rates 250   # the quickest full table
    python3 bench/ipx_bench.py --soak 600 --rates 500   # RSS at 1 min and after 10 min
    python3 bench/ipx_bench.py --no-mixed --ipxbox /path/to/ipxbox \
        --ref-bridge-cmd "env PYTHONPATH=/old/tree python3 -P -m ipxbridge run \
        --ipx-listen 127.0.0.1:{port} --log-level warning"     # before/after and ipxbox

What it does:

* creates the network namespace ``--netns`` (default ``ipxb_bench``), brings ``lo`` up and
  puts every server and client inside it on 127.0.0.1; the namespace is deleted on exit;
* starts a fresh server process for every scenario run (DOSBox never frees a server slot),
  pinned to CPU 1 with ``taskset``; the load generator is this script re-executed as
  ``_client`` inside the same namespace, pinned to CPU 0, printing one JSON line;
* scenarios: unicast round trip (client 0 -> client 1 -> client 0) and broadcast fan-out
  (every client broadcasts at RATE per second for SECS, all clients count what arrives);
* before anything is counted every station sends one probe broadcast (as a game's stations
  announce themselves), and on ipxbridge the broadcast runs wait (about a second) until each
  client has answered the bridge's first keepalive: until then the bridge sends a new client
  only a small budget (its anti-reflection rule), and the bench measures a game in progress.
  What the bridge still held back or the kernel refused is read from its /metrics and printed;
* rounds alternate the server order (A B, B A, ...) so drifts hit both servers alike;
* optional references in the same rounds: ``--ref-bridge-cmd`` (another ipxbridge checkout,
  ``ipxbridge_ref``: before/after in one run) and ``--ipxbox PATH`` (fragglet's ipxbox, run as
  ``ipxbox --port P``; built by hand, so off by default and never in CI);
* every run reports the server's CPU seconds and its resident memory (VmRSS) at the end;
* mixed ports (``--no-mixed`` leaves them out): in every round, after the DOSBox-only
  scenarios, ipxbridge alone runs with half the stations DOSBox-protocol clients and half
  native IPX stations (``--clients 16``: 8 + 8) at ``--mixed-rate`` broadcasts/s each, and a
  unicast round trip native station -> DOSBox client -> native station. The native stations
  are AF_PACKET sockets on veths plugged into a Linux bridge (a switch) in the namespace
  ``NETNS_seg``, whose uplink ``seg0`` is in the bridge's namespace; the bridge runs with
  ``--ipx-iface seg0:ethernet`` (framing ``auto``, so it learns the stations' ``--framing``).
  The DOSBox-only runs start the bridge without that port, as before. A Markdown table sets
  delivered / expected, the RTT median and the bridge's CPU seconds of both side by side;
  ``NETNS_seg`` is deleted on exit with ``NETNS``.

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
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Final

from benchlib import BenchError
from benchlib.ipxload.client import MIN_SIZE, RTT_WARMUP, ClientSpec, JsonDict, client_main
from benchlib.ipxload.native import DEFAULT_FRAMING, FRAMINGS, SEGMENT_IF, build_segment
from benchlib.ipxload.report import (
    Scenario,
    build_scenarios,
    check_targets,
    clients_for,
    describe_run,
    mixed_comparison,
    mixed_split,
    natives_for,
    render_mixed,
    render_table,
    servers_for,
    summarise,
)
from benchlib.ipxload.servers import (
    CLIENT_CPU,
    DOSBOX_FREE_SLOTS,
    DOSBOX_SLOTS,
    KEEPALIVE_WAIT,
    SERVER_CPU,
    Bench,
    preflight,
)
from benchlib.netns import exit_on_signals, namespaces
from benchlib.procstat import rss_kib

from ipxbridge.wire import ipx

HOST: Final = "127.0.0.1"
DEFAULT_NETNS: Final = "ipxb_bench"
DEFAULT_PORT: Final = 31213


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
        "--mixed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run ipxbridge with half the stations native IPX on an Ethernet segment (on)",
    )
    parser.add_argument(
        "--mixed-rate",
        type=float,
        default=250.0,
        help="broadcasts per second per station of the mixed run (250)",
    )
    parser.add_argument(
        "--framing",
        choices=FRAMINGS,
        default=DEFAULT_FRAMING,
        help=f"the native stations' frame type ({DEFAULT_FRAMING})",
    )
    parser.add_argument(
        "--bridge-cmd",
        default=(
            f"{shlex.quote(sys.executable)} -m ipxbridge run "
            f"--ipx-listen {HOST}:{{port}} --log-level warning"
        ),
        help="ipxbridge command; {port} is replaced",
    )
    parser.add_argument(
        "--ref-bridge-cmd",
        help="a second ipxbridge command run as ipxbridge_ref in the same rounds (e.g. the "
        "tree before a change); {port} is replaced",
    )
    parser.add_argument(
        "--ipxbox",
        metavar="PATH",
        help="also run this ipxbox binary as a reference (ipxbox --port P; off by default)",
    )
    parser.add_argument(
        "--soak",
        type=float,
        metavar="SECONDS",
        help="instead of the rounds: ipxbridge alone, --clients x the first --rates for "
        "SECONDS, its RSS sampled every 5 s; reports RSS at 1 minute and at the end",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="server UDP port")
    parser.add_argument("--netns", default=DEFAULT_NETNS, help="namespace to create and delete")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.clients < 2 or args.secs <= 0 or args.rtt_count < 1:
        parser.error("need --rounds >= 1, --clients >= 2, --secs > 0, --rtt-count >= 1")
    if any(rate <= 0 for rate in args.rates) or args.mixed_rate <= 0:
        parser.error("--rates and --mixed-rate must be positive")
    if args.size < MIN_SIZE or args.size + ipx.HEADER_LEN > 1400:
        parser.error(f"--size must be between {MIN_SIZE} and {1400 - ipx.HEADER_LEN}")
    if args.ipxbox is not None and not os.access(args.ipxbox, os.X_OK):
        parser.error(f"--ipxbox {args.ipxbox}: not an executable file")
    return args


def segment_ns(args: argparse.Namespace) -> str:
    """The namespace of the mixed runs' Ethernet segment (the switch and the stations)."""
    return f"{args.netns}_seg"


def loadavg() -> float:
    """The 1-minute load average (the bench itself adds about 1)."""
    return os.getloadavg()[0]


def run_rounds(
    args: argparse.Namespace, bench: Bench, scenarios: Sequence[Scenario]
) -> list[JsonDict]:
    """Every round, scenario and server, the server order alternating (A B, B A, ...) so that
    drifts hit both alike; DOSBox is dropped for good if it never once starts."""
    runs: list[JsonDict] = []
    for round_no in range(args.rounds):
        servers = bench.servers()
        order = servers if round_no % 2 == 0 else servers[::-1]
        for scenario in scenarios:
            for kind in order:
                if kind == "dosbox" and not bench.dosbox_ok:
                    continue
                if kind not in servers_for(scenario):
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
                    native=natives_for(scenario, args.clients),
                    native_ns=segment_ns(args),
                    framing=args.framing,
                )
                result = bench.run_once(kind, spec, f"r{round_no}-{scenario.name}-{kind}")
                run: JsonDict = {"round": round_no, "scenario": scenario.name, "server": kind}
                runs.append({**run, **result})
                print(describe_run(runs[-1]), flush=True)
                if (
                    kind == "dosbox"
                    and "error" in result
                    and not any(r["server"] == "dosbox" and "error" not in r for r in runs)
                ):
                    print(
                        "DOSBox baseline failed to start: continuing with ipxbridge alone",
                        flush=True,
                    )
                    bench.dosbox_ok = False
    return runs


SOAK_SAMPLE: Final = 5.0
SOAK_REFERENCE: Final = 60.0  # RSS at one minute: the bridge has its tables and caches


def run_soak(args: argparse.Namespace, bench: Bench) -> JsonDict:
    """One long broadcast run on ipxbridge; its RSS every ``SOAK_SAMPLE`` seconds."""
    spec = ClientSpec(
        "bcast",
        args.port,
        args.clients,
        args.rates[0],
        args.soak,
        args.rtt_count,
        args.size,
        0,
        keepalive_wait=KEEPALIVE_WAIT,
        dedupe=False,
    )
    server = bench.start_bridge("soak")
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        start = time.monotonic()
        while not done.wait(SOAK_SAMPLE):
            with contextlib.suppress(OSError):
                samples.append((round(time.monotonic() - start, 1), rss_kib(server.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = bench.run_client(ClientSpec(**{**asdict(spec), "server_pid": server.pid}))
    finally:
        done.set()
        sampler.join()
        cpu, rss_end = bench.stop(server)
    # The load starts after registration and the keepalive wait: count from the first
    # sample past SOAK_REFERENCE seconds of the server's life.
    minute = next((kib for t, kib in samples if t >= SOAK_REFERENCE), None)
    last = samples[-1][1] if samples else rss_end
    return {
        "soak_s": args.soak,
        "clients": args.clients,
        "rate": args.rates[0],
        "rss_kib_1min": minute,
        "rss_kib_end": last,
        "rss_growth": round(last / minute - 1, 4) if minute and last else None,
        "rss_samples": samples,
        "server_total_cpu_s": cpu,
        "run": result,
    }


def print_soak(report: JsonDict) -> None:
    """The soak's lines, then its JSON."""
    run = report["run"]
    print(
        f"soak {report['soak_s']:g} s, {report['clients']} clients x {report['rate']:g}/s: "
        f"delivered {run.get('delivered')}/{run.get('expected')} "
        f"({run.get('delivery_ratio')}), server drops {run.get('server_socket_drops')}"
    )
    growth = report["rss_growth"]
    print(
        f"RSS at 1 min {_kib(report['rss_kib_1min'])}, at the end {_kib(report['rss_kib_end'])}"
        f" ({'-' if growth is None else f'{100 * growth:+.1f} %'})"
    )
    print(json.dumps(report))


def _kib(value: int | None) -> str:
    return "-" if value is None else f"{value / 1024:.1f} MiB"


def make_report(
    args: argparse.Namespace,
    runs: list[JsonDict],
    scenarios: Sequence[Scenario],
    *,
    baseline: bool,
    load_start: float,
    started: float,
) -> JsonDict:
    """The whole result: configuration, medians, targets and every run."""
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
            "ref_bridge_cmd": args.ref_bridge_cmd,
            "ipxbox": args.ipxbox,
            "port": args.port,
            "server_cpu": SERVER_CPU,
            "client_cpu": CLIENT_CPU,
            "dosbox_clients_max": DOSBOX_FREE_SLOTS,
            "mixed": args.mixed,
            "mixed_rate": args.mixed_rate if args.mixed else None,
            "mixed_split": list(mixed_split(args.clients)) if args.mixed else None,
            "framing": args.framing if args.mixed else None,
        },
        "elapsed_s": round(time.time() - started, 1),
        "loadavg_1min": {"start": load_start, "end": loadavg()},
        "summary": summary,
        "targets": check_targets(summary, args.clients, args.secs),
        "runs": runs,
    }
    if args.mixed:
        report["mixed"] = mixed_comparison(
            runs, summary, args.clients, args.mixed_rate, args.framing
        )
    return report


def print_report(report: JsonDict, scenarios: Sequence[Scenario]) -> None:
    """The tables, one line per target, the load, then the JSON."""
    print()
    print(render_table(report["summary"], scenarios))
    print()
    if "mixed" in report:
        config = report["config"]
        print(render_mixed(report["mixed"], config["rounds"], config["secs"]))
        print()
    for name, target in report["targets"].items():
        print(
            f"target {name}: value {target['value' if 'value' in target else 'value_us']} "
            f"-> {'PASS' if target['pass'] else 'FAIL' if target['pass'] is False else 'n/a'}"
        )
    load = report["loadavg_1min"]
    print(
        f"load average (1 min) {load['start']:.2f} at the start, {load['end']:.2f} at the end "
        f"(the bench adds about 1; more means other work shared the 2 cores)"
    )
    print(json.dumps(report))


def main(argv: Sequence[str]) -> int:
    """Orchestrate all runs; returns the exit code."""
    if argv and argv[0] == "_client":
        return client_main(argv[1:])
    args = parse_args(argv)
    exit_on_signals()
    try:
        baseline = preflight(args.skip_baseline, mixed=args.mixed)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    scenarios = build_scenarios(args.rates, args.clients, args.mixed_rate if args.mixed else None)
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
    workdir = Path(tempfile.mkdtemp(prefix="ipxb_bench_"))
    script = Path(__file__).resolve()
    bench = Bench(
        args.netns,
        args.port,
        args.bridge_cmd,
        workdir,
        script,
        dosbox_ok=baseline,
        segment_if=SEGMENT_IF if args.mixed else None,
        ref_bridge_cmd=args.ref_bridge_cmd,
        ipxbox=args.ipxbox,
    )
    started = time.time()
    if args.soak:
        with namespaces(args.netns):
            try:
                soak = run_soak(args, bench)
            finally:
                bench.stop_all()
                shutil.rmtree(workdir, ignore_errors=True)
        print_soak(soak)
        if args.json is not None:
            args.json.write_text(json.dumps(soak, indent=2) + "\n", encoding="utf-8")
        return 0
    made = (args.netns, segment_ns(args)) if args.mixed else (args.netns,)
    try:
        # Every namespace made here is deleted on the way out: an error, Ctrl-C, SIGTERM/HUP.
        with namespaces(*made):
            if args.mixed:
                build_segment(args.netns, segment_ns(args), mixed_split(args.clients)[1])
            runs = run_rounds(args, bench, scenarios)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        bench.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    report = make_report(
        args, runs, scenarios, baseline=baseline, load_start=load_start, started=started
    )
    print_report(report, scenarios)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
