"""Hot-path accounting in plain integers.

Every datagram received is counted once as forwarded, control or dropped with a reason, so
``received == forwarded + control + sum(dropped)`` always holds (the "nothing is lost
silently" rule). Copies are counted separately: one forwarded broadcast becomes many copies,
and a copy the kernel refuses is a send error by errno name, never silently lost.

Plain slot integers cost ~40 ns per increment against ~2.7 us for a labelled
prometheus_client counter (house style B1); the exposition reads these at scrape time.
"""

from collections import Counter


class IpxCounters:
    """Counters of the IPX tunnel."""

    __slots__ = (
        "bytes_sent",
        "control",
        "copies_sent",
        "dropped",
        "forward_kinds",
        "forwarded",
        "held_unverified",
        "received",
        "received_bytes",
        "recv_errors",
        "send_errors",
    )

    def __init__(self) -> None:
        self.received = 0
        self.received_bytes = 0
        self.forwarded = 0
        self.control = 0
        self.copies_sent = 0
        self.bytes_sent = 0
        self.recv_errors = 0
        # Copies not sent to unverified clients over their budget (policy/switch.py rule 2).
        self.held_unverified = 0
        self.dropped: Counter[str] = Counter()
        self.forward_kinds: Counter[str] = Counter()
        self.send_errors: Counter[str] = Counter()

    @property
    def dropped_total(self) -> int:
        """Sum of drops over all reasons."""
        return sum(self.dropped.values())

    def summary(self) -> str:
        """One line for the log on stop."""
        drops = ", ".join(f"{k}={v}" for k, v in sorted(self.dropped.items())) or "none"
        errors = ", ".join(f"{k}={v}" for k, v in sorted(self.send_errors.items())) or "none"
        return (
            f"received={self.received} forwarded={self.forwarded} control={self.control} "
            f"dropped={self.dropped_total} ({drops}) copies_sent={self.copies_sent} "
            f"copies_held_unverified={self.held_unverified} "
            f"send_errors=({errors})"
        )
