#!/usr/bin/env python3
"""Hostile broadcasts against the relay (docs/reliability.md R9 source validation, R7 reflection).

Own namespaces (created and deleted here; traffic stays inside them)::

    pa 10.74.1.10/24 --lanA-- box 10.74.1.1/24 | 10.74.2.1/24 --lanB-- hb 10.74.2.20/24

``pa`` writes whole IPv4 frames through an ``AF_PACKET`` socket (any source address, any
checksum, any length field) to 255.255.255.255, relay ports 47624 and 6073. ``box`` runs one
``ipxbridge run`` per mode: ``fast`` (preserve, kernel fast path), ``python`` (preserve,
``--fast-path off``) and ``rewrite``. ``hb`` counts, per class, the copies on its wire (an
``AF_PACKET`` capture: what the bridge emitted, whether or not the stack accepts it) and the
datagrams its UDP sockets deliver (what a game host sees).

Per class ``--count`` frames at ``--rate`` per second, one legitimate broadcast from the
player after every ten of them, and a real client's DP4 EnumSessions (SOCKADDR 0.0.0.0) every
0.5 s throughout. Each class is counted where it is dropped: the bridge's
``ipxbridge_dropped_packets_total{reason}`` (Python path), the fast path's nft counters by
comment, or the kernel before any socket (Udp InCsumErrors / InErrors, IpExt
InTruncatedPkts, and the host-wide ``in_martian_src`` for sources Linux routing refuses).

    python3 bench/hostile_relay.py [--count 10000] [--rate 5000] [--modes fast,python,rewrite]
"""

import argparse
import contextlib
import json
import os
import socket
import struct
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from benchlib.bridge import READY_RELAY, start_bridge
from benchlib.frames import ipv4_udp
from benchlib.metrics import by_label, kernel_counters, nft_counters, scrape
from benchlib.netns import socket_in, two_segments

from ipxbridge.wire.directplay import (
    EnumSessions,
    SockAddr,
    build_dp8_enum_query,
    build_enum_sessions,
)

PREFIX: Final = f"hrl{os.getpid() % 100000}"
PLAYER, VICTIM, BOX_A, BOX_A_BCAST = "10.74.1.10", "10.74.1.77", "10.74.1.1", "10.74.1.255"
BOX_B, HOST, SEGMENT_B_HOST = "10.74.2.1", "10.74.2.20", "10.74.2.99"
DP4_PORT, DP8_PORT = 47624, 6073
MAGIC: Final = b"HRL!"
ETH_P_IP: Final = 0x0800
LEGIT_EVERY: Final = 10  # one legitimate broadcast after every ten hostile frames
ENUM_EVERY: Final = 0.5  # seconds between the real client's own enumerations
MODES: Final = {
    "fast": ("--source-mode", "preserve", "--fast-path", "on"),
    "python": ("--source-mode", "preserve", "--fast-path", "off"),
    "rewrite": ("--source-mode", "rewrite"),
}


# --- frames ------------------------------------------------------------------------------------


def tag(klass: int, seq: int) -> bytes:
    return MAGIC + struct.pack("!BI", klass, seq)


def dp4_enum(sockaddr: str, klass: int, seq: int) -> bytes:
    msg = EnumSessions(uuid.UUID(int=0x4C414E), 0x81, None)
    return build_enum_sessions(msg, sockaddr=SockAddr(2, 2300, sockaddr)) + tag(klass, seq)


def dp8_query(klass: int, seq: int) -> bytes:
    return build_dp8_enum_query(cookie=seq & 0xFFFF, app_data=tag(klass, seq))


@dataclass(frozen=True)
class Threat:
    """One hostile class: how its frames are made and who should drop and count them."""

    name: str
    make: Callable[[int, int], bytes]  # (class id, seq) -> IPv4 packet
    fast: str  # reason on the fast path ("nft:..." for a rule comment, else the bridge's)
    python: str  # on the Python paths ("kernel:..." when the kernel drops it first)
    bound: bool = False  # an enumeration limit: some get through by design


def plain(
    src: str,
    sport: int = 50000,
    *,
    checksum: str = "good",
    udp_length: int | None = None,
    ip_length: int | None = None,
) -> Callable[[int, int], bytes]:
    def make(klass: int, seq: int) -> bytes:
        dst = ("255.255.255.255", DP4_PORT)
        payload = tag(klass, seq)
        return ipv4_udp(
            (src, sport),
            dst,
            payload,
            udp_checksum=checksum,
            udp_length=udp_length,
            ip_length=ip_length,
        )

    return make


def _dp4(src: str, sockaddr: str) -> Callable[[int, int], bytes]:
    def make(klass: int, seq: int) -> bytes:
        payload = dp4_enum(sockaddr, klass, seq)
        return ipv4_udp((src, 2300), ("255.255.255.255", DP4_PORT), payload)

    return make


def _dp8(src: str) -> Callable[[int, int], bytes]:
    def make(klass: int, seq: int) -> bytes:
        return ipv4_udp((src, 40000), ("255.255.255.255", DP8_PORT), dp8_query(klass, seq))

    return make


OFF, BAD, OWN, PORT0 = "source_off_link", "source_invalid", "own_packet", "source_port_zero"
MISMATCH = "dp4_sockaddr_mismatch"
MALFORMED, MARTIAN, TRUNC = "nft:udp_malformed", "kernel:martian", "kernel:InTruncatedPkts"
THREATS: Final = (
    Threat("off_link_8.8.8.8", plain("8.8.8.8"), "nft:" + OFF, OFF),
    Threat("segment_b_on_a", plain(SEGMENT_B_HOST), "nft:" + OFF, OFF),
    Threat("source_0.0.0.0", plain("0.0.0.0", 68), "nft:" + BAD, BAD),
    Threat("source_255.255.255.255", plain("255.255.255.255"), "nft:" + BAD, MARTIAN),
    Threat("directed_bcast", plain(BOX_A_BCAST), "nft:" + BAD, BAD),
    Threat("loopback", plain("127.0.0.1"), "nft:" + BAD, MARTIAN),
    Threat("multicast", plain("224.0.0.251"), "nft:" + BAD, MARTIAN),
    Threat("class_e", plain("240.0.0.1"), "nft:" + BAD, BAD),
    Threat("bridge_own", plain(BOX_A), "nft:" + OWN, MARTIAN),
    Threat("port_0", plain(PLAYER, 0), "nft:" + PORT0, PORT0),
    Threat("udp_bad_checksum", plain(PLAYER, checksum="bad"), "none", "kernel:InCsumErrors"),
    Threat("udp_length_long", plain(PLAYER, udp_length=200), MALFORMED, "kernel:InErrors"),
    Threat("udp_length_4", plain(PLAYER, udp_length=4), MALFORMED, "kernel:InErrors"),
    Threat("ip_length_long", plain(PLAYER, ip_length=400), TRUNC, TRUNC),
    Threat("dp4_sockaddr_victim", _dp4(PLAYER, VICTIM), MISMATCH, MISMATCH),
    Threat("dp4_spoofed_victim", _dp4(VICTIM, VICTIM), "enum_rate", "enum_rate", bound=True),
    Threat("dp8_spoofed_victim", _dp8(VICTIM), "enum_rate", "enum_rate", bound=True),
)
LEGIT: Final = len(THREATS)  # class ids of the player's own traffic
LEGIT_ENUM: Final = LEGIT + 1


# --- the receiving host --------------------------------------------------------------------


@dataclass
class Receiver:
    """hb: copies on the wire and datagrams delivered, per class id."""

    ns: str
    wire: Counter[int] = field(default_factory=Counter)
    delivered: Counter[int] = field(default_factory=Counter)
    socks: list[socket.socket] = field(default_factory=list)

    def open(self) -> None:
        cap = socket_in(self.ns, socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        cap.bind(("eth0", ETH_P_IP))
        cap.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.socks = [cap]
        for port in (DP4_PORT, DP8_PORT):
            s = socket_in(self.ns, socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            s.bind(("0.0.0.0", port))
            self.socks.append(s)
        for s in self.socks:
            s.setblocking(False)

    def drain(self) -> None:
        cap, *udp = self.socks
        with contextlib.suppress(BlockingIOError):
            while True:
                frame = cap.recv(70_000)
                if frame[9] == 17 and (found := _tag_of(frame)) is not None:
                    self.wire[found] += 1
        for s in udp:
            with contextlib.suppress(BlockingIOError):
                while True:
                    if (found := _tag_of(s.recv(70_000))) is not None:
                        self.delivered[found] += 1

    def close(self) -> None:
        for s in self.socks:
            s.close()


def _tag_of(data: bytes) -> int | None:
    at = data.rfind(MAGIC)
    return data[at + 4] if at >= 0 and len(data) >= at + 9 else None


# --- counters --------------------------------------------------------------------------------


def bridge_drops(ns: str) -> Counter[str]:
    """Relay drops by reason from /metrics, nft rule counters by comment ("nft:" prefix), and
    the kernel's own drop counters ("kernel:" prefix)."""
    # Read in-process, inside the namespace (a Python start-up per reading made each settle
    # take seconds under load): /metrics on its loopback, and its /proc/net counters.
    metrics = scrape(ns)
    out = Counter(by_label(metrics, "ipxbridge_dropped_packets_total", "reason", 'path="relay"'))
    for comment, packets in nft_counters(ns, "ipxbridge", missing_ok=True).items():
        if ">" not in comment:  # the copy rules (lanA>lanB); the drops carry their reason
            out["nft:" + comment] += packets
    kernel = kernel_counters(ns)
    for section in ("Udp", "IpExt"):
        for name, value in kernel.get(section, {}).items():
            out["kernel:" + name] += value
    out["kernel:martian"] = _martians()
    return out


def _martians() -> int:
    """in_martian_src over all CPUs (/proc/net/stat/rt_cache is host-wide, not per namespace)."""
    lines = Path("/proc/net/stat/rt_cache").read_text().split("\n")
    col = lines[0].split().index("in_martian_src")
    return sum(int(line.split()[col], 16) for line in lines[1:] if line.strip())


def settle(ns: str, rx: Receiver) -> Counter[str]:
    """Counters once the bridge has read everything (two readings 0.3 s apart agree on the
    counters a class is judged by; the martian count is host-wide and moves with anything
    else this machine runs, so it is not waited on)."""
    watched = {t.fast for t in THREATS} | {t.python for t in THREATS}
    watched -= {"none", MARTIAN}
    last: Counter[str] = Counter()
    for _ in range(40):
        time.sleep(0.3)
        rx.drain()
        now = bridge_drops(ns)
        if all(now[k] == last[k] for k in watched):
            return now
        last = now
    return last


# --- one mode ----------------------------------------------------------------------------------


def run_mode(mode: str, names: dict[str, str], count: int, rate: float) -> dict[str, Any]:
    bridge = start_bridge(
        *("--ipx-listen", "off", "--metrics-listen", "127.0.0.1:9213"),
        *("--iface", "lanA", "--iface", "lanB", *MODES[mode]),
        name=f"{PREFIX}-{mode}",
        ns=names["box"],
        ready=READY_RELAY,
    )
    rx = Receiver(names["hb"])
    rx.open()
    tx = socket_in(names["pa"], socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
    tx.bind(("eth0", ETH_P_IP))
    to = ("eth0", ETH_P_IP, 0, 0, b"\xff" * 6)
    legit_seq = enum_seq = 0
    next_enum = time.monotonic()
    rows: list[dict[str, Any]] = []
    try:
        before = settle(names["box"], rx)
        for klass, threat in enumerate(THREATS):
            began = time.monotonic()
            for seq in range(count):
                tx.sendto(threat.make(klass, seq), to)
                if seq % LEGIT_EVERY == LEGIT_EVERY - 1:
                    dst = "255.255.255.255" if legit_seq % 2 else BOX_A_BCAST
                    legit = ipv4_udp((PLAYER, 50000), (dst, DP4_PORT), tag(LEGIT, legit_seq))
                    tx.sendto(legit, to)
                    legit_seq += 1
                if time.monotonic() >= next_enum:  # a real client enumerating, as it does
                    enum = dp4_enum("0.0.0.0", LEGIT_ENUM, enum_seq)
                    tx.sendto(ipv4_udp((PLAYER, 2300), ("255.255.255.255", DP4_PORT), enum), to)
                    enum_seq += 1
                    next_enum = time.monotonic() + ENUM_EVERY
                lag = began + (seq + 1) / rate - time.monotonic()
                if lag > 0:
                    time.sleep(lag)
                if seq % 256 == 0:
                    rx.drain()
            seconds = time.monotonic() - began
            after = settle(names["box"], rx)
            delta = after - before
            before = after
            expected = threat.fast if mode == "fast" else threat.python
            rows.append(
                {
                    "class": threat.name,
                    "sent": count,
                    "seconds": round(seconds, 2),
                    "wire_copies": rx.wire[klass],
                    "delivered": rx.delivered[klass],
                    "counted_as": expected,
                    "counted": delta[expected] if expected != "none" else 0,
                    "bound": threat.bound,
                }
            )
        rows.append(_legit_row("legitimate broadcasts", LEGIT, legit_seq, rx))
        rows.append(_legit_row("legitimate DP4 enumerations", LEGIT_ENUM, enum_seq, rx))
    finally:
        tx.close()
        rx.close()
        text = bridge.stop()
    return {"mode": mode, "rows": rows, "tracebacks": text.count("Traceback")}


def _legit_row(name: str, klass: int, sent: int, rx: Receiver) -> dict[str, Any]:
    row = {"class": name, "sent": sent, "wire_copies": rx.wire[klass]}
    return {**row, "delivered": rx.delivered[klass], "counted_as": "", "counted": 0, "bound": False}


def verdict(result: dict[str, Any]) -> list[str]:
    """Failures: a hostile class relayed or not counted; a legitimate datagram lost."""
    bad = []
    for row in result["rows"]:
        name, sent = row["class"], row["sent"]
        if name.startswith("legitimate"):
            if row["delivered"] != sent:
                bad.append(f"{name}: {row['delivered']}/{sent} delivered")
        elif row["bound"]:
            # 20 at once, then 10 per second: the enumeration limit (policy/relay.py rule 9)
            allowed = 20 + 10 * (row["seconds"] + 2)
            if row["delivered"] > allowed or row["counted"] + row["delivered"] != sent:
                bad.append(f"{name}: {row['delivered']} delivered, {row['counted']} counted")
        elif row["counted_as"] == "none":
            continue  # not preventable on this path (bad UDP checksum on the fast path)
        elif (
            row["delivered"]
            or (not row["counted_as"].startswith("kernel:martian") and row["counted"] < sent)
            or row["wire_copies"]
        ):
            bad.append(f"{name}: {row['wire_copies']} copies, {row['counted']} counted")
    return bad


def report(result: dict[str, Any], count: int, rate: float) -> None:
    print(f"\n== mode {result['mode']}: {count:,} frames per class at {rate:,.0f}/s ==")
    print(
        f"{'class':<28}{'sent':>8}{'wire copies':>13}{'delivered':>11}  counted as"
        f"{'':<18}{'count':>8}"
    )
    for row in result["rows"]:
        print(
            f"{row['class']:<28}{row['sent']:>8,}{row['wire_copies']:>13,}"
            f"{row['delivered']:>11,}  {row['counted_as']:<28}{row['counted']:>8,}"
        )
    if result["tracebacks"]:
        print(f"bridge log: {result['tracebacks']} tracebacks")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000, help="frames per class")
    parser.add_argument("--rate", type=float, default=5000.0, help="frames per second")
    parser.add_argument("--modes", default="fast,python,rewrite")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    a = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    results = []
    failures: list[str] = []
    with two_segments(
        PREFIX, pa=f"{PLAYER}/24", box_a=f"{BOX_A}/24", box_b=f"{BOX_B}/24", hb=f"{HOST}/24"
    ) as names:
        for mode in a.modes.split(","):
            result = run_mode(mode, names, a.count, a.rate)
            report(result, a.count, a.rate)
            failures += [f"{mode}: {f}" for f in verdict(result)]
            results.append(result)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    print("\nR7/R9:", "PASS" if not failures else "FAIL\n  " + "\n  ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
