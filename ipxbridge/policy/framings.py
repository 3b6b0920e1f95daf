"""Which Ethernet framing each native station speaks, for an ``ethernet`` port's ``auto``.

Contract:

1. **Learned from what the switch accepted.** The port reports a frame only after the switch
   has judged its packet and not dropped it (``io/segments.py``): a frame with a bad checksum,
   a spent hop count or a loop copy teaches nothing, so a stranger cannot move a station's
   unicasts to another framing, or add a framing to every broadcast, with frames the bridge
   refuses. Group (multicast) source MACs are never learned, as no station sends from one.
2. **Follows the station.** A station's framing is the one it last sent in: a station that
   changes frame type (a DOS PC rebooted with another NET.CFG) is followed rather than lost;
   one bound to several frame types accepts each of them, so following it is always safe.
   Unknown stations get ``fallback`` (802.2, the NetWare 3.12+ default frame type).
3. **Bounded and fair** (``tables.ProvenTable``, table ``framings``): a flood of new source
   MACs churns among the unproven entries and never pushes out a station heard over more
   than a second; evictions are counted.
4. **Forgets.** An entry not heard for ``FRAMING_TTL`` expires (``expire``, from the port's
   tick), so a framing that only an attacker's frames put in use stops costing a copy of
   every broadcast.
5. **Cheap per broadcast.** ``in_use`` is asked for every broadcast: it reads a count per
   framing kept up to date on every change, never scans the table.

Pure: the clock is passed in; no I/O.
"""

from collections import Counter
from typing import Final

from ipxbridge.policy.tables import ProvenTable
from ipxbridge.wire.ethernet import MAC_LEN, EthernetIpx, Framing

MAX_FRAMINGS: Final = 4_096  # stations per Ethernet port
# A station's framing is its driver's configuration and changes only when it reboots, so
# remembering it long costs little: at worst a framing only a stranger spoke keeps costing one
# copy of each broadcast for this long after the stranger stops. Forgetting a quiet station
# costs far more: it hears nothing in its framing until it speaks again (the switch forgets
# where a node is after 300 s; its framing outlives that). Half an hour covers a LAN party's
# pauses between games.
FRAMING_TTL: Final = 1_800.0


class FramingLearner:
    """Station MAC to the framing it speaks (module docstring)."""

    __slots__ = ("_in_use", "_table", "fallback", "ttl")

    def __init__(
        self,
        evictions: Counter[tuple[str, str]] | None = None,
        *,
        max_entries: int = MAX_FRAMINGS,
        fallback: Framing = Framing.LLC,
        ttl: float = FRAMING_TTL,
    ) -> None:
        """A learner of at most ``max_entries`` stations; evictions counted in ``evictions``.

        Raises:
            ValueError: ``max_entries`` below 2 (each tier needs a place).
        """
        if max_entries < 2:
            raise ValueError("max_entries must be at least 2")
        self.fallback: Final = fallback
        self.ttl: Final = ttl
        self._in_use: Counter[Framing] = Counter()  # stations per framing (rule 5)
        self._table: ProvenTable[bytes, Framing] = ProvenTable(
            max_entries,
            "framings",
            Counter() if evictions is None else evictions,
            on_remove=self._uncount,
        )

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, mac: object) -> bool:
        return mac in self._table

    def observe(self, src_mac: bytes, framing: Framing, now: float) -> None:
        """Record that ``src_mac`` sent a frame in ``framing`` that the switch accepted."""
        if len(src_mac) != MAC_LEN or src_mac[0] & 0x01:  # I/G bit: group address
            return
        table = self._table
        before = table.get(src_mac)
        if before is None or before[0] is not framing:
            if before is not None:
                self._uncount(src_mac, before[0])
            self._in_use[framing] += 1
        table.learn(src_mac, framing, now)

    def observe_frame(self, frame: EthernetIpx, now: float) -> None:
        """Record the source and framing of a parsed frame the switch accepted."""
        self.observe(frame.src_mac, frame.framing, now)

    def _uncount(self, _mac: bytes, framing: Framing) -> None:
        in_use = self._in_use
        in_use[framing] -= 1
        if not in_use[framing]:
            del in_use[framing]

    def in_use(self) -> tuple[Framing, ...]:
        """Every framing some known station speaks (the fallback if none).

        A broadcast goes out once in each: a station accepts only the frame types it is
        bound to.
        """
        return tuple(self._in_use) or (self.fallback,)

    def framing_for(self, mac: bytes) -> Framing:
        """The framing to send to ``mac`` in: learned, or the fallback. Does not refresh."""
        known = self._table.get(mac)
        return self.fallback if known is None else known[0]

    def expire(self, now: float) -> int:
        """Forget stations not heard for ``ttl`` (rule 4); returns how many."""
        return self._table.expire(now, self.ttl)

    def forget(self, mac: bytes) -> None:
        """Drop what was learned about ``mac``."""
        self._table.pop(mac)
