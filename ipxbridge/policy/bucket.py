"""The token bucket: the one refill rule behind every limiter of the bridge.

A bucket holds at most ``burst`` tokens and gains ``rate`` tokens a second; what is taken
must be there. The bridge counts in it what it may send or do before it waits: bytes toward
an unproven address (``policy/budget.py``), replies to an uplink handshake
(``policy/uplink.py``), immediate beacon answers (``policy/bridges.py``), DirectPlay
enumerations per source (``policy/relay.py`` rule 9) and log lines (``obs/logging.py``).

Pure: the clock is a parameter. A ``now`` before the bucket's last top-up adds nothing and
leaves that time where it was: callers read their clocks a moment apart, and a bucket must
never gain twice for the same second.
"""


def refilled(tokens: float, at: float, now: float, rate: float, burst: float) -> float:
    """A bucket's tokens at ``now``: ``tokens`` at ``at`` plus ``rate`` since, up to ``burst``."""
    if now <= at:
        return tokens
    return min(float(burst), tokens + (now - at) * rate)


class TokenBucket:
    """``burst`` tokens at most, ``rate`` more a second; full when made.

    Attributes:
        rate: tokens gained per second.
        burst: the most it holds.
        tokens: what it held at ``at``.
        at: when it was last topped up.
    """

    __slots__ = ("at", "burst", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now: float = 0.0) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.at = now

    def level(self, now: float) -> float:
        """The tokens it holds at ``now``."""
        return refilled(self.tokens, self.at, now, self.rate, self.burst)

    def full(self, now: float) -> bool:
        """Whether it has refilled to ``burst`` (it then says nothing a new one would not)."""
        return self.level(now) >= self.burst

    def spend(self, now: float, cost: float) -> None:
        """Take ``cost`` tokens whether or not they are there (the caller asked ``level``)."""
        self.tokens = self._top_up(now) - cost

    def take(self, now: float, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens if it holds them; False, and nothing taken, if not."""
        tokens = self._top_up(now)
        if tokens < cost:
            self.tokens = tokens
            return False
        self.tokens = tokens - cost
        return True

    def _top_up(self, now: float) -> float:
        tokens = self.level(now)
        self.at = max(self.at, now)
        return tokens

    def resize(self, rate: float, burst: float) -> None:
        """New limits (a reload): the tokens it holds are kept, cut to the new ``burst``."""
        self.rate = rate
        self.burst = burst
        self.tokens = min(self.tokens, float(burst))
