"""policy/flows.py: the rewrite-mode flow table's standings, pools and evictions (pure)."""

import random

import pytest

from ipxbridge.policy.flows import (
    FLOW_EVICTION_REASONS,
    PER_SOURCE,
    PROVEN_FULL,
    UNPROVEN_FULL,
    FlowKey,
    FlowLimits,
    FlowTable,
)

LAN_B = 3


def key(n: int, port: int = 2300, egress: int = LAN_B) -> FlowKey:
    return ((f"10.0.{n // 250}.{n % 250 + 1}", port), egress)


def small(**over: float) -> FlowTable:
    values: dict[str, float] = {"max_flows": 8, "max_unproven": 4, "max_per_source": 3}
    values.update(over)
    return FlowTable(FlowLimits(**values))  # type: ignore[arg-type]


def test_a_new_flow_is_unproven_and_reused() -> None:
    t = small()
    first = t.admit(key(1), 0.0)
    assert (first.created, first.proven, first.evicted) == (True, False, ())
    again = t.admit(key(1), 1.0)
    assert (again.created, again.proven) == (False, False)
    assert (len(t), t.unproven, t.proven) == (1, 1, 0)


def test_one_packet_sources_only_churn_the_unproven_pool_oldest_first() -> None:
    t = small()
    for n in range(4):
        assert t.admit(key(n), float(n)).evicted == ()
    adm = t.admit(key(4), 4.0)
    assert adm.created
    assert adm.evicted == ((key(0), UNPROVEN_FULL),)
    assert t.unproven == 4
    assert key(0) not in t


def test_answered_flows_go_before_flows_still_waiting_for_their_answer() -> None:
    """Hosts answer spoofed enumerations too; those flows have had their answer, so a flow
    still waiting (the player who enumerated last) is not pushed out by them."""
    t = small()
    t.admit(key(0), 0.0)  # waiting: the real player, oldest
    for n in range(1, 4):
        t.admit(key(n), float(n))
        t.answered(key(n), float(n) + 0.1)  # the host answered the spoofed source
    evicted = [t.admit(key(n), float(n)).evicted for n in range(4, 7)]
    assert [e[0][0] for e in evicted] == [key(1), key(2), key(3)]
    assert key(0) in t


def test_the_player_coming_back_after_an_answer_is_proven_and_outlives_the_flood() -> None:
    t = small()
    t.admit(key(0), 0.0)
    t.answered(key(0), 0.01)
    back = t.admit(key(0), 1.0)  # the next enumeration, on the same flow
    assert (back.created, back.proven) == (False, True)
    assert t.is_proven(key(0))
    for n in range(1, 1000):  # a flood of one-packet sources, answered or not
        t.admit(key(n), 1.0 + n / 1000)
        if n % 2:
            t.answered(key(n), 1.0 + n / 1000)
    assert key(0) in t
    assert t.proven == 1
    assert t.unproven == 4


def test_a_player_evicted_after_its_answer_comes_back_proven() -> None:
    """The record of answered players has no socket: it outlives the evicted flow."""
    t = small()
    t.admit(key(0), 0.0)
    t.answered(key(0), 0.01)
    for n in range(1, 10):
        t.admit(key(n), 0.1)
    assert key(0) not in t
    adm = t.admit(key(0), 1.0)
    assert (adm.created, adm.proven) == (True, True)
    # ...but not after ``remember`` seconds
    t2 = small(remember=5.0)
    t2.admit(key(0), 0.0)
    t2.answered(key(0), 0.0)
    t2.remove(key(0))
    assert not t2.admit(key(0), 6.0).proven


def test_an_answer_to_a_flow_already_gone_still_counts() -> None:
    """io/relay.py reads an evicted flow's socket once more before closing it."""
    t = small()
    t.answered(key(7), 0.0)
    assert t.admit(key(7), 0.5).proven


def test_writing_to_a_return_socket_proves_the_flow() -> None:
    t = small()
    t.admit(key(0), 0.0)
    t.answered(key(0), 0.0)
    assert t.confirmed(key(0), 0.2) == ()
    assert t.is_proven(key(0))
    assert t.confirmed(key(99), 0.2) == ()  # unknown: nothing happens


def test_the_proven_pool_evicts_its_least_recently_used() -> None:
    t = small()  # 8 - 4 = 4 proven at most
    for n in range(5):
        t.answered(key(n), 0.0)
    for n in range(4):
        assert t.admit(key(n), float(n)).proven
    t.admit(key(0), 10.0)  # used again: the most recent now
    adm = t.admit(key(4), 11.0)
    assert adm.proven
    assert adm.evicted == ((key(1), PROVEN_FULL),)
    assert t.proven == 4


def test_one_address_spraying_ports_only_evicts_its_own_flows() -> None:
    t = small(max_unproven=6, max_flows=12)
    t.admit(key(50), 0.0)  # someone else
    for port in range(10):
        adm = t.admit(key(1, port=40000 + port), float(port))
        if port >= 3:
            assert adm.evicted == ((key(1, port=40000 + port - 3), PER_SOURCE),)
    assert key(50) in t
    assert t.unproven == 4  # three of the sprayer's, one of the other's


def test_per_source_spares_a_proven_flow_of_that_address() -> None:
    """A spoofer using the player's own address with other ports cannot push it out."""
    t = small()
    player = key(1, port=2300)
    t.admit(player, 0.0)
    t.answered(player, 0.0)
    t.admit(player, 1.0)  # proven
    for port in range(20):
        adm = t.admit(key(1, port=50000 + port), 2.0 + port)
        assert all(k != player for k, _ in adm.evicted)
    assert t.is_proven(player)


def test_idle_flows_expire_and_are_returned() -> None:
    t = small(idle=10.0)
    t.admit(key(0), 0.0)
    t.admit(key(1), 5.0)
    t.answered(key(1), 5.0)
    t.admit(key(2), 0.0)
    t.answered(key(2), 0.0)
    t.admit(key(2), 1.0)  # proven
    assert t.expire(10.5) == [key(0)]
    assert sorted(t.expire(16.0)) == sorted([key(1), key(2)])
    assert len(t) == 0


def test_touch_keeps_a_flow_alive_without_proving_it() -> None:
    t = small(idle=10.0)
    t.admit(key(0), 0.0)
    t.touch(key(0), 9.0)
    assert t.expire(15.0) == []
    assert not t.is_proven(key(0))


def test_limits_must_leave_room_for_proven_flows() -> None:
    with pytest.raises(ValueError, match="smaller than max_flows"):
        FlowLimits(max_flows=4, max_unproven=4)
    with pytest.raises(ValueError, match="at least 1"):
        FlowLimits(max_per_source=0)


def test_random_streams_keep_every_bound() -> None:
    """Property: whatever happens, the pools hold their bounds, every admitted flow is in the
    table, evictions name flows that were in it, reasons come from the closed set, and the
    record of answered players stays bounded."""
    rng = random.Random(11)
    limits = FlowLimits(max_flows=16, max_unproven=6, max_per_source=3, max_remembered=50)
    t = FlowTable(limits)
    present: set[FlowKey] = set()
    now = 0.0
    for _ in range(20_000):
        now += rng.random() * 0.05
        k = key(rng.randrange(40), port=rng.randrange(4), egress=rng.randrange(2))
        op = rng.random()
        if op < 0.6:
            adm = t.admit(k, now)
            for victim, reason in adm.evicted:
                assert reason in FLOW_EVICTION_REASONS
                assert victim in present
                assert victim != k
                present.discard(victim)
            present.add(k)
        elif op < 0.8:
            t.answered(k, now)
        elif op < 0.9:
            for victim, _ in t.confirmed(k, now):
                present.discard(victim)
        elif op < 0.95:
            t.remove(k)
            present.discard(k)
        else:
            for gone in t.expire(now):
                present.discard(gone)
        assert t.unproven <= limits.max_unproven
        assert t.proven <= limits.max_flows - limits.max_unproven
        assert len(t) == len(present)
        assert all(p in t for p in present)
        assert len(t._remembered) <= limits.max_remembered
        per_ip: dict[str, int] = {}
        for p in present:
            per_ip[p[0][0]] = per_ip.get(p[0][0], 0) + 1
        assert max(per_ip.values(), default=0) <= limits.max_per_source
