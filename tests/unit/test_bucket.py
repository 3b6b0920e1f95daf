"""The one token bucket every limiter uses (``policy/bucket.py``)."""

from ipxbridge.policy.bucket import TokenBucket, refilled


def test_a_bucket_starts_full_and_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=10.0)
    assert [bucket.take(10.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.level(10.5) == 1.0
    assert bucket.take(10.5)
    assert not bucket.take(10.5)
    assert bucket.level(100.0) == 3.0
    assert bucket.full(100.0)


def test_a_clock_read_a_moment_early_adds_nothing_and_moves_nothing_back() -> None:
    bucket = TokenBucket(rate=1.0, burst=2, now=5.0)
    bucket.spend(5.0, 2)
    assert bucket.level(4.0) == 0.0
    assert not bucket.take(4.0)
    assert bucket.at == 5.0
    assert bucket.level(6.0) == 1.0
    assert refilled(0.5, 1.0, 0.5, rate=10.0, burst=2) == 0.5


def test_spend_may_overdraw_and_take_never_does() -> None:
    bucket = TokenBucket(rate=1.0, burst=4, now=0.0)
    assert not bucket.take(0.0, cost=5)
    assert bucket.level(0.0) == 4.0
    bucket.spend(0.0, 5)
    assert bucket.level(0.0) == -1.0
    assert not bucket.full(4.0)
    assert bucket.full(5.0)


def test_resize_keeps_the_tokens_held_cut_to_the_new_burst() -> None:
    bucket = TokenBucket(rate=1.0, burst=10, now=0.0)
    bucket.spend(0.0, 2)
    bucket.resize(rate=4.0, burst=5)
    assert bucket.level(0.0) == 5.0
    bucket.spend(0.0, 5)
    assert bucket.level(0.5) == 2.0
