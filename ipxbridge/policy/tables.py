"""Bounded tables that a stranger cannot use to push out what is known to work.

``ProvenTable`` holds what the switch learns from traffic (which port a node is behind, which
bridges are on a segment). A flood of new keys from one sender must neither grow memory nor
evict a quiet station that is known to be real (docs/reliability.md R24), so entries live in
two tiers:

* **unproven**: heard once, or only within ``PROOF_AFTER`` of when it was first heard. A flood
  of unique keys (one packet each) stays here and churns here.
* **proven**: heard again at least ``PROOF_AFTER`` after it was first heard: real stations
  talk over time. Three quarters of the capacity; a promotion into a full proven tier evicts
  its least recently heard entry.

Each tier evicts its least recently heard entry first (LRU through ``OrderedDict``, O(1):
``popitem(last=False)``, never ``next(iter(dict))``, which walks every slot deleted from the
front of a plain dict). Evictions are counted by (table, tier); expiry is not an eviction.
An owner that keeps figures over the values (the framing learner's count per framing) is told
of every entry that leaves, by eviction, expiry or ``pop`` (``on_remove``). The clock is
passed in (docs/architecture.md).

``EgressGuard`` is the end-to-end bound on loops (the switch's rule 9): a packet goes out of a
given port at most once per window, whatever way it came in and whatever the other rules
concluded.
"""

from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterator
from operator import itemgetter
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
P = TypeVar("P", bound=Hashable)

PROOF_AFTER: Final = 1.0  # seconds between the first and a later packet that make a key proven


class _Entry(Generic[V]):
    # A plain class, not a dataclass: mypyc compiles no generic dataclass.
    __slots__ = ("first", "last", "value")

    def __init__(self, value: V, first: float, last: float) -> None:
        self.value = value
        self.first = first
        self.last = last


def check_window(window: float, max_entries: int) -> None:
    """The bounds of a table of recent records: a window of >= 0 s and room for one at least.

    Raises:
        ValueError: a negative ``window`` or a ``max_entries`` below 1 (local misuse).
    """
    if window < 0 or max_entries < 1:
        raise ValueError("window must be >= 0 and max_entries >= 1")


def purge_front(entries: "OrderedDict[K, V]", stamp: Callable[[V], float], older: float) -> int:
    """Pop the records at the front (oldest first) whose ``stamp`` is at or before ``older``.

    Time-ordered tables only: the first fresh record ends the walk, so a purge costs what it
    removes, not the table's size. Returns how many went.
    """
    removed = 0
    while entries:
        _, value = next(iter(entries.items()))
        if stamp(value) > older:
            break
        entries.popitem(last=False)
        removed += 1
    return removed


class ProvenTable(Generic[K, V]):
    """A bounded map learned from traffic, with a protected tier (module docstring)."""

    __slots__ = (
        "_evictions",
        "_name",
        "_on_remove",
        "_proven",
        "_proven_cap",
        "_unproven",
        "_unproven_cap",
    )

    def __init__(
        self,
        capacity: int,
        name: str,
        evictions: Counter[tuple[str, str]],
        *,
        on_remove: Callable[[K, V], None] | None = None,
    ) -> None:
        """A table of at most ``capacity`` entries; evictions counted under ``name``.

        ``on_remove`` is called with the key and value of every entry that leaves the table.

        Raises:
            ValueError: a capacity below 2 (each tier needs a place).
        """
        if capacity < 2:
            raise ValueError("capacity must be >= 2")
        self._proven_cap = max(1, capacity * 3 // 4)
        self._unproven_cap = capacity - self._proven_cap
        self._name = name
        self._evictions = evictions
        self._on_remove = on_remove
        # Order = least recently heard first.
        self._unproven: OrderedDict[K, _Entry[V]] = OrderedDict()
        self._proven: OrderedDict[K, _Entry[V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._unproven) + len(self._proven)

    def __contains__(self, key: object) -> bool:
        return key in self._proven or key in self._unproven

    def learn(self, key: K, value: V, now: float) -> None:
        """Record that ``key`` was heard now (behind ``value``)."""
        proven = self._proven
        entry = proven.get(key)
        if entry is not None:
            entry.value = value
            entry.last = now
            proven.move_to_end(key)
            return
        unproven = self._unproven
        entry = unproven.get(key)
        if entry is None:
            unproven[key] = _Entry(value, now, now)
            if len(unproven) > self._unproven_cap:
                self._removed(*unproven.popitem(last=False))
                self._evictions[(self._name, "unproven")] += 1
            return
        entry.value = value
        entry.last = now
        if now - entry.first < PROOF_AFTER:
            unproven.move_to_end(key)
            return
        del unproven[key]
        proven[key] = entry
        if len(proven) > self._proven_cap:
            self._removed(*proven.popitem(last=False))
            self._evictions[(self._name, "proven")] += 1

    def _removed(self, key: K, entry: _Entry[V]) -> None:
        if self._on_remove is not None:
            self._on_remove(key, entry.value)

    def get(self, key: K) -> tuple[V, float] | None:
        """(value, last heard) of ``key``, or None."""
        entry = self._proven.get(key) or self._unproven.get(key)
        if entry is None:
            return None
        return entry.value, entry.last

    def is_proven(self, key: K) -> bool:
        """Was ``key`` heard over more than ``PROOF_AFTER``?"""
        return key in self._proven

    def pop(self, key: K) -> None:
        """Forget ``key`` (not counted as an eviction)."""
        entry = self._proven.pop(key, None) or self._unproven.pop(key, None)
        if entry is not None:
            self._removed(key, entry)

    def expire(self, now: float, ttl: float) -> int:
        """Forget entries not heard for ``ttl``; returns how many."""
        removed = 0
        for tier in (self._unproven, self._proven):
            while tier:
                _, entry = next(iter(tier.items()))
                if now - entry.last < ttl:
                    break
                self._removed(*tier.popitem(last=False))
                removed += 1
        return removed

    def items(self) -> Iterator[tuple[K, V, float]]:
        """(key, value, last heard) of every entry, unproven first."""
        for tier in (self._unproven, self._proven):
            for key, entry in tier.items():
                yield key, entry.value, entry.last


class EgressGuard(Generic[P]):
    """A copy that came back by another way never leaves by a port its first copy left by.

    Rule 9 of the IPX switch (``policy/switch.py`` keeps the numbered list), the loop bound
    that holds when every other rule is fooled:

    9. A packet (bytes 10.. of it, as rule 6 names it) that arrives by another *way* than
       the copy that last left (another port, or the same port from another link-layer
       source) within ``window`` of it (the switch's ``EGRESS_WINDOW``) does not leave by a
       port that copy left by. IPXWrapper's header has no hop count, so a copy that crosses
       it starts again at hop 0 and returns on the port its first copy came in on, which the
       duplicate filter (rule 6) passes, as it passes a port's repeats; but it returns from
       the bridge that translated it, not from the station that sent it, so it cannot go
       out again. A sender repeating itself (a retry, a status without a counter,
       redundancy against loss) arrives by the same way each time and goes out each time,
       however fast.

    So, per packet identity, the guard keeps the way of the copy that last went out (the
    ingress port and the link-layer source it came from: a station's MAC or address for the
    original, another bridge's for a copy that went round) and the ports it went to:

    * the same way again is the sender repeating itself: it goes to every target, however
      often, and refreshes the record;
    * another way within ``window`` of the last send is a copy that went round: it goes
      only to ports the packet has not left by, and changes nothing else, so a loop stops
      at the first copy that comes back.

    A loop's round trip on a LAN is about a millisecond, far inside the window.
    """

    __slots__ = ("_entries", "max_entries", "window")

    def __init__(self, window: float, max_entries: int = 65_536) -> None:
        """Raises ValueError for a negative window or fewer than one entry."""
        check_window(window, max_entries)
        self.window = window
        self.max_entries = max_entries
        # key -> (last sent by its way, that way, ports sent to); order = time order
        self._entries: OrderedDict[int, tuple[float, object, tuple[P, ...]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def admit(self, key: int, way: object, targets: tuple[P, ...], now: float) -> tuple[P, ...]:
        """The targets ``key`` may go to, arriving by ``way``; recorded as sent."""
        entries = self._entries
        entry = entries.get(key)
        if entry is None or now - entry[0] >= self.window:
            if entry is not None:
                del entries[key]
            entries[key] = (now, way, targets)
            if len(entries) > self.max_entries:
                entries.popitem(last=False)
            return targets
        sent = entry[2]
        if entry[1] == way:  # the sender repeating itself: all of it, record refreshed
            del entries[key]
            extra = tuple(t for t in targets if t not in sent)
            entries[key] = (now, way, sent + extra if extra else sent)
            return targets
        kept = tuple(t for t in targets if t not in sent)
        if kept:
            entries[key] = (entry[0], entry[1], sent + kept)
        return kept

    def purge(self, now: float) -> int:
        """Forget records older than the window; returns how many were removed."""
        return purge_front(self._entries, itemgetter(0), now - self.window)
