"""Interface ports (io/segments.py) against a real switch and endpoint, fake link-layer sockets.

The Ethernet port gets a fake AF_PACKET socket (no CAP_NET_RAW needed): frames are queued
for it to read and the frames it sends are kept. UDP ports send through a fake socket that
keeps each datagram and its destination. Behind them is a real ``IpxEndpoint`` and
``IpxSwitch`` on a loopback UDP socket, with a clock the test sets.
"""

import asyncio
import logging
import socket
from collections.abc import Iterator
from typing import Any, cast

import pytest

from ipxbridge.io import segments
from ipxbridge.io.ipx_endpoint import IpxEndpoint
from ipxbridge.io.segments import (
    MAX_LINKS,
    EthernetPort,
    IpxWrapperPort,
    IpxWrapperSocket,
    Rfc1234Port,
)
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.policy.framings import FRAMING_TTL
from ipxbridge.policy.port_plan import PortPlan, SourceIndex
from ipxbridge.policy.switch import (
    Decision,
    IpxSwitch,
    Outcome,
    PortKind,
    Segment,
    SwitchSettings,
)
from ipxbridge.policy.tables import PROOF_AFTER
from ipxbridge.wire import ipx
from ipxbridge.wire.ethernet import BROADCAST_MAC, Framing, build_frame, parse_frame
from tests.unit.test_switch import register, verify

ETH = Segment("seg0", PortKind.ETHERNET)
RFC = Segment("lan0", PortKind.RFC1234)
WRAP = Segment("lan0", PortKind.IPXWRAPPER)
PORT_MAC = bytes.fromhex("020000b00001")  # the bridge's interface
STATION = bytes.fromhex("00a0c9123456")  # a native station on the segment
VICTIM = bytes.fromhex("00a0c9654321")  # another one, whose MAC a stranger would borrow
GAME_SOCKET = 0x4545
ETH_LABEL = ("ethernet", "seg0")


class Clock:
    """The loop as the endpoint and ports use it: only its clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def time(self) -> float:
        return self.now


class FakePacketSocket:
    """An AF_PACKET socket: ``incoming`` frames are read, sent frames kept in ``sent``."""

    def __init__(self, mac: bytes = PORT_MAC) -> None:
        self.mac = mac
        self.incoming: list[bytes] = []
        self.sent: list[bytes] = []

    def recv(self, _bufsize: int, /) -> bytes:
        if not self.incoming:
            raise BlockingIOError
        return self.incoming.pop(0)

    def recvfrom(self, bufsize: int, /) -> tuple[bytes, Any]:
        return self.recv(bufsize), ("seg0", 0, 0, 1, self.mac)

    def send(self, data: bytes, /) -> int:
        self.sent.append(data)
        return len(data)

    def getsockname(self) -> Any:
        return ("seg0", 0, 0, 1, self.mac)

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


class Bench:
    """A switch, its endpoint on a loopback socket, and a DOSBox client to switch to."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.counters = IpxCounters()
        self.switch = IpxSwitch(
            SwitchSettings(),
            bridge_id=bytes.fromhex("020000000005"),
            evictions=self.counters.table_evictions,
        )
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        loop = cast(asyncio.AbstractEventLoop, self.clock)
        self.endpoint = IpxEndpoint(loop, self.sock, self.switch, self.counters)
        # The DOSBox client the packets from segments are switched to.
        self.client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.client.bind(("127.0.0.1", 0))
        self.client.setblocking(False)
        addr = self.client.getsockname()
        self.client_addr: tuple[str, int] = (addr[0], addr[1])
        self.client_node = register(self.switch, self.client_addr, self.clock.now)
        verify(self.switch, self.client_addr, self.clock.now)

    def ethernet(self, *, framing: str = "auto") -> tuple[EthernetPort, FakePacketSocket]:
        plan = PortPlan(ETH, 7, "lan", 1500, framing=framing)
        fake = FakePacketSocket()
        port = EthernetPort(plan, self.endpoint, fake, self.counters.table_evictions)
        self.endpoint.segments[ETH] = port
        self.switch.add_segment(ETH)
        return port, fake

    def client_datagrams(self) -> list[bytes]:
        out = []
        while True:
            try:
                out.append(self.client.recv(65535))
            except BlockingIOError:
                return out

    def balanced(self) -> None:
        c = self.counters
        assert c.received == c.forwarded + c.control + sum(c.dropped.values())
        for port, n in c.port_received.items():
            assert n == sum(v for k, v in c.port_outcomes.items() if k[:2] == port), port

    def close(self) -> None:
        self.sock.close()
        self.client.close()


@pytest.fixture
def bench() -> Iterator[Bench]:
    b = Bench()
    yield b
    b.close()


def packet(
    src: bytes,
    dst: bytes = ipx.BROADCAST_NODE,
    *,
    hops: int = 0,
    sock: int = GAME_SOCKET,
    data: bytes = b"game",
) -> bytes:
    return ipx.build_packet(
        dst_node=dst, dst_socket=sock, src_node=src, src_socket=sock, hops=hops, payload=data
    )


def frame(src_mac: bytes, framing: Framing, pkt: bytes, dst_mac: bytes = BROADCAST_MAC) -> bytes:
    return build_frame(dst_mac, src_mac, framing, pkt)


# --- framing learner: only what the switch accepted; bounded; forgets ---------------------------


def test_the_learner_learns_only_from_frames_the_switch_accepted(bench: Bench) -> None:
    port, fake = bench.ethernet()
    spent = packet(VICTIM, hops=255)  # hop_limit
    bad = bytearray(packet(VICTIM, data=b"bad"))
    bad[0:2] = b"\x12\x34"  # a checksum that is wrong
    rip = packet(STATION, sock=0x0453, data=b"\x00\x01" + b"\xff" * 8)  # filtered, but its own
    fake.incoming += [
        frame(VICTIM, Framing.SNAP, spent),
        frame(VICTIM, Framing.SNAP, bytes(bad)),
        frame(STATION, Framing.ETHERNET_II, rip),
    ]
    port.on_readable()
    dropped = {k[3]: v for k, v in bench.counters.port_outcomes.items() if k[2] == "dropped"}
    assert dropped == {"hop_limit": 1, "bad_checksum": 1, "filtered_socket": 1}
    assert VICTIM not in port.framings
    assert port.framings.framing_for(STATION) is Framing.ETHERNET_II
    assert port.framings.in_use() == (Framing.ETHERNET_II,)
    fake.incoming.append(frame(VICTIM, Framing.ETHERNET_II, packet(VICTIM, data=b"ok")))
    port.on_readable()
    assert port.framings.framing_for(VICTIM) is Framing.ETHERNET_II


@pytest.mark.parametrize(
    ("decision", "learn"),
    [
        (Decision(Outcome.FORWARDED, "broadcast"), True),
        (Decision(Outcome.CONTROL, "to_bridge"), True),
        (Decision(Outcome.DROPPED, "filtered_socket"), True),
        (Decision(Outcome.CONTROL, "beacon"), False),  # a bridge, not a station
        (Decision(Outcome.DROPPED, "beacon_unverified"), False),
        (Decision(Outcome.DROPPED, "duplicate"), True),  # its own frame, overtaken by a copy
        (Decision(Outcome.DROPPED, "hop_limit"), False),
        # Taken, with nowhere to go: its only receiver over the reflection limit
        (Decision(Outcome.DROPPED, "unverified_rate"), True),
        (Decision(Outcome.DROPPED, "no_destination"), True),
        (Decision(Outcome.DROPPED, "loop"), False),
        (Decision(Outcome.DROPPED, "bad_checksum"), False),
        (
            Decision(Outcome.CONTROL, "batch", inner=((b"", Decision(Outcome.DROPPED, "loop")),)),
            False,
        ),
        (
            Decision(
                Outcome.CONTROL,
                "batch",
                inner=(
                    (b"", Decision(Outcome.DROPPED, "loop")),
                    (b"", Decision(Outcome.FORWARDED, "unicast")),
                ),
            ),
            True,
        ),
    ],
)
def test_what_a_port_may_learn_from(decision: Decision, learn: bool) -> None:
    assert segments.accepted(decision) is learn


def test_a_copy_from_another_bridge_teaches_nothing(bench: Bench) -> None:
    """Another bridge's copy carries its own MAC, not the station's: no station is learned."""
    port, fake = bench.ethernet()
    other_bridge = bytes.fromhex("02aabbccddee")
    pkt = packet(STATION, data=b"relayed")
    fake.incoming.append(frame(other_bridge, Framing.SNAP, pkt))
    port.on_readable()
    assert STATION not in port.framings
    assert other_bridge not in port.framings


def test_a_stations_own_frame_teaches_even_when_a_relayed_copy_came_first(bench: Bench) -> None:
    """With two bridges on a LAN the neighbour's copy can overtake the station's own frame."""
    port, fake = bench.ethernet()
    pkt = packet(STATION, data=b"raced")
    neighbour = bytes.fromhex("02aabbccddee")
    fake.incoming += [frame(neighbour, Framing.LLC, pkt), frame(STATION, Framing.ETHERNET_II, pkt)]
    port.on_readable()
    assert bench.counters.port_outcomes[(*ETH_LABEL, "dropped", "duplicate")] == 1
    assert port.framings.framing_for(STATION) is Framing.ETHERNET_II


def test_a_fixed_framing_port_knows_its_stations_but_sends_in_its_framing(bench: Bench) -> None:
    port, fake = bench.ethernet(framing="802.2")
    fake.incoming.append(frame(STATION, Framing.SNAP, packet(STATION)))
    port.on_readable()
    assert STATION in port.framings  # heard: a unicast to it may go (and in 802.2)
    port.send(packet(VICTIM, STATION, data=b"to it"), STATION)
    assert [parse_frame(f).framing for f in fake.sent] == [Framing.LLC]


def test_the_ports_tick_forgets_silent_stations_and_evictions_are_counted(bench: Bench) -> None:
    port, fake = bench.ethernet()
    t0 = bench.clock.now
    fake.incoming.append(frame(STATION, Framing.ETHERNET_II, packet(STATION, data=b"a")))
    port.on_readable()
    bench.clock.now = t0 + PROOF_AFTER
    fake.incoming.append(frame(STATION, Framing.ETHERNET_II, packet(STATION, data=b"b")))
    port.on_readable()
    # A flood of one-frame source MACs, each a new packet the switch forwards.
    for n in range(1_500):
        src = b"\x02" + n.to_bytes(5, "big")
        fake.incoming.append(frame(src, Framing.SNAP, packet(src, data=n.to_bytes(4, "big"))))
        if len(fake.incoming) == segments.READS_PER_WAKEUP:
            port.on_readable()
    port.on_readable()
    assert bench.counters.table_evictions[("framings", "unproven")] > 0
    assert bench.counters.table_evictions[("framings", "proven")] == 0
    assert port.framings.framing_for(STATION) is Framing.ETHERNET_II
    port.tick(t0 + PROOF_AFTER + FRAMING_TTL - 1)
    assert port.framings.framing_for(STATION) is Framing.ETHERNET_II
    port.tick(t0 + PROOF_AFTER + FRAMING_TTL)
    assert port.framings.in_use() == (Framing.LLC,)  # nobody known: the fallback


# --- source MAC -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixed", ["auto", "802.3"])
def test_every_frame_leaves_from_the_ports_own_mac_whatever_the_source_node(
    bench: Bench, fixed: str
) -> None:
    port, fake = bench.ethernet(framing=fixed)
    port.framings.observe(STATION, Framing.ETHERNET_II, bench.clock.now)
    port.framings.observe(VICTIM, Framing.SNAP, bench.clock.now)
    # A remote party that chose a LAN station's MAC as its node, a group node, no node.
    for src in (VICTIM, STATION, b"\x01\x00\x5e\x00\x00\x01", bytes(6), bench.client_node):
        port.send(packet(src), ipx.BROADCAST_NODE)
        port.send(packet(src, STATION), STATION)
    assert fake.sent
    assert {f[6:12] for f in fake.sent} == {PORT_MAC}
    # The packets inside are unchanged: the IPX source node is still the sender's.
    assert {bytes(parse_frame(f).packet[22:28]) for f in fake.sent} >= {VICTIM, STATION}


def test_an_unknown_unicast_goes_in_every_framing_in_use_as_a_broadcast_does(
    bench: Bench,
) -> None:
    """A node not heard here gets one frame in each framing its LAN speaks, not the fallback
    alone (802.2 under ``auto``): on a segment of Ethernet II stations it must be Ethernet II.
    A group address that is not the broadcast is no station's node: refused, counted."""
    port, fake = bench.ethernet()
    port.framings.observe(STATION, Framing.ETHERNET_II, bench.clock.now)
    quiet = bytes.fromhex("00a0c9777777")
    port.send(packet(bench.client_node, quiet), quiet)
    assert [(f[:6], parse_frame(f).framing) for f in fake.sent] == [(quiet, Framing.ETHERNET_II)]
    port.framings.observe(VICTIM, Framing.SNAP, bench.clock.now)
    fake.sent.clear()
    port.send(packet(bench.client_node, quiet), quiet)
    assert sorted(str(parse_frame(f).framing) for f in fake.sent) == sorted(
        str(f) for f in (Framing.ETHERNET_II, Framing.SNAP)
    )
    fake.sent.clear()
    group = b"\x01\x00\x5e\x00\x00\x01"
    port.send(packet(bench.client_node, group), group)
    assert fake.sent == []
    assert bench.counters.copies_dropped[("ethernet", "seg0", "group_node")] == 1


def test_a_packet_from_a_dosbox_client_reaches_the_segment_from_the_ports_mac(
    bench: Bench,
) -> None:
    port, fake = bench.ethernet()
    pkt = packet(bench.client_node, data=b"from far away")
    assert bench.switch.handle(pkt, bench.client_addr, bench.clock.now).outcome is Outcome.FORWARDED
    bench.endpoint._send_many(pkt, (ETH,))
    assert [f[:12] for f in fake.sent] == [BROADCAST_MAC + PORT_MAC]
    assert port.mac == PORT_MAC


def test_frames_to_the_ports_mac_and_to_other_macs_are_read_alike(bench: Bench) -> None:
    """A station answers a remote node at the frame's source (the bridge) or at the node as a
    MAC, which the LAN switch floods to the promiscuous port (PACKET_OTHERHOST)."""
    port, fake = bench.ethernet()
    to_client = packet(STATION, bench.client_node, data=b"reply")
    fake.incoming += [
        frame(STATION, Framing.ETHERNET_II, to_client, dst_mac=PORT_MAC),
        frame(
            STATION,
            Framing.ETHERNET_II,
            packet(STATION, bench.client_node, data=b"2"),
            dst_mac=bench.client_node,
        ),
    ]
    port.on_readable()
    assert bench.counters.port_outcomes[(*ETH_LABEL, "forwarded", "")] == 2
    assert [ipx.parse_packet(d)[1] for d in bench.client_datagrams()] == [b"reply", b"2"]
    bench.balanced()


def test_an_own_kernel_frame_is_skipped_where_the_kernel_hands_it_back(bench: Bench) -> None:
    port, fake = bench.ethernet()
    port._own_frames_read = True
    fake.incoming.append(frame(STATION, Framing.LLC, packet(STATION)))
    port.on_readable()  # recvfrom: PACKET_HOST (0) in the fake's address
    assert bench.counters.port_received[ETH_LABEL] == 1


# --- UDP ports: no reflector ------------------------------------------------------------------


class FakeDatagramSocket:
    """A UDP socket bound to the wildcard: every datagram sent is kept with its address."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, tuple[str, int]]] = []

    def sendmsg(
        self,
        buffers: list[bytes],
        _ancdata: list[tuple[int, int, bytes]],
        _flags: int,
        address: tuple[str, int],
        /,
    ) -> int:
        self.sent.append((b"".join(buffers), address))
        return 0

    def getsockname(self) -> Any:
        return ("0.0.0.0", 213)

    def destinations(self) -> list[tuple[str, int]]:
        return [addr for _, addr in self.sent]


def rfc1234_port(
    bench: Bench, *, role: str = "lan", peers: tuple[str, ...] = ()
) -> tuple[Rfc1234Port, FakeDatagramSocket]:
    plan = PortPlan(
        RFC,
        3,
        role,
        1500,
        "10.61.0.1",
        "10.61.0.255" if role == "lan" else "",
        peers,
        ("10.61.0.0/24",),
    )
    fake = FakeDatagramSocket()
    return Rfc1234Port(plan, fake, 213, bench.counters), fake


def host(ip: str) -> bytes:
    return ipx.rfc1234_node(ip)


def test_rfc1234_sends_a_host_number_only_to_a_host_heard_on_the_port(bench: Bench) -> None:
    port, fake = rfc1234_port(bench)
    stranger = host("198.51.100.7")  # any IPv4 on the internet
    neighbour = host("10.61.0.9")  # on the subnet, never heard
    heard = host("10.61.0.2")
    port.links.learn(heard, ("10.61.0.2", 213), bench.clock.now)
    for dst in (stranger, neighbour, heard):
        port.send(packet(bench.client_node, dst), dst)
    assert fake.destinations() == [("10.61.0.2", 213)]
    assert bench.counters.copies_dropped[("rfc1234", "lan0", "unproven_host")] == 2
    # Broadcasts and other unknown nodes go to the subnet broadcast, as before.
    port.send(packet(bench.client_node), ipx.BROADCAST_NODE)
    port.send(packet(bench.client_node, STATION), STATION)
    assert fake.destinations()[1:] == [("10.61.0.255", 213)] * 2


def test_rfc1234_p2p_sends_a_host_number_to_a_plan_peer(bench: Bench) -> None:
    port, fake = rfc1234_port(bench, role="p2p", peers=("10.98.0.2",))
    for ip in ("10.98.0.2", "10.98.0.3"):
        port.send(packet(bench.client_node, host(ip)), host(ip))
    assert fake.destinations() == [("10.98.0.2", 213)]
    assert bench.counters.copies_dropped[("rfc1234", "lan0", "unproven_host")] == 1


def test_a_new_plan_cuts_the_links_outside_its_subnet(bench: Bench) -> None:
    port, fake = rfc1234_port(bench)
    old = host("10.61.0.2")
    port.links.learn(old, ("10.61.0.2", 213), bench.clock.now)
    port.links.learn(STATION, ("10.61.0.3", 213), bench.clock.now)
    plan = port.plan
    port.plan = PortPlan(RFC, 3, "lan", 1500, "10.62.0.1", "10.62.0.255", (), ("10.62.0.0/24",))
    assert len(port.links) == 0
    port.send(packet(bench.client_node, old), old)
    port.send(packet(bench.client_node, STATION), STATION)
    assert fake.destinations() == [("10.62.0.255", 213)]
    port.plan = plan
    assert fake.sent[0][0][10:16] == STATION


def test_ipxwrapper_unicasts_only_to_heard_addresses_else_the_subnet_broadcast(
    bench: Bench,
) -> None:
    wrapper = IpxWrapperSocket(bench.endpoint, "127.0.0.1", 0)
    try:
        plan = PortPlan(WRAP, 3, "lan", 1500, "10.61.0.1", "10.61.0.255", (), ("10.61.0.0/24",))
        port = wrapper.port_for(plan, bench.counters)
        fake = FakeDatagramSocket()
        port._sock = fake
        port.heard(packet(STATION), ("10.61.0.2", 54792), bench.clock.now)
        for dst in (STATION, host("198.51.100.7"), VICTIM):
            port.send(packet(bench.client_node, dst), dst)
        assert fake.destinations() == [
            ("10.61.0.2", 54792),
            ("10.61.0.255", wrapper.port),
            ("10.61.0.255", wrapper.port),
        ]
    finally:
        wrapper.close()


def wrapper_port(bench: Bench) -> tuple[IpxWrapperSocket, IpxWrapperPort, FakeDatagramSocket]:
    wrapper = IpxWrapperSocket(bench.endpoint, "127.0.0.1", 0)
    plan = PortPlan(WRAP, 3, "lan", 1500, "10.61.0.1", "10.61.0.255", (), ("10.61.0.0/24",))
    port = wrapper.port_for(plan, bench.counters)
    fake = FakeDatagramSocket()
    port._sock = fake
    return wrapper, port, fake


def wrapper_header(datagram: bytes) -> tuple[bytes, bytes, int]:
    """Destination network, node and socket of an IPXWrapper datagram, read by offset from
    its 27-byte header layout (docs/protocols.md 6: type, dst net/node/socket, ...)."""
    return datagram[1:5], datagram[5:11], int.from_bytes(datagram[11:13], "big")


def test_ipxwrapper_programs_sharing_a_node_each_get_their_own_unicasts(bench: Bench) -> None:
    """IPXWrapper behaviour reproduced: two programs on one PC share its node but send from
    their own UDP ports (docs/protocols.md 6, "Native mode, addresses"); a unicast goes to the
    port its destination socket was heard from, with the network it was heard with."""
    wrapper, port, fake = wrapper_port(bench)
    try:
        setup, game = 0x4001, 0x4002
        net = b"\x00\x00\x00\x01"  # IPXWrapper's default network
        for sock, udp in ((setup, 50001), (game, 50002)):
            heard = ipx.build_packet(
                dst_node=ipx.BROADCAST_NODE,
                dst_socket=sock,
                src_net=net,
                src_node=STATION,
                src_socket=sock,
                payload=b"hello",
            )
            port.heard(heard, ("10.61.0.2", udp), bench.clock.now)
        for sock in (game, setup):
            port.send(packet(bench.client_node, STATION, sock=sock), STATION)
        assert fake.destinations() == [("10.61.0.2", 50002), ("10.61.0.2", 50001)]
        assert [wrapper_header(d) for d, _ in fake.sent] == [
            (net, STATION, game),
            (net, STATION, setup),
        ]
    finally:
        wrapper.close()


def test_an_ipxwrapper_program_that_exits_is_no_black_hole_for_its_node(bench: Bench) -> None:
    """The setup program exits; its socket's entry lives 30 s as in IPXWrapper's own cache,
    then unicasts to it go to the subnet broadcast, where the PC's listener on 54792 hands
    them to whichever program has the socket now. The game's socket is unaffected."""
    wrapper, port, fake = wrapper_port(bench)
    try:
        setup, game = 0x4001, 0x4002
        port.heard(packet(STATION, sock=setup), ("10.61.0.2", 50001), bench.clock.now)
        bench.clock.now += 20
        port.heard(packet(STATION, sock=game), ("10.61.0.2", 50002), bench.clock.now)
        bench.clock.now += 10 + 0.5  # setup silent 30.5 s, game 10.5 s
        port.send(packet(bench.client_node, STATION, sock=setup), STATION)
        port.send(packet(bench.client_node, STATION, sock=game), STATION)
        port.send(packet(bench.client_node, STATION, sock=0x4003), STATION)  # never heard
        assert fake.destinations() == [
            ("10.61.0.255", wrapper.port),
            ("10.61.0.2", 50002),
            ("10.61.0.255", wrapper.port),
        ]
        # Where the socket is unknown, to the network its node was heard with: IPXWrapper
        # refuses a unicast to any other, FFFFFFFF included (docs/protocols.md 6).
        assert wrapper_header(fake.sent[0][0])[0] == ipx.ZERO_NET
        assert wrapper_header(fake.sent[2][0])[0] == ipx.ZERO_NET
    finally:
        wrapper.close()


def test_a_unicast_to_an_ipxwrapper_host_carries_its_network_never_ffffffff(bench: Bench) -> None:
    """IPXWrapper delivers a unicast only if its destination (network, node) is its own
    exactly (docs/protocols.md 6, "Native mode, addresses"; seen with the real program: 0 of
    70 with FFFFFFFF). Heard: the network it sent from; never heard: the port's number."""
    wrapper, port, fake = wrapper_port(bench)
    try:
        heard = ipx.build_packet(
            src_net=b"\x00\x00\x00\x2a",
            src_node=STATION,
            src_socket=0x4001,
            dst_node=ipx.BROADCAST_NODE,
            dst_socket=0x4001,
        )
        port.heard(heard, ("10.61.0.2", 50001), bench.clock.now)
        port.send(packet(bench.client_node, STATION, sock=0x4009), STATION)  # socket unheard
        stranger = bytes.fromhex("02005e00beef")
        port.send(packet(bench.client_node, stranger), stranger)  # node never heard
        nets = [wrapper_header(sent)[0] for sent, _ in fake.sent]
        assert nets == [b"\x00\x00\x00\x2a", b"\x00\x00\x00\x01"]  # 00000001: default
        assert ipx.ALL_NETS not in nets
    finally:
        wrapper.close()


def test_ipxwrapper_broadcasts_go_to_every_network(bench: Bench) -> None:
    """IPXWrapper delivers a broadcast only to its own network or FFFFFFFF (docs/protocols.md
    6); a DOSBox client's broadcast says 00000000, which none of them would deliver."""
    wrapper, port, fake = wrapper_port(bench)
    try:
        port.send(packet(bench.client_node), ipx.BROADCAST_NODE)
        assert fake.destinations() == [("10.61.0.255", wrapper.port)]
        assert wrapper_header(fake.sent[0][0]) == (b"\xff" * 4, ipx.BROADCAST_NODE, GAME_SOCKET)
    finally:
        wrapper.close()


@pytest.mark.parametrize("kind", [PortKind.RFC1234, PortKind.IPXWRAPPER])
def test_link_tables_are_bounded_in_two_tiers_and_count_evictions(
    bench: Bench, kind: PortKind
) -> None:
    port, _ = rfc1234_port(bench)
    if kind is PortKind.IPXWRAPPER:
        wrapper = IpxWrapperSocket(bench.endpoint, "127.0.0.1", 0)
        plan = PortPlan(WRAP, 3, "lan", 1500, "10.61.0.1", "10.61.0.255", (), ("10.61.0.0/24",))
        port = wrapper.port_for(plan, bench.counters)  # type: ignore[assignment]
        wrapper.close()
    t0 = bench.clock.now
    port.links.learn(STATION, ("10.61.0.2", 213), t0)
    port.links.learn(STATION, ("10.61.0.2", 213), t0 + PROOF_AFTER)
    for n in range(2 * MAX_LINKS):
        port.links.learn(b"\x02" + n.to_bytes(5, "big"), ("10.61.0.3", 213), t0 + 2)
    assert port.links.get(STATION) == ("10.61.0.2", 213)
    assert len(port.links) <= MAX_LINKS
    table = f"{kind}_links"
    assert bench.counters.table_evictions[(table, "unproven")] > 0
    assert bench.counters.table_evictions[(table, "proven")] == 0


def test_rfc1234_links_are_learned_only_from_datagrams_the_switch_accepted(bench: Bench) -> None:
    port, _ = rfc1234_port(bench)
    lo = PortPlan(RFC, 3, "lan", 1500, "127.0.0.1", "127.255.255.255", (), ("127.0.0.0/8",))
    port.plan = lo
    bench.endpoint.segments[RFC] = port
    bench.switch.add_segment(RFC)
    bench.switch.udp_segment_for = SourceIndex((lo,), PortKind.RFC1234)
    good, bad = (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
    )
    try:
        good.bind(("127.0.0.1", 0))
        bad.bind(("127.0.0.1", 0))
        good_node, bad_node = host("127.0.0.2"), host("127.0.0.3")
        good.sendto(packet(good_node, data=b"hello"), bench.sock.getsockname())
        spent = packet(bad_node, hops=255)
        bad.sendto(spent, bench.sock.getsockname())
        bench.endpoint._on_readable()
        assert bench.counters.port_outcomes[("rfc1234", "lan0", "dropped", "hop_limit")] == 1
        assert port.links.get(good_node) == good.getsockname()
        assert port.links.get(bad_node) is None
    finally:
        good.close()
        bad.close()


def test_ipxwrapper_links_are_learned_only_from_datagrams_the_switch_accepted(
    bench: Bench,
) -> None:
    wrapper = IpxWrapperSocket(bench.endpoint, "127.0.0.1", 0)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sender.bind(("127.0.0.1", 0))
        plan = PortPlan(WRAP, 3, "lan", 1500, "127.0.0.1", "127.255.255.255", (), ("127.0.0.0/8",))
        port = wrapper.port_for(plan, bench.counters)
        bench.endpoint.segments[WRAP] = port
        bench.switch.add_segment(WRAP)
        wrapper.sources = SourceIndex((plan,), PortKind.IPXWRAPPER)

        def ipxwrapper(src: bytes, payload: bytes) -> bytes:
            # docs/protocols.md 6: type, dst net/node/socket, src net/node/socket, data size.
            return (
                b"\x00" + bytes(4) + ipx.BROADCAST_NODE + GAME_SOCKET.to_bytes(2, "big")
                + bytes(4) + src + GAME_SOCKET.to_bytes(2, "big")
                + len(payload).to_bytes(2, "big") + payload
            )  # fmt: skip

        sender.sendto(ipxwrapper(STATION, b"hi"), wrapper.sock.getsockname())
        # A host on the subnet that claims a DOSBox client's node: a loop, dropped.
        sender.sendto(ipxwrapper(bench.client_node, b"hi"), wrapper.sock.getsockname())
        wrapper.on_readable()
        assert bench.counters.port_outcomes[("ipxwrapper", "lan0", "dropped", "loop")] == 1
        assert port.links.get(STATION) == sender.getsockname()
        assert port.links.get(bench.client_node) is None
    finally:
        sender.close()
        wrapper.close()


# --- crash guard --------------------------------------------------------------------------------


def boom(*_args: object, **_kw: object) -> Decision:
    raise RuntimeError("a bug")


def errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.patches_code
def test_a_bug_in_the_switch_costs_one_frame_each_booked_and_logged_once_a_minute(
    bench: Bench, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, fake = bench.ethernet()
    monkeypatch.setattr(bench.switch, "handle_segment", boom)
    fake.incoming += [
        frame(STATION, Framing.LLC, packet(STATION, data=bytes([n]))) for n in range(5)
    ]
    with caplog.at_level(logging.ERROR):
        port.on_readable()
    assert not fake.incoming  # the reader went on
    assert bench.counters.port_outcomes[(*ETH_LABEL, "dropped", "internal_error")] == 5
    assert bench.counters.dropped["internal_error"] == 5
    bench.balanced()
    (record,) = errors(caplog)
    assert record.exc_info is not None
    assert "RuntimeError: a bug" in caplog.text
    caplog.clear()
    bench.clock.now += 60
    fake.incoming.append(frame(STATION, Framing.LLC, packet(STATION, data=b"later")))
    with caplog.at_level(logging.ERROR):
        port.on_readable()
    (record,) = errors(caplog)
    assert "4 more since the last one logged" in record.getMessage()


def test_a_bug_while_sending_keeps_the_books_and_counts_the_lost_copies(
    bench: Bench, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, fake = bench.ethernet()
    monkeypatch.setattr(bench.endpoint, "_send_many", boom)
    fake.incoming += [
        frame(STATION, Framing.LLC, packet(STATION, data=bytes([n]))) for n in range(3)
    ]
    with caplog.at_level(logging.ERROR):
        port.on_readable()
    assert bench.counters.port_outcomes[(*ETH_LABEL, "forwarded", "")] == 3
    assert bench.counters.copies_dropped[(*ETH_LABEL, "internal_error")] == 3
    bench.balanced()
    assert len(errors(caplog)) == 1
    # It was accepted: what the port learns from it is still learned.
    assert port.framings.framing_for(STATION) is Framing.LLC


def test_a_bug_before_the_switch_is_a_dropped_frame(
    bench: Bench, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, fake = bench.ethernet()
    monkeypatch.setattr(segments, "parse_frame", boom)
    fake.incoming += [frame(STATION, Framing.LLC, packet(STATION))] * 2
    with caplog.at_level(logging.ERROR):
        port.on_readable()
    assert bench.counters.port_received[ETH_LABEL] == 2
    assert bench.counters.port_outcomes[(*ETH_LABEL, "dropped", "internal_error")] == 2
    bench.balanced()
    assert len(errors(caplog)) == 1


@pytest.mark.patches_code
def test_a_bug_on_the_tunnel_socket_costs_one_datagram(
    bench: Bench, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench.switch, "handle", boom)
    for n in range(4):
        bench.client.sendto(packet(bench.client_node, data=bytes([n])), bench.sock.getsockname())
    with caplog.at_level(logging.ERROR):
        bench.endpoint._on_readable()
    with pytest.raises(BlockingIOError):
        bench.sock.recv(65535)  # every datagram was read
    assert bench.counters.port_outcomes[("dosbox", "tunnel", "dropped", "internal_error")] == 4
    bench.balanced()
    assert len(errors(caplog)) == 1


def test_a_bug_on_the_ipxwrapper_socket_costs_one_datagram(
    bench: Bench, caplog: pytest.LogCaptureFixture
) -> None:
    wrapper = IpxWrapperSocket(bench.endpoint, "127.0.0.1", 0)
    try:

        def broken(_ip: str) -> Segment | None:
            raise KeyError(_ip)

        wrapper.sources = broken
        for _ in range(3):
            bench.client.sendto(b"x" * 40, wrapper.sock.getsockname())
        with caplog.at_level(logging.ERROR):
            wrapper.on_readable()
        assert bench.counters.port_outcomes[("ipxwrapper", "", "dropped", "internal_error")] == 3
        bench.balanced()
        assert len(errors(caplog)) == 1
    finally:
        wrapper.close()
