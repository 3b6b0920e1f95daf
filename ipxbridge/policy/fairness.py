"""Per-source fairness on the relay's receive path (reliability.md R13). Pure.

A flood from one source must not starve the others. Before, the Python path decided,
inspected and copied datagrams in arrival order, 256 per wake-up: a source sending faster
than that filled the socket, the kernel dropped whatever came next whoever sent it, and a
10 pps player behind the flood lost most of its broadcasts and waited for the rest.

Now each wake-up reads the socket until it is empty (bounded; reading is the cheap part)
into one FIFO queue per source address, and a *turn* takes at most ``budget`` datagrams
round robin: one from each source that has something waiting, then again, each source served
moving to the back. Turns follow each other until the queues are empty. So a quiet source
waits for at most one round whatever its neighbour sends, and a flooder's excess is dropped
where it costs least: its queue is full (``per_source``), and the datagram is counted as
``fair_share`` without being decided, inspected or copied. Since reading keeps up, the
kernel's receive buffer, whose drops cannot tell sources apart, does not overflow first.

Bounded: ``per_source`` datagrams per source, ``max_items`` datagrams and ``max_bytes`` in
all. A flood from many (spoofed) sources fills the totals and then loses new datagrams
whoever sends them: per-source fairness cannot help there; on-link source checks can.
"""

from collections import deque
from typing import Final, Generic, TypeVar

T = TypeVar("T")

PER_SOURCE: Final = 256  # about 60 ms of a 4000 pps source; a flooder's excess beyond it drops
MAX_ITEMS: Final = 4096
MAX_BYTES: Final = 8 << 20


class FairQueue(Generic[T]):
    """FIFO queues by source, served round robin; bounded. See the module rules."""

    def __init__(
        self, per_source: int = PER_SOURCE, max_items: int = MAX_ITEMS, max_bytes: int = MAX_BYTES
    ) -> None:
        self.per_source = per_source
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._queues: dict[str, deque[tuple[T, int]]] = {}
        # the round: sources with something waiting, next to serve first (a deque: a dict used
        # as the round leaves a hole at its front per source served, which every later turn
        # walks past)
        self._round: deque[str] = deque()
        self._items = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._items

    @property
    def sources(self) -> int:
        """Sources with something waiting."""
        return len(self._queues)

    def push(self, source: str, item: T, size: int) -> bool:
        """Queue ``item`` (``size`` bytes) from ``source``; False if it must be dropped."""
        if self._items >= self.max_items or self._bytes + size > self.max_bytes:
            return False
        queue = self._queues.get(source)
        if queue is None:
            queue = self._queues[source] = deque()
            self._round.append(source)
        elif len(queue) >= self.per_source:
            return False
        queue.append((item, size))
        self._items += 1
        self._bytes += size
        return True

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
        self._items -= len(out)
        return out

    def clear(self) -> list[T]:
        """Empty the queues; what they held, in no particular order."""
        out = [item for queue in self._queues.values() for item, _ in queue]
        self._queues.clear()
        self._round.clear()
        self._items = self._bytes = 0
        return out
