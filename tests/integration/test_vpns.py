"""LAN games find each other across the real VPN programs, through an ipxbridge relay.

Each class builds one VPN from the programs Debian ships (OpenVPN 2.6, tinc 1.0, Nebula 1.6,
wireguard-go) in namespaces of its own, as the bridge's users set them up (a daemon's
configuration where its Debian unit reads it, in the namespace's own /etc), and shares it
between its tests; a test starts the bridge (``ipxbridge run``: the default kernel fast path
in preserve mode, or ``--fast-path off``), lets the stand-in game of ``vpn.py`` look for hosts
in every direction, and checks the bridge's books against what the hosts received.

A test runs every direction before it fails, so its message says all that went wrong.

What the programs do with a broadcast (measured by the ``test_what_*_carries`` tests, and
read in their sources):

* OpenVPN 2.6 tun (src/openvpn/mroute.c ``mroute_extract_addr_ip`` flags an IPv4
  destination as multicast only, never as broadcast; src/openvpn/multi.c
  ``multi_process_incoming_link`` then sends a client's 255.255.255.255 up the server's tun,
  and ``multi_process_incoming_tun`` finds no client for a 255.255.255.255 the server box
  sends, so it goes nowhere): a client's broadcast reaches the server box only; the box's
  broadcast reaches no client. The relay needs the clients' addresses.
* OpenVPN tap: Ethernet broadcast (mroute.c ``mroute_extract_addr_ether``:
  ``MROUTE_EXTRACT_BCAST``): the server box's reaches every client (``multi_bcast``); a
  client's reaches the server box (and other clients only with client-to-client).
* tinc 1.0 router mode (src/route.c ``route_ipv4``: 255.255.255.255 and multicast go to
  ``route_broadcast``, src/net_packet.c ``broadcast_packet``: every node, over the minimum
  spanning tree): 255.255.255.255 reaches every node; a subnet broadcast is routed as unicast
  to the Subnet that holds it (none here). The relay still unicasts to each peer on a tun
  device: the bridge reads them from the net's host files (/etc/tinc/NET/hosts/*, as
  Debian's ``tinc@NET`` unit runs ``tincd -n NET``), before any node has sent a broadcast.
* Nebula 1.6 (inside.go ``consumeInsidePacket`` and ``getOrHandshake``: 255.255.255.255 is
  outside the Nebula network and no unsafe route covers it, so the packet is dropped; the
  tunnel's broadcast address is a host no lighthouse knows, whose handshake never
  completes): no broadcast crosses, so each site has a LAN and a bridge, and a site's inner
  sources must be in its certificate's subnets, on the way out and in (firewall.go
  ``Drop``: ``localIps``, ``remoteCidr``). Each bridge finds the other as the ``via`` of its
  unsafe route, in /etc/nebula/NAME.yml (Debian's ``nebula@NAME`` unit runs nebula through
  ``nebula-systemd-launcher NAME``, which reads it).

With a bridge at each end (Nebula, WireGuard two sites, the triangle), a bridge relays the
other's marked copy, arriving on a point-to-point interface, once more, to its LANs only
(policy/relay.py); on the fast path that needed the change that made it so (before it, 0/20
there; the Python path relayed them already). The OpenVPN tun row's LAN-to-clients
direction needs the bridge to learn the clients from the server's status file (``--status
... --status-version 2``, io/openvpn.py); the test runs it before any client has sent a
broadcast, so the peers cannot have been heard instead.
"""

import dataclasses
import json
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scripts.harness import BridgeProcess, Netns, bridge_get, sh
from tests.integration import vpn, wg
from tests.integration.conftest import require

FIND_PORT = 50000  # the players' fixed source ports
DP4_PORT = 50001
DP4_TCP = 2300  # where DirectPlay 4 players take their answers
ROUNDS = 20  # plain broadcasts per search
DP4_ROUNDS = 5  # DirectPlay 4 EnumSessions per search
FAST_PATHS = ["default", "off"]  # the kernel fast path (preserve), then the Python path


@dataclass(frozen=True)
class Place:
    """Where a player or a host runs: its namespace, the player's device there, the address
    its host answers from, and the (bridge namespace, egress) its copies leave by."""

    name: str
    ns: str
    device: str
    address: str
    via: tuple[str, str]
    shared: bool = False  # behind a broadcast egress: one copy reaches every host there


@dataclass
class Report:
    """What went wrong in a test, and what the receivers got for the books."""

    problems: list[str] = field(default_factory=list)
    # the copies the receivers behind each (bridge, egress) got: one per datagram a host
    # got, or, behind a broadcast egress, one per distinct datagram
    unicast: Counter[tuple[str, str]] = field(default_factory=Counter)
    shared: dict[tuple[str, str], set[bytes]] = field(default_factory=dict)
    sent: Counter[str] = field(default_factory=Counter)  # originals, by first-hop bridge

    def copies(self, bridge: str) -> dict[str, int]:
        """The copies the receivers say ``bridge`` sent, by egress."""
        out = {egress: n for (where, egress), n in self.unicast.items() if where == bridge}
        for (where, egress), seen in self.shared.items():
            if where == bridge:
                out[egress] = out.get(egress, 0) + len(seen)
        return out

    def check(self) -> None:
        assert not self.problems, "\n".join(self.problems)


def netns(short: str) -> Netns:
    """Namespaces for one class's VPN, named apart from every other set-up."""
    return Netns(prefix=f"ixv{vpn.unique_tag()}{short}")


def cross(report: Report, label: str, player: Place, far: Sequence[Place], first: str) -> None:
    """A player at ``player`` looks for hosts at every ``far`` place: 20 broadcasts and 5
    DirectPlay 4 EnumSessions; each host must answer all. ``first`` is the bridge that reads
    the player's broadcasts."""
    with vpn.hosts(*((h.ns, h.name) for h in far)) as hosts:
        found = vpn.find_hosts(
            player.ns, player.device, FIND_PORT, count=ROUNDS, label=label, expect=len(far)
        )
        dp4 = vpn.dp4_search(
            player.ns, player.device, DP4_PORT, DP4_TCP, count=DP4_ROUNDS, expect=len(far)
        )
    report.sent[first] += ROUNDS + DP4_ROUNDS
    for place, host in zip(far, hosts, strict=True):
        if place.shared:
            report.shared.setdefault(place.via, set()).update(d for d, _ in host.received)
        else:
            report.unicast[place.via] += len(host.received)
        plain = len(found.get(place.address, set()))
        enum = len(dp4.get(place.address, set()))
        if plain != ROUNDS or enum != DP4_ROUNDS:
            report.problems.append(
                f"{label}: the host at {place.name} ({place.address}) answered {plain}/{ROUNDS}"
                f" broadcasts and {enum}/{DP4_ROUNDS} DP4 EnumSessions"
                f" (it received {len(host.received)} datagrams)"
            )
        if plain and len(host.received) != ROUNDS + DP4_ROUNDS:  # more: duplicates, a loop
            report.problems.append(
                f"{label}: the host at {place.name} received {len(host.received)} datagrams"
                f" for {ROUNDS + DP4_ROUNDS} broadcasts"
            )
        report.problems += [f"{label}: host at {place.name}: {e}" for e in host.errors]
    stray = {*found, *dp4} - {p.address for p in far}
    if stray:
        report.problems.append(f"{label}: answers from unexpected addresses {sorted(stray)}")


def start_bridge(
    net: Netns, ns: str, ifaces: Sequence[str], fast_path: str, log_dir: Path
) -> BridgeProcess:
    """``ipxbridge run --ipx-listen off --iface ...`` (default: kernel fast path, preserve),
    ready once its plan names every interface."""
    args = ["--ipx-listen", "off"]
    for iface in ifaces:
        args += ["--iface", iface]
    if fast_path == "off":
        args += ["--fast-path", "off"]
    names = "".join(f"(?=.*{re.escape(i.split(':')[0])} \\()" for i in ifaces)
    return BridgeProcess(net, ns, *args, log_dir=log_dir, ready=f"relaying between: {names}")


def sources_named(
    bridge: BridgeProcess, ns: str, dev: str, peers: Sequence[str], source: str, words: str
) -> list[str]:
    """What is wrong with how the bridge in ``ns`` names where ``dev``'s ``peers`` came from
    (``source``: "tinc /etc/tinc/NET", "nebula /etc/nebula/NAME.yml"): the start-up plan line,
    /api/interfaces, ``ipxbridge_relay_peers{source}`` and ``ipxbridge interfaces`` (run in
    ``ns`` with the same --iface, as a user checks the plan: ``words``, its text)."""
    problems = []
    kind = source.split(maxsplit=1)[0]
    line = bridge.wait_for(rf"relaying between: .*{re.escape(dev)} \(p2p, \d+ peers: .*", 5)[0]
    for peer in peers:
        if f"{peer} ({source})" not in line:
            problems.append(f"the plan line does not name {peer} ({source}): {line}")
    api = json.loads(bridge_get(ns, "/api/interfaces"))
    rows = [r for r in (api if isinstance(api, list) else api["relay"]) if r["name"] == dev]
    got = rows[0]["peer_sources"] if rows else {}
    if got != dict.fromkeys(peers, source):
        problems.append(f"/api/interfaces: {dev}'s peer_sources are {got}")
    metric = f'ipxbridge_relay_peers{{interface="{dev}",source="{kind}"}} {len(peers)}.0'
    if metric not in bridge_get(ns, "/metrics"):
        problems.append(f"/metrics has no {metric}")
    text = sh("ip", "netns", "exec", ns, sys.executable, "-m", "ipxbridge", "interfaces",
              "--iface", dev).stdout  # fmt: skip
    if words not in text or not all(peer in text for peer in peers):
        problems.append(f"ipxbridge interfaces does not say {words!r} for {peers}:\n{text}")
    return problems


def fast_path_on(ns: str) -> bool:
    """Whether the bridge in ``ns`` has its nftables table (the kernel makes the copies)."""
    return (
        sh(
            "ip", "netns", "exec", ns, "nft", "list", "table", "ip", "ipxbridge", check=False
        ).returncode
        == 0
    )


def expect_fast_path(report: Report, ns: str, fast_path: str) -> None:
    want = fast_path != "off"
    if fast_path_on(ns) != want:
        report.problems.append(f"{ns}: kernel fast path {'not ' if want else ''}in use")


def books(report: Report, bridges: dict[str, vpn.Books], to_bridges: dict[str, str]) -> None:
    """Each bridge's books against the receivers: the copies booked per egress are what the
    hosts behind it got, every datagram read is relayed or dropped, and the broadcasts its
    LAN's players sent were each booked once (read, or copied by the kernel uninspected).

    ``to_bridges`` names, by bridge, the egress whose receiver is another bridge (two sites,
    one peer there): its copies must be one per broadcast of the bridge's own players, and
    what arrives there is left out of the count of broadcasts read."""
    for ns, before in bridges.items():
        sent = report.sent.get(ns, 0)
        want = report.copies(ns)
        far = to_bridges.get(ns)
        if far is not None:
            want[far] = sent
        delta = vpn.settled_books(ns, before, want)
        if delta.copies != {k: float(v) for k, v in want.items() if v}:
            report.problems.append(
                f"{ns}: copies booked {delta.copies}, receivers got {want} (books: {delta})"
            )
        if delta.received != delta.relayed + delta.dropped:
            report.problems.append(f"{ns}: received != relayed + dropped: {delta}")
        uninspected = delta.fastpath.get("uninspected", 0.0)
        local = delta.received - (delta.received_by.get(far, 0.0) if far else 0.0)
        if local + uninspected != sent:
            report.problems.append(
                f"{ns}: {sent} broadcasts sent, booked {local} received"
                f" + {uninspected} uninspected ({delta})"
            )


def carried(
    sender: tuple[str, str], dst: str, receivers: dict[str, str], wait: float = 0.7
) -> set[str]:
    """Which of ``receivers`` (name -> namespace) get a datagram that ``sender`` (namespace,
    device) sends to ``dst``:GAME_PORT (three tries)."""
    socks = {name: vpn.udp_socket(ns, vpn.GAME_PORT) for name, ns in receivers.items()}
    out = vpn.udp_socket(sender[0], 0, sender[1])
    try:
        for sock in socks.values():
            sock.setblocking(False)
        for _ in range(3):
            out.sendto(b"probe", (dst, vpn.GAME_PORT))
        time.sleep(wait)
        got = set()
        for name, sock in socks.items():
            try:
                if sock.recvfrom(100)[0] == b"probe":
                    got.add(name)
            except BlockingIOError:
                pass
        return got
    finally:
        out.close()
        for sock in socks.values():
            sock.close()


# --- 1. OpenVPN tun: server box with a LAN, two clients -----------------------------------


@dataclass
class OpenVpn:
    net: Netns
    box: str
    lan: Place
    clients: list[Place]
    dev: str
    dev_type: str
    status: Path


def openvpn_setup(short: str, k: int, dev_type: str) -> Iterator[OpenVpn]:
    """Server on ``box`` (UDP on an underlay switch, LAN 10.7k.1.0/24 behind it, tunnel
    10.8k.0.0/24) and clients c1 (.2) and c2 (.3) with a pushed route to the LAN."""
    require("ip", "openvpn", "openssl", "nft")
    net = netns(short)
    where = Path(tempfile.mkdtemp(prefix=f"ixv-{short}-"))
    tag = vpn.unique_tag()
    dev = f"os{short}{tag}"
    status = vpn.status_path(net.prefix, dev)
    made_dir = vpn.make_status_dir()
    daemons: list[vpn.Daemon] = []
    try:
        box, station, c1, c2 = (net.add(n) for n in ("box", "lan", "c1", "c2"))
        vpn.router(box)
        vpn.lan(box, "lanA", station, f"10.7{k}.1.0/24")
        vpn.switch(box, "ubr", f"10.9{k}.0.1/24")
        vpn.plug(box, "ubr", "u1", c1, "under", f"10.9{k}.0.2/24")
        vpn.plug(box, "ubr", "u2", c2, "under", f"10.9{k}.0.3/24")
        vpn.openvpn_pki(where, "server", ["c1", "c2"])
        addresses = {"c1": f"10.8{k}.0.2", "c2": f"10.8{k}.0.3"}
        server = vpn.openvpn_server(
            net,
            box,
            where,
            dev=dev,
            dev_type=dev_type,
            network=f"10.8{k}.0.0/24",
            local=f"10.9{k}.0.1",
            clients=addresses,
            routes=[f"10.7{k}.1.0/24"],
        )
        daemons.append(server)
        server.wait_for(vpn.OPENVPN_READY)
        places = []
        for ns, name in ((c1, "c1"), (c2, "c2")):
            cdev = f"o{name}{short}{tag}"
            client = vpn.openvpn_client(
                net, ns, where, name=name, dev=cdev, dev_type=dev_type, remote=f"10.9{k}.0.1"
            )
            daemons.append(client)
            places.append(Place(name, ns, cdev, addresses[name], ("", ""), dev_type == "tap"))
        for client in daemons[1:]:
            client.wait_for(vpn.OPENVPN_READY)
        vpn.wait_status_lists(status, addresses.values())
        for place in places:
            vpn.wait_reach(place.ns, station, f"10.7{k}.1.10")
        yield OpenVpn(
            net,
            box,
            Place("lan", station, "eth0", f"10.7{k}.1.10", (box, "lanA")),
            [dataclasses.replace(p, via=(box, dev)) for p in places],
            dev,
            dev_type,
            status,
        )
    finally:
        vpn.stop_all(daemons)
        net.close()
        vpn.remove_status(status, made_dir=made_dir)
        shutil.rmtree(where, ignore_errors=True)


def openvpn_both_ways(t: OpenVpn, fast_path: str, workdir: Path, *, clients_back: int) -> None:
    """The LAN player finds the hosts on both clients; players on the first ``clients_back``
    clients find the LAN's host; the books match."""
    report = Report()
    bridge = start_bridge(t.net, t.box, ["lanA", t.dev], fast_path, workdir)
    try:
        if t.dev_type == "tun":
            try:  # the clients, from the server's status file (tun: no broadcast to them)
                bridge.wait_for(rf"{t.dev} \(p2p, 2 peers", 5)
            except TimeoutError:
                report.problems.append(
                    f"the bridge did not learn the two clients of {t.dev} from {t.status}"
                )
        expect_fast_path(report, t.box, fast_path)
        before = {t.box: vpn.Books.read(t.box)}
        cross(report, "LAN -> clients", t.lan, t.clients, t.box)
        for client in t.clients[:clients_back]:
            cross(report, f"{client.name} -> LAN", client, [t.lan], t.box)
        books(report, before, {})
    finally:
        assert bridge.stop() == 0
    report.check()


@pytest.mark.netns
class TestOpenVpnTun:
    @pytest.fixture(scope="class")
    @classmethod
    def topo(cls) -> Iterator[OpenVpn]:
        yield from openvpn_setup("t", 1, "tun")

    def test_what_openvpn_tun_carries(self, topo: OpenVpn) -> None:
        """A client's broadcast (255.255.255.255 or the tunnel's) goes up the server's tun
        only; what the server box sends to either reaches no client (module docstring)."""
        names = {"box": topo.box, **{c.name: c.ns for c in topo.clients}}
        c1 = topo.clients[0]
        for dst in ("255.255.255.255", "10.81.0.255"):
            assert carried((c1.ns, c1.device), dst, names) == {"box", "c1"}, dst  # c1: looped
            assert carried((topo.box, topo.dev), dst, names) == {"box"}, dst

    @pytest.mark.parametrize("fast_path", FAST_PATHS)
    def test_lan_and_clients_find_each_other(
        self, topo: OpenVpn, fast_path: str, workdir: Path
    ) -> None:
        openvpn_both_ways(topo, fast_path, workdir, clients_back=2)


# --- 2. OpenVPN tap (routed, the server has an address on its tap) -----------------------


@pytest.mark.netns
class TestOpenVpnTap:
    @pytest.fixture(scope="class")
    @classmethod
    def topo(cls) -> Iterator[OpenVpn]:
        yield from openvpn_setup("p", 2, "tap")

    def test_what_openvpn_tap_carries(self, topo: OpenVpn) -> None:
        names = {"box": topo.box, **{c.name: c.ns for c in topo.clients}}
        c1 = topo.clients[0]
        assert carried((c1.ns, c1.device), "255.255.255.255", names) == {"box", "c1"}
        assert carried((topo.box, topo.dev), "10.82.0.255", names) == {"box", "c1", "c2"}

    def test_lan_and_clients_find_each_other(self, topo: OpenVpn, workdir: Path) -> None:
        """A tap device broadcasts: role lan, no peers needed, the subnet broadcast reaches
        every client."""
        openvpn_both_ways(topo, "default", workdir, clients_back=1)


# --- 3, 4. tinc 1.0, router and switch mode ------------------------------------------------


@dataclass
class Tinc:
    net: Netns
    box: str
    lan: Place
    nodes: list[Place]
    dev: str


def tinc_setup(short: str, k: int, mode: str) -> Iterator[Tinc]:
    """Three tinc nodes: ``box`` (LAN 10.7k.1.0/24 behind it, tunnel .1) and r1, r2 (.2, .3),
    both connecting to box over an underlay switch."""
    require("ip", "tincd", "nft")
    net = netns(short)
    tag = vpn.unique_tag()
    daemons: list[vpn.Daemon] = []
    try:
        box, station, r1, r2 = (net.add(n) for n in ("box", "lan", "r1", "r2"))
        vpn.router(box)
        lan_prefix = f"10.7{k}.1.0/24"
        vpn.lan(box, "lanA", station, lan_prefix)
        vpn.switch(box, "ubr", f"10.9{k}.0.1/24")
        vpn.plug(box, "ubr", "u1", r1, "under", f"10.9{k}.0.2/24")
        vpn.plug(box, "ubr", "u2", r2, "under", f"10.9{k}.0.3/24")
        router = mode == "router"
        nodes = [
            vpn.TincNode(
                "box",
                box,
                f"tb{short}{tag}",
                f"10.8{k}.0.1",
                f"10.9{k}.0.1",
                subnets=(f"10.8{k}.0.1/32", lan_prefix) if router else (),
            ),  # its net named after its interface: tinc.conf has no Interface line
            *(
                vpn.TincNode(
                    f"r{i}",
                    ns,
                    f"t{i}{short}{tag}",
                    f"10.8{k}.0.{i + 1}",
                    f"10.9{k}.0.{i + 1}",
                    subnets=(f"10.8{k}.0.{i + 1}/32",) if router else (),
                    routes=(lan_prefix,),
                    connect_to=("box",),
                    net=f"v{i}{short}{tag}",  # /run/tinc.NET.pid is one for all namespaces
                )
                for i, ns in ((1, r1), (2, r2))
            ),
        ]
        daemons = vpn.tinc_network(net, nodes, mode=mode)
        # A second net on the box, for another interface (not up here): its nodes are no
        # peers on the first one's (nets are told apart by the interface each names).
        other = vpn.etc_of(box) / "tinc" / f"o{short}{tag}"
        (other / "hosts").mkdir(parents=True)
        (other / "tinc.conf").write_text(f"Name = box\nInterface = od{short}{tag}\n")
        (other / "hosts" / "far").write_text(f"Subnet = 10.8{k}.0.99/32\n")
        for node in nodes[1:]:
            vpn.wait_reach(node.ns, station, f"10.7{k}.1.10")
        vpn.wait_reach(r1, r2, f"10.8{k}.0.3")
        yield Tinc(
            net,
            box,
            Place("lan", station, "eth0", f"10.7{k}.1.10", (box, "lanA")),
            [
                Place(n.name, n.ns, n.ifname, n.address, (box, nodes[0].ifname), not router)
                for n in nodes[1:]
            ],
            nodes[0].ifname,
        )
    finally:
        vpn.stop_all(daemons)
        net.close()


def tinc_both_ways(
    t: Tinc, ifaces: Sequence[str], fast_path: str, workdir: Path, *, peers: int = 0
) -> None:
    """The LAN's player finds the nodes' hosts, then r1's finds the LAN's; ``peers``: how
    many the bridge must have found on the tinc interface before the first search."""
    report = Report()
    bridge = start_bridge(t.net, t.box, ifaces, fast_path, workdir)
    try:
        if peers:
            bridge.wait_for(rf"{t.dev} \(p2p, {peers} peers", 5)
            source = f"tinc /etc/tinc/{t.dev}"  # the box's net is named after its interface
            report.problems += sources_named(
                bridge, t.box, t.dev, [n.address for n in t.nodes], source,
                f"other tinc nodes' host-sized Subnets in {source.split()[1]}/hosts",
            )  # fmt: skip
        expect_fast_path(report, t.box, fast_path)
        before = {t.box: vpn.Books.read(t.box)}
        cross(report, "LAN -> nodes", t.lan, t.nodes, t.box)
        cross(report, "r1 -> LAN", t.nodes[0], [t.lan], t.box)
        books(report, before, {})
        if peers and fast_path == "default":
            # A new node's host file is read on the next round (every 10 s), no restart.
            hosts = vpn.etc_of(t.box) / "tinc" / t.dev / "hosts"
            (hosts / "r9").write_text(f"Subnet = {t.nodes[0].address.rsplit('.', 1)[0]}.9\n")
            try:
                bridge.wait_for(rf"{t.dev} \(p2p, {peers + 1} peers", 15)
            finally:
                (hosts / "r9").unlink()
    finally:
        assert bridge.stop() == 0
    report.check()


@pytest.mark.netns
class TestTincRouter:
    @pytest.fixture(scope="class")
    @classmethod
    def topo(cls) -> Iterator[Tinc]:
        yield from tinc_setup("r", 3, "router")

    def test_what_tinc_router_carries(self, topo: Tinc) -> None:
        """255.255.255.255 reaches every node, from a node or from the box; the tunnel's
        subnet broadcast is routed as unicast to the Subnet holding it, and none does."""
        names = {"box": topo.box, **{n.name: n.ns for n in topo.nodes}}
        r1 = topo.nodes[0]
        assert carried((r1.ns, r1.device), "255.255.255.255", names) == {"box", "r1", "r2"}
        assert carried((topo.box, topo.dev), "255.255.255.255", names) == {"box", "r1", "r2"}
        assert carried((r1.ns, r1.device), "10.83.0.255", names) == {"r1"}

    @pytest.mark.parametrize("fast_path", FAST_PATHS)
    def test_lan_and_nodes_find_each_other(self, topo: Tinc, fast_path: str, workdir: Path) -> None:
        """A tun device: the bridge unicasts to each peer, found in tinc's own files (the
        host-sized Subnets of /etc/tinc/NET/hosts/*), no list: the nodes only listen until
        the LAN's player has found them."""
        tinc_both_ways(topo, ["lanA", topo.dev], fast_path, workdir, peers=len(topo.nodes))


@pytest.mark.netns
class TestTincSwitch:
    @pytest.fixture(scope="class")
    @classmethod
    def topo(cls) -> Iterator[Tinc]:
        yield from tinc_setup("s", 4, "switch")

    def test_lan_and_nodes_find_each_other(self, topo: Tinc, workdir: Path) -> None:
        """A tap device: role lan, the subnet broadcast reaches every node."""
        tinc_both_ways(topo, ["lanA", topo.dev], "default", workdir)


# --- 5, 6. Two sites, a bridge at each: Nebula, WireGuard ---------------------------------


@dataclass
class TwoSites:
    net: Netns
    sites: list[str]  # the two site boxes
    lans: list[Place]
    devs: list[str]  # each box's VPN interface
    peers: list[str]  # each box's peer on it ("" when the bridge finds it itself)
    found: list[str] = field(default_factory=list)  # the peer each finds in its VPN's files
    names: list[str] = field(default_factory=list)  # each box's Nebula config's name


def two_sites_both_ways(t: TwoSites, fast_path: str, workdir: Path) -> None:
    """Each LAN's player finds the other LAN's host; the books of both bridges match."""
    report = Report()
    bridges = []
    try:
        for box, lan_place, dev, peer in zip(t.sites, t.lans, t.devs, t.peers, strict=True):
            iface = f"{dev}:{peer}" if peer else dev
            bridges.append(start_bridge(t.net, box, [lan_place.via[1], iface], fast_path, workdir))
            expect_fast_path(report, box, fast_path)
        if not t.peers[0]:
            for bridge, dev in zip(bridges, t.devs, strict=True):
                bridge.wait_for(rf"{dev} \(p2p, 1 peers", 5)
        for i, far in enumerate(t.found):  # the other site's bridge, from its unsafe route
            source = f"nebula /etc/nebula/{t.names[i]}.yml"
            report.problems += sources_named(
                bridges[i], t.sites[i], t.devs[i], [far], source,
                f"the via of Nebula's unsafe routes in {source.split()[1]}",
            )  # fmt: skip
        before = {box: vpn.Books.read(box) for box in t.sites}
        a, b = t.lans
        cross(report, "site A -> site B", a, [b], a.via[0])
        cross(report, "site B -> site A", b, [a], b.via[0])
        books(report, before, dict(zip(t.sites, t.devs, strict=True)))
    finally:
        for bridge in bridges:
            assert bridge.stop() == 0
    report.check()


@pytest.mark.netns
class TestNebula:
    @pytest.fixture(scope="class")
    @classmethod
    def topo(cls) -> Iterator[TwoSites]:
        """A lighthouse and two site boxes (Nebula .1, .2, .3 in 10.85.0.0/24) on an
        underlay switch; each site's certificate carries its LAN (-subnets) and each routes
        the other's LAN to it (unsafe_routes), in /etc/nebula/NAME.yml as Debian's
        nebula@NAME unit reads it. The bridges get no list of peers."""
        require("ip", "nebula", "nebula-cert", "nft")
        net = netns("n")
        where = Path(tempfile.mkdtemp(prefix="ixv-n-"))
        tag = vpn.unique_tag()
        daemons: list[vpn.Daemon] = []
        try:
            lh, sa, sb, la, lb = (net.add(n) for n in ("lh", "sa", "sb", "la", "lb"))
            for box in (sa, sb):
                vpn.router(box)
            vpn.lan(sa, "lanA", la, "10.75.1.0/24")
            vpn.lan(sb, "lanB", lb, "10.75.2.0/24")
            vpn.switch(lh, "ubr", "10.95.0.1/24")
            vpn.plug(lh, "ubr", "ua", sa, "under", "10.95.0.2/24")
            vpn.plug(lh, "ubr", "ub", sb, "under", "10.95.0.3/24")
            nodes = [
                vpn.NebulaNode("lh", lh, f"nl{tag}", "10.85.0.1", "10.95.0.1", lighthouse=True),
                vpn.NebulaNode(
                    "sa",
                    sa,
                    f"na{tag}",
                    "10.85.0.2",
                    "10.95.0.2",
                    subnets=("10.75.1.0/24",),
                    unsafe_routes=(("10.75.2.0/24", "10.85.0.3"),),
                ),
                vpn.NebulaNode(
                    "sb",
                    sb,
                    f"nb{tag}",
                    "10.85.0.3",
                    "10.95.0.3",
                    subnets=("10.75.2.0/24",),
                    unsafe_routes=(("10.75.1.0/24", "10.85.0.2"),),
                ),
            ]
            daemons = vpn.nebula_network(net, where, nodes)
            for daemon in daemons:
                daemon.wait_for(vpn.NEBULA_READY)
            vpn.wait_reach(la, lb, "10.75.2.10")
            yield TwoSites(
                net,
                [sa, sb],
                [
                    Place("site A", la, "eth0", "10.75.1.10", (sa, "lanA")),
                    Place("site B", lb, "eth0", "10.75.2.10", (sb, "lanB")),
                ],
                [f"na{tag}", f"nb{tag}"],
                ["", ""],  # each bridge finds the other in its unsafe_routes' via
                ["10.85.0.3", "10.85.0.2"],
                ["sa", "sb"],
            )
        finally:
            vpn.stop_all(daemons)
            net.close()
            shutil.rmtree(where, ignore_errors=True)

    def test_what_nebula_carries(self, topo: TwoSites) -> None:
        """Neither 255.255.255.255 nor the tunnel's broadcast crosses Nebula."""
        names = dict(zip(("sa", "sb"), topo.sites, strict=True))
        for dst in ("255.255.255.255", "10.85.0.255"):
            assert carried((topo.sites[0], topo.devs[0]), dst, names) == {"sa"}, dst

    @pytest.mark.parametrize("fast_path", FAST_PATHS)
    def test_two_sites_find_each_other(self, topo: TwoSites, fast_path: str, workdir: Path) -> None:
        two_sites_both_ways(topo, fast_path, workdir)


def wg_sites(
    short: str, k: int, count: int
) -> Iterator[tuple[Netns, list[vpn.WgSite], list[Place]]]:
    """``count`` sites over wireguard-go, every one a peer of every other (tunnel
    10.8k.0.0/24, site i's LAN 10.7k.i.0/24 with a station at .10, underlay switch)."""
    require("ip", "wireguard-go", "wg", "nft")
    net = netns(short)
    where = Path(tempfile.mkdtemp(prefix=f"ixv-{short}-"))
    tag = vpn.unique_tag()
    sites: list[vpn.WgSite] = []
    try:
        sw = net.add("u")
        vpn.switch(sw, "ubr", f"10.9{k}.0.254/24")
        places = []
        for i in range(1, count + 1):
            box, station = net.add(f"s{i}"), net.add(f"l{i}")
            vpn.router(box)
            vpn.lan(box, "lan", station, f"10.7{k}.{i}.0/24")
            vpn.plug(sw, "ubr", f"p{i}", box, "under", f"10.9{k}.0.{i}/24")
            end = wg.WgEnd(box, f"w{i}{short}{tag}", f"10.8{k}.0.{i}", f"10.9{k}.0.{i}", 51820)
            sites.append(vpn.WgSite(end, f"10.7{k}.{i}.0/24"))
            places.append(Place(f"site {i}", station, "eth0", f"10.7{k}.{i}.10", (box, "lan")))
        vpn.wg_mesh(net, sites, where)
        for place in places[1:]:
            vpn.wait_reach(places[0].ns, place.ns, place.address)
        yield net, sites, places
    finally:
        for site in sites:
            wg.stop(net, site.end)
        net.close()
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.netns
class TestWireGuardTwoSites:
    @pytest.fixture(scope="class")
    @classmethod
    def topo(cls) -> Iterator[TwoSites]:
        for net, sites, places in wg_sites("w", 6, 2):
            yield TwoSites(
                net, [s.end.ns for s in sites], places, [s.end.ifname for s in sites], ["", ""]
            )

    @pytest.mark.parametrize("fast_path", FAST_PATHS)
    def test_two_sites_find_each_other(self, topo: TwoSites, fast_path: str, workdir: Path) -> None:
        """The peers come from WireGuard (the /32 AllowedIPs), no list."""
        two_sites_both_ways(topo, fast_path, workdir)


# --- 7. A triangle of sites ----------------------------------------------------------------


@dataclass
class Triangle:
    net: Netns
    boxes: list[str]
    places: list[Place]
    links: list[list[str]]  # each site's WireGuard interfaces, one per other site


def triangle_setup(short: str, k: int) -> Iterator[Triangle]:
    """Three sites, each pair joined by its own wireguard-go link (10.8k.IJ.0/24, site I at
    .I): a broadcast relayed on to every other interface would go round the triangle."""
    require("ip", "wireguard-go", "wg", "nft")
    net = netns(short)
    where = Path(tempfile.mkdtemp(prefix=f"ixv-{short}-"))
    tag = vpn.unique_tag()
    ends: list[wg.WgEnd] = []
    try:
        sw = net.add("u")
        vpn.switch(sw, "ubr", f"10.9{k}.0.254/24")
        boxes, places = [], []
        for i in (1, 2, 3):
            box, station = net.add(f"s{i}"), net.add(f"l{i}")
            vpn.router(box)
            vpn.lan(box, "lan", station, f"10.7{k}.{i}.0/24")
            vpn.plug(sw, "ubr", f"p{i}", box, "under", f"10.9{k}.0.{i}/24")
            boxes.append(box)
            places.append(Place(f"site {i}", station, "eth0", f"10.7{k}.{i}.10", (box, "lan")))
        links: list[list[str]] = [[], [], []]
        for i, j in ((1, 2), (1, 3), (2, 3)):
            pair = [
                wg.WgEnd(
                    boxes[a - 1],
                    f"w{a}{b}{short}{tag}",
                    f"10.8{k}.{i}{j}.{a}",
                    f"10.9{k}.0.{a}",
                    51800 + 10 * a + b,
                )
                for a, b in ((i, j), (j, i))
            ]
            ends += pair
            vpn.wg_mesh(
                net,
                [
                    vpn.WgSite(pair[0], f"10.7{k}.{i}.0/24"),
                    vpn.WgSite(pair[1], f"10.7{k}.{j}.0/24"),
                ],
                where,
            )
            links[i - 1].append(pair[0].ifname)
            links[j - 1].append(pair[1].ifname)
        for a, b in ((0, 1), (0, 2), (1, 2)):
            vpn.wait_reach(places[a].ns, places[b].ns, places[b].address)
        yield Triangle(net, boxes, places, links)
    finally:
        for end in ends:
            wg.stop(net, end)
        net.close()
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.netns
class TestTriangle:
    @pytest.fixture(scope="class")
    @classmethod
    def topo(cls) -> Iterator[Triangle]:
        yield from triangle_setup("g", 7)

    @pytest.mark.parametrize("fast_path", FAST_PATHS)
    def test_one_broadcast_arrives_once_at_each_other_site_and_never_comes_back(
        self, topo: Triangle, fast_path: str, workdir: Path
    ) -> None:
        """A bridge at each site: site A's broadcast reaches B and C by their links, their
        bridges put it on their LANs and on no link (a marked copy from a point-to-point
        interface goes to the LANs only): once on each LAN, never back on A's, no storm."""
        bridges = []
        captures: list[vpn.Capture] = []
        try:
            for box, links in zip(topo.boxes, topo.links, strict=True):
                bridges.append(start_bridge(topo.net, box, ["lan", *links], fast_path, workdir))
            for bridge, links in zip(bridges, topo.links, strict=True):
                for link in links:  # peers from WireGuard, one per link
                    bridge.wait_for(rf"{link} \(p2p, 1 peers", 5)
            before = {box: vpn.Books.read(box) for box in topo.boxes}
            captures = [vpn.Capture(p.ns, "eth0") for p in topo.places]
            player = vpn.udp_socket(topo.places[0].ns, FIND_PORT, "eth0")
            try:
                player.sendto(b"ixv-triangle", ("255.255.255.255", vpn.GAME_PORT))
            finally:
                player.close()
            # 2 s on site A's LAN, then what the other two captures hold by then
            seen = [captures[0].read(2.0), *(c.read(0.2) for c in captures[1:])]
            assert [len(s) for s in seen] == [0, 1, 1], seen
            assert seen[1] == seen[2] == [b"ixv-triangle"]
            a, b, c = topo.boxes
            want = {a: dict.fromkeys(topo.links[0], 1), b: {"lan": 1}, c: {"lan": 1}}
            for box in topo.boxes:
                delta = vpn.settled_books(box, before[box], want[box])
                assert delta.copies == {k: float(v) for k, v in want[box].items()}, (box, delta)
                assert delta.received == delta.relayed + delta.dropped, (box, delta)
        finally:
            for capture in captures:
                capture.close()
            for bridge in bridges:
                assert bridge.stop() == 0
