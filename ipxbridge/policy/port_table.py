"""The IPX switch's port table: its ports, the nodes behind them, and where a packet may go.

The switch (``policy/switch.py``) decides what becomes of each packet; this table answers
what its rules 6 to 8 ask of the ports: which port owns a node (``lookup``; a node behind a
peer, an uplink or a segment is learned from the first copy of its packets, ``learn``), and
which ports a broadcast (``all_but``) or a unicast to an unknown node (``peers_but``) from
an ingress may go to. Those lists are cached per ingress until a port comes or goes, or
rule 8's view of the other bridges changes (``policy/bridges.py``: the ports another bridge
serves are left out).

Learned nodes and the bridges heard per segment live in bounded tables that a flood of new
source nodes cannot use against real stations (``tables.ProvenTable``): a node heard again
a second or more after it was first heard is *proven* and is evicted only by other proven
nodes; a flood of one-packet nodes churns among the unproven. Evictions are counted by
table and tier (``evictions``).

Pure: ``now`` is a parameter.
"""

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from ipxbridge.policy.bridges import SegmentBridges
from ipxbridge.policy.clients import Client
from ipxbridge.policy.ports import Address, Port, Segment
from ipxbridge.policy.tables import ProvenTable
from ipxbridge.wire.ipx import BROADCAST_NODE, ZERO_NODE, rfc1234_node


@dataclass
class Peer:
    """A statically configured RFC 1234 peer."""

    addr: Address
    node: bytes  # RFC 1234 host number: 00 00 + IPv4
    # Its books for the status page, as a client's: plain integers on the hot path.
    rx_packets: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0


class PortTable:
    """Which ports the switch has, who is behind them, and the targets from each."""

    def __init__(
        self,
        *,
        clients: Mapping[Address, Client],
        client_nodes: Mapping[bytes, Client],
        peers: dict[Address, Peer],
        uplinks: dict[Address, str],
        segments: dict[Segment, None],
        bridges: SegmentBridges,
        max_learned: int,
        evictions: Counter[tuple[str, str]],
    ) -> None:
        """The switch's port tables, read and changed here.

        Args:
            clients: the client table's clients (``policy/clients.py``), read live.
            client_nodes: the same clients by node.
            peers: the RFC 1234 peers, changed by ``add_peer`` and ``remove_peer``.
            uplinks: authenticated uplinks and this bridge's role on each.
            segments: the interface ports.
            bridges: rule 8's state: the ports other bridges serve.
            max_learned: how many learned nodes are kept.
            evictions: where the learned-node table counts what it pushes out.
        """
        self._clients = clients
        self._client_nodes = client_nodes
        self.peers = peers
        self.uplinks = uplinks
        self.segments = segments
        self._bridges = bridges
        self._static_nodes: dict[bytes, Address] = {}  # each peer's RFC 1234 node
        # node -> the port it is behind (peer, uplink or segment), two tiers (module docstring)
        self._learned: ProvenTable[bytes, Port] = ProvenTable(
            max_learned, "learned_nodes", evictions
        )
        self.ports: tuple[Port, ...] = ()
        # Keyed by the ingress, and by the bridge whose copy it was when one put it there
        self._flood_targets: dict[object, tuple[Port, ...]] = {}
        self._delegated: dict[object, tuple[Segment, ...]] = {}  # same keys (rule 8)
        self._peer_targets: dict[object, tuple[Port, ...]] = {}

    # --- membership ------------------------------------------------------------------------

    def add_peer(self, addr: Address) -> None:
        """Add a static RFC 1234 peer (idempotent)."""
        peer = Peer(addr, rfc1234_node(addr[0]))
        self.peers[addr] = peer
        self._static_nodes[peer.node] = addr
        self.changed()

    def remove_peer(self, addr: Address) -> None:
        """Forget a static peer; the nodes learned behind it go too."""
        peer = self.peers.pop(addr, None)
        if peer is None:
            return
        self._static_nodes.pop(peer.node, None)
        self._bridges.remove_peer(addr)
        self._forget_learned(addr)
        self.changed()

    def add_uplink(self, addr: Address, role: str) -> bool:
        """An authenticated uplink becomes a port; False if it already was, in that role."""
        if self.uplinks.get(addr) == role:
            return False
        self.uplinks[addr] = role
        self.changed()
        return True

    def remove_uplink(self, addr: Address) -> None:
        """An uplink ended; the nodes learned behind it go too."""
        if self.uplinks.pop(addr, None) is None:
            return
        self._forget_learned(addr)
        self.changed()

    def add_segment(self, segment: Segment) -> None:
        """Attach an interface port (idempotent)."""
        if segment in self.segments:
            return
        self.segments[segment] = None
        self._bridges.add_segment(segment)
        self.changed()

    def remove_segment(self, segment: Segment) -> bool:
        """Detach an interface port; False if it was not attached.

        The bridges heard there are remembered until their beacons expire (rule 8): an
        interface deleted and re-created under its name is back on the same segment, and a
        bridge that forgot its neighbour there would put the neighbour's packets on the
        segment too until the next beacon; they can then go round bridge, segment, peer up
        to the hop limit, back to their sender too (a copy that comes back through the port
        its first copy came in on is no duplicate, rule 6).
        """
        if self.segments.pop(segment, 0) is not None:
            return False
        self._bridges.remove_segment(segment)
        self._forget_learned(segment)
        self.changed()
        return True

    def changed(self) -> None:
        """A port came or went (a client too): the port list and every cached target go."""
        self.ports = (*self._clients, *self.peers, *self.uplinks, *self.segments)
        self.topology_changed()
        self._bridges.clear_cache()

    def topology_changed(self) -> None:
        """Rule 8's view changed: the cached target lists are stale."""
        self._flood_targets.clear()
        self._delegated.clear()
        self._peer_targets.clear()

    # --- where a packet may go -------------------------------------------------------------

    def all_but(self, ingress: Port, bridge: bytes | None = None) -> tuple[Port, ...]:
        """Every port except the ingress, cached until membership changes.

        For a copy another bridge put on a segment, not the ports that bridge serves either.
        """
        key = ingress if bridge is None else (ingress, bridge)
        targets = self._flood_targets.get(key)
        if targets is None:
            shared = self._served_by_others(ingress, bridge)
            targets = tuple(p for p in self.ports if p != ingress and p not in shared)
            self._flood_targets[key] = targets
            # the segments left to another bridge: watched (rule 8, ``DeliveryWatch``)
            self._delegated[key] = tuple(s for s in self.segments if s != ingress and s in shared)
        return targets

    def left_to_others(self, ingress: Port, bridge: bytes | None) -> tuple[Segment, ...]:
        """The segments ``all_but`` left to another bridge (after it ran for the key)."""
        return self._delegated.get(ingress if bridge is None else (ingress, bridge), ())

    def peers_but(self, ingress: Port, bridge: bytes | None = None) -> tuple[Port, ...]:
        """Peers and segments except the ingress: where an unknown unicast may go (rule 7)."""
        key = ingress if bridge is None else (ingress, bridge)
        targets = self._peer_targets.get(key)
        if targets is None:
            shared = self._served_by_others(ingress, bridge)
            owners: tuple[Port, ...] = (*self.peers, *self.uplinks, *self.segments)
            targets = tuple(p for p in owners if p != ingress and p not in shared)
            self._peer_targets[key] = targets
        return targets

    def _served_by_others(self, ingress: Port, bridge: bytes | None) -> frozenset[Port]:
        """The ports other bridges serve for a packet from ``ingress`` (rule 8).

        For a copy ``bridge`` put on a segment, the ports it reached itself too.
        """
        shared = self._bridges.skip_for(ingress)
        if bridge is not None:
            shared |= self._bridges.served_by(bridge)
        return shared

    # --- who is behind a port --------------------------------------------------------------

    def lookup(self, node: bytes, now: float, ttl: float) -> Port | None:
        """The port that owns ``node``: a client's, a peer's, or learned within ``ttl``."""
        client = self._client_nodes.get(node)
        if client is not None:
            return client.addr
        static = self._static_nodes.get(node)
        if static is not None:
            return static
        learned = self._learned.get(node)
        if learned is not None and now - learned[1] < ttl:
            return learned[0]
        return None

    def learn(self, node: bytes, port: Port, now: float) -> None:
        """``node`` sent the first copy of a packet through ``port`` (rule 6)."""
        if node in (BROADCAST_NODE, ZERO_NODE) or node in self._static_nodes:
            return
        self._learned.learn(node, port, now)

    def _forget_learned(self, port: Port) -> None:
        learned = self._learned
        for node in [n for n, via, _ in learned.items() if via == port]:
            learned.pop(node)

    def expire(self, now: float, ttl: float) -> None:
        """Forget the nodes not heard for ``ttl``."""
        self._learned.expire(now, ttl)

    def learned_segment_nodes(self) -> list[tuple[bytes, Segment, float]]:
        """(node, segment, last heard) of every station learned on an interface port."""
        return [
            (n, via, seen) for n, via, seen in self._learned.items() if isinstance(via, Segment)
        ]

    def learned_on(self, port: Port) -> int:
        """How many nodes are currently learned behind ``port``."""
        return sum(1 for _, via, _ in self._learned.items() if via == port)

    @property
    def learned_nodes(self) -> int:
        """How many nodes are learned."""
        return len(self._learned)
