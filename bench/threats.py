#!/usr/bin/env python3
"""Interface ports under attack (R19-R25, R7's rejoin): the threat table.

docs/reliability.md §4.2 quotes its output.

One command builds its own namespaces (``benchlib/ipxlan.py``: two ipxbridges on one Linux
bridge with the default kinds of ``--ipx-iface lan0``, ethernet + ipxwrapper, peered over a
link of their own; a native Ethernet II station, an IPXWrapper host, quiet stations, remote
DOSBox-protocol clients that never answer pings, an attacker with a raw AF_PACKET socket, a
plain UDP socket and a raw IP socket), runs each attack against ``ipxbridge run`` and prints

    attack | what a trustworthy bridge does | measured figure | verdict

Every namespace is removed on exit, Ctrl-C or SIGTERM; no packet leaves them; every loop is
bounded in count and time. Frames are built and read with ``struct`` (``benchlib/ipxwire``),
never with the bridge's codec; copies, source MACs and bytes are counted by taps on the Linux
bridges' ports (a frame coming in on ``p-b1`` is one b1 put on the wire), drop reasons and
evictions from each bridge's ``/metrics`` (127.0.0.1:9213 in its namespace), memory from
``/proc``, tracebacks and log bytes from its log.

Attacks (``--only NAME,...``): loop, source_mac, beacon_forged, beacon_duplicate,
beacon_flood, batch_malformed, batch_filter, malformed, reflector, framings, mac_flood,
rejoin, rule8. The short form leaves rule8 out unless ``--only`` names it: its cases wait for
beacons to expire (a minute and a half), and ``tests/integration/test_rule8_attacks.py``
runs them (``--only rule8``) and holds R25 in CI.

    python3 bench/threats.py [--tree PATH] [--quick] [--json] [--save FILE] [--only NAME,...]

``--tree PATH`` runs the bridges from another checkout (PYTHONPATH=PATH), so the same script
measures before and after. Options the tree lacks (``ipx.bridge_key_file``) are read from its
``print-default-config`` and their rows say n/a.
"""

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from benchlib import ROOT, BenchError
from benchlib.bridge import Process, spawn
from benchlib.frames import ipv4_udp
from benchlib.ipxlan import (
    ATT_IP,
    B1_LAN,
    B1_PEER,
    B1_WAN,
    B2_LAN,
    B2_PEER,
    B2_WAN,
    B3_WAN,
    C1_SERVER,
    C3_SERVER,
    LAN,
    LAN_PORTS,
    N1_IP,
    NAT_SERVER,
    PREFIX,
    V1_IP,
    VR_IPS,
    VR_SERVER,
    W1_IP,
    W1_NODE,
    Capture,
    DosClient,
    Lan,
    Reader,
    Station,
    UdpSink,
    Watcher,
    WrapperHost,
    counts,
    lan,
    tap,
)
from benchlib.ipxwire import (
    BEACON_MAGIC_V1,
    BROADCAST,
    COALESCED_MAX,
    ETHERNET_II,
    FILTERED_SOCKETS,
    FRAMINGS,
    GAME_SOCKET,
    IPX_HEADER,
    IPXWRAPPER_PORT,
    LLC,
    RAW_8023,
    SNAP,
    Seen,
    batch,
    batch_ipxwrapper,
    beacon_v1,
    beacon_v1_peers,
    frame,
    ipx,
    ipx_to_ipxwrapper,
    ipxwrapper,
    read_frame,
    tag,
    with_source,
)
from benchlib.netns import exit_on_signals, sh, socket_in
from benchlib.procstat import cpu_seconds

from ipxbridge.policy.switch import SwitchSettings

ETH_P_ALL: Final = 0x0003
LAN_BCAST: Final = str(LAN.broadcast_address)
ATT_NODE: Final = bytes.fromhex("02a77a000042")  # the attacker's own IPXWrapper node

# Tag codes: which attack a test packet belongs to (benchlib.ipxwire.tag).
HELLO, LOOP_W, LOOP_A = 1, 2, 3
MAC_WRAPPER, MAC_BATCH_CLIENT, MAC_BATCH_WRAPPER, VICTIM_UDP = 10, 11, 12, 13
BEACON_TRAFFIC = 20
BATCH_BAD, BATCH_FILTER, MALFORMED = 40, 41, 42
REFLECT = (50, 51, 52, 53)
FRAMING_BCAST, FRAMING_UNI, FRAMING_BAIT = 60, 61, 62
MAC_FLOOD, Q_UNI, Q_BCAST = 70, 71, 72
PLAYER = 80
R25_TRAFFIC = 90


# --- results -------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the threat table."""

    attack: str
    trustworthy: str
    measured: str
    verdict: str  # pass | FAIL | n/a | error


@dataclass
class Result:
    """One attack: its table rows and its figures (the tests read ``values``)."""

    name: str
    rows: list[Row] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def row(self, attack: str, trustworthy: str, measured: str, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else ("pass" if ok else "FAIL")
        self.rows.append(Row(attack, trustworthy, measured, verdict))


@dataclass(frozen=True)
class Cfg:
    """Durations and counts: the short form (``--quick``, the tests) or the full one."""

    quick: bool

    def t(self, quick: float, full: float) -> float:
        return quick if self.quick else full

    def n(self, quick: int, full: int) -> int:
        return quick if self.quick else full


# --- helpers -------------------------------------------------------------------------------------


def sample(m: dict[str, float], family: str, **labels: str) -> float:
    """The sum of ``family``'s samples whose labels include ``labels`` (any order)."""
    total = 0.0
    for key, value in m.items():
        name, _, rest = key.partition("{")
        if name != family:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(got.get(k) == v for k, v in labels.items()):
            total += value
    return total


def by_reason(m: dict[str, float], prefix: str = "") -> dict[str, int]:
    """IPX drops by reason (``ipxbridge_dropped_packets_total{path="ipx"}``)."""
    out: dict[str, int] = {}
    for key, value in m.items():
        if key.startswith("ipxbridge_dropped_packets_total{") and 'path="ipx"' in key:
            reason = re.search(r'reason="([^"]*)"', key)
            if reason and reason.group(1).startswith(prefix) and value:
                out[reason.group(1)] = int(value)
    return out


def books(m: dict[str, float]) -> tuple[int, int]:
    """(received, forwarded + control + dropped) of the IPX tunnel and its ports."""
    received = sample(m, "ipxbridge_received_packets_total", path="ipx")
    outcomes = (
        sample(m, "ipxbridge_forwarded_packets_total", path="ipx")
        + sample(m, "ipxbridge_control_packets_total")
        + sum(by_reason(m).values())
    )
    return int(received), int(outcomes)


def evictions(m: dict[str, float]) -> dict[str, int]:
    """``ipxbridge_table_evictions_total`` by ``table/reason``."""
    out: dict[str, int] = {}
    for key, value in m.items():
        if key.startswith("ipxbridge_table_evictions_total{") and value:
            table = re.search(r'table="([^"]*)"', key)
            reason = re.search(r'reason="([^"]*)"', key)
            name = f"{table.group(1) if table else '?'}/{reason.group(1) if reason else '?'}"
            out[name] = int(value)
    return out


def pace(started: float, i: int, rate: float) -> None:
    """Sleep until the ``i``-th event of a ``rate``-per-second schedule begun at ``started``."""
    lag = started + i / rate - time.monotonic()
    if lag > 0:
        time.sleep(lag)


def two_bridges(
    net: Lan, *, kinds: str = "", key: bool = False, remote: str = "", converged: bool = True
) -> None:
    """b1 and b2 on site A's segment with ``--ipx-iface lan0[:kinds]``, peered. ``remote``:
    the remote bridge b3 (DOSBox clients only, no segment) peered with ``b1``, or with
    ``both`` (a hub). ``converged``: wait until each hears the other on the segment."""
    port = "lan0" + (f":{kinds}" if kinds else "")
    specs: dict[str, Sequence[str]] = {
        "b1": ("--ipx-iface", port, "--peer", B2_PEER, *(("--peer", B3_WAN) if remote else ())),
        "b2": ("--ipx-iface", port, "--peer", B1_PEER),
    }
    if remote == "both":
        specs["b2"] = (*specs["b2"], "--peer", B3_WAN)
    if remote:
        hub = ("--peer", B2_WAN) if remote == "both" else ()
        specs["b3"] = ("--peer", B1_WAN, *hub)
    net.start(specs, key=key)
    if converged:
        converge(net)


def converge(net: Lan, timeout: float = 6.0) -> bool:
    """Until b1 and b2 each hear the other on lan0 (their beacons), on every kind of port
    lan0 has (ethernet, ipxwrapper: each kind's trust is its own), or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        heard: list[float] = []
        try:
            for name, b in net.bridges.items():
                if name not in ("b1", "b2"):
                    continue
                m = b.metrics()
                kinds = {
                    k
                    for key in m
                    if key.startswith("ipxbridge_ipx_port_bridges{") and 'interface="lan0"' in key
                    for k in re.findall(r'kind="([^"]*)"', key)
                }
                heard += [
                    sample(m, "ipxbridge_ipx_port_bridges", kind=k, interface="lan0") for k in kinds
                ] or [0.0]
        except OSError:
            heard = []
        if heard and all(n >= 1 for n in heard):
            time.sleep(0.4)  # the beacon to the peer goes out in the same tick
            return True
        time.sleep(0.1)
    return False


class Attacker:
    """A host on site A's segment: a raw AF_PACKET socket (any frame, any source MAC), a plain
    UDP socket (what any user may open) and a raw IP socket (spoofed sources). It hears the
    broadcasts on the segment, the bridges' beacons among them, as any host does."""

    def __init__(self, net: Lan) -> None:
        ns = net.ns["att"]
        self.eth = socket_in(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.eth.bind(("eth0", ETH_P_ALL))
        self.eth.setblocking(False)
        self.mac: bytes = self.eth.getsockname()[4]
        self.udp = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        self.udp.bind((ATT_IP, 0))
        self.raw = socket_in(ns, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.heard: list[Seen] = []
        self.sent = 0
        self.sent_bytes = 0

    def fileno(self) -> int:
        return self.eth.fileno()

    def drain(self) -> None:
        for _ in range(4096):
            try:
                raw, addr = self.eth.recvfrom(70_000)
            except BlockingIOError:
                return
            if addr[2] == 4:  # PACKET_OUTGOING: its own
                continue
            seen = read_frame(raw, time.monotonic(), "att")
            if seen.is_beacon and len(self.heard) < 10_000:
                self.heard.append(seen)

    def frame(self, raw: bytes) -> None:
        self.eth.send(raw)
        self.sent += 1
        self.sent_bytes += len(raw)

    def to(self, data: bytes, addr: tuple[str, int]) -> None:
        self.udp.sendto(data, addr)
        self.sent += 1
        self.sent_bytes += len(data)

    def spoof(self, src: tuple[str, int], dst: tuple[str, int], payload: bytes) -> None:
        self.raw.sendto(ipv4_udp(src, dst, payload), (dst[0], 0))
        self.sent += 1
        self.sent_bytes += len(payload)

    def close(self) -> None:
        for sock in (self.eth, self.udp, self.raw):
            sock.close()


@contextlib.contextmanager
def watching(*readers: Reader | WrapperHost | Capture) -> Iterator[Watcher]:
    """Drain every reader in the background while the block runs."""
    watcher = Watcher()
    for r in readers:
        if isinstance(r, WrapperHost):
            watcher.add(*r.readers())
        elif isinstance(r, Capture):
            watcher.add(*r.ports)
        else:
            watcher.add(r)
    with watcher:
        yield watcher


def lan_copies(
    capture: Capture, since: float, code: int, ports: Sequence[str] = LAN_PORTS
) -> dict[str, Counter[int]]:
    """Copies of attack ``code`` b1 and b2 put on site A's segment, per kind (a framing or
    ``ipxwrapper``/``udp213``), per sequence number."""
    out: dict[str, Counter[int]] = {}
    for s in capture.since(since, ports=ports):
        if s.tag is not None and s.tag[0] == code and s.is_ipx:
            out.setdefault(s.kind, Counter())[s.tag[1]] += 1
    return out


def worst_per_kind(copies: dict[str, Counter[int]]) -> int:
    """The most copies one packet had in one kind."""
    return max((max(c.values()) for c in copies.values() if c), default=0)


def plural(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def kinds_text(copies: dict[str, Counter[int]], sent: int) -> str:
    parts = [f"{k} {sum(c.values()) / max(sent, 1):.2f}" for k, c in sorted(copies.items())]
    return ", ".join(parts) or "none"


# --- R19: loops across kinds -----------------------------------------------------------------


def cpu(net: Lan) -> float:
    """CPU seconds the running bridges have used."""
    total = 0.0
    for bridge in net.bridges.values():
        with contextlib.suppress(OSError):
            total += sum(cpu_seconds(bridge.proc.pid))
    return total


def start_dumpcap(net: Lan, path: Path) -> Process | None:
    """dumpcap on site A's Linux bridge (every broadcast crosses it once), IPX and IPXWrapper
    frames only; None without dumpcap and tshark."""
    if not (shutil.which("dumpcap") and shutil.which("tshark")):
        return None
    bpf = "ether proto 0x8137 or udp port 54792 or ether[12:2] <= 1500"
    argv = ["dumpcap", "-q", "-i", "br0", "-f", bpf, "-w", str(path)]
    proc = spawn(argv, log=path.with_suffix(".log"), ns=net.ns["seg"])
    try:
        proc.wait_for("Capturing on", 10)
    except BenchError:
        proc.stop(2)
        return None
    return proc


def tshark_kinds(path: Path, code: int, exclude: set[bytes]) -> Counter[str]:
    """Frames with attack ``code``'s tag in a capture, by kind, as tshark decodes them
    (frames from ``exclude`` left out): an oracle that is not the bench's own parser."""
    out = sh(
        "tshark", "-r", str(path), "-Y", f"frame contains 54:48:52:21:{code:02x}",
        "-T", "fields", "-e", "eth.src", "-e", "frame.protocols", "-e", "llc.dsap",
        "-e", "udp.dstport",
    )  # fmt: skip
    kinds: Counter[str] = Counter()
    macs = {m.hex(":") for m in exclude}
    for line in out.splitlines():
        src, protocols, dsap, dport = [*line.split("\t"), "", "", ""][:4]
        if src in macs:
            continue
        if dport == str(IPXWRAPPER_PORT):
            kinds["ipxwrapper"] += 1
        elif dsap == "0xaa":
            kinds[SNAP] += 1
        elif dsap == "0xe0":
            kinds[LLC] += 1
        elif "ethertype:ipx" in protocols:
            kinds[ETHERNET_II] += 1
        elif protocols.startswith("eth:ipx"):
            kinds[RAW_8023] += 1
    return kinds


def egress_repeats(net: Lan) -> int | None:
    """Copies held back and packets dropped as ``egress_repeat`` by the bridges (rule 9 of the
    new switch; 0 where it does not exist), None if a bridge did not answer."""
    total = 0.0
    for bridge in net.bridges.values():
        try:
            m = bridge.metrics()
        except OSError:
            return None
        total += sample(m, "ipxbridge_held_copies_total", reason="egress_repeat")
        total += sample(m, "ipxbridge_dropped_packets_total", reason="egress_repeat")
    return int(total)


def attack_loop(net: Lan, cfg: Cfg) -> Result:
    """Two bridges, both kinds on one wire: an IPXWrapper host broadcasting, then one 83-byte
    IPXWrapper datagram to one bridge, then the same with one frame to the other."""
    res = Result("loop")
    two_bridges(net)
    n1 = Station("n1", net.ns["n1"])
    w1 = WrapperHost("w1", net.ns["w1"], f"{W1_IP}/24", W1_NODE)
    att = Attacker(net)
    capture = tap(net)
    rate, count = 10.0, cfg.n(20, 600)  # R19: 10 pps, 60 s in the full form
    watch = int(cfg.t(2.0, 10.0))
    storms: list[tuple[int, int, list[int], int]] = []
    pcap = net.workdir / "loop.pcap"
    dumpcap = None if cfg.quick else start_dumpcap(net, pcap)
    try:
        with watching(capture, n1, w1):
            n1.broadcast(tag(HELLO, 0), GAME_SOCKET)  # a NetWare client loading
            time.sleep(0.3)
            began = time.monotonic()
            cpu0 = cpu(net)
            for seq in range(count):
                pace(began, seq, rate)
                w1.broadcast(tag(LOOP_W, seq, 26), GAME_SOCKET)
            time.sleep(0.5)
            busy = (cpu(net) - cpu0) / (time.monotonic() - began)
            if dumpcap is not None:
                dumpcap.stop(5)
            host = lan_copies(capture, began, LOOP_W)
            at_n1 = counts(n1.got, LOOP_W)
            for seq, with_frame in ((0, False), (1, True)):
                # 27 + 56 = 83 bytes to b1 from a plain socket. Which copy b2 hears first,
                # b1's frame or its peer copy, is a race (IPXWrapper's header has no hop
                # count); the attacker can settle it with one frame of its own to b2 right
                # after, hop count 1 (a copy b1's frames do not exceed), which reaches b2
                # before anything b1 sends.
                t0 = time.monotonic()
                data = tag(LOOP_A, seq, 56)
                datagram = ipxwrapper(BROADCAST, GAME_SOCKET, ATT_NODE, GAME_SOCKET, data)
                att.to(datagram, (B1_LAN, IPXWRAPPER_PORT))
                if with_frame:
                    packet = ipx(BROADCAST, GAME_SOCKET, ATT_NODE, GAME_SOCKET, data, hops=1)
                    att.frame(frame(net.macs["b2"], att.mac, ETHERNET_II, packet))
                per_second: list[int] = []
                for second in range(watch):
                    time.sleep(max(0.0, t0 + second + 1 - time.monotonic()))
                    copies = lan_copies(capture, t0, LOOP_A)
                    per_second.append(sum(c[seq] for c in copies.values()))
                copies = lan_copies(capture, t0, LOOP_A)
                frames = sum(c[seq] for k, c in copies.items() if k in FRAMINGS)
                worst = max((c[seq] for c in copies.values()), default=0)
                storms.append((frames, copies.get("ipxwrapper", Counter())[seq], per_second, worst))
            drops = capture.kernel_drops()
            repeats = egress_repeats(net)
    finally:
        att.close()
        net.stop(2.0)
    worst = worst_per_kind(host)
    delivered = sum(1 for s in range(count) if at_n1[s] >= 1)
    twice = sum(1 for s in range(count) if at_n1[s] > 1)
    tenth = max(count // 10, 1)
    first, last = (
        sum(c[s] for c in host.values() for s in seqs) / tenth
        for seqs in (range(tenth), range(count - tenth, count))
    )
    oracle = ""
    if dumpcap is not None:
        found = tshark_kinds(pcap, LOOP_W, {net.macs.get("w1", b"")})
        res.values["tshark_copies"] = {k: v / count for k, v in found.items()}
        oracle = "; tshark on the Linux bridge: " + (
            ", ".join(f"{k} {v / count:.2f}" for k, v in sorted(found.items())) or "none"
        )
    res.values.update(
        host_broadcasts=count,
        host_worst_per_kind=worst,
        host_copies=kinds_text(host, count),
        host_at_n1=delivered,
        host_at_n1_twice=twice,
        host_first_tenth=first,
        host_last_tenth=last,
        host_cpu=busy,
        tap_kernel_drops=drops,
        egress_repeat=repeats,
    )
    res.row(
        "IPXWrapper host broadcasts (10/s), two bridges with ethernet + ipxwrapper on its wire",
        "one copy per framing/kind in use; each reaches the native station once",
        f"copies per broadcast on the wire by kind: {kinds_text(host, count)}; worst {worst} "
        f"in one kind; first/last tenth {first:.2f}/{last:.2f} copies; native station got "
        f"{delivered}/{count} ({twice} twice); bridges' CPU {busy:.0%}{oracle}",
        worst <= 1 and delivered >= 0.95 * count and not twice and last <= first,
    )
    for (frames, datagrams, per_second, worst_one), name in zip(
        storms, ("single", "single_and_frame"), strict=True
    ):
        last = per_second[-1] - (per_second[-2] if len(per_second) > 1 else 0)
        res.values.update(
            {
                f"{name}_frames": frames,
                f"{name}_datagrams": datagrams,
                f"{name}_worst_per_kind": worst_one,
                f"{name}_last_second": last,
            }
        )
        res.row(
            "one 83-byte IPXWrapper datagram to one bridge from anyone on the subnet"
            + (", and one Ethernet II frame of it to the other" if name != "single" else ""),
            "one copy per kind, then silence",
            f"{plural(frames, 'frame')} + {plural(datagrams, 'IPXWrapper datagram')} in "
            f"{len(per_second)} s, {last:,} in the last second"
            + (f" (egress_repeat: {repeats} held or dropped)" if name != "single" else ""),
            worst_one <= 1 and last == 0,
        )
    return res


# --- R20: foreign source MACs ------------------------------------------------------------------


def fdb_port(net: Lan, mac: bytes) -> str:
    """The Linux bridge port where site A's switch has ``mac`` (its FDB)."""
    out = sh("ip", "netns", "exec", net.ns["seg"], "bridge", "-j", "fdb", "show", "br", "br0")
    for entry in json.loads(out or "[]"):
        if entry.get("mac") == mac.hex(":") and "vlan" not in entry:
            return str(entry.get("ifname", "?"))
    return "none"


def attack_source_mac(net: Lan, cfg: Cfg) -> Result:
    """A LAN station's MAC as the IPX source node, from a UDP host on the subnet and from a
    remote DOSBox client (inside a coalesced batch), while the station's own UDP goes on."""
    res = Result("source_mac")
    two_bridges(net)
    n1 = Station("n1", net.ns["n1"])
    sink = UdpSink(net.ns["n1"], 7000)
    chatter = socket_in(net.ns["w1"], socket.AF_INET, socket.SOCK_DGRAM)
    c1 = DosClient("c1", net.ns["c1"], (C1_SERVER, 213))
    att = Attacker(net)
    capture = tap(net)
    own = {net.macs["b1"], net.macs["b2"]}
    victim = n1.mac
    seconds = cfg.t(1.0, 6.0)

    def via_wrapper(seq: int) -> None:
        packet = ipxwrapper(BROADCAST, GAME_SOCKET, victim, GAME_SOCKET, tag(MAC_WRAPPER, seq, 40))
        att.to(packet, (LAN_BCAST, IPXWRAPPER_PORT))

    def via_client_batch(seq: int) -> None:
        inner = ipx(BROADCAST, GAME_SOCKET, victim, GAME_SOCKET, tag(MAC_BATCH_CLIENT, seq, 40))
        c1.send(batch(BROADCAST, c1.node, [inner]))

    def via_wrapper_batch(seq: int) -> None:
        inner = ipx(BROADCAST, GAME_SOCKET, victim, GAME_SOCKET, tag(MAC_BATCH_WRAPPER, seq, 40))
        att.to(batch_ipxwrapper(BROADCAST, ATT_NODE, [inner]), (LAN_BCAST, IPXWRAPPER_PORT))

    variants: list[tuple[str, Callable[[int], None]]] = [
        ("a UDP sender on the IPXWrapper subnet", via_wrapper),
        ("a remote (unverified) DOSBox client, inside a coalesced batch", via_client_batch),
        ("a UDP sender on the IPXWrapper subnet, inside a coalesced batch", via_wrapper_batch),
    ]
    foreign_total = 0
    worst_delivery = 1.0
    try:
        with watching(capture, n1, sink, c1):
            for name, send in variants:
                n1.broadcast(tag(HELLO, 1), GAME_SOCKET)  # the station speaks: the switch knows it
                time.sleep(0.3)
                sink.got.clear()
                began = time.monotonic()
                sent = attacks = 0
                for i in range(int(seconds * 20)):
                    pace(began, i, 20.0)
                    chatter.sendto(tag(VICTIM_UDP, i, 64), (N1_IP, 7000))
                    sent += 1
                    if i % 10 == 0:  # 2 per second
                        send(attacks)
                        attacks += 1
                time.sleep(0.3)
                foreign = [
                    s
                    for s in capture.since(began, ports=LAN_PORTS)
                    if s.kind in FRAMINGS and s.src_mac not in own
                ]
                hijacked = sum(1 for s in foreign if s.src_mac == victim)
                got = len(sink.got)
                where = fdb_port(net, victim)
                foreign_total += len(foreign)
                worst_delivery = min(worst_delivery, got / max(sent, 1))
                res.values[name] = {
                    "foreign": len(foreign),
                    "victim_mac": hijacked,
                    "delivered": got,
                    "sent": sent,
                    "fdb": where,
                }
                res.row(
                    f"the native station's MAC as IPX source node, from {name} ({attacks} at 2/s)",
                    "never a frame with a source MAC the bridge does not own; the station's "
                    "own traffic unaffected",
                    f"{len(foreign)} frames with a foreign source MAC ({hijacked} with the "
                    f"station's); its UDP {got}/{sent}; switch has its MAC on {where}",
                    not foreign and got >= 0.95 * sent,
                )
    finally:
        att.close()
        chatter.close()
        net.stop(2.0)
    res.values.update(foreign_frames=foreign_total, victim_delivery=worst_delivery)
    return res


# --- R21: forged bridge control --------------------------------------------------------------


def identities(heard: Iterable[Seen]) -> tuple[set[bytes], set[bytes]]:
    """(bridge ids heard on the segment, the peer identities their beacons list)."""
    ids: set[bytes] = set()
    peers: set[bytes] = set()
    for s in heard:
        ids.add(s.src_node)
        peers.update(beacon_v1_peers(s.packet[IPX_HEADER.size :]))
    return ids, peers


class Forger:
    """What a bystander on the segment makes of the beacons it hears.

    Version-1 beacons are imitated field by field. A beacon of another version (one the
    bench cannot read) is replayed with its source node changed: the most a bystander
    without the key can do to it.
    """

    LOWER: Final = bytes.fromhex("020000000001")  # below any id a bridge draws (02..FE first)

    def __init__(self, att: Attacker) -> None:
        self.att = att

    def heard(self) -> tuple[set[bytes], set[bytes], list[Seen]]:
        ids, peers = identities(self.att.heard)
        newer = [s for s in self.att.heard if not s.packet[30:].startswith(BEACON_MAGIC_V1)]
        return ids, peers, newer[-2:]

    def _both(self, packet: bytes, udp: bool) -> None:
        """On the wire in Ethernet II, or as IPXWrapper's UDP from a plain socket."""
        if udp:
            self.att.to(ipx_to_ipxwrapper(packet), (LAN_BCAST, IPXWRAPPER_PORT))
        else:
            self.att.frame(frame(BROADCAST, self.att.mac, ETHERNET_II, packet))

    def lower_id(self, *, udp: bool = False) -> None:
        """A bridge with a lower id than any real one, claiming every peer it heard of."""
        ids, peers, newer = self.heard()
        self._both(beacon_v1(self.LOWER, sorted(peers | ids)), udp)
        for s in newer:
            self._both(with_source(s.packet, self.LOWER), udp)

    def as_peer(self, *, udp: bool = False) -> None:
        """The remote peer itself on this segment (an id the beacons list, not heard here, or
        the ``00 00`` + IPv4 a bridge without segments goes by: its address is no secret)."""
        ids, peers, newer = self.heard()
        for identity in sorted((peers - ids) | {b"\0\0" + socket.inet_aton(B3_WAN)}):
            self._both(beacon_v1(identity, []), udp)
            for s in newer:
                self._both(with_source(s.packet, identity), udp)

    def no_peers(self) -> None:
        """The responsible bridge (the lowest id heard) saying it has no peers."""
        ids, _, _ = self.heard()
        if ids:
            self._both(beacon_v1(min(ids), []), udp=False)

    def spoofed_peer(self) -> None:
        """A peer beacon in UDP from one bridge's peer address to the other, naming another
        bridge id: the receiver no longer sees its peer on the segment."""
        for src, server, own in ((B1_PEER, B2_LAN, B2_PEER), (B2_PEER, B1_LAN, B1_PEER)):
            dst_node = b"\0\0" + socket.inet_aton(own)
            forged = beacon_v1(b"\x02" + os.urandom(5), [], dst_node)
            self.att.spoof((src, 213), (server, 213), forged)


SILENCING: Final = ("lower_id", "as_peer", "udp")
DUPLICATING: Final = ("spoofed_peer", "no_peers")


def forge(forger: Forger, variant: str) -> None:
    """One round of the forgeries ``variant`` names (``FORGERIES``)."""
    if variant == "lower_id":
        forger.lower_id()
    elif variant == "as_peer":
        forger.as_peer()
    elif variant == "udp":
        forger.lower_id(udp=True)
        forger.as_peer(udp=True)
    elif variant == "no_peers":
        forger.no_peers()
    elif variant == "spoofed_peer":
        forger.spoofed_peer()
    elif variant == "single":
        forger.lower_id()
    elif variant == "silence":
        for each in SILENCING:
            forge(forger, each)
    elif variant == "duplicate":
        for each in DUPLICATING:
            forge(forger, each)


def beacon_run(net: Lan, cfg: Cfg, variant: str, *, key: bool) -> dict[str, Any]:
    """Broadcasts at 10/s toward site A while ``variant`` is forged; what n1 (Ethernet II)
    and w1 (IPXWrapper) get.

    The remote bridge b3 is peered with b1 only, so its client c3's packets reach site A
    through b1 alone, by rule 8's peer clause: the one a forged beacon may turn off. For the
    duplicating forgeries the sender is b1's own client c1, which b2 hears from its peer b1
    and must leave alone. ``hub``: no forgery, b3 peered with both bridges.
    """
    dup = variant in (*DUPLICATING, "duplicate")
    att = Attacker(net)  # listening on the segment before the bridges start, as a host does
    forger = Forger(att)
    period = 0.1 if dup else 2.0
    seconds = cfg.t(2.0, 20.0 if variant == "single" else 8.0)
    capture = tap(net)
    try:
        with watching(att, capture) as watch:
            two_bridges(net, key=key, remote="both" if variant == "hub" else "b1")
            n1 = Station("n1", net.ns["n1"])
            w1 = WrapperHost("w1", net.ns["w1"], f"{W1_IP}/24", W1_NODE)
            server = (C1_SERVER, 213) if dup else (C3_SERVER, 213)
            source = DosClient("source", net.ns["c1" if dup else "c3"], server)
            watch.add(n1, *w1.readers(), source)
            n1.broadcast(tag(HELLO, 2), GAME_SOCKET)
            time.sleep(0.3)
            beacons_heard = len(att.heard)
            began = time.monotonic()
            sent = 0
            next_forgery = began + 0.5
            forged_rounds = 0
            for i in range(int(seconds * 10) + 5):
                pace(began, i, 10.0)
                if time.monotonic() > began + 0.5 + seconds:
                    break
                source.broadcast(tag(BEACON_TRAFFIC, i, 32), GAME_SOCKET)
                sent += 1
                due = time.monotonic() >= next_forgery and variant != "hub"
                if due and (variant != "single" or not forged_rounds):
                    forge(forger, variant)
                    forged_rounds += 1
                    next_forgery += period
            time.sleep(0.5)
            on_wire = {
                f"{port}/{kind}": sum(c.values())
                for port in LAN_PORTS
                for kind, c in lan_copies(capture, began, BEACON_TRAFFIC, (port,)).items()
            }
        # Broadcasts from the first forgery on (i >= 5: sent 0.5 s in)
        window = range(5, sent)
        at_n1, at_w1 = counts(n1.got, BEACON_TRAFFIC), counts(w1.got, BEACON_TRAFFIC)
        gaps = (
            max(
                (
                    len(list(run))
                    for got, run in itertools.groupby(at_n1[s] > 0 for s in window)
                    if not got
                ),
                default=0,
            )
            / 10.0
        )
    finally:
        att.close()
        net.stop(2.0)
    n = max(len(window), 1)
    return {
        "sent": len(window),
        "n1": sum(1 for s in window if at_n1[s]) / n,
        "w1": sum(1 for s in window if at_w1[s]) / n,
        "copies_n1": sum(at_n1[s] for s in window) / max(sum(1 for s in window if at_n1[s]), 1),
        "copies_w1": sum(at_w1[s] for s in window) / max(sum(1 for s in window if at_w1[s]), 1),
        "longest_gap": gaps,
        "missing_n1": [s for s in window if not at_n1[s]][:20],
        # Which broadcasts arrived more than once, and when: startup or steady state
        "extra_n1": [s for s in window if at_n1[s] > 1][:20],
        "extra_w1": [s for s in window if at_w1[s] > 1][:20],
        "on_wire": on_wire,  # what each bridge put on site A's segment, by kind
        "forged": att.sent,
        "beacons_heard": beacons_heard,
    }


FORGERIES: Final = {
    "hub": "no forgery: the remote bridge is a hub peered with both bridges",
    "lower_id": "a lower bridge id claiming the remote peer, Ethernet II frames every 2 s",
    "as_peer": "the remote peer's own identity on the segment, every 2 s",
    "udp": "both, as IPXWrapper datagrams from a plain UDP socket, every 2 s",
    "silence": "a lower id, the peer's identity, and both over UDP, every 2 s",
    "single": "one frame: a lower bridge id claiming the remote peer",
    "no_peers": "the responsible bridge's id saying it has no peers, 10/s",
    "spoofed_peer": "peer beacons in UDP spoofed from each bridge's peer address, 10/s",
    "duplicate": "'no peers' beacons and spoofed peer beacons, 10/s",
}


def _beacon_rows(res: Result, net: Lan, cfg: Cfg, variants: Sequence[str], dup: bool) -> None:
    for key in (False, True):
        keyed = "with" if key else "without"
        for variant in variants:
            name = f"{variant}/{'key' if key else 'no_key'}"
            attack = f"forged beacons ({FORGERIES[variant]}), {keyed} ipx.bridge_key_file"
            if variant == "hub":
                attack = f"{FORGERIES[variant]}, {keyed} ipx.bridge_key_file"
            if dup:
                trustworthy = "one copy: <= 1.05 copies with a key (without one, a duplicate)"
            else:
                trustworthy = "forwarding continues (>= 95 % delivered)"
            if key and not net.features.bridge_key:
                res.values[name] = None
                if variant == variants[-1]:  # one row says it for all of them
                    res.row(
                        "the same, with ipx.bridge_key_file",
                        trustworthy,
                        "n/a: this tree has no ipx.bridge_key_file",
                        None,
                    )
                continue
            got = beacon_run(net, cfg, variant, key=key)
            res.values[name] = got
            worst = min(got["n1"], got["w1"])
            copies = max(got["copies_n1"], got["copies_w1"])
            text = (
                f"native station {got['n1']:.0%}, IPXWrapper host {got['w1']:.0%} of "
                f"{got['sent']} broadcasts; {copies:.2f} copies each"
            )
            if variant == "single":
                text += f"; longest gap {got['longest_gap']:.1f} s"
            res.row(attack, trustworthy, text, worst >= 0.95 and (copies <= 1.05 or not key))


def attack_beacon_forged(net: Lan, cfg: Cfg) -> Result:
    """Forged rule-8 beacons meant to silence a segment (R21: no silence)."""
    res = Result("beacon_forged")
    variants = ("silence",) if cfg.quick else ("hub", *SILENCING, "silence", "single")
    _beacon_rows(res, net, cfg, variants, dup=False)
    return res


def attack_beacon_duplicate(net: Lan, cfg: Cfg) -> Result:
    """Forged beacons meant to make two bridges both forward (R21: no duplicates)."""
    res = Result("beacon_duplicate")
    variants = ("duplicate",) if cfg.quick else (*DUPLICATING, "duplicate")
    _beacon_rows(res, net, cfg, variants, dup=True)
    return res


def attack_beacon_flood(net: Lan, cfg: Cfg) -> Result:
    """Unique-id beacons carrying 241 peers each, 300/s (R21: bounded table, replies, memory)."""
    res = Result("beacon_flood")
    two_bridges(net)
    att = Attacker(net)
    capture = tap(net)
    rate, seconds = 300.0, cfg.t(3.0, 10.0)
    try:
        with watching(capture, att):
            time.sleep(0.3)
            b1 = net.bridges["b1"]
            rss0 = b1.rss_kib()
            m0 = b1.metrics()

            newer = [s for s in att.heard if not s.packet[30:].startswith(BEACON_MAGIC_V1)][-1:]
            began = time.monotonic()
            sent = sent_bytes = 0
            for i in range(int(rate * seconds)):
                pace(began, i, rate)
                forged_id = b"\x02" + os.urandom(5)
                if newer and i % 2:
                    packet = with_source(newer[0].packet, forged_id)
                else:
                    packet = beacon_v1(forged_id, [b"\x02" + os.urandom(5) for _ in range(241)])
                raw = frame(BROADCAST, att.mac, ETHERNET_II, packet)
                att.frame(raw)
                sent += 1
                sent_bytes += len(packet)
            time.sleep(0.5)
            ended = time.monotonic()
            rss1 = b1.rss_kib()
            m1 = b1.metrics()
            replies = [
                s
                for s in capture.since(began, ports=("p-b1", "p-b2", "q-b1", "q-b2"))
                if s.is_beacon and s.at <= ended
            ]
            rss2 = rss1
            if not cfg.quick:
                time.sleep(16.0)  # past the beacons' expiry (15 s)
                rss2 = b1.rss_kib()
    finally:
        att.close()
        net.stop(2.0)
    bridges = max(
        (v for k, v in m1.items() if k.startswith("ipxbridge_ipx_port_bridges{")), default=0.0
    )
    out_bytes = sum(s.payload for s in replies)
    # The bridges' own beacons (every 5 s on each port) are not replies: allowed for.
    own = 2 * 3 * (seconds + 0.5) / 5.0
    amplification = max(len(replies) - own, 0) / max(sent, 1)
    growth = (rss1 - rss0) / 1024
    res.values.update(
        forged=sent,
        forged_bytes=sent_bytes,
        rss_growth_mb=growth,
        rss_after_expiry_mb=(rss2 - rss0) / 1024,
        replies=len(replies),
        reply_packets_per_beacon=amplification,
        reply_bytes_per_byte=out_bytes / max(sent_bytes, 1),
        bridges_table=bridges,
        evictions=evictions(m1),
        unverified=by_reason(m1, "beacon_").get("beacon_unverified", 0)
        - by_reason(m0, "beacon_").get("beacon_unverified", 0),
    )
    expiry = "" if cfg.quick else f", {(rss2 - rss0) / 1024:+.1f} MB 16 s later"
    res.row(
        f"unique-id beacons with 241 peers each, {rate:.0f}/s for {seconds:.0f} s ({sent:,})",
        "bounded bridge table and memory; replies never amplify",
        f"RSS {rss0 / 1024:.0f} -> {rss1 / 1024:.0f} MB ({growth:+.1f}){expiry}; bridge table "
        f"{bridges:.0f}; {len(replies):,} beacons sent in reply ({amplification:.2f} per forged "
        f"beacon, {out_bytes / max(sent_bytes, 1):.2f} bytes per byte); evictions "
        f"{sum(res.values['evictions'].values())}",
        growth <= 10 and bridges <= 16 and amplification <= 1.0,
    )
    return res


# --- R22: coalesced batches, malformed frames --------------------------------------------------


def bad_batches(src_node: bytes, seq: int) -> list[tuple[str, bytes]]:
    """Batches with one bad inner packet each: nested, oversize, inner length past the end or
    below 30, bad inner checksum (docs/protocols.md 6)."""
    good = ipx(BROADCAST, GAME_SOCKET, src_node, GAME_SOCKET, tag(BATCH_BAD, seq, 40))
    past = bytearray(good)
    past[2:4] = (len(good) + 20).to_bytes(2, "big")
    short = bytearray(good)
    short[2:4] = (20).to_bytes(2, "big")
    checksum = bytearray(good)
    checksum[0:2] = b"\x12\x34"
    nested = batch(BROADCAST, src_node, [good])
    big = [good] * (COALESCED_MAX // len(good) + 2)
    return [
        ("nested", b"".join((good, nested))),
        ("oversize", b"".join(big)),
        ("length_past_end", good + bytes(past)),
        ("length_below_30", good + bytes(short)),
        ("bad_checksum", good + bytes(checksum)),
    ]


def attack_batches(net: Lan, cfg: Cfg) -> list[Result]:
    """Malformed frames (the control row), bad batches, batches to filtered sockets."""
    control, bad, filtered = Result("malformed"), Result("batch_malformed"), Result("batch_filter")
    two_bridges(net)
    c1 = DosClient("c1", net.ns["c1"], (C1_SERVER, 213))
    att = Attacker(net)
    capture = tap(net)
    b1 = net.bridges["b1"]
    try:
        with watching(capture, c1):
            time.sleep(0.2)
            # 1. malformed frames and datagrams (the table's passing row, kept as a control)
            log0 = {n: len(b.log()) for n, b in net.bridges.items()}

            for frame_ in malformed_frames(att, net, cfg):
                att.frame(frame_)
            for packet, dport in (
                (ipx(BROADCAST, GAME_SOCKET, ATT_NODE, GAME_SOCKET, tag(MALFORMED, 0)), 213),
                (
                    ipxwrapper(BROADCAST, GAME_SOCKET, ATT_NODE, GAME_SOCKET, tag(MALFORMED, 1)),
                    IPXWRAPPER_PORT,
                ),
            ):
                for src in ("8.8.8.8", "10.99.0.5"):
                    att.spoof((src, 40000), (B1_LAN, dport), packet)
            time.sleep(0.5)
            m1 = b1.metrics()
            logs1 = {n: b.log() for n, b in net.bridges.items()}
            tb_control = sum(logs1[n][log0[n] :].count("Traceback") for n in logs1)
            received, outcomes = books(m1)
            control.values.update(tracebacks=tb_control, received=received, outcomes=outcomes)
            control.row(
                "malformed frames (runts, lying lengths, jumbo length, own MAC), hop counts "
                "15/16/255, a storm in four framings, off-subnet sources on 54792 and 213",
                "counted, no traceback",
                f"{tb_control} tracebacks; books received {received:,} = outcomes "
                f"{outcomes:,}: {'yes' if received == outcomes else 'no'}",
                tb_control == 0 and received == outcomes,
            )
            # 2. bad batches, from the DOSBox client on 213 and from a UDP host on 54792.
            # The control's frames from b1's own MAC moved that MAC to the attacker's port
            # in the Linux bridge; b1's next beacon (every 5 s, from its MAC) moves it back,
            # else the attacker's datagrams to b1 go to the attacker's own port.
            time.sleep(5.5)
            count = cfg.n(300, 3000)
            fwd0 = sample(m1, "ipxbridge_forwarded_packets_total", path="ipx")
            drops0 = sum(by_reason(m1, "batch_").values())
            log1 = {n: len(t) for n, t in logs1.items()}
            began = time.monotonic()
            kinds: Counter[str] = Counter()
            for i in range(count):
                pace(began, i, 1000.0)
                name, data = bad_batches(c1.node if i % 2 else ATT_NODE, i)[i // 2 % 5]
                kinds[name] += 1
                if i % 2:
                    c1.send(_outer(c1.node, data))
                else:
                    att.to(_outer_wrapper(data), (B1_LAN, IPXWRAPPER_PORT))
            time.sleep(0.8)
            m2 = b1.metrics()
            logs2 = {n: b.log() for n, b in net.bridges.items()}
            tracebacks = sum(logs2[n][log1[n] :].count("Traceback") for n in logs2)
            log_bytes = sum(len(logs2[n]) - log1[n] for n in logs2)
            counted = sum(by_reason(m2, "batch_").values()) - drops0
            before = by_reason(m1)
            moved = {k: v - before.get(k, 0) for k, v in by_reason(m2).items()}
            by_port = {
                kind: int(
                    sample(m2, "ipxbridge_ipx_port_packets_total", kind=kind, outcome="dropped")
                    - sample(m1, "ipxbridge_ipx_port_packets_total", kind=kind, outcome="dropped")
                )
                for kind in ("dosbox", "ipxwrapper")
            }
            forwarded = int(sample(m2, "ipxbridge_forwarded_packets_total", path="ipx") - fwd0)
            copies = len([s for s in capture.since(began) if s.tag and s.tag[0] == BATCH_BAD])
            bad.values.update(
                sent=count,
                tracebacks=tracebacks,
                log_bytes=log_bytes,
                counted=counted,
                reasons=by_reason(m2, "batch_"),
                drops_during={k: v for k, v in moved.items() if v},
                dropped_by_port=by_port,
                forwarded=forwarded,
                copies=copies,
                kinds=dict(kinds),
            )
            bad.row(
                f"{count:,} coalesced batches with a bad inner packet (nested, > 1384 B, "
                "inner length past the end or < 30, bad inner checksum), half on UDP 54792, "
                "half from a DOSBox client",
                "dropped and counted by reason; no traceback, no log line per packet",
                f"{tracebacks:,} tracebacks, {log_bytes / 1024:,.0f} KB of log; batch_* drops "
                f"{counted:,}/{count:,} (dropped on the DOSBox port {by_port['dosbox']:,}, on "
                f"54792 {by_port['ipxwrapper']:,}); booked forwarded {forwarded:,}; {copies} "
                "copies of them sent on",
                tracebacks == 0 and counted >= count and log_bytes <= 20_000,
            )
            # 3. batches whose inner packets go to NCP, SAP and RIP
            began = time.monotonic()
            datagrams = 5
            for i in range(datagrams):
                inner = [
                    ipx(
                        BROADCAST,
                        sock,
                        c1.node if i % 2 else ATT_NODE,
                        sock,
                        tag(BATCH_FILTER, i * 3 + j, 30),
                    )
                    for j, sock in enumerate(FILTERED_SOCKETS)
                ]
                if i % 2:
                    c1.send(batch(BROADCAST, c1.node, inner))
                else:
                    att.to(
                        batch_ipxwrapper(BROADCAST, ATT_NODE, inner), (LAN_BCAST, IPXWRAPPER_PORT)
                    )
                time.sleep(0.05)
            time.sleep(0.6)
            leaked = [
                s
                for s in capture.since(began)
                if s.is_ipx
                and (s.dst_socket in FILTERED_SOCKETS or (s.tag and s.tag[0] == BATCH_FILTER))
            ]
            filtered.values.update(datagrams=datagrams, leaked=len(leaked))
            filtered.row(
                f"{datagrams} coalesced batches whose inner packets go to sockets 0x451-0x453",
                "filtered like any packet",
                f"{len(leaked)} NCP/SAP/RIP frames and datagrams from the bridges",
                not leaked,
            )
    finally:
        att.close()
        net.stop(2.0)
    return [control, bad, filtered]


def _outer(src_node: bytes, data: bytes) -> bytes:
    """A batch from a DOSBox client: outer IPX header, type 2, sockets 0."""
    return ipx(BROADCAST, 0, src_node, 0, data, ptype=2)


def _outer_wrapper(data: bytes) -> bytes:
    return ipxwrapper(BROADCAST, 0, ATT_NODE, 0, data, ptype=2)


def malformed_frames(att: Attacker, net: Lan, cfg: Cfg) -> Iterator[bytes]:
    """The table's passing row: runts, lying lengths, jumbo length, the bridge's own MAC,
    hop counts 15/16/255, and a burst in four framings."""
    mac = att.mac
    good = ipx(BROADCAST, GAME_SOCKET, mac, GAME_SOCKET, tag(MALFORMED, 2, 20))
    yield frame(BROADCAST, mac, ETHERNET_II, good)[:20]  # runt
    yield frame(BROADCAST, mac, ETHERNET_II, good[:20])  # IPX runt
    for framing in (RAW_8023, LLC, SNAP):
        raw = bytearray(frame(BROADCAST, mac, framing, good))
        raw[12:14] = (1400).to_bytes(2, "big")  # 802.3 length past the frame
        yield bytes(raw)
    yield frame(BROADCAST, mac, ETHERNET_II, good[:2] + b"\xff\xff" + good[4:])  # IPX length
    yield frame(BROADCAST, mac, ETHERNET_II, good[:2] + b"\x00\x10" + good[4:])
    yield frame(BROADCAST, net.macs["b1"], ETHERNET_II, good)  # the bridge's own MAC
    for hops in (15, 16, 255):
        yield frame(
            BROADCAST,
            mac,
            ETHERNET_II,
            ipx(BROADCAST, GAME_SOCKET, mac, GAME_SOCKET, tag(MALFORMED, 3 + hops), hops=hops),
        )
    for i in range(cfg.n(400, 2000)):
        yield frame(
            BROADCAST,
            mac,
            FRAMINGS[i % 4],
            ipx(BROADCAST, GAME_SOCKET, mac, GAME_SOCKET, tag(MALFORMED, 1000 + i)),
        )


# --- R23: reflection and the framing learner -----------------------------------------------------


def attack_reflector(net: Lan, cfg: Cfg) -> Result:
    """A remote client that never proved anything aims the bridges at a LAN host nobody
    heard: unicast to ``00 00`` + IPv4, batches toward an IPv4, toward a MAC, a broadcast batch."""
    res = Result("reflector")
    two_bridges(net, kinds="ethernet,ipxwrapper,rfc1234")
    c1 = DosClient("c1", net.ns["c1"], (C1_SERVER, 213))
    capture = tap(net)
    v1_mac = net.macs["v1"]
    v1_node = b"\0\0" + socket.inet_aton(V1_IP)
    data = 100
    per = 50

    def packets(dst: bytes, code: int, i: int, many: int) -> bytes:
        """One packet of ``code`` to node ``dst``, or a batch of ``many`` of them."""
        inner = [
            ipx(dst, GAME_SOCKET, c1.node, GAME_SOCKET, tag(code, i * many + j, data))
            for j in range(max(many, 1))
        ]
        return batch(dst, c1.node, inner) if many else inner[0]

    variants: list[tuple[str, Callable[[int], bytes]]] = [
        ("unicast to node 00 00 + its IPv4", lambda i: packets(v1_node, REFLECT[0], i, 0)),
        ("a batch toward its IPv4", lambda i: packets(v1_node, REFLECT[1], i, 4)),
        ("a batch toward its MAC", lambda i: packets(v1_mac, REFLECT[2], i, 4)),
        ("a broadcast batch", lambda i: packets(BROADCAST, REFLECT[3], i, 4)),
    ]

    def unproven() -> int:
        """Copies the bridges left out toward hosts not heard on a port (``unproven_host``)."""
        return int(
            sum(
                sample(
                    b.metrics(), "ipxbridge_ipx_port_dropped_copies_total", reason="unproven_host"
                )
                for b in net.bridges.values()
            )
        )

    try:
        with watching(capture, c1):
            time.sleep(0.2)
            for (name, make), code in zip(variants, REFLECT, strict=True):
                held = unproven()
                began = time.monotonic()
                sent_bytes = 0
                for i in range(per):
                    pace(began, i, 100.0)
                    packet = make(i)
                    c1.send(packet)
                    sent_bytes += len(packet)
                time.sleep(0.5)
                out = [s for s in capture.since(began) if s.tag is not None and s.tag[0] == code]
                to_ip = [s for s in out if s.ip_dst == V1_IP]
                to_mac = [s for s in out if s.dst_mac == v1_mac and s.kind in FRAMINGS]
                on_lan = [s for s in out if s.port in LAN_PORTS and _on_lan(s)]
                if code == REFLECT[3]:
                    toward, judged = on_lan, False
                elif code == REFLECT[2]:
                    toward, judged = to_mac + to_ip, True
                else:
                    toward, judged = to_ip, True
                out_bytes = sum(s.payload for s in toward)
                ratio = out_bytes / max(sent_bytes, 1)
                held = unproven() - held
                res.values[name] = {
                    "unproven_host": held,
                    "in": sent_bytes,
                    "out": out_bytes,
                    "ratio": ratio,
                    "to_ip": len(to_ip),
                    "to_mac": len(to_mac),
                    "by_port": dict(Counter(f"{s.port}/{s.kind}" for s in toward)),
                }
                res.row(
                    f"an unverified remote client aims {per} x {name} at a LAN host nobody heard",
                    "nothing to an address nobody proved; bytes out <= bytes in"
                    if judged
                    else "(a broadcast: reported, not judged)",
                    f"{ratio:.2f} bytes out per byte in ({len(to_ip)} datagrams to its IPv4, "
                    f"{len(to_mac)} frames to its MAC; {held} copies counted unproven_host)",
                    (ratio <= 1.0 and not to_ip) if judged else None,
                )
    finally:
        net.stop(2.0)
    return res


def _on_lan(s: Seen) -> bool:
    return s.kind in FRAMINGS or s.kind in ("ipxwrapper", "udp213")


def attack_framings(net: Lan, cfg: Cfg) -> Result:
    """Four frames in four framings, then bad-checksum SNAP frames with a station's MAC."""
    res = Result("framings")
    two_bridges(net)
    n1 = Station("n1", net.ns["n1"])
    c1 = DosClient("c1", net.ns["c1"], (C1_SERVER, 213))
    att = Attacker(net)
    capture = tap(net)
    try:
        with watching(capture, n1, c1):
            n1.broadcast(tag(HELLO, 3), GAME_SOCKET)
            time.sleep(0.3)

            def framings_of(first: int, count: int) -> tuple[set[str], int, float]:
                """Framings c1's next ``count`` broadcasts go out in, the most copies of one
                in one framing, and the frames per broadcast."""
                began = time.monotonic()
                for i in range(first, first + count):
                    c1.broadcast(tag(FRAMING_BCAST, i, 20), GAME_SOCKET)
                    time.sleep(0.05)
                time.sleep(0.3)
                native = {
                    k: v
                    for k, v in lan_copies(capture, began, FRAMING_BCAST).items()
                    if k in FRAMINGS
                }
                frames = sum(sum(c.values()) for c in native.values())
                return set(native), worst_per_kind(native), frames / count

            before, _, per_before = framings_of(0, 5)
            # Four frames the switch drops (hop count 255), one per framing, four MACs.
            for framing in FRAMINGS:
                mac = b"\x02" + os.urandom(5)
                bait = ipx(BROADCAST, GAME_SOCKET, mac, GAME_SOCKET, tag(FRAMING_BAIT, 0), hops=255)
                att.frame(frame(BROADCAST, mac, framing, bait))
            time.sleep(0.3)
            after, worst, per = framings_of(100, 10)
            # One bad-checksum SNAP frame a second from the station's MAC, unicasts to it.
            seconds = cfg.t(2.0, 8.0)
            began = time.monotonic()
            unicasts = int(seconds * 10)
            for i in range(unicasts):
                pace(began, i, 10.0)
                if i % 10 == 0:
                    bait = ipx(
                        BROADCAST,
                        GAME_SOCKET,
                        n1.mac,
                        GAME_SOCKET,
                        tag(FRAMING_BAIT, i),
                        checksum=0x1234,
                    )
                    att.frame(frame(BROADCAST, n1.mac, SNAP, bait))
                    time.sleep(0.02)
                c1.send(ipx(n1.mac, GAME_SOCKET, c1.node, GAME_SOCKET, tag(FRAMING_UNI, i, 20)))
            time.sleep(0.4)
            toward = [
                s
                for s in capture.since(began, ports=LAN_PORTS)
                if s.tag is not None and s.tag[0] == FRAMING_UNI and s.kind in FRAMINGS
            ]
            right = len({s.tag[1] for s in toward if s.kind == ETHERNET_II and s.tag})
            by_framing = Counter(s.kind for s in toward)
    finally:
        att.close()
        net.stop(2.0)
    added = sorted(after - before)
    res.values.update(
        framings_before=sorted(before),
        framings_after=sorted(after),
        frames_per_broadcast_before=per_before,
        frames_per_broadcast=per,
        worst_per_framing=worst,
        unicasts=unicasts,
        in_station_framing=right,
        by_framing=dict(by_framing),
    )
    res.row(
        "4 frames the switch drops (hop count 255), one in each framing, from 4 MACs",
        "each later broadcast once per framing in real use",
        f"{per_before:.1f} frames per broadcast before ({', '.join(sorted(before))}), "
        f"{per:.1f} after ({', '.join(sorted(after))})",
        not added and worst <= 1,
    )
    res.row(
        "a bad-checksum SNAP frame a second with a station's MAC",
        "frames the switch drops teach nothing: its unicasts stay in its framing",
        f"{right}/{unicasts} unicasts to it in Ethernet II (by framing: "
        f"{', '.join(f'{k} {v}' for k, v in sorted(by_framing.items()))})",
        right >= unicasts,
    )
    return res


# --- R24: table exhaustion ------------------------------------------------------------------------


def attack_mac_flood(net: Lan, cfg: Cfg) -> Result:
    """6,000 unique source MACs in 4 s while a quiet, proven Ethernet II station is sent
    unicasts and broadcasts."""
    res = Result("mac_flood")
    two_bridges(net)
    q1 = Station("q1", net.ns["q1"])
    c1 = DosClient("c1", net.ns["c1"], (C1_SERVER, 213))
    att = Attacker(net)
    total, seconds = 6000, 4.0
    try:
        with watching(q1, c1):
            # Proven: heard twice, more than a second apart; then quiet.
            q1.broadcast(tag(HELLO, 4), GAME_SOCKET)
            time.sleep(1.2)
            q1.broadcast(tag(HELLO, 5), GAME_SOCKET)
            time.sleep(0.3)
            began = time.monotonic()
            sent_uni = sent_bc = 0
            # 6,000 valid broadcasts in 802.2, each from a new MAC (the table of 4,096 is full
            # 2.7 s in); from 3 s on, c1 sends the quiet station 30 unicasts and 30 broadcasts
            # a second, 60 of each.
            for i in range(total + 300):  # the tail: 10 ms steps until 60 of each are sent
                if i < total:
                    pace(began, i, total / seconds)
                    mac = b"\x02" + os.urandom(5)
                    flood = ipx(BROADCAST, GAME_SOCKET, mac, GAME_SOCKET, tag(MAC_FLOOD, i))
                    att.frame(frame(BROADCAST, mac, LLC, flood))
                else:
                    time.sleep(0.01)
                due = min(int((time.monotonic() - began - 3.0) * 30), 60)
                while sent_uni < due:
                    c1.send(
                        ipx(q1.mac, GAME_SOCKET, c1.node, GAME_SOCKET, tag(Q_UNI, sent_uni, 20))
                    )
                    c1.broadcast(tag(Q_BCAST, sent_bc, 20), GAME_SOCKET)
                    sent_uni += 1
                    sent_bc += 1
                if sent_uni >= 60:
                    break
            time.sleep(0.5)
            m = {n: b.metrics() for n, b in net.bridges.items()}
    finally:
        att.close()
        net.stop(2.0)
    uni = len(counts(q1.got, Q_UNI))
    bc = len(counts(q1.got, Q_BCAST))
    evicted = {n: evictions(v) for n, v in m.items()}
    stations = max(
        sample(v, "ipxbridge_ipx_port_stations", kind="ethernet", interface="lan0")
        for v in m.values()
    )
    counted = sum(sum(e.values()) for e in evicted.values())
    res.values.update(
        unicasts=uni,
        broadcasts=bc,
        sent=sent_uni,
        evictions=evicted,
        evictions_total=counted,
        stations=stations,
    )
    res.row(
        f"{total:,} unique source MACs in {seconds:.0f} s (802.2), a quiet proven Ethernet II "
        "station",
        "tables bounded, evictions counted; the quiet station keeps 100 % of its unicasts and "
        "broadcasts",
        f"quiet station got {uni}/{sent_uni} unicasts, {bc}/{sent_bc} broadcasts; stations "
        f"table {stations:,.0f}; evictions counted {counted:,}",
        uni >= sent_uni and bc >= sent_bc and counted > 0 and stations <= 4096,
    )
    return res


# --- R7 again: rejoin and registration amplification -------------------------------------------


class VictimCounter:
    """UDP payload bytes a victim address gets from the bridge (AF_PACKET on its link)."""

    def __init__(self, ns: str, source: str) -> None:
        self.sock = socket_in(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind(("eth0", ETH_P_ALL))
        self.sock.setblocking(False)
        self.source = source
        self.bytes: Counter[str] = Counter()
        self.packets: Counter[str] = Counter()

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def drain(self) -> None:
        for _ in range(4096):
            try:
                raw, addr = self.sock.recvfrom(70_000)
            except BlockingIOError:
                return
            if addr[2] == 4:
                continue
            seen = read_frame(raw, time.monotonic(), "vr")
            if seen.ip_src == self.source and seen.kind in ("udp", "udp213"):
                self.bytes[seen.ip_dst] += seen.payload
                self.packets[seen.ip_dst] += 1


def attack_rejoin(net: Lan, cfg: Cfg) -> Result:
    """One spoofed rejoin with the address node, spoofed registrations, and 17 players
    behind one NAT address that never answer pings."""
    res = Result("rejoin")
    net.start({"b1": ("--ipx-iface", "lan0")})
    player = DosClient("player", net.ns["c1"], (C1_SERVER, 213), answer_pings=True)
    counter = VictimCounter(net.ns["vr"], VR_SERVER)
    att = Attacker(net)
    seconds = cfg.t(2.0, 20.0)
    registrations = cfg.n(100, 1000)
    rejoin_ip, reg_ip = VR_IPS
    try:
        with watching(player, counter) as watch:
            time.sleep(1.5)  # the player answers its first probe
            # 17 players behind one address that never answer pings (IPXWrapper).
            nat: list[bool] = []
            for i in range(17):
                try:
                    # IPXWrapper in DOSBox mode: registration type 2, retried (docs/protocols.md 6).
                    player_ = DosClient(
                        f"nat{i}",
                        net.ns["nat"],
                        (NAT_SERVER, 213),
                        tries=2,
                        timeout=0.4,
                        registration_type=2,
                    )
                except BenchError:
                    nat.append(False)
                else:
                    nat.append(True)
                    watch.add(player_)
            # One spoofed packet carrying the node the old scheme gives that address.
            address_node = socket.inet_aton(rejoin_ip) + (40000).to_bytes(2, "big")
            spoofed = ipx(BROADCAST, GAME_SOCKET, address_node, GAME_SOCKET, bytes(30))
            att.spoof((rejoin_ip, 40000), (B1_LAN, 213), spoofed)
            rejoin_in = len(spoofed)
            registration = ipx(bytes(6), 2, bytes(6), 2)
            attack_began = time.monotonic()
            for i in range(registrations):
                att.spoof((reg_ip, 41000 + i), (B1_LAN, 213), registration)
            reg_in = registrations * len(registration)
            began = time.monotonic()
            for i in range(int(seconds * 20)):
                pace(began, i, 20.0)
                player.broadcast(tag(PLAYER, i, 200), GAME_SOCKET)
            time.sleep(0.5)
            span = time.monotonic() - attack_began
    finally:
        att.close()
        net.stop(2.0)
    rejoin_baf = counter.bytes[rejoin_ip] / rejoin_in
    reg_baf = counter.bytes[reg_ip] / reg_in
    # What the reflection limit allows toward one address over the attack (docs/ipx.md,
    # "Verification"): its burst plus its rate for as long as the attack and the game ran.
    limits = SwitchSettings()
    reg_bound = (
        limits.unverified_address_byte_burst + limits.unverified_address_bytes_per_second * span
    )
    res.values.update(
        rejoin_in=rejoin_in,
        rejoin_out=counter.bytes[rejoin_ip],
        rejoin_baf=rejoin_baf,
        rejoin_packets=counter.packets[rejoin_ip],
        registrations=registrations,
        registration_in=reg_in,
        registration_out=counter.bytes[reg_ip],
        registration_baf=reg_baf,
        registration_bound=reg_bound,
        nat_answered=sum(nat),
        nat_17th=nat[-1] if nat else False,
    )
    res.row(
        "one spoofed DOSBox packet with the node of the victim's address (a rejoin)",
        "amplification <= 1.0",
        f"{rejoin_baf:.1f} ({counter.packets[rejoin_ip]} datagrams, "
        f"{counter.bytes[rejoin_ip]:,} B to the victim in {seconds:.0f} s for {rejoin_in} B)",
        rejoin_baf <= 1.0,
    )
    res.row(
        f"{registrations:,} spoofed registrations from one victim address, a player broadcasting",
        "bytes to the victim <= the address's burst + rate x time",
        f"{counter.bytes[reg_ip]:,} B in {span:.1f} s (bound {reg_bound:,.0f} B; "
        f"{reg_baf:.2f}x the {reg_in:,} B spoofed)",
        counter.bytes[reg_ip] <= reg_bound,
    )
    res.row(
        "17 players behind one NAT address who never answer pings (IPXWrapper)",
        "the 17th is not locked out",
        f"{sum(nat)}/17 got a registration reply; the 17th "
        + ("did" if nat and nat[-1] else "did not"),
        bool(nat and nat[-1]),
    )
    return res


# --- R25: rule 8 against recorded beacons, and failover ------------------------------------------


class Recorder:
    """The attacker's two cards, ``eth0`` on site A's segment and ``eth1`` on segment T: it
    keeps each bridge's latest beacon of every kind as it was on the wire (an Ethernet II
    frame, an IPXWrapper datagram), and forwards one bridge's beacons from one wire to the
    other as they come (``forward``)."""

    def __init__(self, net: Lan) -> None:
        self.socks: dict[str, socket.socket] = {}
        for iface in ("eth0", "eth1"):
            sock = socket_in(
                net.ns["att"], socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)
            )
            sock.bind((iface, ETH_P_ALL))
            sock.setblocking(False)
            self.socks[iface] = sock
        self.ids: dict[bytes, bytes] = {}  # a bridge's port MAC -> its bridge id
        self.latest: dict[tuple[bytes, str], bytes] = {}  # (port MAC, kind) -> frame
        self.forward: tuple[bytes, str, str] | None = None  # (port MAC, from wire, to wire)
        self.forwarded = 0
        self.replayed = 0

    def readers(self) -> list[Reader]:
        return [_Wire(self, iface) for iface in self.socks]

    def take(self, iface: str, raw: bytes) -> None:
        seen = read_frame(raw, time.monotonic(), iface)
        if not seen.is_beacon:
            return
        self.ids[seen.src_mac] = seen.src_node
        self.latest[(seen.src_mac, seen.kind)] = raw
        if self.forward is not None and self.forward[:2] == (seen.src_mac, iface):
            self.socks[self.forward[2]].send(raw)
            self.forwarded += 1

    def replay(self, iface: str, frames: Sequence[bytes]) -> None:
        for raw in frames:
            self.socks[iface].send(raw)
            self.replayed += 1

    def recorded(self, mac: bytes) -> list[bytes]:
        return [raw for (src, _), raw in self.latest.items() if src == mac]

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()


@dataclass
class _Wire:
    """One of the recorder's cards, as the watcher drains it."""

    recorder: Recorder
    iface: str

    def fileno(self) -> int:
        return self.recorder.socks[self.iface].fileno()

    def close(self) -> None:
        pass  # the recorder closes its sockets

    def drain(self) -> None:
        sock = self.recorder.socks[self.iface]
        for _ in range(4096):
            try:
                raw, addr = sock.recvfrom(70_000)
            except BlockingIOError:
                return
            if addr[2] != 4:  # PACKET_OUTGOING: what it sent itself
                self.recorder.take(self.iface, raw)


RULE8: Final = {
    "replayed_later": "L switched off; every kind of its recorded beacon replayed every 2 s "
    "after H took over",
    "another_segment": "L and H on two segments; every beacon of L forwarded onto H's segment "
    "as it comes",
    "another_segment_no_key": "the same without a key",
    "low_dies": "failover: L killed mid-game",
    "low_loses_peer_link": "failover: L loses its link to B (its wan0 down)",
    "low_loses_its_port": "failover: L loses its port on the segment (its lan0 down)",
}


def rule8_run(net: Lan, cfg: Cfg, case: str) -> dict[str, Any]:
    """b1 and b2 (the key shared unless the case says not) on site A's segment, or b2 moved
    to segment T; b3 peered with both, its client c3 broadcasting 10 a second; a native
    station on H's segment counts what arrives. L is the bridge with the lower id: the one H
    leaves b3's packets to (rule 8), and the one the attack aims at."""
    seg = net.ns["seg"]
    two = case.startswith("another_segment")
    key = not case.endswith("no_key")
    failover = case.startswith("low_")
    sent_n = cfg.n(40, 80)
    rec = Recorder(net)
    low = high = ""
    if two:
        sh("ip", "-n", seg, "link", "set", "p-b2", "master", "br1")
    try:
        with watching(*rec.readers()) as watch:
            two_bridges(net, key=key, remote="both", converged=not two)
            deadline = time.monotonic() + 8.0  # a bridge announces itself as it starts
            while time.monotonic() < deadline and not all(
                net.macs[b] in rec.ids for b in ("b1", "b2")
            ):
                time.sleep(0.1)
            if not all(net.macs[b] in rec.ids for b in ("b1", "b2")):
                raise BenchError("the attacker heard no beacon from one of the bridges")
            low, high = sorted(("b1", "b2"), key=lambda b: rec.ids[net.macs[b]])
            wire = {"b1": "eth0", "b2": "eth1" if two else "eth0"}
            station = Station("n", net.ns["n2" if wire[high] == "eth1" else "n1"])
            watch.add(station)
            station.broadcast(tag(HELLO, 3), GAME_SOCKET)
            source = DosClient("c3", net.ns["c3"], (C3_SERVER, 213))
            watch.add(source)
            h = net.bridges[high]
            replaying: list[bytes] = []
            if case == "replayed_later":
                replaying = rec.recorded(net.macs[low])
                net.bridges[low].proc.stop(5.0)
                began_wait = time.monotonic()
                while time.monotonic() < began_wait + 30.0:  # H forgets L (BEACON_TTL)
                    bridges = sample(
                        h.metrics(), "ipxbridge_ipx_port_bridges", kind="ethernet",
                        interface="lan0",
                    )  # fmt: skip
                    if bridges == 0:
                        break
                    time.sleep(0.25)
                rec.replay(wire[low], replaying)
                time.sleep(3.0)  # the recording takes hold, if it can
            elif two:
                rec.forward = (net.macs[low], wire[low], wire[high])
                time.sleep(5.5)  # one beacon interval: a forwarded beacon has reached H
            m0 = h.metrics()
            began = time.monotonic()
            next_replay = began + 2.0
            failed_at = sent_n * 3 // 8
            for i in range(sent_n):
                pace(began, i, 10.0)
                if failover and i == failed_at:
                    if case == "low_dies":
                        net.bridges[low].proc.proc.kill()
                    elif case == "low_loses_peer_link":
                        sh("ip", "-n", net.ns[low], "link", "set", "wan0", "down")
                    else:
                        sh("ip", "-n", net.ns[low], "link", "set", "lan0", "down")
                if replaying and time.monotonic() >= next_replay:
                    rec.replay(wire[low], replaying)
                    next_replay += 2.0
                source.broadcast(tag(R25_TRAFFIC, i, 32), GAME_SOCKET)
            time.sleep(0.6)
            m1 = h.metrics()
        got = counts(station.got, R25_TRAFFIC)
    finally:
        rec.close()
        net.stop(2.0)
        for who, iface in ((low, "wan0"), (low, "lan0")):
            if who:
                sh("ip", "-n", net.ns[who], "link", "set", iface, "up")
        if two:
            sh("ip", "-n", seg, "link", "set", "p-b2", "master", "br0")
    delivered = sum(1 for i in range(sent_n) if got[i])
    drops1, drops0 = by_reason(m1), by_reason(m0)
    return {
        "sent": sent_n,
        "delivered": delivered,
        "copies": sum(got[i] for i in range(sent_n)) / max(delivered, 1),
        "missing": [i for i in range(sent_n) if not got[i]][:20],
        "sent_late_by_h": sample(m1, "ipxbridge_ipx_delegated_total", outcome="missing")
        - sample(m0, "ipxbridge_ipx_delegated_total", outcome="missing"),
        "dropped": {r: drops1.get(r, 0) - drops0.get(r, 0) for r in drops1},
        "replayed": rec.replayed,
        "forwarded": rec.forwarded,
        "low": low,
    }


def attack_rule8(net: Lan, cfg: Cfg) -> Result:
    """Recorded beacons replayed later or on another segment, and failover (R25)."""
    res = Result("rule8")
    for case, what in RULE8.items():
        keyed = "" if case.endswith("no_key") else ", with ipx.bridge_key_file"
        if keyed and not net.features.bridge_key:
            res.values[case] = None
            res.row(f"R25: {what}{keyed}", "", "n/a: this tree has no ipx.bridge_key_file", None)
            continue
        got = rule8_run(net, cfg, case)
        res.values[case] = got
        dropped = ", ".join(
            f"{n:,} {r}" for r, n in sorted(got["dropped"].items()) if n and r.startswith("beacon_")
        )  # every reason is in the JSON
        text = (
            f"{got['delivered']}/{got['sent']} on H's segment, {got['copies']:.2f} copies; "
            f"copies H sent itself after the watch's window: {got['sent_late_by_h']:.0f} "
            f"(ethernet and ipxwrapper); beacons H refused: {dropped or 'none'}"
        )
        # A failover may cost the one broadcast in flight (docs/reliability.md R25); an
        # attack may cost none of 80 (>= 99 %).
        need = got["sent"] - 1 if case.startswith("low_") else 0.99 * got["sent"]
        trustworthy = (
            f"the segment is served (>= {got['sent'] - 1}/{got['sent']})"
            if case.startswith("low_")
            else ">= 99 % delivered; the recording refused"
        )
        res.row(
            f"R25: {what}{keyed}",
            trustworthy,
            text,
            got["delivered"] >= need and got["copies"] <= 1.05,
        )
    return res


# --- the table ------------------------------------------------------------------------------------


ATTACKS: Final[dict[str, Callable[[Lan, Cfg], Result | list[Result]]]] = {
    "loop": attack_loop,
    "source_mac": attack_source_mac,
    "beacon_forged": attack_beacon_forged,
    "beacon_duplicate": attack_beacon_duplicate,
    "beacon_flood": attack_beacon_flood,
    "batches": attack_batches,
    "reflector": attack_reflector,
    "framings": attack_framings,
    "mac_flood": attack_mac_flood,
    "rejoin": attack_rejoin,
    "rule8": attack_rule8,
}
# names --only takes -> the function that measures them
PROVIDES: Final = {
    "loop": "loop",
    "source_mac": "source_mac",
    "beacon_forged": "beacon_forged",
    "beacon_duplicate": "beacon_duplicate",
    "beacon_flood": "beacon_flood",
    "malformed": "batches",
    "batch_malformed": "batches",
    "batch_filter": "batches",
    "reflector": "reflector",
    "framings": "framings",
    "mac_flood": "mac_flood",
    "rejoin": "rejoin",
    "rule8": "rule8",
}
LONG_ONLY: Final = frozenset({"rule8"})


def describe(tree: Path) -> str:
    res = subprocess.run(
        ["git", "-C", str(tree), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return res.stdout.strip() or "?"


def print_table(results: list[Result], header: str) -> None:
    print(header)
    print()
    print("| attack | what a trustworthy bridge does | measured | verdict |")
    print("|---|---|---|---|")
    for result in results:
        for row in result.rows:
            print(f"| {row.attack} | {row.trustworthy} | {row.measured} | {row.verdict} |")


def run(
    tree: Path, cfg: Cfg, only: Sequence[str], progress: Callable[[str], None]
) -> dict[str, Any]:
    wanted = [k for k in ATTACKS if k in {PROVIDES[n] for n in only}]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-") as tmp, lan(tree, Path(tmp)) as net:
        for name in wanted:
            started = time.monotonic()
            progress(f"{name} ...")
            try:
                got = ATTACKS[name](net, cfg)
            except (BenchError, OSError, TimeoutError) as exc:
                net.stop(2.0)
                err = Result(name)
                err.values["error"] = "".join(traceback.format_exception_only(exc)).strip()
                err.row(name, "", f"error: {err.values['error']}", False)
                err.rows[-1].verdict = "error"
                got = err
            for r in got if isinstance(got, list) else [got]:
                r.seconds = time.monotonic() - started
                results.append(r)
            progress(f"{name}: {time.monotonic() - started:.1f} s")
        features = asdict(net.features)
    return {
        "tree": str(tree),
        "commit": describe(tree),
        "namespaces": f"{PREFIX}_*",  # this run's, so a caller can check they are gone
        "quick": cfg.quick,
        "features": features,
        "attacks": {
            r.name: {
                "rows": [asdict(x) for x in r.rows],
                "values": r.values,
                "seconds": round(r.seconds, 1),
            }
            for r in results
            if r.name in only
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose bridge to run")
    parser.add_argument("--quick", action="store_true", help="the short form (the tests)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--only", help="attacks, comma-separated (default: all of them)")
    parser.add_argument("--save", type=Path, help="write the JSON to this file as well")
    a = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    if a.only is None:  # the short form leaves out what CI holds elsewhere (the docstring)
        only = [n for n in PROVIDES if not (a.quick and n in LONG_ONLY)]
    else:
        only = [n.strip() for n in a.only.split(",") if n.strip()]
    unknown = [n for n in only if n not in PROVIDES]
    if unknown:
        print(
            f"unknown attacks: {', '.join(unknown)}; known: {', '.join(PROVIDES)}", file=sys.stderr
        )
        return 2
    tree = a.tree.resolve()
    if not (tree / "ipxbridge" / "__init__.py").exists():
        print(f"{tree} is not an ipxbridge checkout", file=sys.stderr)
        return 2
    exit_on_signals()

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    began = time.monotonic()
    out = run(tree, Cfg(a.quick), only, progress)
    out["seconds"] = round(time.monotonic() - began, 1)
    text = json.dumps(out, indent=1, default=str)
    if a.save:
        a.save.write_text(text + "\n")
    if a.json:
        print(text)
    else:
        results = [Result(n, [Row(**r) for r in v["rows"]]) for n, v in out["attacks"].items()]
        header = (
            f"ipxbridge threat table: tree {out['tree']} ({out['commit']}), "
            f"{'short' if a.quick else 'full'} form, {out['seconds']:.0f} s; "
            f"features {', '.join(k for k, v in out['features'].items() if v) or 'none'}"
        )
        print_table(results, header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
