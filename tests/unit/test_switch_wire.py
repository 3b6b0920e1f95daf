"""Two bridges on one wire, played out packet by packet (switch rules 6, 8 and 9).

Each bridge has an Ethernet port and an IPXWrapper port on the same LAN, so everything one
puts on either segment the other reads (one broadcast domain), and they may be peered. The
IPXWrapper encapsulation has no hop count (docs/protocols.md 6): a copy that crosses it starts
again at 0, which is how two bridges with both kinds once kept a single datagram going for
ever. Here the wire is simulated with a bounded queue: every copy a bridge sends to a
segment is delivered to the other bridge's port of the same kind (and an IPXWrapper copy is
re-read with hops 0, as IPXWrapper's header would carry it); copies to a peer are delivered
over the peer link. The properties: the exchange ends, and each packet appears on each kind
of segment a bounded number of times.
"""

from collections import Counter
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.policy.switch import Address, IpxSwitch, Outcome, Port, PortKind, Segment
from ipxbridge.policy.switch import SwitchSettings as Settings
from ipxbridge.wire import ipx

ETH = Segment("lan0", PortKind.ETHERNET)
WRAP = Segment("lan0", PortKind.IPXWRAPPER)
ADDR = {"b1": ("10.45.0.1", 213), "b2": ("10.45.0.2", 213)}
IDS = {"b1": bytes.fromhex("020000000001"), "b2": bytes.fromhex("020000000002")}
KEY = b"sixteen or more bytes of secret"
STATION = "station"  # the link-layer source of the station's own frames
STEP_LIMIT = 5_000  # far more than any finite exchange here needs; a loop hits it


def bridge(name: str, *, peered: bool, key: bytes | None) -> IpxSwitch:
    other = "b2" if name == "b1" else "b1"
    clock = iter(range(1, 1_000_000))
    return IpxSwitch(
        Settings(),
        (ADDR[other],) if peered else (),
        segments=(ETH, WRAP),
        bridge_id=IDS[name],
        beacon_key=key,
        beacon_clock=lambda: next(clock),
    )


def strip_hops(packet: bytes) -> bytes:
    """What an IPXWrapper hop leaves of the transport control byte: nothing (0)."""
    return ipx.with_hops(packet, 0)


def play(
    bridges: dict[str, IpxSwitch],
    kind: Segment,
    packet: bytes,
    now: float,
    *,
    late: bool = False,
) -> tuple[Counter[tuple[str, Segment]], int]:
    """A station's packet on ``kind``, heard by both bridges, and every copy it causes.

    ``late``: b2 reads the original only after everything b1's copy caused (an Ethernet
    frame can overtake a UDP datagram on one LAN): b2's first copy is then b1's.
    Returns the copies each bridge put on each segment, and the steps it took.
    """
    names = ["b1"] if late else list(bridges)
    # (bridge that reads it, port, packet, link-layer source: the station's, or the bridge
    # whose port sent the copy, as the I/O layer passes it)
    queue: list[tuple[str, Port, bytes, str]] = [(name, kind, packet, STATION) for name in names]
    on_wire: Counter[tuple[str, Segment]] = Counter()
    steps = 0
    while queue and steps < STEP_LIMIT:
        steps += 1
        name, port, data, source = queue.pop(0)
        sw = bridges[name]
        other = "b2" if name == "b1" else "b1"
        if isinstance(port, Segment):
            decision = sw.handle_segment(port, data, now, sender=source)
        else:
            decision = sw.handle(data, port, now)
        sent: list[tuple[bytes, Port]] = list(decision.replies)
        if decision.outcome is Outcome.FORWARDED and decision.packet is not None:
            sent += [(decision.packet, t) for t in decision.targets]
        for out, target in sent:
            if isinstance(target, Segment):
                if not ipx.is_beacon(ipx.parse_header(out), out):
                    on_wire[(name, target)] += 1
                copy = strip_hops(out) if target.kind is PortKind.IPXWRAPPER else out
                queue.append((other, target, copy, name))  # the other bridge hears the wire
            elif target in ADDR.values():
                queue.append((other, ADDR[name], out, name))  # over the peer link
        now += 0.0001  # a LAN's round trip is well under a millisecond
        if late and not queue and names == ["b1"]:
            names = ["b2"]
            queue.append(("b2", kind, packet, STATION))
    return on_wire, steps


def converge(bridges: dict[str, IpxSwitch]) -> float:
    """Let the bridges exchange beacons (ticks), as they do within a second of starting."""
    now = 0.0
    for _ in range(3):
        for name, sw in bridges.items():
            for packet, target in sw.tick(now):
                for peer, other in bridges.items():
                    if peer == name:
                        continue
                    if isinstance(target, Segment):
                        other.handle_segment(target, packet, now, sender=name)
                    else:
                        other.handle(packet, ADDR[name], now)
        now += 5.0
    return now


def station_broadcast(payload: bytes) -> bytes:
    return ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=0x4545,
        src_node=bytes.fromhex("02005e000102"),
        src_socket=0x4545,
        payload=payload,
    )


Setup = Callable[[], dict[str, IpxSwitch]]


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from([ETH, WRAP]),
    peered=st.booleans(),
    key=st.sampled_from([None, KEY]),
    repeats=st.integers(1, 4),
    payload=st.binary(min_size=1, max_size=40),
    late=st.booleans(),
)
def test_a_packet_on_a_shared_wire_ends_and_is_carried_a_bounded_number_of_times(
    kind: Segment, peered: bool, key: bytes | None, repeats: int, payload: bytes, late: bool
) -> None:
    bridges = {n: bridge(n, peered=peered, key=key) for n in ("b1", "b2")}
    now = converge(bridges)
    packet = station_broadcast(payload)
    trusted = key is not None or peered
    for r in range(repeats):  # the station repeats itself (a game announcing a session)
        on_wire, steps = play(bridges, kind, packet, now + r * 0.3, late=late)
        assert steps < STEP_LIMIT  # it ended
        # Each bridge puts the packet on a segment at most once.
        assert all(n <= 1 for n in on_wire.values())
        if trusted:  # the bridges know each other: only the lower one translates
            assert sum(on_wire.values()) <= 1


def test_two_trusted_bridges_put_a_station_packet_on_the_other_kind_once() -> None:
    bridges = {n: bridge(n, peered=True, key=None) for n in ("b1", "b2")}
    now = converge(bridges)
    assert bridges["b2"].bridges_on(ETH) == (IDS["b1"],)
    assert bridges["b1"].bridges_on(WRAP) == (IDS["b2"],)
    on_wire, steps = play(bridges, WRAP, station_broadcast(b"hello"), now)
    assert steps < 20
    assert on_wire == Counter({("b1", ETH): 1})  # b1 (the lower id) translates, b2 does not


def test_unpeered_bridges_without_a_key_duplicate_but_never_loop() -> None:
    """Neither can trust the other's beacon: both translate (two copies), nothing loops."""
    bridges = {n: bridge(n, peered=False, key=None) for n in ("b1", "b2")}
    now = converge(bridges)
    assert bridges["b2"].bridges_on(ETH) == ()
    on_wire, steps = play(bridges, WRAP, station_broadcast(b"hello"), now)
    assert steps < 20
    # Both translate; a copy back onto IPXWrapper would be the start of a loop, and none goes.
    assert on_wire == Counter({("b1", ETH): 1, ("b2", ETH): 1})


def test_a_copy_that_overtakes_the_original_ends_at_the_egress_bound() -> None:
    """The storm two bridges with both kinds once had: b2 reads b1's Ethernet copy first,
    puts it on IPXWrapper (hops gone), b1 reads that on its first port with hops 0 as a game
    repeating itself, and so on. Rule 9 ends it: neither sends the packet out of a port twice
    within the window.
    """
    bridges = {n: bridge(n, peered=False, key=None) for n in ("b1", "b2")}
    now = converge(bridges)
    on_wire, steps = play(bridges, WRAP, station_broadcast(b"storm"), now, late=True)
    assert steps < 20
    assert on_wire == Counter({("b1", ETH): 1, ("b2", WRAP): 1})


def test_peer_addresses_are_tuples() -> None:
    """The simulation's peer links are the switch's peers (a guard on the helper itself)."""
    sw = bridge("b1", peered=True, key=None)
    peer: Address = ADDR["b2"]
    assert set(sw.peers) == {peer}
