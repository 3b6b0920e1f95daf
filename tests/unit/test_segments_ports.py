"""Interface ports (io/segments.py) against a real switch and endpoint, fake link-layer sockets.

The Ethernet port gets a fake AF_PACKET socket (no CAP_NET_RAW needed): frames are queued
for it to read and the frames it sends are kept. UDP ports send through a fake socket that
keeps each datagram and its destination. Behind them is a real ``IpxEndpoint`` and
``IpxSwitch`` on a loopback UDP socket, with a clock the test sets.
"""

import asyncio
import socket
from collections.abc import Iterator
from typing import Any, cast

import pytest

from ipxbridge.io import segments
from ipxbridge.io.segments import (
    EthernetPort,
)
from ipxbridge.io.udp import IpxEndpoint
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.policy.framings import FRAMING_TTL
from ipxbridge.policy.ipx_ports import PortPlan
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
        (Decision(Outcome.DROPPED, "duplicate"), False),
        (Decision(Outcome.DROPPED, "hop_limit"), False),
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


def test_a_loop_copy_in_another_framing_teaches_nothing(bench: Bench) -> None:
    port, fake = bench.ethernet()
    pkt = packet(STATION, data=b"once")
    fake.incoming += [frame(STATION, Framing.ETHERNET_II, pkt), frame(STATION, Framing.SNAP, pkt)]
    port.on_readable()
    assert bench.counters.port_outcomes[(*ETH_LABEL, "dropped", "duplicate")] == 1
    assert port.framings.framing_for(STATION) is Framing.ETHERNET_II


def test_a_fixed_framing_port_learns_nothing(bench: Bench) -> None:
    port, fake = bench.ethernet(framing="802.2")
    fake.incoming.append(frame(STATION, Framing.SNAP, packet(STATION)))
    port.on_readable()
    assert len(port.framings) == 0


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
