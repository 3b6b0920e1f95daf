"""IPX interface ports in a live topology: loops between bridges, churn, addresses.

Everything runs in namespaces this file creates (the ``net`` fixture removes them).

* **Two bridges on one segment plus a WireGuard link**. Site A is a Linux
  bridge ``br0`` in ``seg`` with the native station ``n1`` and the ipxbridges ``b1`` and
  ``b2`` on its ports (each ``--ipx-iface lan0:ethernet``); ``b1`` and ``b2`` are also RFC
  1234 peers of each other over a link of their own (``peer0``, 10.45.0.0/24). ``b2`` reaches
  site B's bridge ``b3`` over userspace WireGuard (wireguard-go, tunnel 10.98.0.1-2, underlay
  10.40.0.1-2), where they are RFC 1234 peers; ``b3`` has the native station ``n3`` on its
  ``lan0``. Every bridge has a DOSBox-protocol client on a link of its own: ``c1``, ``c2``
  and ``d`` (10.46.{1,2,3}.11).
* **Churn**: site A alone (``b1``, ``b2``, ``n1``, ``c1``, ``c2``); ``b1``'s ``lan0`` is
  deleted and re-created with the same name.
* **Addresses**: one bridge ``box`` with RFC 1234 and IPXWrapper ports on ``lan0``, the
  host ``h`` on that subnet, a DOSBox-protocol client ``c`` on ``cl0``; ``lan0`` moves from
  10.61.0.0/24 to 10.62.0.0/24 while the bridge runs.

The native stations behave like a NetWare client bound to Ethernet II (docs/protocols.md 3.1):
they send and accept only Ethernet II frames (EtherType 0x8137), address frames to the IPX
node (their MAC), and announce themselves when they start with a RIP request (socket 0x0453),
as a client shell does when it loads. The bridge never relays that socket, but it learns the
station's framing from it (framing ``auto``); a station that never sent anything is unknown
to the bridge and gets 802.2 frames, which an Ethernet II stack ignores. The frames they send
and read are built and taken apart here with ``struct`` (not with the bridge's codec).
"""

import contextlib
import os
import re
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest

from ipxbridge.wire import ipx
from scripts.harness import BridgeProcess, Client, Netns, bridge_get, inside, sh
from tests.integration import wg
from tests.integration.conftest import require

DATA_SOCKET = 0x4545  # the socket the test's broadcasts use (not in the bridge's filter)
RIP_SOCKET = 0x0453  # a NetWare client's RIP request on load; filtered by the bridge
ETH_P_ALL = 0x0003
ETH_P_IPX = 0x8137
PACKET_OTHERHOST = 3  # linux/if_packet.h: a unicast frame to another MAC
PACKET_OUTGOING = 4  # linux/if_packet.h: a frame this socket's host sent
IP_PKTINFO = 8  # linux/in.h (Python 3.11 has no socket.IP_PKTINFO)
IPXWRAPPER_PORT = 54792
IPXWRAPPER_NODE = bytes.fromhex("02005e000102")  # the IPXWrapper host's node (its NIC's MAC)
BROADCAST = b"\xff" * 6
ETHERNET_II = "ethernet_ii"


# --- stations and clients ----------------------------------------------------------------


def frame_ipx(frame: bytes) -> tuple[str, bytes] | None:
    """The framing and IPX packet of a native frame, or None for anything else.

    Read the way an ODI driver tells the four framings apart: EtherType 0x8137 is Ethernet
    II; a length field (<= 1500) followed by FF FF is raw 802.3 (the IPX checksum), by
    E0 E0 03 is 802.2 LLC, by AA AA 03 00 00 00 81 37 is SNAP.
    """
    if len(frame) < 14 + ipx.HEADER_LEN:
        return None
    (type_or_len,) = struct.unpack_from("!H", frame, 12)
    body = frame[14:]
    if type_or_len == ETH_P_IPX:
        framing, packet = ETHERNET_II, body
    elif type_or_len > 1500:
        return None
    else:
        body = body[:type_or_len]
        if body[:2] == b"\xff\xff":
            framing, packet = "802.3", body
        elif body[:3] == b"\xe0\xe0\x03":
            framing, packet = "802.2", body[3:]
        elif body[:8] == b"\xaa\xaa\x03\x00\x00\x00\x81\x37":
            framing, packet = "snap", body[8:]
        else:
            return None
    if len(packet) < ipx.HEADER_LEN:
        return None
    (length,) = struct.unpack_from("!H", packet, 2)
    if not ipx.HEADER_LEN <= length <= len(packet):
        return None
    return framing, packet[:length]


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy of a test broadcast as a receiver saw it."""

    at: float  # time.monotonic() when read
    receiver: str
    framing: str  # ETHERNET_II... for native stations, "dosbox" for clients
    payload: bytes
    hops: int  # the IPX transport-control byte: how many bridges it crossed
    src_mac: str = ""  # native frames: who put it on the wire


class Receiver(Protocol):
    """What the tally reads from."""

    name: str

    def fileno(self) -> int: ...

    def drain(self) -> list[Copy]: ...


class Station:
    """A native IPX station bound to Ethernet II, on an AF_PACKET socket (module docstring)."""

    def __init__(self, name: str, ns: str, iface: str) -> None:
        self.name = name
        with inside(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((iface, ETH_P_ALL))
        self.mac: bytes = self.sock.getsockname()[4]
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send_ipx(self, dst_socket: int, payload: bytes, dst_node: bytes = BROADCAST) -> None:
        """One IPX packet in an Ethernet II frame, from the station's MAC (its node).

        The frame goes to the destination node as a MAC (docs/protocols.md 3.1).
        """
        packet = ipx.build_packet(
            dst_node=dst_node,
            dst_socket=dst_socket,
            src_node=self.mac,
            src_socket=dst_socket,
            payload=payload,
        )
        self.sock.send(dst_node + self.mac + struct.pack("!H", ETH_P_IPX) + packet)

    @property
    def node(self) -> bytes:
        return self.mac

    def unicast(self, dst_node: bytes, payload: bytes) -> None:
        self.send_ipx(DATA_SOCKET, payload, dst_node)

    def announce(self) -> None:
        """A RIP request to the local network, as a NetWare client sends when it loads."""
        # RIP request: operation 1, network FF FF FF FF (all), hops and ticks FF FF.
        self.send_ipx(RIP_SOCKET, struct.pack("!H4sHH", 1, b"\xff" * 4, 0xFFFF, 0xFFFF))

    def broadcast(self, payload: bytes) -> None:
        self.send_ipx(DATA_SOCKET, payload)

    def drain(self) -> list[Copy]:
        out: list[Copy] = []
        while True:
            try:
                frame, addr = self.sock.recvfrom(65535)
            except BlockingIOError:
                return out
            if addr[2] == PACKET_OUTGOING:
                continue  # our own frame, seen on the way out
            if addr[2] == PACKET_OTHERHOST:
                continue  # a NIC's address filter drops it (a veth hands it to raw sockets)
            got = frame_ipx(frame)
            if got is None:
                continue
            framing, packet = got
            header, data = ipx.parse_packet(packet)
            if header.dst_socket != DATA_SOCKET:
                continue
            out.append(
                Copy(
                    time.monotonic(),
                    self.name,
                    framing,
                    bytes(data),
                    header.hops,
                    frame[6:12].hex(":"),
                )
            )


class DosboxClient:
    """A DOSBox-protocol client (``harness.Client``) as a tally receiver."""

    def __init__(self, name: str, ns: str, server: tuple[str, int]) -> None:
        self.name = name
        self.client = Client(ns, server)

    def fileno(self) -> int:
        return self.client.sock.fileno()

    @property
    def node(self) -> bytes:
        return self.client.node

    def broadcast(self, payload: bytes) -> None:
        self.client.send(ipx.BROADCAST_NODE, payload, DATA_SOCKET)

    def unicast(self, dst_node: bytes, payload: bytes) -> None:
        self.client.send(dst_node, payload, DATA_SOCKET)

    def drain(self) -> list[Copy]:
        out: list[Copy] = []
        while True:
            try:
                data = self.client.sock.recv(70_000)
            except BlockingIOError:
                return out
            header, payload = ipx.parse_packet(data)
            # keepalive pings (socket 2) and the bridges' probes are not test traffic
            if header.dst_socket == DATA_SOCKET:
                out.append(Copy(time.monotonic(), self.name, "dosbox", bytes(payload), header.hops))


@dataclass
class Tally:
    """Reads every receiver in a background thread and keeps each copy it saw."""

    receivers: Sequence[Receiver]
    copies: list[Copy] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> "Tally":
        for receiver in self.receivers:
            receiver.drain()  # anything from before starts no count
        self._thread = threading.Thread(target=self._run, name="tally", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        by_fd = {r.fileno(): r for r in self.receivers}
        while not self._stop.is_set():
            ready, _, _ = select.select(list(by_fd), [], [], 0.05)
            for fd in ready:
                self.copies.extend(by_fd[fd].drain())

    def count(self, receiver: str, payload: bytes, framing: str | None = None) -> int:
        return sum(
            1
            for c in list(self.copies)
            if c.receiver == receiver
            and c.payload == payload
            and (framing is None or c.framing == framing)
        )

    def first(self, receiver: str, match: Callable[[Copy], bool], timeout: float) -> Copy | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in list(self.copies):
                if c.receiver == receiver and match(c):
                    return c
            time.sleep(0.005)
        return None


# --- topology helpers --------------------------------------------------------------------


def veth(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    """A veth pair between two namespaces, both ends down and without addresses."""
    sh(*f"ip link add {if_a} netns {ns_a} type veth peer name {if_b} netns {ns_b}".split())


def up(ns: str, iface: str, address: str = "") -> None:
    if address:
        sh("ip", "-n", ns, "addr", "add", address, "brd", "+", "dev", iface)
    sh("ip", "-n", ns, "link", "set", iface, "up")


def segment_port(seg: str, ns: str, iface: str, port: str) -> None:
    """``iface`` in ``ns`` joined to the Linux bridge ``br0`` of ``seg`` as ``port``."""
    veth(ns, iface, seg, port)
    sh("ip", "-n", seg, "link", "set", port, "master", "br0")
    up(seg, port)


def metrics(ns: str) -> str:
    return bridge_get(ns, "/metrics")


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of the Prometheus text, or None if absent."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}") + 1]))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def port_bridges(ns: str, iface: str = "lan0") -> float | None:
    return metric(metrics(ns), "ipxbridge_ipx_port_bridges", kind="ethernet", interface=iface)


def wait_until(what: str, predicate: Callable[[], bool], timeout: float) -> float:
    """Poll ``predicate`` until it holds; the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def diagnostics(bridges: dict[str, str]) -> str:
    """Each bridge's port books and stations, for a failure message."""
    parts = []
    for name, ns in bridges.items():
        lines = [
            line
            for line in metrics(ns).splitlines()
            if line.startswith(("ipxbridge_ipx_port", "ipxbridge_forwarded", "ipxbridge_dropped"))
        ]
        parts.append(f"--- {name} /metrics\n" + "\n".join(lines))
        parts.append(f"--- {name} /api/clients\n" + bridge_get(ns, "/api/clients"))
    return "\n".join(parts)


@dataclass
class SiteA:
    """The segment with the native station n1 and the bridges b1 and b2 (module docstring)."""

    seg: str
    n1: str
    b1: str
    b2: str
    c1: str
    c2: str


def build_site_a(net: Netns) -> SiteA:
    seg, n1, b1, b2, c1, c2 = (net.add(n) for n in ("seg", "n1", "b1", "b2", "c1", "c2"))
    sh("ip", "-n", seg, "link", "add", "br0", "type", "bridge")
    up(seg, "br0")
    segment_port(seg, n1, "eth0", "p-n1")
    segment_port(seg, b1, "lan0", "p-b1")
    segment_port(seg, b2, "lan0", "p-b2")
    for ns in (n1, b1, b2):
        up(ns, "eth0" if ns == n1 else "lan0")
    net.link(b1, "peer0", "10.45.0.1/24", b2, "peer0", "10.45.0.2/24")
    net.link(b1, "cl0", "10.46.1.1/24", c1, "eth0", "10.46.1.11/24")
    net.link(b2, "cl0", "10.46.2.1/24", c2, "eth0", "10.46.2.11/24")
    return SiteA(seg, n1, b1, b2, c1, c2)


def start_bridge(net: Netns, ns: str, workdir: Path, *args: str) -> BridgeProcess:
    bridge = BridgeProcess(net, ns, "--ipx-iface", "lan0:ethernet", *args, log_dir=workdir)
    bridge.wait_for(r"IPX interface ports: .*lan0/ethernet", 10)
    return bridge


def verified(*clients: DosboxClient) -> None:
    """Each client's game announces itself before the test listens (``harness.Client.
    announce``, on a socket the tally does not count): the keyed node it carries verifies
    it, as a game's first packet does (policy/switch.py rule 2)."""
    for c in clients:
        c.client.announce()
        # From here on it is read by the tally: a socket with a timeout would wait in recv.
        c.client.sock.setblocking(False)


def wait_for_beacons(b1: str, b2: str, iface: str = "lan0") -> float:
    """Until each of b1 and b2 has heard the other's beacon on ``iface`` (policy/switch.py rule 8).

    A bridge sends its beacon on its segments and to its peers in the same tick, so once the
    segment beacon is in, the one to the peer is too (a short grace covers the gap).
    """
    took = wait_until(
        f"b1 and b2 see each other on {iface} (ipxbridge_ipx_port_bridges)",
        lambda: port_bridges(b1, iface) == 1.0 and port_bridges(b2, iface) == 1.0,
        15,
    )
    time.sleep(0.3)
    return took


@contextlib.contextmanager
def stopping(*bridges: BridgeProcess) -> Iterator[None]:
    """Stop the bridges however the block ends; after a clean block, each exited cleanly."""
    try:
        yield
    finally:
        codes = [bridge.stop() for bridge in bridges]
    for bridge, code in zip(bridges, codes, strict=True):
        assert code == 0, bridge.log()
        assert "Traceback" not in bridge.log(), bridge.log()


# --- 1. loops: two bridges on one segment, and a WireGuard link ----------------------------


def check_counts(
    tally: Tally, sent: dict[str, bytes], parties: Sequence[Station | DosboxClient]
) -> list[str]:
    """Every broadcast in ``sent`` (by sender) reached every other party once, the sender never.

    A native station counts the frames in its own framing (Ethernet II); the other framings a
    bridge also sends (module docstring) may not arrive twice either.
    """
    wrong: list[str] = []
    for sender, payload in sent.items():
        for party in parties:
            framing = ETHERNET_II if isinstance(party, Station) else "dosbox"
            expected = 0 if party.name == sender else 1
            got = tally.count(party.name, payload, framing)
            if got != expected:
                wrong.append(f"{sender} -> {party.name}: {got} copies, not {expected}")
            per_framing = Counter(
                c.framing for c in tally.copies if c.receiver == party.name and c.payload == payload
            )
            for other, n in per_framing.items():
                if other != framing and n > 1 - (party.name == sender):
                    wrong.append(f"{sender} -> {party.name}: {n} copies in {other}")
    return wrong


@pytest.mark.netns
def test_each_packet_reaches_every_station_exactly_once(net: Netns, workdir: Path) -> None:
    require("wireguard-go", "wg")
    site = build_site_a(net)
    b3, n3, d = net.add("b3"), net.add("n3"), net.add("d")
    veth(b3, "lan0", n3, "eth0")
    up(b3, "lan0")
    up(n3, "eth0")
    net.link(b3, "cl0", "10.46.3.1/24", d, "eth0", "10.46.3.11/24")
    net.link(site.b2, "wan", "10.40.0.1/24", b3, "wan", "10.40.0.2/24")
    tag = os.getpid() % 100000
    end_a = wg.WgEnd(site.b2, f"ixs{tag}a", "10.98.0.1", "10.40.0.1", 51821)
    end_b = wg.WgEnd(b3, f"ixs{tag}b", "10.98.0.2", "10.40.0.2", 51822)
    try:
        wg.pair(net, end_a, end_b)
        bridge1 = start_bridge(net, site.b1, workdir, "--peer", "10.45.0.2")
        bridge2 = start_bridge(net, site.b2, workdir, "--peer", "10.45.0.1", "--peer", "10.98.0.2")
        bridge3 = start_bridge(net, b3, workdir, "--peer", "10.98.0.1")
        with stopping(bridge1, bridge2, bridge3):
            n1 = Station("N1", site.n1, "eth0")
            n3_station = Station("N3", n3, "eth0")
            c1 = DosboxClient("C1", site.c1, ("10.46.1.1", 213))
            c2 = DosboxClient("C2", site.c2, ("10.46.2.1", 213))
            dd = DosboxClient("D", d, ("10.46.3.1", 213))
            verified(c1, c2, dd)
            n1.announce()
            n3_station.announce()
            took = wait_for_beacons(site.b1, site.b2)
            print(f"b1 and b2 heard each other's beacons on lan0 after {took:.1f} s more")
            bridges = {"b1": site.b1, "b2": site.b2, "b3": b3}
            parties: list[Station | DosboxClient] = [n1, n3_station, c1, c2, dd]

            # Broadcasts: the native stations first, so that the bridges have heard them
            # (apart from their RIP requests) before they are sent anything.
            sent = {p.name: f"once from {p.name} {tag}".encode() for p in parties}
            with Tally(parties) as tally:
                for party in parties:
                    party.broadcast(sent[party.name])
                    time.sleep(0.4)
                time.sleep(3.0)  # every broadcast watched for at least 3 s
            wrong = check_counts(tally, sent, parties)
            copies = "\n".join(str(c) for c in tally.copies)
            assert not wrong, "\n".join(wrong) + "\n" + copies + "\n" + diagnostics(bridges)

            # Unicast between every two of them, once each, only at the destination. The
            # native stations send last: until then b1 and b2 know N1 only from its
            # broadcast, which each got from the segment and again from the other (only the
            # first copy tells where a node is, policy/switch.py rule 6).
            unicasts: dict[tuple[str, str], bytes] = {}
            with Tally(parties) as tally:
                for src in reversed(parties):
                    for dst in parties:
                        if dst is not src:
                            payload = f"to {dst.name} from {src.name} {tag}".encode()
                            unicasts[(src.name, dst.name)] = payload
                            src.unicast(dst.node, payload)
                            time.sleep(0.05)
                time.sleep(2.0)
            for (src_name, dst_name), payload in unicasts.items():
                where = Counter(c.receiver for c in tally.copies if c.payload == payload)
                if where != {dst_name: 1}:
                    wrong.append(f"unicast {src_name} -> {dst_name}: {dict(where)}")
            copies = "\n".join(str(c) for c in tally.copies)
            assert not wrong, "\n".join(wrong) + "\n" + copies + "\n" + diagnostics(bridges)
    finally:
        for end in (end_a, end_b):
            wg.stop(net, end)
            with contextlib.suppress(FileNotFoundError):
                Path(f"/tmp/{end.ifname}.key").unlink()  # written by wg.configure


# --- 2. churn: the segment interface deleted and re-created --------------------------------


class Chatter:
    """Broadcasts from each party every ``interval`` seconds, numbered, in a thread (a game)."""

    def __init__(self, parties: Sequence[Station | DosboxClient], interval: float) -> None:
        self.parties = parties
        self.interval = interval
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chatter", daemon=True)

    def __enter__(self) -> "Chatter":
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        for seq in range(600):  # 30 s at most
            for party in self.parties:
                party.broadcast(f"churn {party.name} {seq}".encode())
            self.sent = seq + 1
            if self._stop.wait(self.interval):
                return


def port_up(ns: str) -> float | None:
    return metric(metrics(ns), "ipxbridge_ipx_port_up", kind="ethernet", interface="lan0")


@pytest.mark.netns
def test_deleted_segment_interface_is_reopened_and_traffic_resumes(
    net: Netns, workdir: Path
) -> None:
    site = build_site_a(net)
    bridge1 = start_bridge(net, site.b1, workdir, "--peer", "10.45.0.2")
    bridge2 = start_bridge(net, site.b2, workdir, "--peer", "10.45.0.1")
    with stopping(bridge1, bridge2):
        n1 = Station("N1", site.n1, "eth0")
        c1 = DosboxClient("C1", site.c1, ("10.46.1.1", 213))
        c2 = DosboxClient("C2", site.c2, ("10.46.2.1", 213))
        verified(c1, c2)
        n1.announce()
        wait_for_beacons(site.b1, site.b2)
        bridges = {"b1": site.b1, "b2": site.b2}
        with Tally([n1]) as tally:
            c1.broadcast(b"before churn")
            seen = tally.first("N1", lambda c: c.payload == b"before churn", 2.0)
        assert seen is not None, diagnostics(bridges)

        plans_logged = bridge1.log().count("IPX interface ports:")
        sh("ip", "-n", site.b1, "link", "del", "lan0")  # its peer end leaves br0 with it
        wait_until("b1's lan0 port closed (ipxbridge_ipx_port_up 0 or absent)",
                   lambda: port_up(site.b1) in (None, 0.0), 5)  # fmt: skip
        assert bridge1.log().count("IPX interface ports:") > plans_logged
        plans_logged = bridge1.log().count("IPX interface ports:")

        # The same name again, joined to the same segment, still down.
        veth(site.b1, "lan0", site.seg, "p-b1")
        sh("ip", "-n", site.seg, "link", "set", "p-b1", "master", "br0")
        up(site.seg, "p-b1")

        # N1, C1 and C2 keep broadcasting, as the players of a game do. A broadcast from C1
        # that crossed b1 alone (hops 1) came through the re-created interface; by way of b2
        # it would have crossed two bridges. What counts is N1's Ethernet II: b1's new port
        # learns N1's framing from N1's next frame (it sends 802.2 until then, framing auto).
        def through_b1(c: Copy) -> bool:
            return c.payload.startswith(b"churn C1 ") and c.hops == 1 and c.at >= up_at

        up_at = float("inf")
        with Tally([n1]) as tally, Chatter([c1, n1, c2], 0.05) as chatter:
            time.sleep(0.2)
            up_at = time.monotonic()
            up(site.b1, "lan0")
            first_any = tally.first("N1", through_b1, 5.0)
            first = tally.first("N1", lambda c: through_b1(c) and c.framing == ETHERNET_II, 5.0)
            time.sleep(3.0)  # b1 and b2 both on the segment again: one copy each from here
        missing = (
            f"no broadcast from C1 reached N1 through b1 within 5 s of `ip link set lan0 up` "
            f"({chatter.sent} sent)\n{bridge1.log()}\n{diagnostics(bridges)}"
        )
        assert first_any is not None, missing
        assert first is not None, missing
        took, took_any = first.at - up_at, first_any.at - up_at
        print(
            f"churn: first broadcast through the re-created lan0 {took_any * 1000:.0f} ms "
            f"after `ip link set up` ({first_any.framing}); in N1's Ethernet II "
            f"{took * 1000:.0f} ms"
        )
        assert took < 2.0, f"{took:.2f} s\n{bridge1.log()}"
        assert port_up(site.b1) == 1.0
        assert bridge1.log().count("IPX interface ports:") > plans_logged
        last_plan = bridge1.log().rsplit("IPX interface ports:", 1)[1].splitlines()[0]
        assert "lan0/ethernet" in last_plan, last_plan

        # Through the churn and after it: N1 never gets its own broadcasts back, and no
        # broadcast of C1 or C2 twice (rule 8 still holds on the re-created port).
        copies = Counter(c.payload for c in tally.copies if c.framing == ETHERNET_II)
        spread = sorted(Counter(copies.values()).items())
        print(f"copies of one broadcast at N1 (copies, broadcasts): {spread}")
        wrong = sorted(p for p, n in copies.items() if n > 1 or p.startswith(b"churn N1 "))
        assert not wrong, (
            f"{len(wrong)} broadcasts reached N1 twice or came back to it: {wrong[:5]}\n"
            + "\n".join(str(c) for c in tally.copies if c.payload in wrong[:5])
            + "\n"
            + diagnostics(bridges)
        )


@pytest.mark.netns
def test_a_bridge_starting_on_a_busy_segment_puts_nothing_on_it_twice(
    net: Netns, workdir: Path
) -> None:
    # b2 is running and its client C2 broadcasts every 20 ms, as a game does; b1 starts on the
    # same segment, peered with b2. Until the two know each other (rule 8) b1 would put C2's
    # packets, which b2 already put there, on the segment again whenever b2's copy over the
    # peer link reached b1 before the one on the segment. Here the segment copy wins that race
    # on this machine (this test passes on the code before the bridges answered a newcomer's
    # beacon at once; tests/unit/test_switch_segments.py shows that answer), so this checks
    # the outcome a user sees, not the mechanism.
    site = build_site_a(net)
    bridge2 = start_bridge(net, site.b2, workdir, "--peer", "10.45.0.1")
    with contextlib.ExitStack() as stack:
        stack.enter_context(stopping(bridge2))
        n1 = Station("N1", site.n1, "eth0")
        c2 = DosboxClient("C2", site.c2, ("10.46.2.1", 213))
        verified(c2)
        n1.announce()
        tally = stack.enter_context(Tally([n1]))
        chatter = stack.enter_context(Chatter([c2], 0.02))
        time.sleep(0.5)
        bridge1 = start_bridge(net, site.b1, workdir, "--peer", "10.45.0.2")
        stack.enter_context(stopping(bridge1))
        time.sleep(3.0)
        chatter.__exit__()
        time.sleep(0.3)
        copies = Counter(c.payload for c in tally.copies if c.framing == ETHERNET_II)
        twice = sorted(p for p, n in copies.items() if n > 1)
        print(f"{chatter.sent} broadcasts from C2 while b1 started; at N1 twice: {len(twice)}")
        assert len(copies) >= chatter.sent - 2, "C2's broadcasts did not reach N1"
        assert not twice, (
            f"{len(twice)} of C2's broadcasts reached N1 twice: {twice[:5]}\n"
            + diagnostics({"b1": site.b1, "b2": site.b2})
        )


# --- 3. an address change on RFC 1234 and IPXWrapper ports ---------------------------------


class SubnetHost:
    """An RFC 1234 host and an IPXWrapper host on one address, reading where datagrams went.

    Both listen on their well-known ports on every address, as the real ones do (RFC 1234:
    UDP 213 both ways; IPXWrapper: 54792, docs/protocols.md 6), and note each datagram's
    destination address (IP_PKTINFO): a subnet broadcast or this host.
    """

    def __init__(self, ns: str) -> None:
        with inside(ns):
            self.rfc1234 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.ipxwrapper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for sock, port in ((self.rfc1234, ipx.IPX_UDP_PORT), (self.ipxwrapper, IPXWRAPPER_PORT)):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
            sock.bind(("0.0.0.0", port))
            sock.settimeout(0.2)

    def close(self) -> None:
        self.rfc1234.close()
        self.ipxwrapper.close()

    @staticmethod
    def _read(sock: socket.socket, timeout: float) -> Iterator[tuple[bytes, str, str]]:
        """(datagram, source IP, destination IP) until ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data, ancillary, _flags, src = sock.recvmsg(65535, socket.CMSG_SPACE(12))
            except TimeoutError:
                continue
            dst = ""
            for level, kind, value in ancillary:
                if level == socket.IPPROTO_IP and kind == IP_PKTINFO:
                    dst = socket.inet_ntoa(value[8:12])  # in_pktinfo.ipi_addr: the header's
            yield data, src[0], dst

    def rfc1234_payload(self, payload: bytes, timeout: float = 3.0) -> tuple[str, str] | None:
        """(source, destination) of the RFC 1234 datagram carrying ``payload``."""
        for data, src, dst in self._read(self.rfc1234, timeout):
            if len(data) >= ipx.HEADER_LEN and data[ipx.HEADER_LEN :] == payload:
                return src, dst
        return None

    def ipxwrapper_payload(self, payload: bytes, timeout: float = 3.0) -> tuple[str, str] | None:
        """(source, destination) of the IPXWrapper datagram carrying ``payload``.

        Its 27-byte header (docs/protocols.md 6): type, destination net, node, socket, source
        net, node, socket, then the data size, which must equal what follows.
        """
        for data, src, dst in self._read(self.ipxwrapper, timeout):
            if len(data) < 27:
                continue
            size = struct.unpack_from("!H", data, 25)[0]
            if size == len(data) - 27 and data[27:] == payload:
                return src, dst
        return None

    def send_rfc1234(self, src_ip: str, to: str, payload: bytes) -> None:
        """An IPX broadcast as an RFC 1234 host sends it: node 00 00 + IPv4, 213 to 213."""
        packet = ipx.build_packet(
            dst_node=BROADCAST,
            dst_socket=DATA_SOCKET,
            src_node=ipx.rfc1234_node(src_ip),
            src_socket=DATA_SOCKET,
            payload=payload,
        )
        self.rfc1234.sendto(packet, (to, ipx.IPX_UDP_PORT))

    def send_ipxwrapper(self, to: str, payload: bytes) -> None:
        """An IPX broadcast as IPXWrapper sends it: its 27-byte header, 54792 to 54792."""
        header = struct.pack(
            "!B4s6sH4s6sHH",
            0,  # packet type
            bytes(4),
            BROADCAST,
            DATA_SOCKET,
            bytes(4),
            IPXWRAPPER_NODE,
            DATA_SOCKET,
            len(payload),
        )
        self.ipxwrapper.sendto(header + payload, (to, IPXWRAPPER_PORT))


@pytest.mark.netns
def test_address_change_on_udp_ports_is_followed_without_restart(net: Netns, workdir: Path) -> None:
    box, h, c = net.add("box"), net.add("h"), net.add("c")
    net.link(box, "lan0", "10.61.0.1/24", h, "eth0", "10.61.0.2/24")
    net.link(box, "cl0", "10.63.0.1/24", c, "eth0", "10.63.0.11/24")
    bridge = BridgeProcess(net, box, "--ipx-iface", "lan0:rfc1234,ipxwrapper", log_dir=workdir)
    host = SubnetHost(h)
    with stopping(bridge), contextlib.closing(host):
        plan = r"IPX interface ports: .*lan0/{kind} \(lan, broadcast {net}\.255 from {net}\.1\)"
        for kind in ("rfc1234", "ipxwrapper"):
            bridge.wait_for(plan.format(kind=kind, net=r"10\.61\.0"), 10)
        client = DosboxClient("C", c, ("10.63.0.1", 213))
        verified(client)

        def round_trip(net_prefix: str) -> None:
            """Client to the subnet and back, on the addresses of ``net_prefix``.0/24."""
            ours, theirs, subnet = f"{net_prefix}.1", f"{net_prefix}.2", f"{net_prefix}.255"
            payload = f"to {subnet}".encode()
            client.broadcast(payload)
            got = (host.rfc1234_payload(payload), host.ipxwrapper_payload(payload))
            # Each kind sends to the subnet broadcast from the bridge's own address there
            # (IPXWrapper takes sources in its subnet only, docs/protocols.md 6).
            assert got == ((ours, subnet), (ours, subnet)), (got, bridge.log())
            # And back: each port takes sources in its subnet only, the new one after the move.
            client.client.sock.settimeout(3.0)
            try:
                back = f"rfc1234 from {theirs}".encode()
                host.send_rfc1234(theirs, subnet, back)
                header, data = client.client.receive(DATA_SOCKET)
                assert (data, header.src_node) == (back, ipx.rfc1234_node(theirs)), bridge.log()
                back = f"ipxwrapper from {theirs}".encode()
                host.send_ipxwrapper(subnet, back)
                header, data = client.client.receive(DATA_SOCKET)
                assert (data, header.src_node) == (back, IPXWRAPPER_NODE), bridge.log()
            finally:
                client.client.sock.setblocking(False)

        round_trip("10.61.0")
        sh("ip", "-n", box, "addr", "del", "10.61.0.1/24", "dev", "lan0")
        sh("ip", "-n", box, "addr", "add", "10.62.0.1/24", "brd", "+", "dev", "lan0")
        sh("ip", "-n", h, "addr", "del", "10.61.0.2/24", "dev", "eth0")
        sh("ip", "-n", h, "addr", "add", "10.62.0.2/24", "brd", "+", "dev", "eth0")
        for kind in ("rfc1234", "ipxwrapper"):
            bridge.wait_for(plan.format(kind=kind, net=r"10\.62\.0"), 5)
        round_trip("10.62.0")
        assert bridge.proc.poll() is None
        assert bridge.log().count("IPX tunnel on udp") == 1  # the same run, not a restart
