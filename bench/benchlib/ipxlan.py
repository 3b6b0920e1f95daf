"""The threat bench's LAN: namespaces, ipxbridges, stations, clients, an attacker, taps.

Everything lives in namespaces made here (``PREFIX_*``) and removed on the way out; no
packet leaves them. The shapes follow docs/protocols.md:

* **Site A's segment** ``br0`` (a Linux bridge in ``seg``): the bridges ``b1`` and ``b2``
  (``lan0``, 10.77.0.1 and .2/24), a native station ``n1`` bound to Ethernet II (3.1: its
  node is its MAC; it announces itself with a broadcast, as a client shell does when it
  loads), a quiet station ``q1``, an IPXWrapper host ``w1`` (6: the 27-byte header on UDP
  54792, broadcasts to the subnet broadcast, accepts only sources in its subnet, never
  answers a ping), a victim host ``v1`` that speaks no IPX, and the attacker ``att`` (an
  AF_PACKET socket for any frame, a plain UDP socket any user may open, and a raw IP socket
  for spoofed sources).
* **Segment T** ``br1``: a second segment, with no bridge on it until an attack moves b2's
  ``lan0`` port there (R25); on it a native station ``n2`` and the attacker's second card
  (``eth1``, no address: it only records and forwards frames).
* **Links of the bridges' own**: ``brpeer`` (b1-b2, their RFC 1234 peer link, 10.78.0.0/24)
  and ``brwan`` (b1, b2 and the remote site's bridge ``b3``, 10.81.0.0/24), also Linux
  bridges in ``seg``, so that every frame a bridge puts anywhere passes a tap.
* **Remote parties**: synthetic DOSBox-protocol clients (4: they register, take the first
  datagram as the reply, and answer a ping only when told to) on links of their own:
  ``c1`` behind b1 (10.79.1.11), ``c3`` behind b3 (10.79.3.11); b1's links ``cl2``
  (victims of spoofing, 10.79.2.10 and .11) and ``cl4`` (a NAT address with many players,
  10.79.4.10). b3 has no segment: a site of DOSBox clients only.

Taps: one AF_PACKET socket per Linux-bridge port in ``seg``; a frame *coming in* on port
``p-b1`` is one b1 put on its wire. That is the oracle for copies, source MACs and bytes.
"""

import contextlib
import ipaddress
import itertools
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from benchlib import BenchError
from benchlib.bridge import Process, bridge_argv, spawn
from benchlib.ipxwire import (
    BROADCAST,
    ETHERNET_II,
    IPX_HEADER,
    IPXWRAPPER_HEADER,
    IPXWRAPPER_PORT,
    Seen,
    find_tag,
    frame,
    ipx,
    ipxwrapper,
    ipxwrapper_to_ipx,
    read_frame,
)
from benchlib.metrics import scrape
from benchlib.netns import namespaces, sh, socket_in
from benchlib.procstat import rss_kib

PREFIX: Final = f"thr{os.getpid() % 100000}"
ETH_P_ALL: Final = 0x0003
PACKET_OTHERHOST: Final = 3
PACKET_OUTGOING: Final = 4
SO_RCVBUFFORCE: Final = 33
PACKET_STATISTICS: Final = 6
SOL_PACKET: Final = 263

LAN: Final = ipaddress.IPv4Network("10.77.0.0/24")
B1_LAN, B2_LAN = "10.77.0.1", "10.77.0.2"
N1_IP, Q1_IP, W1_IP, N2_IP = "10.77.0.10", "10.77.0.11", "10.77.0.20", "10.77.0.12"
V1_IP, ATT_IP = "10.77.0.99", "10.77.0.66"
B1_PEER, B2_PEER = "10.78.0.1", "10.78.0.2"
B1_WAN, B2_WAN, B3_WAN = "10.81.0.1", "10.81.0.2", "10.81.0.3"
C1_SERVER, C1_IP = "10.79.1.1", "10.79.1.11"
C3_SERVER, C3_IP = "10.79.3.1", "10.79.3.11"
VR_SERVER, VR_IPS = "10.79.2.1", ("10.79.2.10", "10.79.2.11")
NAT_SERVER, NAT_IP = "10.79.4.1", "10.79.4.10"
W1_NODE: Final = bytes.fromhex("02005e000114")  # IPXWrapper takes the NIC's MAC; a fixed one
WATCH_LIMIT: Final = 900.0  # no watcher thread outlives this, whatever happens

# The Linux-bridge ports in seg where the bridges' frames come in: lan0 (site A's segment),
# peer0 (b1-b2) and wan0 (b1, b2, b3).
LAN_PORTS: Final = ("p-b1", "p-b2")
TAPPED: Final = (*LAN_PORTS, "q-b1", "q-b2", "w-b1", "w-b2", "w-b3")


# --- readers: everything the watcher thread drains ------------------------------------------


class Reader(Protocol):
    """A socket the watcher reads whenever it is readable, and closes at the end."""

    def fileno(self) -> int: ...

    def drain(self) -> None: ...

    def close(self) -> None: ...


def _bigger_buffer(sock: socket.socket, size: int = 32 << 20) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


class TapPort:
    """Frames one attached namespace sent into a Linux bridge (``Capture``)."""

    def __init__(self, capture: "Capture", ns: str, port: str) -> None:
        self.capture = capture
        self.port = port
        self.sock = socket_in(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        _bigger_buffer(self.sock)
        self.sock.bind((port, ETH_P_ALL))
        self.sock.setblocking(False)

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
            if addr[2] == PACKET_OUTGOING:
                continue  # the Linux bridge handing a frame to this port's namespace
            self.capture.add(read_frame(raw, time.monotonic(), self.port))

    def dropped(self) -> int:
        """Frames the kernel dropped at this socket (struct tpacket_stats: packets, drops)."""
        stats = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        return int(struct.unpack("II", stats)[1])


class Capture:
    """What the bridges emitted, frame by frame (bounded), as ``Seen`` records."""

    LIMIT: Final = 400_000

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.overflow = 0
        self.ports: list[TapPort] = []
        self._lock = threading.Lock()

    def add(self, seen: Seen) -> None:
        if len(self.seen) < self.LIMIT:
            self.seen.append(seen)
        else:
            self.overflow += 1

    def clear(self) -> None:
        with self._lock:
            self.seen = []
            self.overflow = 0

    def since(self, at: float, ports: Iterable[str] = TAPPED) -> list[Seen]:
        """What the bridges put on the tapped ports ``ports`` from ``at`` on."""
        wanted = set(ports)
        return [s for s in list(self.seen) if s.at >= at and s.port in wanted]

    def kernel_drops(self) -> int:
        return sum(p.dropped() for p in self.ports)


class Station:
    """A native IPX station on Ethernet, bound to one framing (docs/protocols.md 3.1).

    Its node is its MAC. It takes a frame only in its framing, addressed to its MAC or to
    broadcast (what its NIC and its IPX stack let through), and keeps the tagged ones.
    """

    def __init__(self, name: str, ns: str, iface: str = "eth0", framing: str = ETHERNET_II) -> None:
        self.name = name
        self.framing = framing
        self.sock = socket_in(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        _bigger_buffer(self.sock, 4 << 20)
        self.sock.bind((iface, ETH_P_ALL))
        self.mac: bytes = self.sock.getsockname()[4]
        self.sock.setblocking(False)
        self.got: list[Seen] = []

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
            if addr[2] in (PACKET_OUTGOING, PACKET_OTHERHOST):
                continue  # its own frame, or one its NIC's address filter drops
            seen = read_frame(raw, time.monotonic(), self.name)
            if seen.kind != self.framing or seen.tag is None:
                continue
            if seen.dst_node in (self.mac, BROADCAST):
                self.got.append(seen)

    def send(self, packet: bytes, dst_mac: bytes = BROADCAST) -> None:
        self.sock.send(frame(dst_mac, self.mac, self.framing, packet))

    def broadcast(self, data: bytes, dst_socket: int) -> None:
        """A broadcast from its node, same socket at both ends (a game announcing itself)."""
        self.send(ipx(BROADCAST, dst_socket, self.mac, dst_socket, data))


class WrapperHost:
    """An IPXWrapper host in its default mode (docs/protocols.md 6).

    A shared socket on 54792 (broadcasts arrive there) and a private one it sends from. It
    takes a datagram only from a source in its subnet with a size field that matches, for
    its node or broadcast, on its network (0 here, as the project's test station) or all
    networks; it never answers a ping and sends nothing of its own accord.
    """

    def __init__(self, name: str, ns: str, address: str, node: bytes) -> None:
        self.name = name
        self.iface = ipaddress.IPv4Interface(address)
        self.node = node
        self.shared = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
        self.private = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
        for sock in (self.shared, self.private):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            _bigger_buffer(sock, 4 << 20)
            sock.setblocking(False)
        self.shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.shared.bind(("0.0.0.0", IPXWRAPPER_PORT))
        self.private.bind((str(self.iface.ip), 0))
        self.got: list[Seen] = []
        self.pings_ignored = 0

    def readers(self) -> list[Reader]:
        return [_SocketReader(self.shared, self._take), _SocketReader(self.private, self._take)]

    def _take(self, data: bytes, src: tuple[str, int]) -> None:
        if src == self.private.getsockname() or len(data) < IPXWRAPPER_HEADER.size:
            return
        size = struct.unpack_from("!H", data, 25)[0]
        if size != len(data) - IPXWRAPPER_HEADER.size:
            return
        if ipaddress.IPv4Address(src[0]) not in self.iface.network:
            return  # "Packet did not come from an expected subnet"
        packet = ipxwrapper_to_ipx(data)
        _, _, _, _, dnet, dnode, dsock, _, snode, ssock = IPX_HEADER.unpack_from(packet)
        if dsock == 2:
            self.pings_ignored += 1
            return
        if dnode not in (self.node, BROADCAST) or dnet not in (bytes(4), b"\xff" * 4):
            return
        found = find_tag(data)
        if found is not None:
            self.got.append(
                Seen(
                    time.monotonic(),
                    self.name,
                    "ipxwrapper",
                    b"",
                    b"",
                    len(data),
                    len(packet),
                    src[0],
                    "",
                    dnode,
                    snode,
                    dsock,
                    ssock,
                    0xFFFF,
                    found,
                )
            )

    def broadcast(self, data: bytes, dst_socket: int) -> None:
        """A broadcast as IPXWrapper sends it: to the subnet broadcast, port 54792."""
        datagram = ipxwrapper(BROADCAST, dst_socket, self.node, dst_socket, data)
        self.private.sendto(datagram, (str(self.iface.network.broadcast_address), IPXWRAPPER_PORT))


class _SocketReader:
    """A UDP socket drained into a callback (data, source)."""

    def __init__(self, sock: socket.socket, take: "TakeFn") -> None:
        self.sock = sock
        self.take = take

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def drain(self) -> None:
        for _ in range(4096):
            try:
                data, src = self.sock.recvfrom(70_000)
            except BlockingIOError:
                return
            self.take(data, src)


class TakeFn(Protocol):
    def __call__(self, data: bytes, src: tuple[str, int], /) -> None: ...


class DosClient:
    """A DOSBox-protocol client (docs/protocols.md 4): registers, then plays through the bridge.

    It sends its registration ``tries`` times, ``timeout`` seconds apart, until a reply comes
    (DOSBox sends it once; IPXWrapper's DOSBox mode retries, docs/protocols.md 6).

    ``answer_pings``: answers the bridge's ping as DOSBox does (4.5), which verifies it; an
    IPXWrapper host in DOSBox mode never does (6), and neither does a client that only sends.
    """

    def __init__(
        self,
        name: str,
        ns: str,
        server: tuple[str, int],
        *,
        answer_pings: bool = False,
        tries: int = 3,
        timeout: float = 2.0,
        registration_type: int = 0,
    ) -> None:
        self.name = name
        self.server = server
        self.answer_pings = answer_pings
        self.sock = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
        _bigger_buffer(self.sock, 4 << 20)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.settimeout(timeout)
        # DOSBox's packet type is whatever was in memory, IPXWrapper's 2 (docs/protocols.md 4.7).
        registration = ipx(bytes(6), 2, bytes(6), 2, ptype=registration_type)
        for _ in range(tries):
            self.sock.sendto(registration, server)
            try:
                reply = self.sock.recv(2048)
            except TimeoutError:
                continue
            self.node: bytes = IPX_HEADER.unpack_from(reply)[5]
            break
        else:
            self.sock.close()
            raise BenchError(f"{name}: no registration reply from {server}")
        self.sock.setblocking(False)
        self.got: list[Seen] = []
        self.received = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def drain(self) -> None:
        for _ in range(4096):
            try:
                data = self.sock.recv(70_000)
            except BlockingIOError:
                return
            self.received += 1
            if len(data) < IPX_HEADER.size:
                continue
            _, _, _, _, _, dnode, dsock, _, snode, ssock = IPX_HEADER.unpack_from(data)
            if dsock == 2 and ssock == 2:
                if self.answer_pings and dnode == BROADCAST:
                    self.sock.sendto(ipx(snode, 2, self.node, 2), self.server)
                continue
            found = find_tag(data)
            if found is not None:
                self.got.append(
                    Seen(
                        time.monotonic(),
                        self.name,
                        "dosbox",
                        b"",
                        b"",
                        len(data),
                        len(data),
                        "",
                        "",
                        dnode,
                        snode,
                        dsock,
                        ssock,
                        0xFFFF,
                        found,
                    )
                )

    def send(self, packet: bytes) -> None:
        self.sock.sendto(packet, self.server)

    def broadcast(self, data: bytes, dst_socket: int) -> None:
        self.send(ipx(BROADCAST, dst_socket, self.node, dst_socket, data))


class UdpSink:
    """Ordinary UDP traffic a host receives (the victim's own, unrelated to IPX)."""

    def __init__(self, ns: str, port: int) -> None:
        self.sock = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("0.0.0.0", port))
        self.sock.setblocking(False)
        self.got: list[bytes] = []

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def drain(self) -> None:
        for _ in range(4096):
            try:
                self.got.append(self.sock.recv(2048))
            except BlockingIOError:
                return


@dataclass
class Watcher:
    """Drains every reader in one background thread while a block runs, then closes them."""

    readers: list[Reader] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def add(self, *readers: Reader) -> None:
        self.readers.extend(readers)

    def __enter__(self) -> "Watcher":
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        for reader in self.readers:
            reader.close()

    def _run(self) -> None:
        deadline = time.monotonic() + WATCH_LIMIT
        while not self._stop.is_set() and time.monotonic() < deadline:
            by_fd = {r.fileno(): r for r in list(self.readers)}
            ready, _, _ = select.select(list(by_fd), [], [], 0.05)
            for fd in ready:
                with contextlib.suppress(OSError):
                    by_fd[fd].drain()


# --- the bridges -------------------------------------------------------------------------------


@dataclass
class Bridge:
    """One ``ipxbridge run`` in its namespace."""

    name: str
    ns: str
    proc: Process

    def metrics(self) -> dict[str, float]:
        return scrape(self.ns)

    def rss_kib(self) -> int:
        try:
            return rss_kib(self.proc.pid)
        except OSError:
            return 0

    def log(self) -> str:
        return self.proc.text()


@dataclass(frozen=True)
class Features:
    """What the tree under test offers, read from its ``print-default-config``."""

    bridge_key: bool
    keyed_nodes: bool
    node_key_file: bool

    @classmethod
    def of(cls, tree: Path) -> "Features":
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = sh_env([sys.executable, "-m", "ipxbridge", "print-default-config"], env, tree)
        return cls("bridge_key_file" in out, "node_assignment" in out, "node_key_file" in out)


def sh_env(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run ``argv`` with ``env`` in ``cwd``; its output.

    Raises:
        BenchError: it failed.
    """
    res = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=30, check=False
    )
    if res.returncode != 0:
        raise BenchError(f"{' '.join(argv)} in {cwd}: {res.stderr.strip()}")
    return res.stdout


# --- the topology -----------------------------------------------------------------------------


SHORT: Final = (
    "seg",
    "b1",
    "b2",
    "b3",
    "n1",
    "n2",
    "q1",
    "w1",
    "v1",
    "att",
    "c1",
    "c3",
    "vr",
    "nat",
)


@dataclass
class Lan:
    """The namespaces of the module docstring, and what runs in them."""

    tree: Path
    workdir: Path
    features: Features
    ns: dict[str, str] = field(default_factory=dict)
    macs: dict[str, bytes] = field(default_factory=dict)
    bridges: dict[str, Bridge] = field(default_factory=dict)
    runs: int = 0

    def _veth(self, a: str, if_a: str, b: str, if_b: str) -> None:
        sh(
            "ip",
            "link",
            "add",
            if_a,
            "netns",
            self.ns[a],
            "type",
            "veth",
            "peer",
            "name",
            if_b,
            "netns",
            self.ns[b],
        )

    def _up(self, who: str, iface: str, *addresses: str) -> None:
        for address in addresses:
            sh("ip", "-n", self.ns[who], "addr", "add", address, "brd", "+", "dev", iface)
        sh("ip", "-n", self.ns[who], "link", "set", iface, "up")

    def _port(self, bridge: str, who: str, iface: str, port: str, *addresses: str) -> None:
        self._veth(who, iface, "seg", port)
        sh("ip", "-n", self.ns["seg"], "link", "set", port, "master", bridge)
        self._up("seg", port)
        self._up(who, iface, *addresses)

    def build(self) -> None:
        seg = self.ns["seg"]
        for br in ("br0", "br1", "brpeer", "brwan"):
            sh("ip", "-n", seg, "link", "add", br, "type", "bridge")
            self._up("seg", br)
        self._port("br0", "b1", "lan0", "p-b1", f"{B1_LAN}/24")
        self._port("br0", "b2", "lan0", "p-b2", f"{B2_LAN}/24")
        for who, ip in (
            ("n1", N1_IP),
            ("q1", Q1_IP),
            ("w1", W1_IP),
            ("v1", V1_IP),
            ("att", ATT_IP),
        ):
            self._port("br0", who, "eth0", f"p-{who}", f"{ip}/24")
        self._port("br1", "n2", "eth0", "p-n2", f"{N2_IP}/24")
        self._port("br1", "att", "eth1", "t-att")
        self._port("brpeer", "b1", "peer0", "q-b1", f"{B1_PEER}/24")
        self._port("brpeer", "b2", "peer0", "q-b2", f"{B2_PEER}/24")
        for who, ip in (("b1", B1_WAN), ("b2", B2_WAN), ("b3", B3_WAN)):
            self._port("brwan", who, "wan0", f"w-{who}", f"{ip}/24")
        for bridge, iface, who, server, client in (
            ("b1", "cl0", "c1", C1_SERVER, C1_IP),
            ("b3", "cl0", "c3", C3_SERVER, C3_IP),
            ("b1", "cl2", "vr", VR_SERVER, VR_IPS[0]),
            ("b1", "cl4", "nat", NAT_SERVER, NAT_IP),
        ):
            self._veth(bridge, iface, who, "eth0")
            self._up(bridge, iface, f"{server}/24")
            extra = (f"{VR_IPS[1]}/24",) if who == "vr" else ()
            self._up(who, "eth0", f"{client}/24", *extra)
        for who in ("b1", "b2", "n1", "n2", "q1", "w1", "v1", "att"):
            iface = "lan0" if who in ("b1", "b2") else "eth0"
            link = sh("ip", "-n", self.ns[who], "-j", "link", "show", iface)
            self.macs[who] = bytes.fromhex(json.loads(link)[0]["address"].replace(":", ""))

    # --- bridges

    def start(self, specs: dict[str, Sequence[str]], *, key: bool = False) -> dict[str, Bridge]:
        """Start a bridge per ``specs`` entry (name -> ``ipxbridge run`` arguments) at once,
        then wait until each has its tunnel and every interface port it was given."""
        self.stop()
        self.runs += 1
        for name, args in specs.items():
            ipx_cfg: dict[str, str] = {}
            if self.features.node_key_file:
                ipx_cfg["node_key_file"] = str(self.workdir / f"{name}.node.key")
            if key:
                ipx_cfg["bridge_key_file"] = str(self.workdir / "bridge.key")
            config = self.workdir / f"{name}.yaml"
            config.write_text(json.dumps({"ipx": ipx_cfg}))  # JSON is YAML
            env = {**os.environ, "PYTHONPATH": str(self.tree)}
            log = self.workdir / f"{name}-{self.runs}.log"
            proc = spawn(
                bridge_argv("--config", str(config), *args),
                log=log,
                ns=self.ns[name],
                env=env,
                cwd=self.tree,
            )
            self.bridges[name] = Bridge(name, self.ns[name], proc)
        for name, args in specs.items():
            bridge = self.bridges[name]
            try:
                bridge.proc.wait_for("IPX tunnel on udp", 20)
                for iface, kinds in _ports_of(args):
                    for kind in kinds:
                        bridge.proc.wait_for(f"{iface}/{kind}", 10)
                bridge.proc.wait_for("HTTP API on", 10)
            except BenchError:
                self.stop()
                raise
        return self.bridges

    def stop(self, timeout: float = 5.0) -> dict[str, str]:
        """Stop every bridge; their logs by name."""
        logs = {name: b.proc.stop(timeout) for name, b in self.bridges.items()}
        self.bridges = {}
        return logs

    def write_bridge_key(self) -> None:
        (self.workdir / "bridge.key").write_text(os.urandom(32).hex() + "\n")
        (self.workdir / "bridge.key").chmod(0o600)


def _ports_of(args: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    out = []
    for flag, value in itertools.pairwise(args):
        if flag == "--ipx-iface":
            name, _, kinds = value.partition(":")
            out.append((name, tuple(kinds.split(",")) if kinds else ("ethernet", "ipxwrapper")))
    return out


@contextlib.contextmanager
def lan(tree: Path, workdir: Path) -> Iterator[Lan]:
    """The LAN of the module docstring; every namespace is removed on the way out."""
    names = {short: f"{PREFIX}_{short}" for short in SHORT}
    with namespaces(*names.values()):
        net = Lan(tree, workdir, Features.of(tree), names)
        try:
            net.build()
            net.write_bridge_key()
            yield net
        finally:
            net.stop(2.0)


def tap(net: Lan) -> Capture:
    capture = Capture()
    for port in TAPPED:
        capture.ports.append(TapPort(capture, net.ns["seg"], port))
    return capture


def counts(seen: Iterable[Seen], code: int) -> Counter[int]:
    """How many copies of each sequence number of attack ``code``."""
    return Counter(s.tag[1] for s in seen if s.tag is not None and s.tag[0] == code)
