"""IPv4 interfaces of this machine, read with netifaces (netifaces-plus).

The broadcast address is always computed from the address and netmask: an address added
without ``brd +`` reports 0.0.0.0, and sending there reaches only this machine
(reliability.md item 8).
"""

import fnmatch
import ipaddress
from dataclasses import dataclass

import netifaces


@dataclass(frozen=True, slots=True)
class Ipv4Interface:
    """One IPv4 address on one interface."""

    name: str
    address: str
    prefixlen: int
    broadcast: str  # computed; equals ``address`` on a /32 (point-to-point)

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The on-link subnet."""
        return ipaddress.IPv4Interface(f"{self.address}/{self.prefixlen}").network


def list_ipv4() -> list[Ipv4Interface]:
    """Every IPv4 address on every interface except loopback."""
    out: list[Ipv4Interface] = []
    for name in netifaces.interfaces():
        for entry in netifaces.ifaddresses(name).get(netifaces.AF_INET, []):
            addr = entry.get("addr")
            mask = entry.get("netmask") or "255.255.255.255"
            if not addr:
                continue
            iface = ipaddress.IPv4Interface(f"{addr}/{mask}")
            if iface.is_loopback:
                continue
            net = iface.network
            bcast = str(net.broadcast_address) if net.prefixlen < 31 else addr
            out.append(Ipv4Interface(name, addr, net.prefixlen, bcast))
    return out


def select_ipv4(patterns: list[str] | tuple[str, ...]) -> list[Ipv4Interface]:
    """Addresses whose interface matches a name, a glob (``wg*``) or a CIDR; all if empty."""
    found = list_ipv4()
    if not patterns:
        return found
    chosen: list[Ipv4Interface] = []
    for iface in found:
        for pattern in patterns:
            if "/" in pattern:
                try:
                    hit = ipaddress.IPv4Address(iface.address) in ipaddress.IPv4Network(
                        pattern, strict=False
                    )
                except ValueError:
                    hit = False
            else:
                hit = fnmatch.fnmatchcase(iface.name, pattern)
            if hit:
                chosen.append(iface)
                break
    return chosen
