"""The framing learner of ``ethernet`` ports with framing ``auto`` (policy/framings.py)."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.policy.framings import FRAMING_TTL, MAX_FRAMINGS, FramingLearner
from ipxbridge.policy.tables import PROOF_AFTER
from ipxbridge.wire import ethernet
from ipxbridge.wire.ethernet import Framing


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


A = hx("00A0C9000001")
B = hx("00A0C9000002")
C = hx("00A0C9000003")
IPX_PACKET = hx("FFFF 001E 00 04 00000000 FFFFFFFFFFFF 4545 00000000 00A0C9000002 4545")


def mac(n: int) -> bytes:
    return b"\x02" + n.to_bytes(5, "big")  # locally administered unicast


def test_falls_back_to_8022() -> None:
    learner = FramingLearner()
    assert learner.framing_for(A) is Framing.LLC
    assert learner.in_use() == (Framing.LLC,)
    assert len(learner) == 0
    assert FramingLearner(fallback=Framing.ETHERNET_II).framing_for(A) is Framing.ETHERNET_II


def test_learns_per_source_mac() -> None:
    learner = FramingLearner()
    learner.observe(A, Framing.RAW_8023, 0.0)
    frame = ethernet.parse_frame(hx("FFFFFFFFFFFF 00A0C9000002 8137") + IPX_PACKET)
    learner.observe_frame(frame, 0.0)
    assert learner.framing_for(A) is Framing.RAW_8023
    assert learner.framing_for(B) is Framing.ETHERNET_II
    assert learner.framing_for(C) is Framing.LLC
    assert A in learner
    assert C not in learner
    assert set(learner.in_use()) == {Framing.RAW_8023, Framing.ETHERNET_II}


def test_follows_a_station_that_changes_framing() -> None:
    learner = FramingLearner()
    learner.observe(A, Framing.SNAP, 0.0)
    learner.observe(A, Framing.ETHERNET_II, 5.0)
    assert learner.framing_for(A) is Framing.ETHERNET_II
    assert learner.in_use() == (Framing.ETHERNET_II,)  # SNAP is nobody's any more
    assert len(learner) == 1


def test_ignores_group_and_malformed_source_macs() -> None:
    learner = FramingLearner()
    learner.observe(b"\xff" * 6, Framing.SNAP, 0.0)  # broadcast
    learner.observe(hx("01000C000000"), Framing.SNAP, 0.0)  # multicast
    learner.observe(A[:5], Framing.SNAP, 0.0)
    assert len(learner) == 0
    assert learner.in_use() == (Framing.LLC,)


def test_forget_and_bad_bound() -> None:
    learner = FramingLearner()
    learner.observe(A, Framing.SNAP, 0.0)
    learner.forget(A)
    learner.forget(B)  # unknown: no error
    assert learner.framing_for(A) is Framing.LLC
    assert learner.in_use() == (Framing.LLC,)
    with pytest.raises(ValueError, match="max_entries"):
        FramingLearner(max_entries=1)


def test_a_quiet_proven_station_keeps_its_framing_through_a_flood_of_new_macs() -> None:
    # The attack as measured: 6,000 unique source MACs in 4 s while a station is quiet.
    evictions: Counter[tuple[str, str]] = Counter()
    learner = FramingLearner(evictions)
    learner.observe(A, Framing.ETHERNET_II, 0.0)
    learner.observe(A, Framing.ETHERNET_II, PROOF_AFTER)  # a second later: proven
    start = 10.0
    for n in range(6_000):
        learner.observe(mac(n), Framing.SNAP, start + n * 4.0 / 6_000)
    assert learner.framing_for(A) is Framing.ETHERNET_II
    assert len(learner) <= MAX_FRAMINGS
    assert evictions[("framings", "unproven")] > 0
    assert evictions[("framings", "proven")] == 0
    assert set(learner.in_use()) == {Framing.ETHERNET_II, Framing.SNAP}
    # and the station is still there when its framing is asked for at the end of the flood
    learner.expire(start + 4.0)
    assert learner.framing_for(A) is Framing.ETHERNET_II


def test_a_framing_only_a_stranger_spoke_stops_being_in_use_after_the_ttl() -> None:
    learner = FramingLearner()
    learner.observe(A, Framing.ETHERNET_II, 0.0)
    for n, framing in enumerate(Framing):  # four frames, four framings, four MACs
        learner.observe(mac(n), framing, 1.0)
    assert set(learner.in_use()) == set(Framing)
    learner.observe(A, Framing.ETHERNET_II, FRAMING_TTL)  # the real station keeps talking
    assert learner.expire(FRAMING_TTL + 1.0) == 4
    assert learner.in_use() == (Framing.ETHERNET_II,)
    assert learner.framing_for(mac(3)) is Framing.LLC  # back to the fallback
    # a station silent for the whole TTL is forgotten too
    assert learner.expire(2 * FRAMING_TTL) == 1
    assert learner.in_use() == (Framing.LLC,)
    assert len(learner) == 0


def test_expiry_is_not_an_eviction() -> None:
    evictions: Counter[tuple[str, str]] = Counter()
    learner = FramingLearner(evictions, ttl=60.0)
    learner.observe(A, Framing.SNAP, 0.0)
    assert learner.expire(59.0) == 0
    assert learner.expire(60.0) == 1
    assert not evictions


def test_evictions_keep_the_count_per_framing() -> None:
    evictions: Counter[tuple[str, str]] = Counter()
    learner = FramingLearner(evictions, max_entries=4)  # three proven places, one unproven
    learner.observe(A, Framing.SNAP, 0.0)
    learner.observe(B, Framing.RAW_8023, 0.5)  # pushes out A, the only unproven place
    assert evictions[("framings", "unproven")] == 1
    assert learner.in_use() == (Framing.RAW_8023,)
    assert learner.framing_for(A) is Framing.LLC


# One station's events: (MAC number, framing, seconds since the previous event), or an expiry.
events = st.lists(
    st.one_of(
        st.tuples(st.integers(0, 11), st.sampled_from(list(Framing)), st.floats(0.0, 900.0)),
        st.tuples(st.just(-1), st.just(Framing.LLC), st.floats(0.0, 900.0)),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(events)
def test_in_use_is_exactly_the_framings_of_the_stations_known(
    script: list[tuple[int, Framing, float]],
) -> None:
    """The count per framing never drifts from the table, whatever evicts or expires."""
    learner = FramingLearner(max_entries=6, ttl=1_000.0)
    now = 0.0
    for n, framing, gap in script:
        now += gap
        if n < 0:
            learner.expire(now)
        else:
            learner.observe(mac(n), framing, now)
        known = {learner.framing_for(mac(k)) for k in range(12) if mac(k) in learner}
        assert set(learner.in_use()) == (known or {Framing.LLC})
        assert len(learner) <= 6
