"""Per-source fairness on the relay's receive path (docs/reliability.md R13). Pure.

A flood from one source must not starve the others. Before, the Python path decided,
inspected and copied datagrams in arrival order, 256 per wake-up: a source sending faster
than that filled the socket, the kernel dropped whatever came next whoever sent it, and a
10 pps player behind the flood lost most of its broadcasts and waited for the rest.

Rules:

1. One FIFO queue per source address; a *turn* takes at most ``budget`` datagrams round
   robin: one from each source that has something waiting, then again, each source served
   moving to the back. A quiet source waits for at most one round whatever its neighbour
   sends.
2. Bounded in all: ``max_items`` datagrams and ``max_bytes``. While there is room, any source
   may use it: one busy source alone is no reason to drop (a burst waits its turn).
3. When the items are full, the source holding the most gives way: a datagram from a source
   already at or above its share (``max_items`` over the sources waiting) is dropped; from
   any other source it takes the place of the newest datagram of the longest queue. The
   datagram that loses (``push``'s result) is counted ``fair_share`` by the caller, without
   being decided, inspected or copied.
4. The byte budget is a backstop against large datagrams: over it, the incoming datagram is
   dropped.

A flood from many (spoofed) sources fills the totals and then every source is at its share:
per-source fairness cannot help there; on-link source checks can. The caller (io/relay.py)
reads the socket empty into the queue at each wake-up, so the kernel's buffer, whose drops
cannot tell sources apart, does not overflow first.
"""

from collections import deque
from typing import Final, Generic, TypeVar

T = TypeVar("T")

MAX_ITEMS: Final = 1024  # a lone source's backlog: ~70 ms of what the Python path serves
MAX_BYTES: Final = 8 << 20


class FairQueue(Generic[T]):
    """FIFO queues by source, served round robin; bounded. See the module rules."""

    def __init__(self, max_items: int = MAX_ITEMS, max_bytes: int = MAX_BYTES) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._queues: dict[str, deque[tuple[T, int]]] = {}
        # the round: sources with something waiting, next to serve first (a deque: a dict used
        # as the round leaves a hole at its front per source served, which every later turn
        # walks past)
        self._round: deque[str] = deque()
        self._fat: str | None = None  # the longest queue as last seen (rule 3), or None
        self._items = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._items

    @property
    def sources(self) -> int:
        """Sources with something waiting."""
        return len(self._queues)

    def push(self, source: str, item: T, size: int) -> T | None:
        """Queue ``item`` (``size`` bytes) from ``source``; the datagram that loses, if any.

        None when everything fits; else ``item`` itself or the one it displaced (rule 3).
        """
        if self._bytes + size > self.max_bytes:
            return item  # rule 4
        queues = self._queues
        queue = queues.get(source)
        lost: T | None = None
        if self._items >= self.max_items:
            waiting = len(queues) + (queue is None)
            mine = len(queue) if queue is not None else 0
            if mine >= self.max_items // waiting:
                return item
            fat = self._longest()
            lost, lost_size = queues[fat].pop()  # its newest: the oldest keep their turn
            self._items -= 1
            self._bytes -= lost_size
            if not queues[fat]:  # cannot happen while it is over its share; stay consistent
                del queues[fat]
                self._round.remove(fat)
                self._fat = None
        if queue is None:
            queue = queues[source] = deque()
            self._round.append(source)
        queue.append((item, size))
        self._items += 1
        self._bytes += size
        known = self._fat
        if known is None or (known != source and len(queue) > len(queues.get(known, ()))):
            self._fat = source
        return lost

    def _longest(self) -> str:
        """The source with the longest queue (rule 3): the one last seen longest, checked."""
        fat = self._fat
        queues = self._queues
        if fat is None or fat not in queues:
            fat = max(queues, key=lambda s: len(queues[s]))  # rare: after that one emptied
        else:
            share = self.max_items // len(queues)
            if len(queues[fat]) <= share:  # it may have been served since: look again
                fat = max(queues, key=lambda s: len(queues[s]))
        self._fat = fat
        return fat

    def take(self, budget: int) -> list[T]:
        """Up to ``budget`` items, round robin over the sources, oldest first in each."""
        out: list[T] = []
        queues, round_ = self._queues, self._round
        while round_ and len(out) < budget:
            source = round_.popleft()  # served, then to the back of the round
            queue = queues[source]
            item, size = queue.popleft()
            out.append(item)
            self._bytes -= size
            if queue:
                round_.append(source)
            else:
                del queues[source]
                if source == self._fat:
                    self._fat = None
        self._items -= len(out)
        return out

    def clear(self) -> list[T]:
        """Empty the queues; what they held, in no particular order."""
        out = [item for queue in self._queues.values() for item, _ in queue]
        self._queues.clear()
        self._round.clear()
        self._fat = None
        self._items = self._bytes = 0
        return out
