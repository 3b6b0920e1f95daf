"""Hot-path accounting in plain integers, written by ``io/`` and read by ``obs/metrics``.

Every datagram received is counted once as forwarded, control or dropped with a reason, so
``received == forwarded + control + sum(dropped)`` always holds (the "nothing is lost
silently" rule). A coalesced batch is a control datagram, and each packet in it is counted
as received with its own outcome (policy/switch.py rule 1). Copies are counted separately:
one forwarded broadcast becomes many copies, and a copy the kernel refuses is a send error by
errno name, never silently lost.

Plain slot integers cost ~40 ns per increment against ~2.7 us for a labelled
prometheus_client counter (docs/architecture.md B1); the exposition reads these at scrape time.
Nothing here imports prometheus_client, so the I/O layer can report without it.
"""

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

# The ``interface`` of the tunnel's UDP socket in every port label: it listens on an address,
# not an interface. Its ports are ("dosbox", TUNNEL) and ("peer", TUNNEL) (docs/metrics.md).
TUNNEL: Final = "tunnel"


class IpxCounters:
    """Counters of the IPX tunnel."""

    __slots__ = (
        "bytes_sent",
        "control",
        "copies_dropped",
        "copies_sent",
        "dropped",
        "forgiven",
        "forward_kinds",
        "forwarded",
        "held_repeat",
        "held_unverified",
        "port_copies",
        "port_outcomes",
        "port_received",
        "read_datagrams",
        "reads",
        "received",
        "received_bytes",
        "recv_errors",
        "send_errors",
        "table_evictions",
    )

    def __init__(self) -> None:
        self.received = 0
        self.received_bytes = 0
        self.forwarded = 0
        self.control = 0
        self.copies_sent = 0
        self.bytes_sent = 0
        self.recv_errors = 0
        # Copies not sent to unverified clients over the reflection limit (switch rule 2).
        self.held_unverified = 0
        # Copies not sent: that port had the same packet within the window (switch rule 9).
        self.held_repeat = 0
        self.dropped: Counter[str] = Counter()
        self.forward_kinds: Counter[str] = Counter()
        # Copies the kernel refused, by (kind, interface, errno name) of the port sending them.
        self.send_errors: Counter[tuple[str, str, str]] = Counter()
        # The same books per port kind and interface: (kind, interface) received,
        # and (kind, interface, outcome, drop reason or "") for what became of them.
        self.port_received: Counter[tuple[str, str]] = Counter()
        self.port_outcomes: Counter[tuple[str, str, str, str]] = Counter()
        # Copies sent by every port, by (kind, interface); copies_sent is the tunnel's total.
        self.port_copies: Counter[tuple[str, str]] = Counter()
        # Copies a port could not carry, by (kind, interface, reason): frame_too_large,
        # unproven_host, group_node (io/segments.py); internal_error
        # (io/ipx_endpoint.IpxEndpoint.fault).
        self.copies_dropped: Counter[tuple[str, str, str]] = Counter()
        # Entries pushed out of a bounded table, by (table, reason): learned nodes, framings,
        # bridges heard on a segment, port links (policy/tables.py).
        self.table_evictions: Counter[tuple[str, str]] = Counter()
        # Reads of the tunnel socket and the datagrams they found, by mode: "wakeup" (the
        # socket woke the loop) or "timed" (a drain under load, policy/pacing.py).
        self.reads: Counter[str] = Counter()
        self.read_datagrams: Counter[str] = Counter()
        # Packets taken that the strict spec refuses, by (kind, interface, reason): ipxbox's
        # checksum 0x0000 and transport-control mark 127 (wire/ipx.forgiven).
        self.forgiven: Counter[tuple[str, str, str]] = Counter()

    @property
    def dropped_total(self) -> int:
        """Sum of drops over all reasons."""
        return sum(self.dropped.values())

    def summary(self) -> str:
        """One line for the log on stop."""
        drops = ", ".join(f"{k}={v}" for k, v in sorted(self.dropped.items())) or "none"
        errors = (
            ", ".join(f"{i}/{k}/{e}={v}" for (k, i, e), v in sorted(self.send_errors.items()))
            or "none"
        )
        return (
            f"received={self.received} forwarded={self.forwarded} control={self.control} "
            f"dropped={self.dropped_total} ({drops}) copies_sent={self.copies_sent} "
            f"port_copies_sent={sum(self.port_copies.values()) - self.copies_sent} "
            f"copies_held_unverified={self.held_unverified} "
            f"send_errors=({errors})"
        )


@dataclass(slots=True)
class RelayCounters:
    """Relay accounting; every received datagram is relayed or dropped with one reason.

    ``received`` counts datagrams read from every relay socket (relay ports, flow sockets,
    return sockets) and ``received_by_ifindex`` the same datagrams by ingress interface, so
    both sum to the same total. ``replies`` is the part of ``relayed`` that went from a host
    back to a player.
    """

    received: int = 0
    received_bytes: int = 0
    received_by_ifindex: Counter[int] = field(default_factory=Counter)
    relayed: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    copies: Counter[str] = field(default_factory=Counter)  # by egress interface
    send_errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (iface, errno)
    sockaddr_rewrites: int = 0
    replies: int = 0  # host -> player datagrams through the flow table (rewrite mode)
    flows_evicted: Counter[str] = field(default_factory=Counter)  # policy/flows.py reasons
    flows_refused: Counter[str] = field(default_factory=Counter)  # policy/flows.py reasons

    def balanced(self) -> bool:
        """True when every received datagram has exactly one recorded outcome."""
        outcomes = self.relayed + sum(self.dropped.values())
        return self.received == outcomes == sum(self.received_by_ifindex.values())

    def count_received(self, data: bytes, ifindex: int) -> None:
        """One datagram read from a relay socket on interface ``ifindex``."""
        self.received += 1
        self.received_bytes += len(data)
        self.received_by_ifindex[ifindex] += 1

    def summary(self) -> str:
        """One line for the log on stop."""
        drops = ", ".join(f"{k}={v}" for k, v in sorted(self.dropped.items())) or "none"
        copies = ", ".join(f"{k}={v}" for k, v in sorted(self.copies.items())) or "none"
        errs = ", ".join(f"{i}/{e}={v}" for (i, e), v in sorted(self.send_errors.items()))
        return (
            f"received={self.received} relayed={self.relayed} dropped="
            f"{sum(self.dropped.values())} ({drops}) copies=({copies}) "
            f"send_errors=({errs or 'none'}) replies={self.replies}"
        )


# Forwarding latency buckets: 25 us .. 10 ms (docs/architecture.md B1).
BUCKETS: Final = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3)


@dataclass(slots=True)
class LatencyHistogram:
    """A histogram in plain integers (sampled by the caller)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        """Count one observation."""
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds
