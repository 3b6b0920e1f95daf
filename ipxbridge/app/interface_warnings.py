"""Warnings about interface names that match no interface: at start and on each change.

``run --iface nosuch0`` used to log only "relaying between: nothing"; the names a user
gave are checked on every re-plan (start, netlink change, reload), and what is wrong is
logged when it changes, not on every plan or tick. A link that flaps cannot flood the log:
after one line the next waits ``WARN_GAP`` seconds, and then says the state of that moment.
"""

import logging
from collections.abc import Sequence
from typing import Final

from ipxbridge.policy.topology import Topology, Unmatched, unmatched

logger = logging.getLogger(__name__)

WARN_GAP: Final = 60.0  # seconds between two lines of one watcher


class UnmatchedNames:
    """Says which of one list of patterns select no interface, once per change, rate-limited."""

    def __init__(self, what: str, *, gap: float = WARN_GAP) -> None:
        """``what`` names the list and where it comes from, e.g. "relay interfaces (--iface)"."""
        self.what = what
        self.gap = gap
        self.said: tuple[Unmatched, ...] = ()  # the state last logged (nothing at first)
        self._pending: tuple[Unmatched, ...] | None = None  # a change not yet logged
        self._next = float("-inf")  # no line before this time

    def check(self, topology: Topology, patterns: Sequence[str], now: float) -> None:
        """After a (re-)plan: log what changed since the last line, now or when the gap ends."""
        try:
            found = unmatched(topology, patterns)
        except ValueError:
            return  # a malformed CIDR: the plan itself reports it
        self._pending = None if found == self.said else found
        self.tick(now)

    def tick(self, now: float) -> None:
        """Log a change held back by the gap, once the gap is over."""
        if self._pending is None or now < self._next:
            return
        found, self._pending = self._pending, None
        self.said = found
        self._next = now + self.gap
        if found:
            logger.warning("%s: %s", self.what, "; ".join(str(u) for u in found))
        else:
            logger.info("%s: every name matches an interface now", self.what)
