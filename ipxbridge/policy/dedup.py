"""Duplicate suppression for packets that come back around a loop of bridges.

Rule: a packet whose identity was recorded less than ``window`` seconds ago is a duplicate
only if it now arrives through a *different* port than the first copy. A copy arriving through
the same port again is a legitimate repeat (a game resending the same announcement, or the
0.5 s retries of reliability.md R5b) and passes, refreshing the record.

Why this works: in a loop, every copy after the first reaches a bridge through another
neighbour; each bridge accepts a packet from one port only, so it forwards each packet once
per sender transmission and the storm ends within one copy per bridge (reliability.md L9).
Clients are leaves, so identical packets from the same client are never loop copies.

The identity is an integer key chosen by the caller (a keyed hash, so that crafted
collisions are not practical). Memory is bounded by ``max_entries``; the oldest record is
evicted first. The clock is passed in (house style rule 2).
"""

from typing import Generic, TypeVar

PortT = TypeVar("PortT")


class DuplicateFilter(Generic[PortT]):
    """Remembers which port each recent packet identity first arrived on."""

    __slots__ = ("_entries", "max_entries", "window")

    def __init__(self, window: float, max_entries: int = 65_536) -> None:
        if window < 0 or max_entries < 1:
            raise ValueError("window must be >= 0 and max_entries >= 1")
        self.window = window
        self.max_entries = max_entries
        # Insertion order is time order: records are re-inserted when refreshed.
        self._entries: dict[int, tuple[PortT, float]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def is_duplicate(self, key: int, port: PortT, now: float) -> bool:
        """Record ``key`` as seen on ``port`` and say whether it is a loop copy."""
        entries = self._entries
        entry = entries.pop(key, None)
        if entry is not None and now - entry[1] < self.window and entry[0] != port:
            entries[key] = entry  # keep the first port and its time
            return True
        entries[key] = (port, now)
        if len(entries) > self.max_entries:
            del entries[next(iter(entries))]
        return False

    def purge(self, now: float) -> int:
        """Forget records older than the window; returns how many were removed."""
        entries = self._entries
        removed = 0
        for key, (_, seen) in list(entries.items()):
            if now - seen < self.window:
                break
            del entries[key]
            removed += 1
        return removed
