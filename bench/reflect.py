#!/usr/bin/env python3
"""Reflection campaign against the IPX tunnel (docs/reliability.md R26, R7): what can a spoofer
make the bridge send toward victims, and does a silent listener still hear the game meanwhile?

docs/ipx.md ("Verification, and what an unproven address may be sent"): everything the bridge
sends toward an address that has not proven it receives there is held to token buckets in
bytes per second, per destination IPv4 address (``ipx.unverified_address_bytes_per_second``,
``_byte_burst``) and for the whole bridge (``unverified_total_bytes_per_second``,
``_byte_burst``). This bench attacks those bounds and measures them from outside the bridge.

Own namespaces (created and deleted here; every packet stays inside them)::

    player   10.71.1.10 --l0-- 10.71.1.1  box  10.71.2.1 --l1-- 10.71.2.10 victim
    attacker 10.71.3.10 --l2-- 10.71.3.1       10.71.4.1 --l3-- 10.71.4.10 listener

``box`` runs one ``ipxbridge run`` per attack (fresh tables and buckets). ``box`` routes the
victim addresses, 10.72.0.0/16, to ``victim``, which owns none of them and forwards nothing:
the datagrams the bridge aims at them are counted on ``victim``'s wire by an ``AF_PACKET``
socket (kernel receive timestamps; every UDP payload byte from port 213 to 10.72.0.0/16),
not by the bridge's metrics, and then dropped without an ICMP answer.

* ``player`` is a verified DOSBox-protocol client playing: it broadcasts ``--player-rate``
  packets a second of ``--player-size`` bytes and answers pings (the bridge's probe), so the
  bridge aims a copy of each broadcast at every spoofed "client" it admitted.
* ``watcher``, beside the player, is a DOSBox client that only listens: it answers the
  bridge's probe and is verified a second after registering, so what it hears is what the
  bridge forwarded at all (a flood that overloads the bridge loses broadcasts before any
  limit is asked).
* ``listener`` is a legitimate listener that behaves like IPXWrapper: it registers, then
  never sends and never answers a ping, so it stays unverified and shares the bridge's total
  bound with the victims. Printed: the share of the player's broadcasts during the attack
  that reached it, and whether it was still registered afterwards.
* ``attacker`` is one or more processes (``--procs``) writing datagrams whose IPv4 source is
  a victim's through a raw socket, paced to the offered rate; what they achieved is printed.
  Each datagram comes from a new (address, port) as far as they go: addresses
  10.72.0.1... (``--sources`` of them), ports 1024-65535.

Attacks (``--attacks``):

* ``register``: spoofed DOSBox registrations (keyed nodes, the default configuration);
* ``rejoin``: spoofed rejoins, a unicast data packet to an unknown node whose source node is
  the one the bridge assigns to the spoofed (address, port) (so the spoofed packet itself
  reaches nobody: what the victims get is what being a client brings). Run with
  ``node_assignment: address``: with keyed nodes (the default) a rejoin cannot be forged and
  is dropped as ``unregistered`` (``rejoin_keyed`` shows that; not run by default).

Per attack, over the window from the first to the last spoofed datagram (T seconds): bytes
per second toward the most-hit victim address against the per-address rate, and toward all
victim addresses against the total rate; the first second printed apart (the burst), then
the rest (steady: it may exceed the rate by what the burst left after the first second, at
most burst / (T - 1)) and the second half of T alone; and the whole window against
burst + rate * T, the bound that must hold (victims and listener together for the total:
they share it). The limits are the embedded defaults (``ipxbridge.config``).
``ipxbridge_unverified_sent_bytes_total`` and ``_packets_total`` from /metrics against the
bytes and datagrams counted on the wire toward every unverified address (victims and
listener) between the same two scrapes, the second read once the bridge is quiet. Exit
status 1 when a bound is exceeded, the metrics disagree by more than ``--agree`` percent, the
wire counter lost datagrams or the bridge logged a traceback.

    python3 bench/reflect.py [--seconds 10] [--attacks register,rejoin] [--sources 1,10000]
                             [--rates 1000,50000] [--json FILE]
"""

import argparse
import contextlib
import ipaddress
import json
import math
import os
import re
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from benchlib import BenchError
from benchlib.bridge import READY_IPX, Process, start_bridge
from benchlib.metrics import by_label, family_sum, kernel_counters, scrape
from benchlib.netns import exit_on_signals, inside, namespaces, nsexec, sh, socket_in, veth
from benchlib.sockets import SO_TIMESTAMPNS, received_ns, set_buffer

from ipxbridge.config import IpxSection
from ipxbridge.wire import ipx

PREFIX: Final = f"rfl{os.getpid() % 100000}"
# who: (the box's end, theirs); the box's interfaces are l0..l3 in this order
LINKS: Final = {
    "player": ("10.71.1.1", "10.71.1.10"),
    "victim": ("10.71.2.1", "10.71.2.10"),
    "attacker": ("10.71.3.1", "10.71.3.10"),
    "listener": ("10.71.4.1", "10.71.4.10"),
}
VICTIM_NET: Final = ipaddress.IPv4Network("10.72.0.0/16")
MAX_SOURCES: Final = 64_000  # victim_address() stays inside VICTIM_NET
FIRST_PORT, PORTS = 1024, 65536 - 1024
SERVER: Final = 213
FROM_SERVER: Final = SERVER.to_bytes(2, "big")  # a UDP header's source port
API: Final = "http://127.0.0.1:9213"
MAGIC: Final = b"R26!"  # the player's broadcasts: MAGIC, sequence number, padding
UNKNOWN_NODE: Final = bytes.fromhex("020000000001")  # a rejoin's destination: nobody's
GAME_SOCKET: Final = 0x4545
ETH_P_IP: Final = 0x0800
PACKET_OUTGOING: Final = 4
SOL_PACKET, PACKET_STATISTICS = 263, 6
MAX_RATE: Final = 200_000  # offered datagrams per second, at most
FULL_PACKET: Final = 576  # docs/ipx.md: a burst must hold one full packet
IPX_PATH: Final = 'path="ipx"'


@dataclass(frozen=True, slots=True)
class Attack:
    name: str
    nodes: str  # node_assignment
    what: str


ATTACKS: Final = {
    "register": Attack("register", "keyed", "spoofed registrations (keyed nodes, the default)"),
    "rejoin": Attack(
        "rejoin",
        "address",
        "spoofed rejoins, node_assignment: address (with keyed nodes they are `unregistered`)",
    ),
    "rejoin_keyed": Attack("rejoin_keyed", "keyed", "spoofed rejoins against keyed nodes"),
}


@dataclass(frozen=True, slots=True)
class Limits:
    """The reflection limit the bridge runs with (bytes, bytes per second)."""

    address_rate: float
    address_burst: int
    total_rate: float
    total_burst: int

    def env(self) -> dict[str, str]:
        return {
            "IPXBRIDGE_IPX__UNVERIFIED_ADDRESS_BYTES_PER_SECOND": repr(self.address_rate),
            "IPXBRIDGE_IPX__UNVERIFIED_ADDRESS_BYTE_BURST": str(self.address_burst),
            "IPXBRIDGE_IPX__UNVERIFIED_TOTAL_BYTES_PER_SECOND": repr(self.total_rate),
            "IPXBRIDGE_IPX__UNVERIFIED_TOTAL_BYTE_BURST": str(self.total_burst),
        }


def default_limits() -> Limits:
    """The embedded defaults (``ipxbridge.config.IpxSection``)."""
    d = IpxSection()
    return Limits(
        d.unverified_address_bytes_per_second,
        d.unverified_address_byte_burst,
        d.unverified_total_bytes_per_second,
        d.unverified_total_byte_burst,
    )


def victim_address(n: int) -> str:
    """The ``n``-th victim address (n < MAX_SOURCES), inside VICTIM_NET."""
    return f"10.72.{n // 250}.{1 + n % 250}"


@contextlib.contextmanager
def topology() -> Iterator[dict[str, str]]:
    names = {n: f"{PREFIX}_{n}" for n in ("box", *LINKS)}
    with namespaces(*names.values()):
        for i, (who, (box_ip, their_ip)) in enumerate(LINKS.items()):
            veth((names["box"], f"l{i}", f"{box_ip}/24"), (names[who], "eth0", f"{their_ip}/24"))
        # Spoofed sources arrive from the attacker's link and replies leave by the victim's:
        # no reverse-path filter in the box (it is off in a new namespace; say so anyway).
        for key in ("all", "default", "l2"):
            nsexec(names["box"], "sysctl", "-qw", f"net.ipv4.conf.{key}.rp_filter=0")
        sh("ip", "-n", names["box"], "route", "add", str(VICTIM_NET), "via", LINKS["victim"][1])
        # The victim owns none of them and does not forward: dropped there, no ICMP back.
        sh("ip", "-n", names["victim"], "route", "add", "blackhole", str(VICTIM_NET))
        yield names


# --- the attacker (a separate process inside the attacker's namespace) ------------------------


def spoof_worker(a: argparse.Namespace) -> int:
    """``--worker``: this process's share of the spoofed datagrams, paced; prints JSON."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    with contextlib.suppress(OSError):
        raw.setsockopt(socket.SOL_SOCKET, 32, 4 << 20)  # SO_SNDBUFFORCE
    target = LINKS["attacker"][0]
    dst4 = socket.inet_aton(target)
    addresses = [socket.inet_aton(victim_address(n)) for n in range(a.sources)]
    if a.kind == "register":
        before, after = ipx.build_registration(), b""
    else:
        pkt = ipx.build_packet(
            dst_node=UNKNOWN_NODE,
            dst_socket=GAME_SOCKET,
            src_node=bytes(6),
            src_socket=GAME_SOCKET,
            payload=MAGIC,
        )
        before, after = pkt[:22], pkt[28:]  # the source node (address, port) goes between
    size = len(before) + len(after) + (6 if a.kind != "register" else 0)
    ip_head = struct.pack("!BBHHHBBH", 0x45, 0, 28 + size, 0, 0, 64, socket.IPPROTO_UDP, 0)
    udp_rest = struct.pack("!HHH", SERVER, 8 + size, 0)  # no UDP checksum
    total = round(a.rate * a.seconds)
    mine = len(range(a.index, total, a.procs))
    rate = a.rate / a.procs
    send, where, sources = raw.sendto, (target, 0), a.sources
    rejoin = a.kind != "register"
    time.sleep(max(0.0, a.start_at - time.time()))
    start_wall, start = time.time(), time.monotonic()
    sent = errors = 0
    while sent < mine:
        elapsed = time.monotonic() - start
        if elapsed >= a.seconds:
            break
        due = min(mine, int(elapsed * rate) + 1)
        if sent >= due:
            time.sleep(min(0.001, (sent + 1) / rate - elapsed))
            continue
        while sent < due:
            j = a.index + sent * a.procs
            src4 = addresses[j % sources]
            port = struct.pack("!H", FIRST_PORT + (j // sources) % PORTS)
            payload = before + src4 + port + after if rejoin else before
            try:
                send(ip_head + src4 + dst4 + port + udp_rest + payload, where)
            except OSError:
                errors += 1
            sent += 1
    print(json.dumps({"sent": sent, "errors": errors, "start": start_wall, "end": time.time()}))
    return 0


def run_attackers(
    ns: str, kind: str, *, sources: int, rate: float, seconds: float, procs: int
) -> dict[str, float]:
    """Start ``procs`` spoofing processes in ``ns``, wait for them; their sums and times."""
    start_at = time.time() + 1.5  # past their interpreter's start
    workers = [
        subprocess.Popen(
            [
                *("ip", "netns", "exec", ns, sys.executable, __file__, "--worker", kind),
                *(f"--sources={sources}", f"--rate={rate}", f"--seconds={seconds}"),
                *(f"--start-at={start_at}", f"--index={i}", f"--procs={procs}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(procs)
    ]
    outs = []
    for w in workers:
        out, err = w.communicate(timeout=seconds + 30)
        if w.returncode != 0 or not out.strip():
            raise BenchError(f"spoofing process failed ({w.returncode}): {err.strip()}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    start = min(o["start"] for o in outs)
    end = max(o["end"] for o in outs)
    return {
        "sent": sum(o["sent"] for o in outs),
        "errors": sum(o["errors"] for o in outs),
        "start": start,
        "end": end,
    }


# --- the wire counter, the player and the listener (threads of this process) ------------------


class WireCounter(threading.Thread):
    """Every UDP datagram from the bridge (source port 213) to ``net`` that reaches
    interface ``ifname`` of ``ns``: its kernel receive time, destination and payload bytes."""

    def __init__(self, ns: str, ifname: str, net: ipaddress.IPv4Network) -> None:
        super().__init__(daemon=True)
        self.sock = socket_in(ns, socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        self.sock.bind((ifname, ETH_P_IP))
        set_buffer(self.sock, 64 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.net, self.mask = int(net.network_address), int(net.netmask)
        self.when = array("d")  # wall-clock seconds (the kernel's receive time)
        self.dst = array("L")
        self.size = array("L")
        self.stopping = False
        self.kernel_drops = 0

    def run(self) -> None:
        sock, net, mask = self.sock, self.net, self.mask
        when, dst, size = self.when, self.dst, self.size
        while not self.stopping:
            ready, _, _ = select.select([sock], [], [], 0.1)
            if not ready:
                continue
            for _ in range(256):
                try:
                    data, anc, _, addr = sock.recvmsg(64, 64, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING or len(data) < 28 or data[9] != socket.IPPROTO_UDP:
                    continue
                ihl = (data[0] & 0x0F) * 4
                to = int.from_bytes(data[16:20], "big")
                if to & mask != net or data[ihl : ihl + 2] != FROM_SERVER:
                    continue
                when.append(received_ns(anc) / 1e9)
                dst.append(to)
                size.append(int.from_bytes(data[ihl + 4 : ihl + 6], "big") - 8)

    def finish(self) -> None:
        self.stopping = True
        if self.is_alive():
            self.join(5)
        _, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        self.kernel_drops = drops
        self.sock.close()

    def window(self, start: float, end: float) -> tuple[Counter[int], int]:
        """Bytes per destination, and datagrams, received in [start, end)."""
        per: Counter[int] = Counter()
        packets = 0
        for t, d, n in zip(self.when, self.dst, self.size, strict=True):
            if start <= t < end:
                per[d] += n
                packets += 1
        return per, packets


def register(sock: socket.socket, server: tuple[str, int]) -> bytes:
    """Register as a DOSBox client; the node the first datagram back gives us."""
    sock.settimeout(3)
    sock.sendto(ipx.build_registration(), server)
    return ipx.parse_header(sock.recvfrom(2048)[0]).dst_node


class DosClient(threading.Thread):
    """A DOSBox-protocol client as DOSBox behaves: registers, answers pings (so the bridge's
    probe verifies it a second after it registers), broadcasts ``rate`` game packets a second
    (0: it only listens), and notes which of the player's broadcasts reach it."""

    def __init__(self, ns: str, *, rate: float, size: int, limit: float) -> None:
        super().__init__(daemon=True)
        box, me = LINKS["player"]
        self.server = (box, SERVER)
        self.sock = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
        set_buffer(self.sock, 4 << 20)
        self.sock.bind((me, 0))
        self.address = f"{me}:{self.sock.getsockname()[1]}"
        self.node = register(self.sock, self.server)
        self.sock.setblocking(False)
        self.rate, self.pad = rate, bytes(max(0, size - ipx.HEADER_LEN - 8))
        self.max_packets = math.ceil(rate * limit)  # bounded however long we are kept
        self.sent: list[float] = []  # wall-clock time of broadcast seq
        self.heard: set[int] = set()
        self.stopping = False

    def run(self) -> None:
        interval = 1 / self.rate if self.rate else math.inf
        due = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if now >= due and len(self.sent) < self.max_packets:
                data = MAGIC + len(self.sent).to_bytes(4, "big") + self.pad
                self.sock.sendto(
                    ipx.build_packet(
                        dst_node=ipx.BROADCAST_NODE,
                        dst_socket=GAME_SOCKET,
                        src_node=self.node,
                        src_socket=GAME_SOCKET,
                        payload=data,
                    ),
                    self.server,
                )
                self.sent.append(time.time())
                due += interval
            wait = min(0.1, max(0.0, due - time.monotonic()))
            ready, _, _ = select.select([self.sock], [], [], wait)
            for _ in range(64 if ready else 0):
                try:
                    packet = self.sock.recv(2048)
                except BlockingIOError:
                    break
                with contextlib.suppress(ValueError):
                    self.take(packet)

    def take(self, packet: bytes) -> None:
        h = ipx.parse_header(packet)
        if h.is_echo and h.is_broadcast and h.src_node != self.node:
            self.sock.sendto(ipx.build_ping_reply(h.src_node, self.node), self.server)
        elif packet[ipx.HEADER_LEN : ipx.HEADER_LEN + 4] == MAGIC:
            self.heard.add(int.from_bytes(packet[ipx.HEADER_LEN + 4 : ipx.HEADER_LEN + 8], "big"))


class Listener(threading.Thread):
    """A legitimate listener as IPXWrapper behaves: registers, then never sends and never
    answers a ping. Notes which of the player's broadcasts reach it."""

    def __init__(self, ns: str) -> None:
        super().__init__(daemon=True)
        box, me = LINKS["listener"]
        self.sock = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
        set_buffer(self.sock, 4 << 20)
        self.sock.bind((me, 0))
        self.port = self.sock.getsockname()[1]
        self.node = register(self.sock, (box, SERVER))
        self.registered = time.monotonic()
        self.sock.settimeout(0.1)
        self.heard: set[int] = set()
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            try:
                packet = self.sock.recv(2048)
            except TimeoutError:
                continue
            at = ipx.HEADER_LEN
            if packet[at : at + 4] == MAGIC:
                self.heard.add(int.from_bytes(packet[at + 4 : at + 8], "big"))


# --- one attack -------------------------------------------------------------------------------


def clients(ns: str) -> list[dict[str, Any]]:
    with inside(ns), urllib.request.urlopen(API + "/api/clients", timeout=5) as res:  # noqa: S310
        out: list[dict[str, Any]] = json.loads(res.read())
    return out


def quiet(*counters: "WireCounter", still: float = 0.5, limit: float = 5.0) -> None:
    """Wait until no counter has seen a datagram for ``still`` seconds (``limit`` at most)."""
    end = time.monotonic() + limit
    seen = -1
    while time.monotonic() < end:
        now = sum(len(c.when) for c in counters)
        if now == seen:
            return
        seen = now
        time.sleep(still)


def timed_scrape(ns: str) -> tuple[float, dict[str, float]]:
    """/metrics and the wall-clock time it was read at (the middle of the request)."""
    before = time.time()
    m = scrape(ns)
    return (before + time.time()) / 2, m


def limited(m: dict[str, float]) -> Counter[str]:
    """ipxbridge_unverified_limited_total summed per bound."""
    out: Counter[str] = Counter()
    for key, value in m.items():
        found = re.match(r'ipxbridge_unverified_limited_total\{.*bound="(\w+)"', key)
        if found:
            out[found.group(1)] += int(value)
    return out


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def run_case(
    names: dict[str, str],
    attack: Attack,
    *,
    sources: int,
    rate: float,
    a: argparse.Namespace,
    limits: Limits,
    workdir: Path,
) -> dict[str, Any]:
    env = {
        **limits.env(),
        "IPXBRIDGE_IPX__NODE_ASSIGNMENT": attack.nodes,
        "IPXBRIDGE_IPX__NODE_KEY_FILE": str(workdir / "node.key"),
    }
    bridge: Process = start_bridge(
        *("--metrics-listen", "127.0.0.1:9213", "--ipx-listen", f"0.0.0.0:{SERVER}"),
        name=f"{PREFIX}-{attack.name}-{sources}-{int(rate)}",
        ns=names["box"],
        ready=READY_IPX,
        env=env,
    )
    victims = listened = None
    player: DosClient | None = None
    watcher: DosClient | None = None
    listener: Listener | None = None
    log = ""
    try:
        victims = WireCounter(names["victim"], "eth0", VICTIM_NET)
        listen_net = ipaddress.IPv4Network(LINKS["listener"][1] + "/32")
        listened = WireCounter(names["listener"], "eth0", listen_net)
        victims.start()
        listened.start()
        listener = Listener(names["listener"])
        listener.start()
        limit = a.seconds + 60  # the player's broadcasts are bounded in count too
        player = DosClient(names["player"], rate=a.player_rate, size=a.player_size, limit=limit)
        watcher = DosClient(names["player"], rate=0, size=0, limit=limit)
        player.start()
        watcher.start()
        # Player and watcher verified (keyed: the player's first packet; else the probe a
        # second after registering, which they answer); the listener has had its first probe.
        deadline = time.monotonic() + 10
        while not {player.address, watcher.address} <= {
            c["address"] for c in clients(names["box"]) if c.get("verified")
        }:
            if time.monotonic() > deadline:
                raise BenchError("the player and the watcher were not verified within 10 s")
            time.sleep(0.1)
        time.sleep(max(0.0, listener.registered + 1.5 - time.monotonic()))
        k0 = kernel_counters(names["box"])["Udp"]
        m0_at, m0 = timed_scrape(names["box"])
        spoof = run_attackers(
            names["attacker"],
            attack.name,
            sources=sources,
            rate=rate,
            seconds=a.seconds,
            procs=a.procs,
        )
        player.stopping = True  # at the attack's end: copies stop with it
        k1 = kernel_counters(names["box"])["Udp"]
        # What the bridge still had queued goes out; then the books are read in the quiet.
        quiet(victims, listened)
        m1_at, m1 = timed_scrape(names["box"])
        registered = [c for c in clients(names["box"]) if c["kind"] == "dosbox"]
        time.sleep(0.2)
    finally:
        for t in (player, watcher, listener):
            if t is not None:
                t.stopping = True
                if t.is_alive():
                    t.join(5)
        for c in (victims, listened):
            if c is not None:
                c.finish()
        log = bridge.stop()
    t0, t1 = spoof["start"], spoof["end"]
    span = max(t1 - t0, 1e-3)
    per, v_packets = victims.window(t0, t1)
    first, _ = victims.window(t0, t0 + 1)
    steady, _ = victims.window(t0 + 1, t1)
    late, _ = victims.window((t0 + t1) / 2, t1)
    top = max(per, key=lambda d: per[d]) if per else 0
    l_bytes = sum(listened.window(t0, t1)[0].values())
    # the metrics' window: between the two scrapes
    mv, mv_packets = victims.window(m0_at, m1_at)
    ml, ml_packets = listened.window(m0_at, m1_at)
    counted_bytes = sum(mv.values()) + sum(ml.values())
    counted_packets = mv_packets + ml_packets
    metric_bytes = family_sum(m1, "ipxbridge_unverified_sent_bytes_total") - family_sum(
        m0, "ipxbridge_unverified_sent_bytes_total"
    )
    metric_packets = family_sum(m1, "ipxbridge_unverified_sent_packets_total") - family_sum(
        m0, "ipxbridge_unverified_sent_packets_total"
    )
    during = [seq for seq, at in enumerate(player.sent if player else []) if t0 <= at < t1]
    heard = sum(seq in listener.heard for seq in during) if listener else 0
    watched = sum(seq in watcher.heard for seq in during) if watcher else 0
    listener_addr = f"{LINKS['listener'][1]}:{listener.port}" if listener else ""
    steady_span = max(span - 1, 1e-3)
    drop = "ipxbridge_dropped_packets_total"
    return {
        "attack": attack.name,
        "node_assignment": attack.nodes,
        "sources": sources,
        "offered_rate": rate,
        "procs": a.procs,
        "sent": spoof["sent"],
        "send_errors": spoof["errors"],
        "seconds": round(span, 3),
        "achieved_rate": spoof["sent"] / span,
        "bridge_udp_in": k1.get("InDatagrams", 0) - k0.get("InDatagrams", 0),
        "bridge_rcvbuf_drops": k1.get("RcvbufErrors", 0) - k0.get("RcvbufErrors", 0),
        "top_victim": {
            "address": str(ipaddress.IPv4Address(top)) if per else None,
            "bytes": per[top],
            "first_second": first[top],
            "steady_rate": steady[top] / steady_span,
            "late_rate": late[top] / (span / 2),
            "window_bound": limits.address_burst + limits.address_rate * span,
        },
        "victims": {
            "addresses_hit": len(per),
            "bytes": sum(per.values()),
            "packets": v_packets,
            "first_second": sum(first.values()),
            "steady_rate": sum(steady.values()) / steady_span,
            "late_rate": sum(late.values()) / (span / 2),
        },
        "all_unverified": {
            "bytes": sum(per.values()) + l_bytes,
            "window_bound": limits.total_burst + limits.total_rate * span,
        },
        "listener": {
            "broadcasts": len(during),
            "heard": heard,
            "fraction": heard / len(during) if during else 0.0,
            "bytes": l_bytes,
            "registered_after": any(c["address"] == listener_addr for c in registered),
        },
        "watcher": {"heard": watched, "fraction": watched / len(during) if during else 0.0},
        "metrics": {
            "sent_bytes": metric_bytes,
            "sent_packets": metric_packets,
            "counted_bytes": counted_bytes,
            "counted_packets": counted_packets,
            "limited": dict(limited(m1) - limited(m0)),
            "drops": diff(
                by_label(m1, drop, "reason", 'path="ipx"'),
                by_label(m0, drop, "reason", 'path="ipx"'),
            ),
            "send_errors": family_sum(m1, "ipxbridge_send_errors_total", IPX_PATH)
            - family_sum(m0, "ipxbridge_send_errors_total", IPX_PATH),
            "read": family_sum(m1, "ipxbridge_ipx_read_datagrams")
            - family_sum(m0, "ipxbridge_ipx_read_datagrams"),
        },
        "counter_drops": victims.kernel_drops + listened.kernel_drops,
        "unverified_clients_after": sum(not c["verified"] for c in registered),
        "tracebacks": log.count("Traceback"),
        "traceback": log[log.find("Traceback") :][:4000] if "Traceback" in log else "",
    }


# --- the verdict and the tables ---------------------------------------------------------------


def verdict(r: dict[str, Any], limits: Limits, agree: float) -> list[str]:
    """What went wrong in one attack (empty: the bounds held and the books agree)."""
    out = []
    # Timing slack: the buckets run on the bridge's clock, the window on the wire's.
    slack = FULL_PACKET
    top, allv = r["top_victim"], r["all_unverified"]
    if top["bytes"] > top["window_bound"] + slack + limits.address_rate * 0.05:
        out.append(f"top victim {top['bytes']:,} B > burst + rate*T {top['window_bound']:,.0f}")
    if allv["bytes"] > allv["window_bound"] + slack + limits.total_rate * 0.05:
        out.append(f"all unverified {allv['bytes']:,} B > bound {allv['window_bound']:,.0f}")
    m = r["metrics"]
    if abs(m["sent_bytes"] - m["counted_bytes"]) > agree / 100 * m["counted_bytes"] + slack:
        out.append(f"metrics {m['sent_bytes']:,} B vs counted {m['counted_bytes']:,} B")
    if abs(m["sent_packets"] - m["counted_packets"]) > agree / 100 * m["counted_packets"] + 1:
        out.append(f"metrics {m['sent_packets']:,} datagrams vs {m['counted_packets']:,}")
    if r["counter_drops"]:
        out.append(f"the wire counter lost {r['counter_drops']} datagrams")
    if r["tracebacks"]:
        out.append(
            f"{r['tracebacks']} tracebacks in the bridge's log, the first:\n{r['traceback']}"
        )
    return out


def pct(a: float, b: float) -> str:
    return f"{(a - b) / b * 100:+.1f}%" if b else "n/a"


def report(results: list[dict[str, Any]], limits: Limits) -> None:
    ar, tr = limits.address_rate, limits.total_rate
    print(
        "\nsteady: from 1 s after the first spoofed datagram to the last; listener: the share"
        " of the player's broadcasts meanwhile that reached it; metrics: the delta of"
        " ipxbridge_unverified_sent_bytes_total vs the bytes counted on the wire toward"
        " victims and listener between the same two scrapes"
    )
    print(
        f"{'attack':<13}{'sources':>8}{'offered/s':>10}{'achieved/s':>11}"
        f"{'top victim B/s':>16}{'bound':>8}{'all victims B/s':>17}{'bound':>9}"
        f"{'listener':>10}  metrics B vs counted B"
    )
    for r in results:
        m = r["metrics"]
        print(
            f"{r['attack']:<13}{r['sources']:>8,}{r['offered_rate']:>10,.0f}"
            f"{r['achieved_rate']:>11,.0f}{r['top_victim']['steady_rate']:>16,.0f}{ar:>8,.0f}"
            f"{r['victims']['steady_rate']:>17,.0f}{tr:>9,.0f}"
            f"{r['listener']['fraction'] * 100:>9.1f}%"
            f"  {m['sent_bytes']:,} vs {m['counted_bytes']:,}"
            f" ({pct(m['sent_bytes'], m['counted_bytes'])})"
        )
    print(
        "\nburst and window: T from the first spoofed datagram to the last; bytes in the first"
        " second, B/s over the second half of T, bytes over T against burst + rate*T (the"
        " total bound against victims and listener together: they share it)"
    )
    print(
        f"{'attack':<13}{'sources':>8}{'offered/s':>10}{'T s':>6}"
        f"{'| top 1st s':>12}{'2nd half/s':>11}{'in T':>9}{'bound':>9}"
        f"{'| all 1st s':>12}{'2nd half/s':>11}{'+listener T':>12}{'bound':>11}"
    )
    for r in results:
        top, v, u = r["top_victim"], r["victims"], r["all_unverified"]
        print(
            f"{r['attack']:<13}{r['sources']:>8,}{r['offered_rate']:>10,.0f}{r['seconds']:>6.1f}"
            f"{'|':>3}{top['first_second']:>9,}{top['late_rate']:>11,.0f}{top['bytes']:>9,}"
            f"{top['window_bound']:>9,.0f}"
            f"{'|':>3}{v['first_second']:>9,}{v['late_rate']:>11,.0f}{u['bytes']:>12,}"
            f"{u['window_bound']:>11,.0f}"
        )
    print(
        "\nthe bridge meanwhile: spoofed datagrams it read (all it read, per second) and the"
        " kernel dropped (its socket buffer full); victim addresses it sent anything; datagrams"
        " the limit held (per-address / total bound); of the player's broadcasts, the share"
        " a verified DOSBox client that only listens got (watcher: what the bridge forwarded"
        " at all) and those the IPXWrapper-like listener got (gone: it was no longer"
        " registered afterwards)"
    )
    print(
        f"{'attack':<13}{'sources':>8}{'offered/s':>10}{'read/s':>9}{'rcvbuf drops':>13}"
        f"{'hit':>7}{'held addr/total':>17}{'watcher':>9}{'listener':>14}  dropped (reason)"
    )
    for r in results:
        m, lst = r["metrics"], r["listener"]
        lim = m["limited"]
        held = f"{lim.get('address', 0):,}/{lim.get('total', 0):,}"
        listen = f"{lst['heard']}/{lst['broadcasts']}" + (
            "" if lst["registered_after"] else " gone"
        )
        drops = ", ".join(f"{k} {v:,}" for k, v in sorted(m["drops"].items()))
        print(
            f"{r['attack']:<13}{r['sources']:>8,}{r['offered_rate']:>10,.0f}"
            f"{m['read'] / r['seconds']:>9,.0f}{r['bridge_rcvbuf_drops']:>13,}"
            f"{r['victims']['addresses_hit']:>7,}{held:>17}"
            f"{r['watcher']['fraction'] * 100:>8.1f}%{listen:>14}  {drops or '-'}"
        )


def parse_list(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="spoofing time per attack")
    ap.add_argument("--attacks", default="register,rejoin", help=f"of {','.join(ATTACKS)}")
    ap.add_argument("--sources", default="1,10000", help="victim addresses, comma-separated")
    ap.add_argument("--rates", default="1000,50000", help="spoofed datagrams/s, comma-separated")
    ap.add_argument("--procs", type=int, default=0, help="spoofing processes (0: 1 per 40,000/s)")
    ap.add_argument("--player-rate", type=float, default=20.0, help="broadcasts per second")
    ap.add_argument("--player-size", type=int, default=500, help="bytes per IPX packet")
    ap.add_argument("--agree", type=float, default=3.0, help="metrics vs wire, percent")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    # the spoofing process (internal)
    ap.add_argument("--worker", choices=tuple(ATTACKS), help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        a.kind = a.worker
        a.sources = int(a.sources)
        return spoof_worker(a)
    attacks = a.attacks.split(",")
    sources = [int(s) for s in parse_list(a.sources)]
    rates = parse_list(a.rates)
    if not set(attacks) <= set(ATTACKS):
        ap.error(f"--attacks: of {', '.join(ATTACKS)}")
    if not all(1 <= s <= MAX_SOURCES for s in sources) or not all(0 < r <= MAX_RATE for r in rates):
        ap.error(f"--sources 1..{MAX_SOURCES:,} and --rates up to {MAX_RATE:,} (bounded)")
    if not 2 <= a.seconds <= 120 or not 1 <= a.player_rate <= 1000:
        ap.error("--seconds 2..120 and --player-rate 1..1000")
    if not ipx.HEADER_LEN + 8 <= a.player_size <= FULL_PACKET:
        ap.error(f"--player-size {ipx.HEADER_LEN + 8}..{FULL_PACKET}")
    if os.geteuid() != 0:
        print("reflect.py needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    exit_on_signals()
    limits = default_limits()
    print(
        f"R26 reflection: {a.seconds:g} s of spoofing per attack; a verified player broadcasts "
        f"{a.player_rate:g}/s of {a.player_size} B; an IPXWrapper-like listener (never sends)\n"
        f"limits: per address {limits.address_rate:,.0f} B/s (burst {limits.address_burst:,}),"
        f" total {limits.total_rate:,.0f} B/s (burst {limits.total_burst:,})"
    )
    for name in attacks:
        print(f"  {name}: {ATTACKS[name].what}")
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reflect") as tmp, topology() as names:
        for name in attacks:
            for count in sources:
                for rate in rates:
                    procs = a.procs or max(1, math.ceil(rate / 40_000))
                    args = argparse.Namespace(**{**vars(a), "procs": procs})
                    r = run_case(
                        names,
                        ATTACKS[name],
                        sources=count,
                        rate=rate,
                        a=args,
                        limits=limits,
                        workdir=Path(tmp),
                    )
                    results.append(r)
                    bad = verdict(r, limits, a.agree)
                    failures += [f"{name} {count:,} @ {rate:,.0f}/s: {b}" for b in bad]
                    print(
                        f"  done {name} sources {count:,} at {rate:,.0f}/s: achieved "
                        f"{r['achieved_rate']:,.0f}/s with {procs} process(es)"
                        + (f"; {'; '.join(bad)}" if bad else ""),
                        flush=True,
                    )
    report(results, limits)
    if a.json:
        a.json.write_text(json.dumps({"limits": asdict(limits), "results": results}, indent=1))
    print(f"\n({time.monotonic() - started:.0f} s)")
    print("R26:", "PASS" if not failures else "FAIL\n  " + "\n  ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
