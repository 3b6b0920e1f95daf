"""Which interface ports the IPX switch has: the pure plan behind ``ipx.interfaces``.

Contract:

1. **Chosen like relay interfaces.** Each configured entry is a pattern (name, glob or CIDR,
   ``policy/topology.select``) with a role (``auto``/``lan``/``p2p``), optional static peers
   and the kinds of port to speak there (``PortKind``). The first entry that matches an
   interface decides for it (``policy/relay.selection_for``); p2p peers come from the entry,
   else from WireGuard, else from the point-to-point peer address (``build_plan``).
2. **What each kind needs.** The UDP kinds (``ipxwrapper``, ``rfc1234``) need an interface
   that is up and has an IPv4 address: they send from it. ``ethernet`` needs an interface that
   is up and carries Ethernet frames: WireGuard and tun devices carry IP only (docs/testbed.md 4),
   so an ``ethernet`` port there is skipped with the reason, never opened to fail. It needs no
   IPv4 address: a segment of DOS machines or emulators may have none.
3. **Pure.** No socket, no clock. ``io/segments.py`` opens what the plan says; the plan is
   rebuilt on every topology change and the difference applied (``app/ipx.py``).
"""

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ipxbridge.policy.relay import Egress, Selection, build_plan, selection_for
from ipxbridge.policy.switch import PortKind, Segment
from ipxbridge.policy.topology import Interface, Topology
from ipxbridge.wire.ipxwrapper import IPXWRAPPER_DEFAULT_NET

# Interface kinds (policy/topology.KINDS) that carry no Ethernet frames (rule 2).
_LAYER3_KINDS = frozenset({"wireguard", "loopback"})


@dataclass(frozen=True)
class IpxInterface:
    """One ``ipx.interfaces`` entry."""

    pattern: str
    kinds: tuple[PortKind, ...]
    role: str = "auto"  # auto | lan | p2p
    peers: tuple[str, ...] = ()
    framing: str = "auto"  # auto, or a wire.ethernet.Framing value (ethernet ports only)
    # IPXWrapper hosts' network number when a unicast's receiver has not been heard yet
    # (their default; docs/protocols.md 6: a unicast must carry the receiver's network).
    network: bytes = IPXWRAPPER_DEFAULT_NET

    @property
    def selection(self) -> Selection:
        """The same entry as the relay's planner takes it."""
        return Selection(self.pattern, self.role, self.peers)


@dataclass(frozen=True)
class PortPlan:
    """One interface port as the I/O layer opens it."""

    segment: Segment
    index: int  # ifindex: a deleted and re-created interface gets a new one (reopen)
    role: str  # lan | p2p
    mtu: int
    address: str = ""  # the bridge's address there ("" on an address-less Ethernet)
    broadcast: str = ""  # subnet broadcast of a lan interface
    peers: tuple[str, ...] = ()  # unicast copies on a p2p interface
    networks: tuple[str, ...] = ()  # on-link prefixes: the sources a UDP port accepts
    framing: str = "auto"
    ipx_network: bytes = IPXWRAPPER_DEFAULT_NET  # IPXWrapper unicasts to an unheard receiver


@dataclass(frozen=True)
class Skipped:
    """A selected interface and kind that gets no port, and why (for the log and the CLI)."""

    interface: str
    kind: PortKind
    why: str


def carries_ethernet(iface: Interface) -> bool:
    """Whether native IPX frames can be sent on ``iface`` (rule 2)."""
    return iface.kind not in _LAYER3_KINDS and iface.role == "lan" and not iface.noarp


def plan_ports(
    topology: Topology,
    interfaces: Sequence[IpxInterface],
    wireguard_peers: Mapping[str, Sequence[str]],
) -> tuple[tuple[PortPlan, ...], tuple[Skipped, ...]]:
    """The interface ports to open now, and what was selected but cannot be (rules 1-2)."""
    selections = tuple(i.selection for i in interfaces)
    egresses = {e.name: e for e in build_plan(topology, selections, wireguard_peers)[0]}
    plans: list[PortPlan] = []
    skipped: list[Skipped] = []
    for iface in topology.interfaces:
        if iface.is_loopback:
            continue
        sel = selection_for(iface, selections)
        if sel is None:
            continue
        entry = interfaces[selections.index(sel)]
        for kind in entry.kinds:
            plan_or_why = _plan_one(iface, kind, entry, egresses.get(iface.name))
            if isinstance(plan_or_why, str):
                skipped.append(Skipped(iface.name, kind, plan_or_why))
            else:
                plans.append(plan_or_why)
    return tuple(plans), tuple(skipped)


def _plan_one(
    iface: Interface, kind: PortKind, entry: IpxInterface, egress: Egress | None
) -> PortPlan | str:
    segment = Segment(iface.name, kind)
    if not iface.up:
        return "interface is down"
    if kind is PortKind.ETHERNET:
        if not carries_ethernet(iface):
            return f"a {iface.kind} interface carries no Ethernet frames"
        return PortPlan(
            segment,
            iface.index,
            "lan",
            iface.mtu,
            iface.addresses[0].address if iface.addresses else "",
            framing=entry.framing,
            networks=tuple(dict.fromkeys(str(a.network) for a in iface.addresses)),
        )
    if egress is None:
        return "no IPv4 address (a UDP port sends from one)"
    return PortPlan(
        segment,
        iface.index,
        egress.role,
        egress.mtu,
        egress.address,
        egress.broadcast,
        egress.peers,
        egress.networks,
        ipx_network=entry.network,
    )


def segment_for_source(plans: Sequence[PortPlan], kind: PortKind, ip: str) -> Segment | None:
    """The port of ``kind`` a UDP datagram from ``ip`` arrived on, if any (one question).

    That is the port whose on-link prefix or p2p peers hold ``ip`` (IPXWrapper itself accepts
    only such sources, docs/protocols.md 6). The rule is ``SourceIndex``'s; a port asks it for
    every datagram.
    """
    return SourceIndex(plans, kind)(ip)


class SourceIndex:
    """Which port of a kind a UDP source belongs to, for every datagram: precomputed, cached.

    The networks are parsed once per plan, and answers are remembered per source address
    (bounded: a flood of spoofed sources only churns the cache).
    """

    def __init__(self, plans: Sequence[PortPlan], kind: PortKind, max_entries: int = 4096) -> None:
        self._entries = tuple(
            (
                p.segment,
                frozenset(p.peers),
                tuple(ipaddress.IPv4Network(n) for n in p.networks),
            )
            for p in plans
            if p.segment.kind is kind
        )
        self._cache: dict[str, Segment | None] = {}
        self._max = max_entries

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __call__(self, ip: str) -> Segment | None:
        """The port whose on-link prefix or p2p peers hold ``ip``, or None."""
        cache = self._cache
        if ip in cache:
            return cache[ip]
        found: Segment | None = None
        try:
            address = ipaddress.IPv4Address(ip)
        except ValueError:
            address = None
        if address is not None:
            for segment, peers, networks in self._entries:
                if ip in peers or any(address in net for net in networks):
                    found = segment
                    break
        if len(cache) >= self._max:
            cache.clear()
        cache[ip] = found
        return found
