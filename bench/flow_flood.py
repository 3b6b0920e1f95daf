#!/usr/bin/env python3
"""Flow-table campaign (docs/reliability.md R16): spoofed one-packet sources
against a rewrite-mode bridge while real players enumerate.

Own namespaces, created and deleted here; every packet stays inside them::

    pa 10.72.0.10/16 --lanA-- box 10.72.0.1/16 | 10.73.1.1/24 --lanB-- hb (host) 10.73.1.20/24

``box`` runs ``python -m ipxbridge run --source-mode rewrite`` (from ``--root``: this checkout
by default, or another one for a before/after comparison). ``hb`` is a DirectPlay 8 host that
answers every EnumQuery (``--host-answers player``: only the players'). ``pa`` holds two
players, who broadcast an EnumQuery every second each — one *established* (from 3 s before the
flood), one *newcomer* (from 2 s into the flood, or half-way into a shorter one: a player who
arrives during an attack) — and the attacker: a separate process writing EnumQuery broadcasts
through a raw socket, each from a new (address, port) in 10.72.16.0/20 (4,000 addresses, as
many ports as needed: on-link, so source checks pass, and each address stays under the
per-address enumeration rate). ``pa`` owns that range as a local route and ``box`` has
permanent neighbour entries for it, so the host's answers to spoofed sources are delivered and
ignored instead of filling the kernel's neighbour table.

Printed: each player's enumerations during the flood that were relayed to the host and
answered, in %; flows evicted and refused by reason and the relay's books from /metrics; the
bridge's open descriptors (/proc/PID/fd) and RSS before, during (peak) and after the flood.

    python3 bench/flow_flood.py [--sources 100000] [--rate 2000] [--after 5]
                                [--host-answers all|player] [--root DIR]
"""

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchlib import ROOT
from benchlib.bridge import READY_RELAY, start_bridge
from benchlib.frames import ipv4_udp
from benchlib.metrics import by_label, family_sum, scrape
from benchlib.netns import sh, socket_in, two_segments
from benchlib.procstat import open_fds, rss_kib
from benchlib.sockets import broadcaster

from ipxbridge.wire.directplay import (
    DP8EnumQuery,
    DP8EnumResponse,
    build_dp8_enum_query,
    build_dp8_enum_response,
    parse_dplay,
)

PREFIX = f"ffl{os.getpid() % 100000}"
PLAYER, NEWCOMER = "10.72.0.10", "10.72.0.11"
BOX_A, BOX_B, HOST = "10.72.0.1", "10.73.1.1", "10.73.1.20"
SPOOF_NET, SPOOF_ADDRESSES = "10.72.16.0/20", 4000
DP8 = 6073
PLAYER_COOKIES = 0x7FFF  # players' cookies are 1..0x7FFF, the attacker's have 0x8000 set


def spoof_address(n: int) -> str:
    return f"10.72.{16 + n // 250}.{1 + n % 250}"  # n < 4000: inside 10.72.16.0/20


@contextlib.contextmanager
def topology() -> Iterator[dict[str, str]]:
    with two_segments(
        PREFIX, pa=f"{PLAYER}/16", box_a=f"{BOX_A}/16", box_b=f"{BOX_B}/24", hb=f"{HOST}/24"
    ) as names:
        sh("ip", "-n", names["pa"], "addr", "add", f"{NEWCOMER}/16", "dev", "eth0")
        sh("ip", "-n", names["pa"], "route", "add", "local", SPOOF_NET, "dev", "lo")
        mac_pa = json.loads(sh("ip", "-n", names["pa"], "-j", "link", "show", "eth0"))[0]["address"]
        batch = "".join(
            f"neigh add {spoof_address(n)} lladdr {mac_pa} dev lanA nud permanent\n"
            for n in range(SPOOF_ADDRESSES)
        )
        sh("ip", "-n", names["box"], "-batch", "-", stdin=batch, timeout=60)
        yield names


def spoofed(src: str, sport: int, payload: bytes) -> bytes:
    """An IPv4/UDP broadcast with a chosen source (no UDP checksum)."""
    return ipv4_udp((src, sport), ("255.255.255.255", DP8), payload, udp_checksum="none")


def flood(sources: int, rate: int) -> int:
    """Runs inside ``pa`` (``--flood``): one EnumQuery from each of ``sources`` sources."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    raw.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"eth0")
    start = time.monotonic()
    for n in range(sources):
        src = spoof_address(n % SPOOF_ADDRESSES)
        port = 1024 + n // SPOOF_ADDRESSES
        query = build_dp8_enum_query(cookie=0x8000 | n & 0x7FFF)
        raw.sendto(spoofed(src, port, query), ("255.255.255.255", 0))
        lag = start + (n + 1) / rate - time.monotonic()
        if lag > 0:
            time.sleep(lag)
    print(json.dumps({"sent": sources, "seconds": round(time.monotonic() - start, 2)}))
    return 0


class Host(threading.Thread):
    """A DirectPlay 8 host in ``hb``: answers EnumQuery, notes the player's cookies."""

    def __init__(self, ns: str, *, answer_all: bool) -> None:
        super().__init__(daemon=True)
        self.sock = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(("0.0.0.0", DP8))
        self.sock.settimeout(0.2)
        self.answer_all = answer_all
        self.player_cookies: set[int] = set()
        self.spoofed = 0
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            try:
                data, src = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            query = parse_dplay(data, dp8_context=True)
            if not isinstance(query, DP8EnumQuery):
                continue
            mine = query.cookie <= PLAYER_COOKIES
            if mine:
                self.player_cookies.add(query.cookie)
            else:
                self.spoofed += 1
            if mine or self.answer_all:
                with contextlib.suppress(OSError):
                    self.sock.sendto(response(query.cookie), src)


def response(cookie: int) -> bytes:
    return build_dp8_enum_response(
        DP8EnumResponse(
            cookie=cookie,
            flags=0,
            max_players=8,
            current_players=1,
            session_name="flow flood",
            password=b"",
            reserved_data=b"",
            app_reserved_data=b"",
            instance_guid=uuid.UUID(int=1),
            application_guid=uuid.UUID(int=2),
            reply_data=b"",
        )
    )


class Player(threading.Thread):
    """A real player in ``pa``: an EnumQuery every second, answers matched by cookie."""

    def __init__(self, ns: str, address: str, first_cookie: int) -> None:
        super().__init__(daemon=True)
        self.sock = broadcaster(ns, "eth0", address)
        self.first_cookie = first_cookie
        self.sock.settimeout(0.05)
        self.sent: list[int] = []
        self.answered: set[int] = set()
        self.counting = False  # enumerations during the flood only
        self.counted: list[int] = []
        self.stopping = False

    def run(self) -> None:
        cookie, next_at = self.first_cookie, time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if now >= next_at:
                cookie = cookie % PLAYER_COOKIES + 1
                self.sock.sendto(build_dp8_enum_query(cookie=cookie), ("255.255.255.255", DP8))
                self.sent.append(cookie)
                if self.counting:
                    self.counted.append(cookie)
                next_at = now + 1.0
            try:
                data, _ = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            with contextlib.suppress(Exception):
                self.answered.add(parse_dplay(data, dp8_context=True).cookie)  # type: ignore[union-attr]


def process(pid: int) -> tuple[int, int]:
    """(open descriptors, RSS in KiB) of ``pid``."""
    return open_fds(pid), rss_kib(pid)


def relay_sum(m: dict[str, float], family: str) -> int:
    return family_sum(m, family, 'path="relay"')


def campaign(args: argparse.Namespace, names: dict[str, str]) -> dict[str, Any]:
    bridge = start_bridge(
        *("--ipx-listen", "off", "--metrics-listen", "127.0.0.1:9213"),
        *("--iface", "lanA", "--iface", "lanB", "--source-mode", "rewrite"),
        name=f"{PREFIX}-bridge",
        ns=names["box"],
        root=args.root,
    )
    host = Host(names["hb"], answer_all=args.host_answers == "all")
    player = Player(names["pa"], PLAYER, 0)
    newcomer = Player(names["pa"], NEWCOMER, 0x4000)
    try:
        bridge.wait_for(READY_RELAY, 15)
        host.start()
        player.start()
        time.sleep(3)  # the player enumerates and is answered before the flood
        fds0, rss0 = process(bridge.pid)
        player.counting = True
        attacker = subprocess.Popen(
            [
                *("ip", "netns", "exec", names["pa"], sys.executable, __file__, "--flood"),
                *(f"--sources={args.sources}", f"--rate={args.rate}"),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        peak_fds, peak_rss = fds0, rss0
        flood_started = time.monotonic()
        newcomer_at = min(2.0, args.sources / args.rate / 2)  # well inside the flood
        while attacker.poll() is None:
            if not newcomer.is_alive() and time.monotonic() - flood_started >= newcomer_at:
                newcomer.counting = True
                newcomer.start()
            fds, rss = process(bridge.pid)
            peak_fds, peak_rss = max(peak_fds, fds), max(peak_rss, rss)
            time.sleep(0.2)
        flood_out = json.loads(attacker.stdout.read().strip().splitlines()[-1])  # type: ignore[union-attr]
        time.sleep(1.5)  # the last enumeration's answer
        player.counting = newcomer.counting = False
        time.sleep(max(0.0, args.after - 1.5))
        fds1, rss1 = process(bridge.pid)
        peak_fds, peak_rss = max(peak_fds, fds1), max(peak_rss, rss1)
        metrics = scrape(names["box"])
        alive = bridge.alive()
    finally:
        player.stopping = newcomer.stopping = host.stopping = True
        log = bridge.stop()
    players = {}
    for name, who in (("established", player), ("newcomer", newcomer)):
        players[name] = {
            "enumerations": len(who.counted),
            "relayed": sum(c in host.player_cookies for c in who.counted),
            "answered": sum(c in who.answered for c in who.counted),
        }
    return {
        "root": str(args.root),
        "sources": args.sources,
        "rate": args.rate,
        "flood_seconds": flood_out["seconds"],
        "host_answers": args.host_answers,
        "players": players,
        "spoofed_at_host": host.spoofed,
        "evicted": by_label(metrics, "ipxbridge_relay_flow_evictions_total", "reason"),
        "refused": by_label(metrics, "ipxbridge_relay_flows_refused_total", "reason"),
        "flows": by_label(metrics, "ipxbridge_relay_flows", "standing"),
        "return_sockets": int(metrics.get("ipxbridge_relay_return_sockets", -1)),
        "flow_limit_send_errors": sum(
            int(v) for k, v in metrics.items() if 'errno="FLOW_LIMIT"' in k
        ),
        "received": relay_sum(metrics, "ipxbridge_received_packets_total"),
        "relayed_total": relay_sum(metrics, "ipxbridge_forwarded_packets_total"),
        "dropped": by_label(
            {k: v for k, v in metrics.items() if 'path="relay"' in k},
            "ipxbridge_dropped_packets_total",
            "reason",
        ),
        "kernel_drops": relay_sum(metrics, "ipxbridge_kernel_dropped_packets_total"),
        "fds": [fds0, peak_fds, fds1],
        "rss_kib": [rss0, peak_rss, rss1],
        "after_seconds": args.after,
        "alive": alive,
        "traceback": "Traceback" in log,
    }


def fmt(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}={v:,}" for k, v in sorted(counts.items())) or "n/a (no such metric)"


def report(r: dict[str, Any]) -> None:
    print(
        f"{r['sources']:,} spoofed one-packet sources at {r['rate']:,}/s "
        f"({r['flood_seconds']} s) against a rewrite-mode bridge ({r['root']}); host answers "
        f"{r['host_answers']}; two players enumerating every second"
    )
    for name, p in r["players"].items():
        n = p["enumerations"] or 1
        print(
            f"{name} player, enumerations during the flood: {p['enumerations']}, relayed to the "
            f"host {p['relayed']} ({100 * p['relayed'] / n:.1f} %), answered {p['answered']} "
            f"({100 * p['answered'] / n:.1f} %)"
        )
    print(f"flows evicted: {fmt(r['evicted'])}")
    print(f"flows refused: {fmt(r['refused'])}")
    print(
        f"copies counted as relayed but never sent (send error FLOW_LIMIT, the old table): "
        f"{r['flow_limit_send_errors']:,}"
    )
    dropped = sum(r["dropped"].values())
    books = r["received"] == r["relayed_total"] + dropped
    print(
        f"relay books: received {r['received']:,} = relayed {r['relayed_total']:,} + dropped "
        f"{dropped:,}: {'yes' if books else 'NO'}; kernel drops at the relay ports "
        f"{r['kernel_drops']:,}; drops {fmt({k: v for k, v in r['dropped'].items() if v})}"
    )
    print(f"flows open at the end: {fmt(r['flows'])}, return sockets {r['return_sockets']}")
    f0, f1, f2 = r["fds"]
    m0, m1, m2 = (k / 1024 for k in r["rss_kib"])
    print(
        f"bridge descriptors: before {f0}, peak during {f1}, after {f2} "
        f"({r['after_seconds']} s after the flood)"
    )
    print(f"bridge RSS: before {m0:.1f} MiB, peak during {m1:.1f} MiB, after {m2:.1f} MiB")
    print(f"bridge alive: {r['alive']}, traceback in its log: {r['traceback']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=2_000, help="spoofed datagrams per second")
    parser.add_argument("--after", type=float, default=5.0, help="seconds to wait after")
    parser.add_argument("--host-answers", choices=("all", "player"), default="all")
    parser.add_argument("--root", type=Path, default=ROOT, help="ipxbridge checkout to run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--flood", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 0 < args.sources <= 1_000_000 or not 0 < args.rate <= 50_000:
        parser.error("--sources must be 1..1,000,000 and --rate 1..50,000 (bounded campaign)")
    if args.flood:
        return flood(args.sources, args.rate)
    if os.geteuid() != 0:
        print("flow_flood.py needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    with topology() as names:
        result = campaign(args, names)
    report(result)
    if args.json:
        print(json.dumps(result))
    return 0 if result["alive"] and not result["traceback"] else 1


if __name__ == "__main__":
    sys.exit(main())
