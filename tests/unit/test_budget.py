"""The reflection limit (policy/budget.py; docs/reliability.md R26)."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.policy.budget import BOUND_ADDRESS, BOUND_TOTAL, ReflectionLimit


def test_one_address_gets_its_burst_then_its_rate() -> None:
    limit = ReflectionLimit(100.0, 300, 10_000.0, 10_000)
    assert [limit.allow("10.0.0.1", 100, 0.0, "copy") for _ in range(4)] == [True] * 3 + [False]
    assert limit.allow("10.0.0.1", 100, 0.5, "copy") is False  # 50 bytes earned
    assert limit.allow("10.0.0.1", 100, 1.0, "copy") is True  # 100 earned
    assert limit.allow("10.0.0.2", 100, 1.0, "copy") is True  # another address: its own
    assert limit.refused == Counter({("copy", BOUND_ADDRESS): 2})
    assert (limit.sent_bytes, limit.sent_packets) == (500, 5)


def test_all_addresses_together_stop_at_the_total() -> None:
    limit = ReflectionLimit(1_000.0, 1_000, 100.0, 250)
    sent = sum(limit.allow(f"10.0.1.{n}", 100, 0.0, "probe") for n in range(10))
    assert sent == 2
    assert limit.refused[("probe", BOUND_TOTAL)] == 8
    assert limit.allow("10.0.1.99", 100, 1.0, "probe") is True  # 50 left + 100 earned


def test_a_reserve_is_left_for_what_proves_receipt() -> None:
    limit = ReflectionLimit(0.0, 200, 1_000.0, 1_000)
    assert limit.allow("10.0.0.1", 100, 0.0, "copy", reserve=60) is True
    assert limit.allow("10.0.0.1", 100, 0.0, "copy", reserve=60) is False  # 100 < 160
    assert limit.allow("10.0.0.1", 30, 0.0, "probe") is True  # the reserve is there for it


def test_check_spends_nothing_and_refuse_counts() -> None:
    limit = ReflectionLimit(0.0, 100, 1_000.0, 1_000)
    assert limit.check("10.0.0.1", 100, 0.0) is None
    assert limit.check("10.0.0.1", 101, 0.0) == BOUND_ADDRESS
    assert limit.sent_bytes == 0
    limit.refuse("registration_reply", BOUND_ADDRESS)
    assert limit.refused[("registration_reply", BOUND_ADDRESS)] == 1


def test_a_flood_of_new_addresses_cannot_win_fresh_bursts() -> None:
    """Only a bucket that has refilled makes room; while all are refilling, a newcomer is
    refused, so cycling sources never buys a fresh burst for an address still owed."""
    limit = ReflectionLimit(10.0, 100, 1e9, 1_000_000_000, max_addresses=4)
    for n in range(4):
        assert limit.allow(f"10.0.0.{n}", 100, 0.0, "copy")
    assert limit.allow("10.0.0.9", 100, 0.0, "copy") is False
    assert limit.refused[("copy", BOUND_ADDRESS)] == 1
    assert len(limit) == 4
    # 10 s later the oldest has refilled: it makes room, and the address it held starts over
    # with a full burst, exactly what it would have had.
    assert limit.allow("10.0.0.9", 100, 10.0, "copy")
    assert len(limit) == 4
    assert limit.purge(20.0) == 4


def test_a_reload_keeps_tokens_within_the_new_bursts() -> None:
    limit = ReflectionLimit(0.0, 1_000, 0.0, 1_000)
    limit.reconfigure(0.0, 100, 0.0, 150)
    assert limit.allow("10.0.0.1", 100, 0.0, "copy")
    assert not limit.allow("10.0.0.2", 100, 0.0, "copy")  # total: 50 left


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        ReflectionLimit(-1.0, 100, 1.0, 100)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 30),  # address
            st.integers(1, 1_500),  # size
            st.floats(0, 0.2),  # time step
        ),
        min_size=1,
        max_size=300,
    ),
    st.integers(1, 8),
)
def test_no_sequence_sends_past_burst_plus_rate(
    sends: list[tuple[int, int, float]], max_addresses: int
) -> None:
    """By time t, toward any address at most burst + rate * t, and in total the same with the
    total's figures, whatever is asked and however the table churns."""
    limit = ReflectionLimit(500.0, 2_000, 1_500.0, 4_000, max_addresses=max_addresses)
    now = 0.0
    per: Counter[str] = Counter()
    total = 0
    for address, size, step in sends:
        now += step
        ip = f"10.0.0.{address}"
        if limit.allow(ip, size, now, "copy"):
            per[ip] += size
            total += size
        assert per[ip] <= 2_000 + 500.0 * now + 1e-6
        assert total <= 4_000 + 1_500.0 * now + 1e-6
    assert limit.sent_bytes == total
