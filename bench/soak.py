#!/usr/bin/env python3
"""Malformed-input soak (docs/reliability.md R3): a hostile mixture at a fixed rate, then the books.

Usage (as root)::

    python3 bench/soak.py                        # 1,000,000 hostile + 500,000 valid, 20k pps
    python3 bench/soak.py --hostile 200000 --valid 100000 --rate 20000

Everything runs on 127.0.0.1 inside the network namespace ``ipxb_soak``, created and deleted
here. One ``ipxbridge run`` (embedded defaults but the port) serves two registered synthetic
clients, A (the sender) and B (a receiver that answers keepalives), and a stranger socket.

Phases, each paced at ``--rate`` datagrams per second:

1. *valid* (the baseline): A broadcasts well-formed IPX packets, B receives them;
2. *hostile*: a rotation of R3's classes — empty, 1-29 bytes, IPX Length 0 / 29 / larger than
   the datagram / 0xFFFF, bad checksum, 16 hops, a stranger, a spoofed node, a filtered
   socket; inside valid IPX, DirectPlay EnumSessionsReplies whose size runs past the buffer,
   whose NameOffset points outside it or whose DPSESSIONDESC2 size is wrong, PACKET2_DATA
   fragments claiming 4 GiB; and bad-then-good pairs (the good one
   must still arrive); one datagram in 1,000 is 65,507 bytes.

Printed per phase: datagrams sent, the bridge's RSS growth, delivery of the well-formed
broadcasts to B. At the end, from ``/metrics``: received = forwarded + control + dropped, and
received + kernel drops = everything sent to the bridge (exact, not approximate); the drop
reasons; whether the bridge is alive and its log free of tracebacks. Not covered: spoofed IP
source addresses and IP/UDP length lies (they need raw sockets; the kernel drops the latter
before any socket sees them).
"""

import argparse
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID

from benchlib.bridge import READY_IPX, start_bridge
from benchlib.frames import GAME_SOCKET, ipx_broadcast
from benchlib.metrics import scrape
from benchlib.netns import namespaces
from benchlib.procstat import rss_kib
from benchlib.sockets import set_buffer

from ipxbridge.wire import directplay as dp
from ipxbridge.wire import ipx

NETNS: Final = "ipxb_soak"
PORT: Final = 31213
SERVER: Final = ("127.0.0.1", PORT)
ARMADA: Final = UUID("76F93801-9340-11D2-AE34-00600895C779")


@dataclass(slots=True)
class Peer:
    """A synthetic DOSBox-protocol client."""

    sock: socket.socket
    node: bytes = b""

    @classmethod
    def register(cls) -> "Peer":
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        set_buffer(sock, 64 << 20)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(2)
        sock.sendto(ipx.build_registration(), SERVER)
        reply, _ = sock.recvfrom(2048)
        sock.setblocking(False)
        return cls(sock, ipx.parse_header(reply).dst_node)


@dataclass(slots=True)
class Tally:
    sent: int = 0  # datagrams sent to the bridge from every socket
    good_sent: int = 0  # well-formed broadcasts B must receive
    good_received: int = 0
    classes: Counter[str] = field(default_factory=Counter)


def bcast(src: bytes, payload: bytes = b"game", *, sock: int = GAME_SOCKET) -> bytes:
    return ipx_broadcast(src, payload, sock=sock)


def hostile(a: bytes, b: bytes) -> Iterator[tuple[str, str, bytes]]:
    """(class, sender, datagram) for ever; sender is "a" or "stranger"."""
    good = bcast(a)
    # An EnumSessionsReply (decoded in full by the inspector), then broken three ways.
    desc = dp.SessionDesc(0, UUID(int=1), ARMADA, 8, 1, (0, 0, 0, 0))
    reply = dp.build_enum_sessions_reply(dp.EnumSessionsReply(desc, "soak"))
    oversize = b"\xff\xff" + reply[2:]  # DPSP size 0xFFFF, far beyond the buffer
    bad_offset = reply[:108] + b"\xff\xff\x00\x00" + reply[112:]  # NameOffset past the end
    bad_desc = reply[:28] + b"\x51" + reply[29:]  # DPSESSIONDESC2.dwSize 81, not 80
    frag = dp.build_packet_fragment(
        dp.PacketFragment(0x30, UUID(int=7), 0, 8, 0, 0xFFFF, 0xFFFFFFFF, 0, b"x" * 8),
        bare=True,
    )
    rotation: list[tuple[str, str, Callable[[int], bytes]]] = [
        ("empty", "a", lambda _i: b""),
        ("short", "a", lambda i: bytes([0xFE]) * (1 + i % 29)),
        ("length_0", "a", lambda _i: good[:2] + b"\0\0" + good[4:]),
        ("length_29", "a", lambda _i: good[:2] + (29).to_bytes(2, "big") + good[4:]),
        ("length_long", "a", lambda _i: good[:2] + (len(good) + 9).to_bytes(2, "big") + good[4:]),
        ("length_ffff", "a", lambda _i: good[:2] + b"\xff\xff" + good[4:]),
        ("checksum", "a", lambda _i: b"\x12\x34" + good[2:]),
        ("hops_16", "a", lambda _i: good[:4] + b"\x10" + good[5:]),
        ("stranger", "stranger", lambda _i: good),
        ("spoofed", "a", lambda _i: bcast(b)),
        ("filtered", "a", lambda _i: bcast(a, sock=0x0452)),
        ("dp_oversize", "a", lambda _i: bcast(a, oversize)),
        ("dp_name_offset", "a", lambda _i: bcast(a, bad_offset)),
        ("dp_desc_size", "a", lambda _i: bcast(a, bad_desc)),
        ("dp_fragment_4gib", "a", lambda _i: bcast(a, frag)),
        ("bad_then_good", "a", lambda _i: b"\xff" * 31),
        ("good_after_bad", "a", lambda i: bcast(a, b"after %d" % i)),
    ]
    fill = ipx.MAX_DATAGRAM - ipx.HEADER_LEN - 8
    for i in itertools.count():
        if i % 1000 == 999:
            # Each one its own packet: the same bytes again within 0.25 s would not leave by
            # the receiver's port a second time (the switch's loop bound, rule 9).
            yield "max_datagram", "a", bcast(a, i.to_bytes(8, "big") + b"\xfe" * fill)
            continue
        name, sender, make = rotation[i % len(rotation)]
        yield name, sender, make(i)


def valid(a: bytes) -> Iterator[tuple[str, str, bytes]]:
    for i in itertools.count():
        yield "valid", "a", bcast(a, b"valid %d" % i)


class Soak:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.a = Peer.register()
        self.b = Peer.register()
        self.stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.stranger.bind(("127.0.0.1", 0))
        self.tally = Tally(sent=2)  # the two registrations

    def drain_b(self) -> None:
        """B reads everything and answers keepalives, as DOSBox does."""
        while True:
            try:
                data = self.b.sock.recv(70_000)
            except BlockingIOError:
                return
            header = ipx.parse_header(data)
            if header.dst_socket == ipx.SOCKET_ECHO:
                self.b.sock.sendto(ipx.build_ping_reply(header.src_node, self.b.node), SERVER)
                self.tally.sent += 1
            elif header.dst_socket == GAME_SOCKET and (
                data[30:].startswith((b"valid", b"after")) or len(data) == ipx.MAX_DATAGRAM
            ):
                self.tally.good_received += 1

    def wait_verified(self) -> None:
        """B's game announces itself before the traffic starts, as a game does when it
        joins: the packet carries the node B's registration reply gave it, which proves B
        receives at its address (docs/ipx.md, "Verification"); until then the bridge would send
        B nothing but that reply. Nobody hears it (A has not proved itself yet)."""
        self.b.sock.sendto(bcast(self.b.node, b"B here", sock=GAME_SOCKET + 1), SERVER)
        self.tally.sent += 1

    def run(self, stream: Iterator[tuple[str, str, bytes]], count: int) -> float:
        """Send ``count`` datagrams at the rate; returns the seconds it took."""
        start = time.monotonic()
        tick = 0.01
        per_tick = max(1, int(self.rate * tick))
        sent = 0
        while sent < count:
            for name, sender, data in itertools.islice(stream, min(per_tick, count - sent)):
                sock = self.a.sock if sender == "a" else self.stranger
                while True:
                    try:
                        sock.sendto(data, SERVER)
                        break
                    except BlockingIOError:
                        self.drain_b()
                self.tally.sent += 1
                self.tally.classes[name] += 1
                if name in ("valid", "good_after_bad", "max_datagram"):
                    self.tally.good_sent += 1
                sent += 1
            self.drain_b()
            lag = start + (sent / self.rate) - time.monotonic()
            if lag > 0:
                time.sleep(lag)
        return time.monotonic() - start


def books(m: dict[str, float]) -> dict[str, float]:
    def total(prefix: str) -> float:
        return sum(v for k, v in m.items() if k.startswith(prefix) and 'path="ipx"' in k)

    return {
        "received": total("ipxbridge_received_packets_total"),
        "forwarded": total("ipxbridge_forwarded_packets_total"),
        "control": m.get("ipxbridge_control_packets_total", 0),
        "dropped": total("ipxbridge_dropped_packets_total"),
        "kernel_dropped": total("ipxbridge_kernel_dropped_packets_total"),
    }


def inner(args: argparse.Namespace) -> int:
    """Runs inside the namespace: start the bridge, soak it, print the figures as JSON."""
    bridge = start_bridge(
        *("--ipx-listen", f"127.0.0.1:{PORT}"),
        name=f"ipxb-soak-{os.getpid()}",
        ready=READY_IPX,
        timeout=15,
    )
    try:
        soak = Soak(args.rate)
        soak.wait_verified()
        result: dict[str, Any] = {"rate": args.rate}
        for phase, stream, count in (
            ("valid", valid(soak.a.node), args.valid),
            ("hostile", hostile(soak.a.node, soak.b.node), args.hostile),
        ):
            before = soak.tally.good_sent, soak.tally.good_received
            rss0 = rss_kib(bridge.pid)
            seconds = soak.run(stream, count)
            time.sleep(0.5)
            soak.drain_b()
            good = soak.tally.good_sent - before[0]
            got = soak.tally.good_received - before[1]
            result[phase] = {
                "sent": count,
                "seconds": round(seconds, 1),
                "rss_before_kib": rss0,
                "rss_growth_kib": rss_kib(bridge.pid) - rss0,
                "good_sent": good,
                "good_delivered": got,
            }
        time.sleep(1)
        metrics = scrape()
        result["books"] = books(metrics)
        result["sent_to_bridge"] = soak.tally.sent
        result["drop_reasons"] = {
            re.search(r'reason="(\w+)"', k).group(1): int(v)  # type: ignore[union-attr]
            for k, v in metrics.items()
            if k.startswith("ipxbridge_dropped_packets_total") and 'path="ipx"' in k and v
        }
        result["directplay_malformed"] = {
            k.split('"')[1]: int(v)
            for k, v in metrics.items()
            if k.startswith("ipxbridge_directplay_malformed_total") and v
        }
        result["alive"] = bridge.alive()
    finally:
        log = bridge.stop()
    result["traceback_in_log"] = "Traceback" in log
    print(json.dumps(result))
    return 0


def report(result: dict[str, Any]) -> bool:  # the JSON printed by inner()
    b = result["books"]
    sent = result["sent_to_bridge"]
    print(f"rate {result['rate']:,} datagrams/s on 127.0.0.1 in netns {NETNS}\n")
    print("phase     sent        seconds  bridge RSS before -> growth   well-formed delivered")
    for phase in ("valid", "hostile"):
        p = result[phase]
        print(
            f"{phase:<9} {p['sent']:>10,}  {p['seconds']:>7}  {p['rss_before_kib']:>9,} KiB "
            f"{p['rss_growth_kib']:>+8,} KiB   {p['good_delivered']:,}/{p['good_sent']:,}"
        )
    closed = b["received"] == b["forwarded"] + b["control"] + b["dropped"]
    exact = b["received"] + b["kernel_dropped"] == sent
    print(
        f"\nreceived {b['received']:,.0f} = forwarded {b['forwarded']:,.0f} + control "
        f"{b['control']:,.0f} + dropped {b['dropped']:,.0f}: {'yes' if closed else 'NO'}"
    )
    print(
        f"received + kernel drops {b['kernel_dropped']:,.0f} = sent {sent:,}: "
        f"{'yes' if exact else 'NO'}"
    )
    print(f"drop reasons: {result['drop_reasons']}")
    print(f"DirectPlay malformed (inspected, still forwarded): {result['directplay_malformed']}")
    hostile_growth = result["hostile"]["rss_growth_kib"]
    # Every well-formed broadcast must reach the verified receiver, in both phases.
    delivered = all(
        result[p]["good_delivered"] == result[p]["good_sent"] for p in ("valid", "hostile")
    )
    ok = bool(
        closed
        and exact
        and delivered
        and result["alive"]
        and not result["traceback_in_log"]
        and hostile_growth < 10 * 1024
    )
    print(
        f"well-formed broadcasts all delivered: {delivered}, "
        f"alive: {result['alive']}, traceback in log: {result['traceback_in_log']}, "
        f"RSS growth under hostile input < 10 MiB: {hostile_growth < 10 * 1024}"
    )
    print("R3:", "PASS" if ok else "FAIL")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile", type=int, default=1_000_000)
    parser.add_argument("--valid", type=int, default=500_000)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(args)
    if os.geteuid() != 0:
        print("soak.py needs root (network namespaces)", file=sys.stderr)
        return 2
    with namespaces(NETNS):
        proc = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                NETNS,
                sys.executable,
                __file__,
                "--inner",
                f"--hostile={args.hostile}",
                f"--valid={args.valid}",
                f"--rate={args.rate}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0 or not proc.stdout.strip():
        print(proc.stdout + proc.stderr, file=sys.stderr)
        return 1
    return 0 if report(json.loads(proc.stdout.strip().splitlines()[-1])) else 1


if __name__ == "__main__":
    sys.exit(main())
