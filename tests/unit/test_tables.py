"""The bounded tables of the switch (policy/tables.py): two tiers, counted evictions, loop bound."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.policy.tables import PROOF_AFTER, EgressGuard, ProvenTable


def table(capacity: int = 8) -> tuple[ProvenTable[str, str], Counter[tuple[str, str]]]:
    evictions: Counter[tuple[str, str]] = Counter()
    return ProvenTable(capacity, "nodes", evictions), evictions


def test_a_flood_of_new_keys_never_pushes_out_a_proven_one() -> None:
    t, evictions = table(8)
    t.learn("station", "eth0", 0.0)
    t.learn("station", "eth0", PROOF_AFTER)  # heard again a second later: proven
    assert t.is_proven("station")
    for n in range(6_000):  # one packet each, as a flood of random source MACs
        t.learn(f"mac{n}", "eth0", 2.0 + n / 1_000)
    assert t.get("station") == ("eth0", PROOF_AFTER)
    assert len(t) <= 8
    assert evictions[("nodes", "unproven")] == 6_000 - 2  # two unproven places (8 // 4)
    assert evictions[("nodes", "proven")] == 0


def test_keys_heard_only_within_the_first_second_stay_unproven() -> None:
    t, _ = table()
    for k in range(10):
        t.learn("burst", "p", k * PROOF_AFTER / 20)
    assert not t.is_proven("burst")
    t.learn("burst", "q", PROOF_AFTER)
    assert t.is_proven("burst")
    assert t.get("burst") == ("q", PROOF_AFTER)  # the port it is behind moves with it


def test_a_full_proven_tier_evicts_its_least_recently_heard() -> None:
    t, evictions = table(4)  # three proven places, one unproven
    now = 0.0
    for k in "abc":  # each heard twice a second apart: proven
        t.learn(k, "p", now)
        t.learn(k, "p", now + PROOF_AFTER)
        now += PROOF_AFTER + 0.1
    t.learn("a", "p", now)  # a speaks again: b is now the least recently heard
    t.learn("d", "p", now + 0.1)
    t.learn("d", "p", now + 0.1 + PROOF_AFTER)  # d's promotion needs a proven place
    assert [k in t for k in "abcd"] == [True, False, True, True]
    assert evictions[("nodes", "proven")] == 1


def test_expiry_forgets_the_silent_and_is_not_an_eviction() -> None:
    t, evictions = table()
    t.learn("old", "p", 0.0)
    t.learn("old", "p", 1.0)
    t.learn("new", "p", 50.0)
    assert t.expire(60.0, ttl=30.0) == 1
    assert "old" not in t
    assert "new" in t
    assert not evictions


def test_pop_and_items() -> None:
    t, _ = table()
    t.learn("a", "p", 0.0)
    t.learn("b", "q", 0.5)
    assert sorted((k, v) for k, v, _ in t.items()) == [("a", "p"), ("b", "q")]
    t.pop("a")
    t.pop("nothing")
    assert [k for k, _, _ in t.items()] == ["b"]


def test_a_table_needs_room_for_both_tiers() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ProvenTable(1, "x", Counter())


def test_a_copy_back_by_another_way_leaves_by_no_port_the_packet_left_by() -> None:
    guard: EgressGuard[str] = EgressGuard(0.25)
    assert guard.admit(1, "station", ("eth", "wrap"), 0.0) == ("eth", "wrap")
    # A loop copy comes back a millisecond later, from another bridge's port: it would go
    # out of both again.
    assert guard.admit(1, "bridge-y", ("eth", "wrap", "peer"), 0.001) == ("peer",)
    assert guard.admit(1, "bridge-y", ("eth", "wrap", "peer"), 0.002) == ()
    assert guard.admit(2, "bridge-y", ("eth",), 0.002) == ("eth",)  # another packet
    # The station repeating itself goes out every time, and keeps the record fresh...
    for n in range(1, 9):
        assert guard.admit(1, "station", ("eth", "wrap"), 0.1 * n) == ("eth", "wrap")
    # ...so a copy by another way 0.8 s after the first is still held.
    assert guard.admit(1, "bridge-y", ("eth", "wrap"), 0.85) == ()
    # Once the window has passed since the station's last send, it is a new packet.
    assert guard.admit(1, "bridge-y", ("eth", "wrap"), 1.2) == ("eth", "wrap")
    assert guard.purge(10.0) == 2
    assert len(guard) == 0


def test_a_game_repeating_itself_35_times_a_second_is_not_a_loop() -> None:
    """docs/reliability.md R19 keeps loops bounded; a game's identical broadcasts at 35/s
    each reach every port (what rule 9 used to hold back to 4 a second)."""
    guard: EgressGuard[str] = EgressGuard(0.25)
    sent = sum(len(guard.admit(7, "client", ("a", "b", "c"), n / 35)) for n in range(35))
    assert sent == 3 * 35


def test_the_guard_is_bounded() -> None:
    guard: EgressGuard[str] = EgressGuard(0.25, max_entries=100)
    for key in range(1_000):
        guard.admit(key, "w", ("eth",), 0.0)
    assert len(guard) == 100


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.sampled_from(["w1", "w2", "w3"]),
            st.sampled_from(["a", "b", "c"]),
            st.floats(0, 0.004),
        ),
        min_size=1,
        max_size=200,
    )
)
def test_within_a_window_only_the_first_way_repeats_and_others_leave_once(
    events: list[tuple[int, str, str, float]],
) -> None:
    """Within one window (all events inside it): every copy by a packet's first way goes to
    all its targets; copies by any other way leave by a port at most once, and never by one
    the first way's copies left by (the loop bound of switch rule 9)."""
    guard: EgressGuard[str] = EgressGuard(1.0)
    now = 0.0
    first_way: dict[int, str] = {}
    by_first: dict[int, set[str]] = {}
    others: Counter[tuple[int, str]] = Counter()
    for key, way, port, step in events:
        now += step  # 200 * 0.004 < 1.0: one window
        targets = (port, "z")
        out = guard.admit(key, way, targets, now)
        first = first_way.setdefault(key, way)
        if way == first:
            assert out == targets
            by_first.setdefault(key, set()).update(out)
        else:
            for egress in out:
                assert egress not in by_first.get(key, set()), (key, egress)
                others[(key, egress)] += 1
    assert all(n == 1 for n in others.values())


def test_the_owner_hears_of_every_entry_that_leaves() -> None:
    removed: list[tuple[str, str]] = []
    evictions: Counter[tuple[str, str]] = Counter()
    t: ProvenTable[str, str] = ProvenTable(
        4, "nodes", evictions, on_remove=lambda k, v: removed.append((k, v))
    )
    t.learn("a", "p", 0.0)
    t.learn("b", "q", 0.1)  # one unproven place: a is evicted
    assert removed == [("a", "p")]
    t.learn("b", "q", PROOF_AFTER + 0.1)  # proven
    t.learn("c", "r", 2.0)
    t.pop("c")
    t.pop("nothing")
    assert removed == [("a", "p"), ("c", "r")]
    assert t.expire(100.0, ttl=10.0) == 1
    assert removed == [("a", "p"), ("c", "r"), ("b", "q")]
    assert evictions == {("nodes", "unproven"): 1}
