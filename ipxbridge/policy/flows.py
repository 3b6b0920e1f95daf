"""Rewrite-mode flow table: which (player, egress) flows keep their socket when sockets run out.

In ``rewrite`` source mode every relayed copy leaves from a *flow* socket, one per (player,
egress), so that a host's answer can be told apart and passed back to its player
(``io/relay.py``). Each flow is a file descriptor, so the table is bounded; and a broadcast from
a spoofed source is a single datagram, so a flood of them must not be able to fill the table
and lock real players out until the flows idle out (docs/reliability.md R16, §0 item 9:
per-source state bounded; R16). The rules:

1. **Standing.** A flow is *unproven* until its player shows up again after a host answered
   it: another broadcast on the answered flow, a datagram from the player to the return socket
   the answer came from (a two-way exchange, which a spoofer cannot complete), or a new flow
   of a player answered within ``remember`` seconds (a socketless record of players, so the
   proof outlives a flow that was evicted meanwhile). Then it is *proven*. A host's answer on
   its own proves nothing: hosts answer spoofed enumerations as readily as real ones.
2. **Two pools.** At most ``max_unproven`` unproven flows and ``max_flows - max_unproven``
   proven ones: unproven flows never push out proven ones, and every new flow finds room in
   its own pool.
3. **Evict, never refuse.** A new flow whose pool is full evicts one: for the unproven pool
   the oldest flow that was already answered (its answer has been passed on), else the least
   recently used one still waiting (``unproven_full``); for the proven pool the least recently
   used (``proven_full``). So a player's broadcast always gets a flow, a flow still waiting
   for its answer is the last to go, and the sockets held under a flood of one-packet sources
   stay at ``max_unproven``.
4. **Per source.** At most ``max_per_source`` flows per player IP address (over all its
   ports and egresses); beyond that the address's own lowest-standing, least recently used
   flow is evicted (``per_source``): one address spraying ports only churns its own flows.
5. Flows idle for ``idle`` seconds expire.

Pure: ``now`` is passed in. ``io/relay.py`` opens and closes the sockets this table decides on.
"""

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

Address = tuple[str, int]
FlowKey = tuple[Address, int]  # (player address, egress interface index)

UNPROVEN_FULL: Final = "unproven_full"
PROVEN_FULL: Final = "proven_full"
PER_SOURCE: Final = "per_source"
FLOW_EVICTION_REASONS: Final = (UNPROVEN_FULL, PROVEN_FULL, PER_SOURCE)
# Why the I/O layer could not open a flow's socket (the copy is not sent): no descriptor left,
# or the kernel refused the socket (e.g. the address went away before netlink said so).
FLOW_REFUSAL_REASONS: Final = ("no_fd", "socket_error")


@dataclass(frozen=True)
class FlowLimits:
    """Bounds of the flow table (config ``relay.max_flows`` and friends)."""

    max_flows: int = 1024  # sockets for flows in all (unproven + proven)
    max_unproven: int = 128  # of which unproven at most
    max_per_source: int = 16  # flows per player IP address
    idle: float = 120.0  # seconds without traffic before a flow expires
    remember: float = 60.0  # seconds an answered player counts as coming back
    max_remembered: int = 16_384  # players remembered (no socket: about 100 bytes each)
    # Return sockets (player -> host, opened on a host's first answer): they expire after
    # ``idle`` as flows do; past this many a new answer is dropped as flow_limit.
    max_returns: int = 1024

    def __post_init__(self) -> None:
        """Check the bounds fit together.

        Raises:
            ValueError: a limit below 1, or no room left for proven flows.
        """
        if min(self.max_unproven, self.max_per_source, self.max_remembered) < 1:
            raise ValueError("flow limits must be at least 1")
        if self.max_unproven >= self.max_flows:
            raise ValueError("max_unproven must be smaller than max_flows")


@dataclass(frozen=True)
class Admission:
    """What ``FlowTable.admit`` decided: open a socket if ``created``; close the evicted."""

    created: bool
    proven: bool
    evicted: tuple[tuple[FlowKey, str], ...] = ()  # (flow, reason), closed before opening


@dataclass
class _Entry:
    last_used: float
    answered: bool = False


class FlowTable:
    """Flow standings, pools and evictions. See the module rules."""

    def __init__(self, limits: FlowLimits | None = None) -> None:
        self.limits = limits or FlowLimits()
        # Three ordered dicts, oldest first (a use moves an entry to the end): unproven flows
        # still waiting for an answer, unproven flows already answered, proven flows.
        # OrderedDicts, so taking the oldest is O(1) (policy/dedup.py says why).
        self._waiting: OrderedDict[FlowKey, _Entry] = OrderedDict()
        self._answered: OrderedDict[FlowKey, _Entry] = OrderedDict()
        self._proven: OrderedDict[FlowKey, _Entry] = OrderedDict()
        self._by_ip: dict[str, dict[FlowKey, None]] = {}
        # answered players, oldest answer first
        self._remembered: OrderedDict[Address, float] = OrderedDict()

    # --- queries -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._waiting) + len(self._answered) + len(self._proven)

    def __contains__(self, key: object) -> bool:
        return key in self._waiting or key in self._answered or key in self._proven

    @property
    def unproven(self) -> int:
        """Unproven flows (waiting for an answer or answered once)."""
        return len(self._waiting) + len(self._answered)

    @property
    def proven(self) -> int:
        """Proven flows."""
        return len(self._proven)

    def is_proven(self, key: FlowKey) -> bool:
        """Whether ``key`` is a proven flow."""
        return key in self._proven

    # --- events ----------------------------------------------------------------------------

    def admit(self, key: FlowKey, now: float) -> Admission:
        """A player's broadcast leaves by egress ``key[1]``: use its flow, or make room for one.

        A flow that was answered and is used again is promoted (rule 1).
        """
        pool = self._pool_of(key)
        if pool is not None:
            entry = pool.pop(key)
            entry.last_used = now
            if pool is self._answered:  # the player came back after an answer
                return Admission(False, True, self._insert_proven(key, entry))
            pool[key] = entry
            return Admission(False, pool is self._proven)
        evicted: list[tuple[FlowKey, str]] = []
        same_ip = self._by_ip.get(key[0][0])
        if same_ip is not None and len(same_ip) >= self.limits.max_per_source:
            victim = min(same_ip, key=self._rank)
            self._remove(victim)
            evicted.append((victim, PER_SOURCE))
        entry = _Entry(now)
        proven = self._came_back(key[0], now)
        if proven:
            evicted += self._insert_proven(key, entry)
        else:
            if self.unproven >= self.limits.max_unproven:
                victim = next(iter(self._answered or self._waiting))
                self._remove(victim)
                evicted.append((victim, UNPROVEN_FULL))
            self._waiting[key] = entry
            self._by_ip.setdefault(key[0][0], {})[key] = None
        return Admission(True, proven, tuple(evicted))

    def answered(self, key: FlowKey, now: float) -> None:
        """A host's answer on ``key`` reached its player (``key`` may be gone by now).

        Remembers the player (rule 1) without moving the flow in the eviction order: answers
        to spoofed sources must not push flows still waiting for theirs towards eviction.
        """
        player = key[0]
        self._remembered.pop(player, None)
        self._remembered[player] = now
        while len(self._remembered) > self.limits.max_remembered:
            del self._remembered[next(iter(self._remembered))]
        entry = self._waiting.pop(key, None)
        if entry is not None:
            entry.answered = True
            self._answered[key] = entry

    def confirmed(self, key: FlowKey, now: float) -> tuple[tuple[FlowKey, str], ...]:
        """The player wrote to a return socket of ``key``: proven (returns the evictions)."""
        pool = self._pool_of(key)
        if pool is None:
            return ()
        entry = pool.pop(key)
        entry.last_used = now
        if pool is self._proven:
            pool[key] = entry
            return ()
        return self._insert_proven(key, entry)

    def touch(self, key: FlowKey, now: float) -> None:
        """Traffic on ``key`` that proves nothing: it only stays alive (and recent)."""
        pool = self._pool_of(key)
        if pool is not None:
            entry = pool.pop(key)
            entry.last_used = now
            pool[key] = entry

    def remove(self, key: FlowKey) -> None:
        """Forget ``key`` (its socket was closed for another reason). No-op if absent."""
        if key in self:
            self._remove(key)

    def expire(self, now: float) -> list[FlowKey]:
        """Remove and return the flows idle for longer than ``limits.idle``."""
        idle = self.limits.idle
        gone: list[FlowKey] = []
        for pool in (self._waiting, self._answered, self._proven):
            # Oldest use first in each pool except ``_answered`` (ordered by answer): scan
            # that one whole; it holds at most ``max_unproven``.
            for key, entry in list(pool.items()):
                if now - entry.last_used <= idle:
                    if pool is not self._answered:
                        break
                    continue
                gone.append(key)
        for key in gone:
            self._remove(key)
        remember = self.limits.remember
        while self._remembered:
            player, at = next(iter(self._remembered.items()))
            if now - at <= remember:
                break
            del self._remembered[player]
        return gone

    # --- internals ---------------------------------------------------------------------------

    def _pool_of(self, key: FlowKey) -> dict[FlowKey, _Entry] | None:
        for pool in (self._waiting, self._answered, self._proven):
            if key in pool:
                return pool
        return None

    def _came_back(self, player: Address, now: float) -> bool:
        at = self._remembered.get(player)
        return at is not None and now - at <= self.limits.remember

    def _rank(self, key: FlowKey) -> tuple[int, float]:
        """Eviction order within one source: answered, then waiting, then proven; LRU."""
        for standing, pool in enumerate((self._answered, self._waiting, self._proven)):
            entry = pool.get(key)
            if entry is not None:
                return standing, entry.last_used
        raise KeyError(key)  # a bug: _by_ip and the pools disagree

    def _insert_proven(self, key: FlowKey, entry: _Entry) -> tuple[tuple[FlowKey, str], ...]:
        """Add ``key`` (already out of the other pools) to the proven pool, evicting if full."""
        evicted: tuple[tuple[FlowKey, str], ...] = ()
        if len(self._proven) >= self.limits.max_flows - self.limits.max_unproven:
            victim = next(iter(self._proven))
            self._remove(victim)
            evicted = ((victim, PROVEN_FULL),)
        self._proven[key] = entry
        self._by_ip.setdefault(key[0][0], {})[key] = None
        return evicted

    def _remove(self, key: FlowKey) -> None:
        for pool in (self._waiting, self._answered, self._proven):
            if pool.pop(key, None) is not None:
                break
        same_ip = self._by_ip.get(key[0][0])
        if same_ip is not None:
            same_ip.pop(key, None)
            if not same_ip:
                del self._by_ip[key[0][0]]
