"""IPv4 interfaces read with netifaces-plus: the fallback reader, and the per-address view.

Contract:

- :func:`read_topology_netifaces` builds a :class:`~ipxbridge.policy.topology.Topology`
  without netlink. ``io/netlink.py`` (pyroute2) is the source of truth on Linux; this is
  only its fallback (docs/architecture.md B3). netifaces knows addresses and little else, so:
  kinds are ``loopback`` or ``other``; ``broadcast_capable``/``pointopoint`` come from
  whether getifaddrs reported a broadcast or a destination address; ``up`` is assumed for
  every interface that has an IPv4 address; MTU is 0 (unknown); the default-gateway
  interface gets metric 0 (netifaces has no metrics).
- The broadcast address is always computed from the prefix, never taken from netifaces.
  For ``ip addr add A/24`` without ``brd +`` glibc reports the box's *own* address as the
  broadcast (seen here: ``'broadcast': '10.1.2.3'``; docs/reliability.md item 8).
- :func:`select_ipv4` and :class:`Ipv4Interface` are the older
  one-row-per-address view used by the DirectPlay prober; they keep their behaviour.
  :func:`ipv4_from_topology` gives the same view of a pyroute2 snapshot.

Nothing here raises for a missing or vanished interface; it is simply not listed.
"""

import contextlib
import ipaddress
import socket
from dataclasses import dataclass

import netifaces

from ipxbridge.policy.topology import (
    Interface,
    InterfaceAddress,
    Topology,
    select,
)


@dataclass(frozen=True, slots=True)
class Ipv4Interface:
    """One IPv4 address on one interface."""

    name: str
    address: str
    prefixlen: int
    broadcast: str  # computed; equals ``address`` on a /31 or /32 (point-to-point)

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The on-link subnet."""
        return ipaddress.IPv4Interface(f"{self.address}/{self.prefixlen}").network


def _index(name: str, fallback: int) -> int:
    with contextlib.suppress(OSError):
        return socket.if_nametoindex(name)
    return fallback


def read_topology_netifaces() -> Topology:
    """The IPv4 interfaces as netifaces-plus sees them (see the module contract)."""
    default_if = ""
    gateways = netifaces.gateways().get("default")
    if isinstance(gateways, dict):
        gateway = gateways.get(netifaces.AF_INET)
        if gateway is not None:
            default_if = gateway[1]
    interfaces: list[Interface] = []
    for position, name in enumerate(netifaces.interfaces(), start=1):
        try:
            entries = netifaces.ifaddresses(name).get(netifaces.AF_INET, [])
        except ValueError:  # vanished between interfaces() and ifaddresses()
            continue
        addresses: list[InterfaceAddress] = []
        loopback = broadcast = pointopoint = False
        for entry in entries:
            addr = entry.get("addr")
            if not addr:
                continue
            try:
                iface = ipaddress.IPv4Interface(f"{addr}/{entry.get('netmask') or '32'}")
                peer = entry.get("peer")
                addresses.append(InterfaceAddress.compute(addr, iface.network.prefixlen, peer))
            except ValueError:
                continue
            loopback = loopback or iface.is_loopback
            broadcast = broadcast or "broadcast" in entry
            pointopoint = pointopoint or "peer" in entry
        interfaces.append(
            Interface(
                index=_index(name, position),
                name=name,
                kind="loopback" if loopback else "other",
                up=bool(addresses),
                broadcast_capable=broadcast and not loopback,
                pointopoint=pointopoint and not loopback,
                noarp=False,
                mtu=0,
                addresses=tuple(addresses),
                default_route_metric=0 if name == default_if else None,
            )
        )
    return Topology(tuple(sorted(interfaces, key=lambda i: i.index)))


def ipv4_from_topology(topology: Topology, *, up_only: bool = False) -> list[Ipv4Interface]:
    """One :class:`Ipv4Interface` per IPv4 address of every non-loopback interface."""
    out: list[Ipv4Interface] = []
    for iface in topology.interfaces:
        if iface.is_loopback or (up_only and not iface.up):
            continue
        for addr in iface.addresses:
            if ipaddress.IPv4Address(addr.address).is_loopback:
                continue
            # The legacy view has no "no broadcast" value: a /31, /32 uses the address.
            out.append(
                Ipv4Interface(
                    iface.name, addr.address, addr.prefixlen, addr.broadcast or addr.address
                )
            )
    return out


def select_ipv4(patterns: list[str] | tuple[str, ...]) -> list[Ipv4Interface]:
    """Addresses of the interfaces matching a name, a glob (``wg*``) or a CIDR; all if empty.

    Matching is ``policy.topology.select`` (one rule set for the relay and the prober); an
    invalid CIDR selects nothing here rather than raising, as a probe target list should.
    """
    topology = read_topology_netifaces()
    try:
        chosen = select(topology, list(patterns))
    except ValueError:
        return []
    return ipv4_from_topology(Topology(tuple(chosen)))
