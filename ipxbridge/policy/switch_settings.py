"""The IPX switch's tunables, with the reasons for their defaults.

In a module of its own so that the switch (``policy/switch.py``) and its client table
(``policy/clients.py``, rule 2) read one settings type without importing each other.
"""

from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import Literal

from ipxbridge.wire.ipx import DEFAULT_FILTERED_SOCKETS


@dataclass(frozen=True)
class SwitchSettings:
    """Tunables of the switch (all times in seconds)."""

    max_clients: int = 256
    idle_timeout: float = 600.0  # a client silent this long is forgotten (ipxbox: 10 min)
    keepalive_interval: float = 5.0  # ping clients that were silent this long
    unverified_probes: int = 3  # keepalives an unverified client gets (then it is left quiet)
    # Keyed nodes prove receipt (rule 2); ``address`` nodes (IPv4 + port) prove nothing.
    node_assignment: Literal["keyed", "address"] = "keyed"
    # What the bridge may send toward addresses that registered but have not proven receipt
    # (rule 2, policy/budget.py): bytes per second per destination IPv4 address and for the
    # whole bridge. Sized from what games send before a match (docs/ipx.md, "Verification"):
    # a DirectPlay enumeration is 82 bytes over IPX, a DOS game's lobby broadcast 50-600
    # bytes a few times a second, the busiest (35 a second) about 10 KiB/s; 16 KiB/s and a
    # 32 KiB burst carry that to one address (a few listeners behind one NAT), and 256 KiB/s
    # in all carries it to 16 listeners at once. A real DOSBox client answers the probe a
    # second after it registers and is limited no longer.
    unverified_address_bytes_per_second: float = 16_384.0
    unverified_address_byte_burst: int = 32_768
    unverified_total_bytes_per_second: float = 262_144.0
    unverified_total_byte_burst: int = 524_288
    # The unverified table, apart from max_clients (verified players): spoofed registrations
    # cannot crowd out real ones, and one address cannot fill it.
    max_unverified: int = 256
    max_unverified_per_ip: int = 16
    dedup_window: float = 2.0
    dedup_max_entries: int = 65_536
    learned_node_ttl: float = 300.0
    max_learned_nodes: int = 4_096
    filtered_sockets: frozenset[int] = field(default=DEFAULT_FILTERED_SOCKETS)
    answer_pings: bool = True
    rejoin: bool = True  # re-admit a known-shaped client without a new registration
    clients_allow: tuple[IPv4Network, ...] = ()  # who may register; empty = anyone

    def allows(self, ip: str) -> bool:
        """May a DOSBox-protocol client at ``ip`` register (``clients_allow``)?"""
        if not self.clients_allow:
            return True
        try:
            address = IPv4Address(ip)
        except ValueError:  # an IPv6 browser player (io/websocket.py): no IPv4 list names it
            return False
        return any(address in net for net in self.clients_allow)
