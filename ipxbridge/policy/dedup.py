"""Duplicate suppression for packets that come back around a loop of bridges.

Rule: a packet whose identity was recorded less than ``window`` seconds ago is a duplicate
only if it now arrives through a *different* port than the first copy. A copy arriving through
the same port again is a legitimate repeat (a game resending the same announcement, or the
0.5 s retries of docs/reliability.md R5b) and passes, refreshing the record.

A copy that comes back through the *same* port with a higher hop count than the first is a
loop copy too (interface ports): two bridges on one segment that do not yet know each other (the
first second after one starts, before its beacon, policy/bridges.py, rule 8) hand each
other's copies back onto the segment, and each returning copy arrives on the port the first
came in on. A game repeating itself repeats its hop count; only a loop adds to it.

Why this works: in a loop, every copy after the first reaches a bridge through another
neighbour; each bridge accepts a packet from one port only, so it forwards each packet once
per sender transmission and the storm ends within one copy per bridge (docs/reliability.md L9).
Clients are leaves, so identical packets from the same client are never loop copies.

The identity is an integer key chosen by the caller (a keyed hash, so that crafted
collisions are not practical). Memory is bounded by ``max_entries``; the oldest record is
evicted first. The clock is passed in (docs/architecture.md rule 2).

The records live in an ``OrderedDict``, oldest first: evicting and purging take the front
in O(1) (``popitem(last=False)``), as ``policy/tables.py`` does. A plain dict's
``next(iter(d))`` walks every slot deleted from its front since the last resize: 9 µs an
eviction at 65,536 records, against 0.3 µs (``bench/tables_bench.py``), when a flood keeps
the table full. The price is about 0.07 µs more per packet on the common path.
"""

from collections import OrderedDict
from operator import itemgetter
from typing import Generic, TypeVar

from ipxbridge.policy.tables import check_window, purge_front

PortT = TypeVar("PortT")


class DuplicateFilter(Generic[PortT]):
    """Remembers which port each recent packet identity first arrived on."""

    __slots__ = ("_entries", "max_entries", "window")

    def __init__(self, window: float, max_entries: int = 65_536) -> None:
        check_window(window, max_entries)
        self.window = window
        self.max_entries = max_entries
        # Insertion order is time order: records are re-inserted when refreshed.
        self._entries: OrderedDict[int, tuple[PortT, float, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def is_duplicate(self, key: int, port: PortT, now: float, hops: int = 0) -> bool:
        """Record ``key`` as seen on ``port`` with ``hops`` and say whether it is a loop copy."""
        entries = self._entries
        entry = entries.pop(key, None)
        if (
            entry is not None
            and now - entry[1] < self.window
            and (entry[0] != port or hops > entry[2])
        ):
            entries[key] = entry  # keep the first port, its time and hop count
            return True
        entries[key] = (port, now, hops)
        if len(entries) > self.max_entries:
            entries.popitem(last=False)
        return False

    def purge(self, now: float) -> int:
        """Forget records older than the window; returns how many were removed.

        From the front only, so a purge costs what it removes, not the table's size.
        """
        return purge_front(self._entries, itemgetter(1), now - self.window)


class LoopFilter:
    """Stops broadcast storms between relays by the IP TTL, which every relay decrements.

    Rule: a payload seen less than ``window`` seconds ago with a *higher* TTL is a loop copy
    (it has crossed at least one more relay than the copy we already handled). Copies with
    the same or a higher TTL pass: a game's retries, and two players sending identical bytes
    (same OS, same default TTL). Unlike a "first port wins" rule this also works when two
    bridges join the same two segments (parallel paths: a copy may return through the port
    the original came in on), and it needs no marker shared between bridges, so relays can
    be chained (site A -> VPN -> site B). Measured alternative: per-instance marks let one
    broadcast become 37k-82k copies (docs/reliability.md L9).

    Memory is bounded by ``max_entries``; the clock is passed in.
    """

    __slots__ = ("_entries", "max_entries", "window")

    def __init__(self, window: float, max_entries: int = 65_536) -> None:
        check_window(window, max_entries)
        self.window = window
        self.max_entries = max_entries
        # key -> (highest TTL, last seen), oldest first (module docstring)
        self._entries: OrderedDict[int, tuple[int, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def is_loop_copy(self, key: int, ttl: int, now: float) -> bool:
        """Record ``key`` at ``ttl``; True when a higher-TTL copy was seen within the window."""
        entries = self._entries
        entry = entries.pop(key, None)
        if entry is not None and now - entry[1] < self.window:
            if ttl < entry[0]:
                entries[key] = entry
                return True
            ttl = max(ttl, entry[0])
        entries[key] = (ttl, now)
        if len(entries) > self.max_entries:
            entries.popitem(last=False)
        return False

    def remember(self, key: int, ttl: int, now: float) -> None:
        """Record an outgoing form of a payload (e.g. after a SOCKADDR rewrite)."""
        entry = self._entries.pop(key, None)
        if entry is not None and now - entry[1] < self.window:
            ttl = max(ttl, entry[0])
        self._entries[key] = (ttl, now)
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def purge(self, now: float) -> int:
        """Forget records older than the window (from the front); returns how many."""
        return purge_front(self._entries, itemgetter(1), now - self.window)
