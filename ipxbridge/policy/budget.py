"""What the bridge may send toward addresses that have not proven they receive there.

Pure: ``now`` is a parameter, nothing here reads a clock. The switch's client table
(policy/clients.py, rule 2) asks before every datagram aimed at a client that registered but
has not yet proved it receives at its address: the registration reply, probes, answers to
its pings, and the copies the switch forwards to it.

Why a rate and not a ratio: registration is one spoofable datagram, so a stranger can name
any address as a client. The bridge once sent such a client no more bytes than it had sent
itself; that held the reflection at 1:1, but a real player that only listens never sends
(a DOSBox client is silent after ``ipxnet connect`` until its program speaks, a DirectPlay
host behind IPXWrapper is silent until it is enumerated: docs/protocols.md 4.4 and 6), so it
heard nothing. Now every byte toward an unproven address is held to two token buckets
(``policy/bucket.py``) that must both allow it:

* **per destination IPv4 address** (``address_rate``, ``address_burst``), whatever its
  ports: what a stranger can aim at one victim, however many registrations it spoofs from
  that address and however fast;
* **for the whole bridge** (``total_rate``, ``total_burst``): what it can aim at all
  unproven addresses together, however many it names.

The limits end for an address the moment it proves receipt (the switch stops asking).

Memory: at most ``max_addresses`` per-address buckets. A bucket that has refilled to its
burst says nothing a fresh one would not, so it is the one dropped for a newcomer; when
every bucket is still refilling, a newcomer is refused (``address``): a flood of spoofed
sources cannot win a fresh burst by pushing a bucket out.
"""

from collections import Counter, OrderedDict
from typing import Final

from ipxbridge.policy.bucket import TokenBucket

# Per-address buckets kept: 10,000 spoofed sources fit (docs/reliability.md R26).
MAX_ADDRESSES: Final = 16_384

# Which bound refused a datagram (``ReflectionLimit.refused``): the destination address's or
# the bridge's total.
BOUND_ADDRESS: Final = "address"
BOUND_TOTAL: Final = "total"


class ReflectionLimit:
    """Bytes per second toward unproven addresses: per IPv4 address and in total.

    Attributes:
        address_rate: bytes per second per destination IPv4 address.
        address_burst: bytes an address's bucket holds (what it may get at once).
        total_rate: bytes per second toward all unproven addresses together.
        total_burst: bytes the total bucket holds.
        sent_bytes: bytes let through (and sent) since start.
        sent_packets: datagrams let through since start.
        refused: datagrams refused, by (what, bound); ``what`` is the caller's word for the
            datagram (``copy``, ``registration_reply``, ``probe``, ``ping_reply``...).
    """

    __slots__ = (
        "_addresses",
        "_total",
        "address_burst",
        "address_rate",
        "max_addresses",
        "refused",
        "sent_bytes",
        "sent_packets",
        "total_burst",
        "total_rate",
    )

    def __init__(
        self,
        address_rate: float,
        address_burst: int,
        total_rate: float,
        total_burst: int,
        *,
        now: float = 0.0,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        """Raises ValueError for a negative rate or burst, or no room for an address."""
        if min(address_rate, address_burst, total_rate, total_burst) < 0 or max_addresses < 1:
            raise ValueError("rates and bursts must be >= 0 and max_addresses >= 1")
        self.address_rate = address_rate
        self.address_burst = address_burst
        self.total_rate = total_rate
        self.total_burst = total_burst
        self.max_addresses = max_addresses
        # ip -> its bucket; order = last use, oldest first
        self._addresses: OrderedDict[str, TokenBucket] = OrderedDict()
        self._total = TokenBucket(total_rate, total_burst, now)
        self.sent_bytes = 0
        self.sent_packets = 0
        self.refused: Counter[tuple[str, str]] = Counter()

    def __len__(self) -> int:
        return len(self._addresses)

    def reconfigure(
        self, address_rate: float, address_burst: int, total_rate: float, total_burst: int
    ) -> None:
        """New limits (a reload); tokens held are kept, cut to the new bursts."""
        self.address_rate = address_rate
        self.address_burst = address_burst
        self.total_rate = total_rate
        self.total_burst = total_burst
        self._total.resize(total_rate, total_burst)
        for bucket in self._addresses.values():
            bucket.resize(address_rate, address_burst)

    def check(self, ip: str, size: int, now: float, reserve: int = 0) -> str | None:
        """The bound that would refuse ``size`` bytes to ``ip`` now, or None; spends nothing.

        ``reserve``: bytes that must be left in both buckets afterwards (copies leave room for
        a probe and a registration reply, so a client kept busy can still prove itself).
        """
        size += reserve
        if self._total.level(now) < size:
            return BOUND_TOTAL
        bucket = self._addresses.get(ip)
        if bucket is None:
            if len(self._addresses) >= self.max_addresses and not self._room(now):
                return BOUND_ADDRESS
            tokens = float(self.address_burst)
        else:
            tokens = bucket.level(now)
        return BOUND_ADDRESS if tokens < size else None

    def spend(self, ip: str, size: int, now: float) -> None:
        """Book ``size`` bytes sent to ``ip`` (after ``check`` said yes)."""
        self._total.spend(now, size)
        addresses = self._addresses
        bucket = addresses.pop(ip, None)
        if bucket is None:
            if len(addresses) >= self.max_addresses:
                addresses.popitem(last=False)  # refilled: ``_room`` checked it
            bucket = TokenBucket(self.address_rate, self.address_burst, now)
        bucket.spend(now, size)
        addresses[ip] = bucket
        self.sent_bytes += size
        self.sent_packets += 1

    def allow(self, ip: str, size: int, now: float, what: str, reserve: int = 0) -> bool:
        """Spend ``size`` bytes toward ``ip`` if both bounds allow, or count the refusal.

        ``reserve``: as for ``check``.
        """
        bound = self.check(ip, size, now, reserve)
        if bound is not None:
            self.refused[(what, bound)] += 1
            return False
        self.spend(ip, size, now)
        return True

    def refuse(self, what: str, bound: str) -> None:
        """Count a refusal ``check`` found (when the caller checked before deciding)."""
        self.refused[(what, bound)] += 1

    def _room(self, now: float) -> bool:
        """Whether the least recently used bucket has refilled, so it may make room."""
        return next(iter(self._addresses.values())).full(now)

    def purge(self, now: float) -> int:
        """Forget buckets that have refilled (from the front); returns how many."""
        addresses = self._addresses
        removed = 0
        while addresses:
            if not next(iter(addresses.values())).full(now):
                break
            addresses.popitem(last=False)
            removed += 1
        return removed
