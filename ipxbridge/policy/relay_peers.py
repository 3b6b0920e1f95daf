"""The broadcast relay's peers: those of a p2p interface, learned from what arrives there.

The relay's fan-out targets (docs/relay.md, "Peers"), not the IPX switch's RFC 1234 peers.

A VPN checks a packet's inner source before it hands it up (WireGuard against the peer's
AllowedIPs, OpenVPN against the client's address, Nebula against its certificate), so a
broadcast that arrives on a tun interface from an address of the tunnel's own subnet comes
from a peer, and the relay's copies can go back to it. Only addresses of the interface's
own on-link prefixes are learned: a far site's players behind its bridge keep their own
addresses (preserve mode) and are reached through that bridge, not one by one.

What a stranger can do with it is bounded and counted: at most ``max_per_interface``
addresses per interface (the least recently heard is forgotten first: ``evicted``), each
forgotten ``expire_seconds`` after it was last heard (``expired``), and the plan is rebuilt
at most once per tick however many are learned (the caller asks ``take_changed``).

Pure: ``now`` is passed in.
"""

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Final

MAX_PER_INTERFACE: Final = 64
EXPIRE_SECONDS: Final = 600.0
HEARD_EVENTS: Final = ("learned", "expired", "evicted")


@dataclass
class HeardPeers:
    """Addresses heard per interface name, bounded and expiring."""

    max_per_interface: int = MAX_PER_INTERFACE
    expire_seconds: float = EXPIRE_SECONDS
    # interface -> address -> when last heard; order = least recently heard first
    _heard: dict[str, OrderedDict[str, float]] = field(default_factory=dict)
    events: Counter[str] = field(default_factory=Counter)
    _changed: bool = False

    def hear(self, interface: str, address: str, now: float) -> None:
        """``address`` sent a broadcast on ``interface`` (a p2p one, from its subnet)."""
        table = self._heard.get(interface)
        if table is None:
            table = self._heard[interface] = OrderedDict()
        if address in table:
            table[address] = now
            table.move_to_end(address)
            return
        table[address] = now
        self.events["learned"] += 1
        self._changed = True
        if len(table) > self.max_per_interface:
            table.popitem(last=False)
            self.events["evicted"] += 1

    def expire(self, now: float) -> None:
        """Forget addresses not heard for ``expire_seconds``."""
        for name, table in list(self._heard.items()):
            while table and next(iter(table.values())) <= now - self.expire_seconds:
                table.popitem(last=False)
                self.events["expired"] += 1
                self._changed = True
            if not table:
                del self._heard[name]

    def take_changed(self) -> bool:
        """Whether the set changed since the last call (the caller then re-plans once)."""
        changed, self._changed = self._changed, False
        return changed

    def peers(self) -> dict[str, tuple[str, ...]]:
        """Heard addresses per interface, in the order they were last heard."""
        return {name: tuple(table) for name, table in self._heard.items()}
