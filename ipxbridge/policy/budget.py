"""A send budget in packets and bytes per second (token buckets), with the clock passed in.

Pure: ``now`` is a parameter, nothing here reads a clock. The switch gives one to each client
that registered but has not yet sent anything (policy/switch.py rule 2): what the bridge sends
toward an address that never proved it is there stays bounded per second, while a silent
DirectPlay host behind IPXWrapper still receives the enumerations it must answer.
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
        elapsed = now - self.updated
        if elapsed > 0:
            self.packets = min(self.packet_burst, self.packets + elapsed * self.packet_rate)
            self.bytes_left = min(self.byte_burst, self.bytes_left + elapsed * self.byte_rate)
            self.updated = now
        if self.packets < 1 or self.bytes_left < size:
            return False
        self.packets -= 1
        self.bytes_left -= size
        return True
