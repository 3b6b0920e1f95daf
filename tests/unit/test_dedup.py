from hypothesis import given
from hypothesis import strategies as st

from ipxbridge.policy.dedup import DuplicateFilter


def test_copy_via_other_port_within_window_is_duplicate() -> None:
    f: DuplicateFilter[str] = DuplicateFilter(window=2.0)
    assert not f.is_duplicate(1, "a", 0.0)
    assert f.is_duplicate(1, "b", 1.9)
    assert not f.is_duplicate(1, "b", 2.1)  # window over: a new packet


def test_same_port_repeats_always_pass_and_refresh() -> None:
    f: DuplicateFilter[str] = DuplicateFilter(window=2.0)
    for i in range(10):
        assert not f.is_duplicate(7, "a", i * 0.1)
    assert f.is_duplicate(7, "b", 1.0)


def test_purge_and_bound() -> None:
    f: DuplicateFilter[int] = DuplicateFilter(window=1.0, max_entries=100)
    for i in range(1000):
        f.is_duplicate(i, 0, i * 0.001)
    assert len(f) == 100
    assert f.purge(10.0) == 100
    assert len(f) == 0


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), max_size=300))
def test_size_never_exceeds_bound(ops: list[tuple[int, int]]) -> None:
    f: DuplicateFilter[int] = DuplicateFilter(window=5.0, max_entries=8)
    for t, (key, port) in enumerate(ops):
        f.is_duplicate(key, port, t * 0.01)
        assert len(f) <= 8


def test_a_copy_back_through_the_same_port_with_more_hops_is_a_loop_copy() -> None:
    # Two bridges on one segment that do not know each other yet hand a station's broadcast
    # back onto the segment: it returns on the port of the first copy, one hop further.
    f = DuplicateFilter[str](2.0)
    assert not f.is_duplicate(9, "seg", 0.0, hops=0)
    assert f.is_duplicate(9, "seg", 0.01, hops=2)
    # A game repeating its packet repeats its hop count: still a repeat, not a loop.
    assert not f.is_duplicate(9, "seg", 0.5, hops=0)
    assert not f.is_duplicate(9, "seg", 3.0, hops=2)  # window over: a new packet
