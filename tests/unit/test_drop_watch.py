"""Kernel drops said in the log (obs/logging.DropWatch): soon, rarely, and adding up."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from ipxbridge.obs.logging import DROP_LOG_SECONDS, DropWatch


def test_the_first_drops_are_said_at_once_then_held_for_the_interval() -> None:
    watch = DropWatch()
    assert watch.update(0, 1.0) == 0  # nothing dropped: nothing to say
    assert watch.update(50, 2.0) == 50  # the first drops: at once
    assert watch.update(80, 3.0) == 0  # 30 more, a second later: held
    assert watch.update(80, 4.0) == 0  # no new drops: still nothing to say
    assert watch.update(100, 2.0 + DROP_LOG_SECONDS / 2) == 0
    # One interval after the first line: everything held since, in one line.
    assert watch.update(110, 2.0 + DROP_LOG_SECONDS) == 60


@given(st.lists(st.tuples(st.integers(0, 10_000), st.floats(0.0, 5_000.0)), max_size=60))
def test_the_lines_add_up_to_the_count_and_come_at_most_once_per_interval(
    steps: list[tuple[int, float]],
) -> None:
    """Whatever the growth and the tick times (ticks in order), the numbers said plus the
    ones still held are the socket's count, and no two lines are closer than the interval."""
    watch = DropWatch(seconds=100.0)
    total, now, said, lines = 0, 0.0, 0, []
    for grow, gap in steps:
        total += grow
        now += gap
        n = watch.update(total, now)
        if n:
            said += n
            lines.append(now)
    assert said <= total
    # One more tick a whole interval later says the rest (if any). (A millisecond more:
    # 412.9065885003757 + 100 refills the limiter's token to 0.99999999..., hypothesis found.)
    said += watch.update(total, now + 100.001)
    assert said == total
    assert all(b - a >= 100.0 - 1e-6 for a, b in itertools.pairwise(lines))
