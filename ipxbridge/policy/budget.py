"""A send budget in packets and bytes per second (token buckets), with the clock passed in.

Pure: ``now`` is a parameter, nothing here reads a clock. The switch gives one to each client
that registered but has not yet proved it receives at its address (policy/switch.py rule 2):
what the bridge sends toward such an address is what it earned by its own traffic plus the
base rate configured (none by default).
"""

from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    """Two token buckets, packets and bytes, that must both allow a send.

    Attributes:
        packet_rate: packets added per second.
        packet_burst: most packets that can be sent at once.
        byte_rate: bytes added per second.
        byte_burst: most bytes that can be sent at once (at least one full packet).
        packets: packet tokens left.
        bytes_left: byte tokens left.
        updated: when the tokens were last topped up.
    """

    packet_rate: float
    packet_burst: int
    byte_rate: float
    byte_burst: int
    packets: float
    bytes_left: float
    updated: float

    @classmethod
    def full(
        cls, packet_rate: float, packet_burst: int, byte_rate: float, byte_burst: int, now: float
    ) -> "TokenBucket":
        """A bucket that starts with its whole burst available."""
        return cls(
            packet_rate,
            packet_burst,
            byte_rate,
            byte_burst,
            float(packet_burst),
            float(byte_burst),
            now,
        )

    def take(self, size: int, now: float) -> bool:
        """Spend one packet of ``size`` bytes if both buckets allow it; True when spent."""
        self._refill(now)
        if self.packets < 1 or self.bytes_left < size:
            return False
        self.packets -= 1
        self.bytes_left -= size
        return True

    def spend(self, size: int, now: float) -> None:
        """Spend one packet of ``size`` bytes that is sent whatever the buckets hold.

        What is not there is not borrowed: the buckets stop at empty. The switch sends a
        registration reply so, paid from what the registration itself earned.
        """
        self._refill(now)
        self.packets = max(0.0, self.packets - 1)
        self.bytes_left = max(0.0, self.bytes_left - size)

    def _refill(self, now: float) -> None:
        elapsed = now - self.updated
        if elapsed > 0:
            # The refill stops at the burst; tokens above it (credit) are kept, not clipped.
            if self.packets < self.packet_burst:
                self.packets = min(self.packet_burst, self.packets + elapsed * self.packet_rate)
            if self.bytes_left < self.byte_burst:
                self.bytes_left = min(self.byte_burst, self.bytes_left + elapsed * self.byte_rate)
            self.updated = now

    def credit(self, packets: float, size: float, packet_cap: float, byte_cap: float) -> None:
        """Add tokens earned by traffic from the client, up to the caps (not the burst).

        A client that never answers pings (IPXWrapper) can still play: each packet it sends
        lets it receive a bounded multiple of that, so what the bridge aims at an address is
        tied to what comes from it (docs/reliability.md R7) instead of a flat allowance.
        """
        self.packets = min(max(self.packets, packet_cap), self.packets + packets)
        self.bytes_left = min(max(self.bytes_left, byte_cap), self.bytes_left + size)
