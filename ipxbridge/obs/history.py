"""Bounded in-memory history for the status page: traffic rings, per-client books, events.

Nothing here reads a clock or touches a socket: the owner (``app/status.py``) samples the
existing counters once a tick and passes the times in. Every structure has a fixed cap, so
a flood of clients, drop reasons or events costs at most the numbers below
(docs/status-page.md, "Memory"):

- ``Ring``: ``array('q')``, 8 bytes a slot, allocated once.
- ``TrafficHistory``: ``TRAFFIC_SLOTS`` (180) slots of ``TRAFFIC_PERIOD`` (5 s) = 15 min,
  per series: forwarded, dropped, relayed, up to ``MAX_SERIES`` drop reasons and as many
  relay interfaces (more fold into ``other``). 180 x 8 B = 1.4 KiB a series; at most
  (3 + 2 x (32 + 1)) series + the time ring = 100 KiB, ~7 KiB when quiet.
- ``ClientBooks``: one entry per client or station seen (at most ``MAX_TRACKED``); those
  with counters (DOSBox clients) have two ``SPARK_SLOTS`` (60 x 5 s = 5 min) rings, ~1 KiB,
  for at most ``MAX_SPARKLINES`` of them: under 300 KiB in all.
- Departed entries: at most ``MAX_DEPARTED`` kept ``DEPARTED_SECONDS``; events: a deque of
  ``MAX_EVENTS``.
"""

from array import array
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

TRAFFIC_PERIOD: Final = 5.0  # seconds per traffic slot
TRAFFIC_SLOTS: Final = 180  # 15 minutes
MAX_SERIES: Final = 32  # per family (drop reasons, relay interfaces); the rest is "other"
SPARK_PERIOD: Final = 5.0  # seconds per sparkline slot
SPARK_SLOTS: Final = 60  # 5 minutes
MAX_TRACKED: Final = 8192  # clients and stations at once (the switch bounds both far lower)
MAX_SPARKLINES: Final = 256
MAX_DEPARTED: Final = 64
DEPARTED_SECONDS: Final = 300.0  # a departed entry stays listed, marked gone, this long
MAX_EVENTS: Final = 64
OTHER: Final = "other"


class Ring:
    """The last ``size`` integers pushed, oldest first; allocated once."""

    __slots__ = ("_data", "_next", "count")

    def __init__(self, size: int) -> None:
        self._data = array("q", bytes(8 * size))
        self._next = 0
        self.count = 0  # how many pushed, up to size

    def push(self, value: int) -> None:
        """Append one value, overwriting the oldest once full."""
        data = self._data
        data[self._next] = value
        self._next = (self._next + 1) % len(data)
        if self.count < len(data):
            self.count += 1

    def values(self) -> list[int]:
        """The values held, oldest first."""
        data, n = self._data, self.count
        start = (self._next - n) % len(data)
        return [data[(start + i) % len(data)] for i in range(n)]

    def last(self, n: int) -> list[int]:
        """The newest ``n`` values (fewer if fewer were pushed), oldest first."""
        return self.values()[-n:] if n > 0 else []

    @property
    def nbytes(self) -> int:
        """Bytes held by the ring's storage."""
        return self._data.itemsize * len(self._data)


class TrafficHistory:
    """Per-slot deltas of cumulative counters: totals, drop reasons, relay interface copies.

    ``sample`` takes the counters' current totals; the first sample only sets the baseline.
    A counter that went down (a service restarted its books) counts as 0 for that slot.
    """

    def __init__(self, slots: int = TRAFFIC_SLOTS, period: float = TRAFFIC_PERIOD) -> None:
        self.slots = slots
        self.period = period
        self.times = Ring(slots)  # wall-clock seconds of each slot's end
        self.totals: dict[str, Ring] = {}
        self.families: dict[str, dict[str, Ring]] = {"drops": {}, "copies": {}}
        self._last: dict[tuple[str, str], int] | None = None
        self._next_at: float | None = None

    def due(self, now: float) -> bool:
        """True when a sample is due at monotonic ``now`` (and books the next one)."""
        if self._next_at is not None and now < self._next_at:
            return False
        self._next_at = now + self.period
        return True

    def sample(
        self,
        wall: float,
        totals: Mapping[str, int],
        families: Mapping[str, Mapping[str, int]],
    ) -> None:
        """One slot: the change of every counter since the previous sample."""
        current: dict[tuple[str, str], int] = {("", k): v for k, v in totals.items()}
        for family, values in families.items():
            for key, v in values.items():
                current[(family, key)] = current.get((family, key), 0) + v
        last, self._last = self._last, current
        if last is None:
            return
        self.times.push(int(wall))
        for name in totals:
            self._ring(self.totals, name).push(
                max(0, current[("", name)] - last.get(("", name), 0))
            )
        for family in self.families:
            deltas: dict[str, int] = {}
            for (fam, key), v in current.items():
                if fam == family:
                    delta = max(0, v - last.get((fam, key), 0))
                    if delta or key in self.families[family]:
                        deltas[key] = delta
            self._push_family(self.families[family], deltas)

    def _ring(self, rings: dict[str, Ring], name: str) -> Ring:
        ring = rings.get(name)
        if ring is None:
            ring = rings[name] = Ring(self.slots)
            for _ in range(self.times.count - 1):  # aligned with the time ring
                ring.push(0)
        return ring

    def _push_family(self, rings: dict[str, Ring], deltas: Mapping[str, int]) -> None:
        other = 0
        for key, delta in deltas.items():
            if key in rings or len(rings) < MAX_SERIES:
                self._ring(rings, key).push(delta)
            else:
                other += delta  # a closed set in practice; bounded anyway
        for key, ring in rings.items():
            if key not in deltas and key != OTHER:
                ring.push(0)
        if other or OTHER in rings:
            self._ring(rings, OTHER).push(other)

    def recent(self, name: str, seconds: float) -> int:
        """The sum of ``name``'s newest slots covering ``seconds``."""
        ring = self.totals.get(name)
        if ring is None:
            return 0
        return sum(ring.last(max(1, round(seconds / self.period))))

    def top(self, family: str, n: int) -> list[str]:
        """The ``n`` keys of ``family`` with the most over the window (ties by name)."""
        rings = self.families[family]
        totals = {k: sum(r.values()) for k, r in rings.items()}
        ranked = sorted((k for k, v in totals.items() if v), key=lambda k: (-totals[k], k))
        return ranked[:n]

    @property
    def nbytes(self) -> int:
        """Bytes held by every ring."""
        rings = [self.times, *self.totals.values()]
        for family in self.families.values():
            rings += family.values()
        return sum(r.nbytes for r in rings)

    def json(self, top_drops: int = 4) -> dict[str, Any]:
        """The window as ``/api/status`` ``traffic``: counts per slot, oldest first."""
        drops = self.top("drops", top_drops)
        return {
            "period": self.period,
            "slots": self.slots,
            "times": self.times.values(),
            "totals": {k: r.values() for k, r in sorted(self.totals.items())},
            "drops": {k: self.families["drops"][k].values() for k in drops},
            "copies": {k: r.values() for k, r in sorted(self.families["copies"].items())},
        }


@dataclass(slots=True)
class Tracked:
    """One client or station as the status page lists it."""

    key: str
    row: dict[str, Any]  # the /api/clients item, as last seen
    first_seen: float  # wall clock
    order: int  # first-seen sequence: stable rows
    totals: tuple[int, int, int, int] | None = None  # rx packets, rx bytes, tx packets, tx bytes
    rates: tuple[float, float, float, float] | None = None  # per second over the last slot
    spark_in: Ring | None = None
    spark_out: Ring | None = None
    slot_start: tuple[int, int, int, int] | None = None
    gone_at: float | None = None
    reason: str | None = None


def client_key(row: Mapping[str, Any]) -> str:
    """A stable identity for an ``/api/clients`` item: its kind, where, and which node."""
    kind = row.get("kind", "")
    if kind in ("dosbox", "browser", "peer", "uplink"):
        return f"{kind}|{row.get('role', '')}|{row.get('address', '')}"
    return f"{kind}|{row.get('interface', '')}|{row.get('node', '')}"


@dataclass(slots=True)
class ClientBooks:
    """Who is connected, since when, how fast, and who left recently and why.

    ``update`` takes the current ``/api/clients`` items, each optionally with cumulative
    ``(rx packets, rx bytes, tx packets, tx bytes)``; ``note_reason`` records why a key is
    about to go (a switch event), so its departure says so.
    """

    live: dict[str, Tracked] = field(default_factory=dict)
    departed: dict[str, Tracked] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    sparklines: int = 0
    _order: int = 0
    _next_slot: float | None = None

    def note_reason(self, key: str, reason: str) -> None:
        """Why ``key`` leaves, if it is gone at the next update (bounded like ``live``)."""
        if len(self.reasons) >= MAX_DEPARTED:
            self.reasons.pop(next(iter(self.reasons)))
        self.reasons[key] = reason

    def update(
        self,
        items: Iterable[tuple[dict[str, Any], tuple[int, int, int, int] | None]],
        now: float,
        wall: float,
    ) -> tuple[list[Tracked], list[Tracked]]:
        """Refresh from the current items; returns (joined, left) since the last update."""
        slot_due = self._next_slot is None or now >= self._next_slot
        if slot_due:
            self._next_slot = now + SPARK_PERIOD
        joined: list[Tracked] = []
        seen: set[str] = set()
        for row, totals in items:
            key = client_key(row)
            if key in seen:
                continue
            seen.add(key)
            entry = self.live.get(key)
            if entry is None:
                if len(self.live) >= MAX_TRACKED:
                    continue
                self._order += 1
                back = self.departed.pop(key, None)
                entry = Tracked(key, row, wall, self._order)
                if back is not None:
                    self.release(back)
                self.live[key] = entry
                self.reasons.pop(key, None)
                joined.append(entry)
            entry.row = row
            if totals is not None:
                self._count(entry, totals, slot_due)
        left: list[Tracked] = []
        for key in [k for k in self.live if k not in seen]:
            entry = self.live.pop(key)
            entry.gone_at = wall
            # No event said why: stations and peers go when silent past their TTL.
            entry.reason = self.reasons.pop(key, "expired")
            entry.rates = None
            self.departed[key] = entry
            left.append(entry)
        self._prune(wall)
        return joined, left

    def _count(self, entry: Tracked, totals: tuple[int, int, int, int], slot_due: bool) -> None:
        if entry.totals is not None and any(
            t < o for t, o in zip(totals, entry.totals, strict=True)
        ):
            entry.slot_start = None  # the same key, new books (it re-registered)
        entry.totals = totals
        if entry.spark_in is None and self.sparklines < MAX_SPARKLINES:
            entry.spark_in, entry.spark_out = Ring(SPARK_SLOTS), Ring(SPARK_SLOTS)
            self.sparklines += 1
        if entry.slot_start is None:
            entry.slot_start = totals
            return
        if not slot_due:
            return
        start, entry.slot_start = entry.slot_start, totals
        d = [max(0, t - s) for t, s in zip(totals, start, strict=True)]
        entry.rates = (
            d[0] / SPARK_PERIOD,
            d[1] / SPARK_PERIOD,
            d[2] / SPARK_PERIOD,
            d[3] / SPARK_PERIOD,
        )
        if entry.spark_in is not None and entry.spark_out is not None:
            entry.spark_in.push(d[0])
            entry.spark_out.push(d[2])

    def release(self, entry: Tracked) -> None:
        """Give back an entry's sparkline rings."""
        if entry.spark_in is not None:
            entry.spark_in = entry.spark_out = None
            self.sparklines -= 1

    def _prune(self, wall: float) -> None:
        for key in [
            k
            for k, e in self.departed.items()
            if e.gone_at is not None and wall - e.gone_at > DEPARTED_SECONDS
        ]:
            self.release(self.departed.pop(key))
        while len(self.departed) > MAX_DEPARTED:
            self.release(self.departed.pop(next(iter(self.departed))))

    @property
    def nbytes(self) -> int:
        """Bytes held by the sparkline rings."""
        return self.sparklines * 2 * Ring(SPARK_SLOTS).nbytes

    def entries(self) -> list[Tracked]:
        """Live and departed, in first-seen order: a row keeps its place until it goes."""
        return sorted([*self.live.values(), *self.departed.values()], key=lambda e: e.order)


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the status page's event list."""

    at: float  # wall clock
    kind: str  # join | leave | game | game_end | port_up | port_down
    text: str  # plain text; the page sets it as textContent


class EventLog:
    """The last ``MAX_EVENTS`` events, newest last."""

    def __init__(self, size: int = MAX_EVENTS) -> None:
        self._events: deque[Event] = deque(maxlen=size)

    def add(self, at: float, kind: str, text: str) -> None:
        """Record one event (the oldest falls off when full)."""
        self._events.append(Event(at, kind, text))

    def __len__(self) -> int:
        return len(self._events)

    def json(self) -> list[dict[str, Any]]:
        """Newest first."""
        return [{"at": e.at, "kind": e.kind, "text": e.text} for e in reversed(self._events)]
