"""Bounded reassembly of DirectPlay PACKET (0x15) / PACKET2_DATA (0x30) fragments.

Contract ([MC-DPL4CS] 2.2.41, docs/protocols.md 1.7, docs/reliability.md 1.6 and R4):

* Rule 1. Memory is budgeted by bytes *actually held*, checked on every fragment, globally and
  per source. Nothing is allocated from a claimed size: a first fragment claiming 4 GiB holds
  only its own data. (The Linux kernel learned "check on every fragment" in 2018.)
* Rule 2. A claimed message larger than ``max_message_size`` or with more than
  ``max_fragments`` fragments is refused at once; so is a fragment whose index, offset or size
  does not fit its own claims, or that contradicts earlier fragments of the same message.
* Rule 3. A message that receives no fragment for ``expiry`` seconds (15 s in the spec) is
  discarded (``expire`` is called from a timer, so each fragment costs O(1)). At most
  ``max_messages_per_source`` messages per source are in flight.
* Rule 4. A complete message is the concatenation of the fragments' data in offset order and
  is returned once; it is itself a DirectPlay message starting at ``play``.

Pure: the clock is passed in. Refusals are returned as reasons, never raised.
"""

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final
from uuid import UUID

from ipxbridge.wire.directplay import PacketFragment

REASSEMBLY_REASONS: Final = (
    "reassembly_too_large",
    "reassembly_bad_fragment",
    "reassembly_inconsistent",
    "reassembly_budget",
)


@dataclass(frozen=True)
class ReassemblyLimits:
    """Budgets. Defaults follow docs/reliability.md 1.6 (measured: 17.8 MB peak RSS under flood)."""

    max_message_size: int = 64 * 1024
    max_fragments: int = 128
    max_messages_per_source: int = 8
    source_budget: int = 256 * 1024
    global_budget: int = 4 * 1024 * 1024
    expiry: float = 15.0


@dataclass
class _Partial:
    source: Hashable
    total_packets: int
    message_size: int
    last_seen: float
    held: int = 0
    parts: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # index -> (offset, data)


@dataclass(frozen=True)
class ReassemblyResult:
    """What one fragment produced: a complete message, a refusal, or neither (stored)."""

    message: bytes | None = None
    refused: str | None = None


class Reassembler:
    """Collects fragments per (source, message GUID) within fixed memory budgets."""

    def __init__(self, limits: ReassemblyLimits | None = None) -> None:
        self.limits = limits or ReassemblyLimits()
        self._partials: dict[tuple[Hashable, UUID], _Partial] = {}
        self._held_by_source: dict[Hashable, int] = {}
        self._count_by_source: dict[Hashable, int] = {}
        self.held = 0  # bytes currently reserved, all sources
        self.completed = 0

    def __len__(self) -> int:
        return len(self._partials)

    def add(self, source: Hashable, frag: PacketFragment, now: float) -> ReassemblyResult:
        """Offer one fragment; see the module rules."""
        lim = self.limits
        if frag.message_size > lim.max_message_size or frag.total_packets > lim.max_fragments:
            return ReassemblyResult(refused="reassembly_too_large")
        size = len(frag.data)
        if (
            frag.total_packets < 1
            or frag.packet_index >= frag.total_packets
            or size != frag.data_size
            or frag.offset + size > frag.message_size
        ):
            return ReassemblyResult(refused="reassembly_bad_fragment")
        if frag.total_packets == 1 and size == frag.message_size:
            self.completed += 1
            return ReassemblyResult(message=bytes(frag.data))
        key = (source, frag.message_guid)
        partial = self._partials.get(key)
        if partial is not None and now - partial.last_seen > lim.expiry:
            self._remove(key)  # expire() runs from a timer; a stale entry is never extended
            partial = None
        if partial is None:
            if self._count_by_source.get(source, 0) >= lim.max_messages_per_source:
                return ReassemblyResult(refused="reassembly_budget")
            partial = _Partial(source, frag.total_packets, frag.message_size, now)
        elif (partial.total_packets, partial.message_size) != (
            frag.total_packets,
            frag.message_size,
        ):
            return ReassemblyResult(refused="reassembly_inconsistent")
        if frag.packet_index in partial.parts:
            partial.last_seen = now  # a retransmission: nothing new to hold
            return ReassemblyResult()
        if (
            self.held + size > lim.global_budget
            or self._held_by_source.get(source, 0) + size > lim.source_budget
        ):
            return ReassemblyResult(refused="reassembly_budget")
        if key not in self._partials:
            self._partials[key] = partial
            self._count_by_source[source] = self._count_by_source.get(source, 0) + 1
        partial.parts[frag.packet_index] = (frag.offset, bytes(frag.data))
        partial.held += size
        partial.last_seen = now
        self._reserve(source, size)
        if len(partial.parts) < partial.total_packets:
            return ReassemblyResult()
        self._remove(key)
        ordered = sorted(partial.parts.values())
        message = b"".join(data for _, data in ordered)
        contiguous = all(
            ordered[i][0] + len(ordered[i][1]) == ordered[i + 1][0] for i in range(len(ordered) - 1)
        )
        if not contiguous or len(message) != partial.message_size or ordered[0][0] != 0:
            return ReassemblyResult(refused="reassembly_inconsistent")
        self.completed += 1
        return ReassemblyResult(message=message)

    def expire(self, now: float) -> int:
        """Drop messages idle for longer than the expiry; returns how many."""
        expiry = self.limits.expiry
        stale = [k for k, p in self._partials.items() if now - p.last_seen > expiry]
        for key in stale:
            self._remove(key)
        return len(stale)

    def _reserve(self, source: Hashable, size: int) -> None:
        self.held += size
        self._held_by_source[source] = self._held_by_source.get(source, 0) + size

    def _remove(self, key: tuple[Hashable, UUID]) -> None:
        partial = self._partials.pop(key)
        source = partial.source
        self.held -= partial.held
        left = self._held_by_source[source] - partial.held
        count = self._count_by_source[source] - 1
        if count:
            self._held_by_source[source] = left
            self._count_by_source[source] = count
        else:
            del self._held_by_source[source]
            del self._count_by_source[source]
