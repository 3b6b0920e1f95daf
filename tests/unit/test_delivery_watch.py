"""Rule 8's delivery watch (policy/bridges.DeliveryWatch): no belief about another bridge
can silence a segment. A broadcast left to another bridge for a segment is watched there;
if that bridge's copy does not appear within the window, this bridge sends it itself."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.policy.bridges import BEACON_INTERVAL, WATCH_WINDOW, DeliveryWatch
from ipxbridge.policy.switch import IpxSwitch
from ipxbridge.wire import ipx
from ipxbridge.wire.ethernet import Framing
from tests.unit.test_switch_segments import ETH0, KEY, LOWER, PEER, echo, keyed, packet, tag

FROM_PEER = ipx.rfc1234_node(PEER[0])
LOWERS_PEERS = (FROM_PEER,)  # LOWER has PEER as a peer too, and a lower id: it serves eth0


def believe_lower(sw: IpxSwitch, seq: int, now: float) -> str:
    beacon = ipx.build_beacon(
        LOWER, peers=LOWERS_PEERS, seq=seq, tag=tag(ETH0, 1), tags=echo(sw, ETH0), key=KEY
    )
    return sw.handle_segment(ETH0, beacon, now, via=Framing.LLC).detail


def test_a_broadcast_left_to_a_bridge_that_delivers_is_not_sent_again() -> None:
    sw = keyed()
    assert believe_lower(sw, 1000, 1.0) == "beacon"
    data = packet(FROM_PEER, data=b"left to LOWER")
    assert ETH0 not in sw.handle(data, PEER, 1.1).targets
    # LOWER's copy appears on eth0 (one hop further): seen, nothing to send later
    copy = packet(FROM_PEER, hops=1, data=b"left to LOWER")
    assert sw.handle_segment(ETH0, copy, 1.12, via=Framing.LLC).detail == "duplicate"
    assert sw.watch_due(1.1 + WATCH_WINDOW + 1) == []
    assert sw.watch.outcomes == {"seen": 1}


def test_a_broadcast_left_to_a_bridge_that_is_gone_is_sent_after_the_window() -> None:
    """The attack: LOWER was switched off and a recording of its beacon keeps Y believing."""
    sw = keyed()
    assert believe_lower(sw, 1000, 1.0) == "beacon"
    for n in range(5):
        now = 1.1 + n * 0.1
        assert ETH0 not in sw.handle(packet(FROM_PEER, data=b"%d" % n), PEER, now).targets
    assert sw.watch_due(1.1 + WATCH_WINDOW - 0.01) == []  # still within its window
    due = sw.watch_due(1.5 + WATCH_WINDOW)
    assert [(port, ipx.parse_header(p).hops) for p, port in due] == [(ETH0, 1)] * 5
    assert [p[ipx.HEADER_LEN :] for p, _ in due] == [b"%d" % n for n in range(5)]
    assert sw.watch.outcomes == {"missing": 5}
    assert sw.watch.take_missing() == {ETH0: 5}
    assert not sw.watch.pending
    # the switch's tick sends what is due too (the I/O also runs a timer for it)
    sw.handle(packet(FROM_PEER, data=b"tick"), PEER, 2.0)
    assert (packet(FROM_PEER, hops=1, data=b"tick"), ETH0) in sw.tick(3.0)


def test_the_watch_is_bounded_and_a_full_watch_sends_at_once() -> None:
    watch = DeliveryWatch(max_entries=3)
    assert all(watch.expect(n, ETH0, b"p%d" % n, 0.0) for n in range(3))
    assert not watch.expect(99, ETH0, b"p99", 0.0)  # full: the caller sends it now
    assert watch.outcomes == {"full": 1}
    sw = keyed()
    sw.watch.max_entries = 1
    believe_lower(sw, 1000, 1.0)
    assert ETH0 not in sw.handle(packet(FROM_PEER, data=b"a"), PEER, 1.1).targets
    assert ETH0 in sw.handle(packet(FROM_PEER, data=b"b"), PEER, 1.1).targets  # sent at once
    watch.forget(ETH0)
    assert not watch.pending


Step = tuple[str, int]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["broadcast", "fresh", "replay", "forged", "wait"]),
            st.integers(0, 3),
        ),
        max_size=40,
    )
)
def test_no_beacons_make_a_broadcast_miss_a_segment(steps: list[Step]) -> None:
    """Whatever LOWER's beacons do (fresh, recorded and replayed, forged unsigned, or none
    for a while) and whether LOWER really delivers, every broadcast from PEER reaches eth0:
    this bridge sends it at once, LOWER's copy appears, or this bridge sends it after the
    window."""
    sw = keyed()
    now, seq, recorded = 1.0, 1000, b""
    delivered: dict[bytes, bool] = {}
    for step, arg in steps:
        now += 0.05
        if step == "broadcast":
            payload = b"b%d" % len(delivered)
            decision = sw.handle(packet(FROM_PEER, data=payload), PEER, now)
            delivered[payload] = ETH0 in decision.targets
            if arg % 2 and not delivered[payload]:  # LOWER is alive and delivers this one
                copy = packet(FROM_PEER, hops=1, data=payload)
                sw.handle_segment(ETH0, copy, now + 0.01, via=Framing.LLC)
                delivered[payload] = True
        elif step == "fresh":
            seq += 1000
            recorded = ipx.build_beacon(
                LOWER, peers=LOWERS_PEERS, seq=seq, tag=tag(ETH0, 1), tags=echo(sw, ETH0), key=KEY
            )
            sw.handle_segment(ETH0, recorded, now, via=Framing.LLC)
        elif step == "replay" and recorded:
            sw.handle_segment(ETH0, recorded, now, via=Framing.LLC)
        elif step == "forged":
            forged = ipx.build_beacon(
                LOWER, peers=LOWERS_PEERS, seq=seq + 99, tag=tag(ETH0, 1), tags=echo(sw, ETH0)
            )
            sw.handle_segment(ETH0, forged, now, via=Framing.LLC)
        else:
            now += arg * BEACON_INTERVAL
        for sent, port in sw.tick(now):
            if port == ETH0 and not ipx.is_beacon(ipx.parse_header(sent), sent):
                delivered[sent[ipx.HEADER_LEN :]] = True
    for sent, port in sw.watch_due(now + WATCH_WINDOW):
        assert port == ETH0
        delivered[sent[ipx.HEADER_LEN :]] = True
    assert all(delivered.values()), delivered
