"""A frozen snapshot of this box's IPv4 interfaces, and the pure questions asked of it.

Contract:

1. **Pure.** No socket, netlink, clock or logger here (docs/architecture.md rule 1).
   ``io/netlink.py`` (pyroute2) and ``io/interfaces.py`` (netifaces-plus, the fallback) read
   the kernel and hand the raw numbers to :func:`build_interface` and
   :meth:`InterfaceAddress.compute`; everything that interprets those numbers lives here so
   it can be tested without root.
2. **The broadcast address is computed, never read.** An address added without ``brd +`` has
   IFA_BROADCAST 0.0.0.0 (or none at all), and glibc's ``getifaddrs`` then reports the box's
   *own* address as the broadcast; sending there reaches only this box (docs/reliability.md item 8,
   measured: 0 packets delivered). So :class:`InterfaceAddress` derives it from the on-link
   prefix and refuses any other value. A /31 or /32 has no broadcast address (RFC 3021): ``""``.
3. **Role.** An interface is ``"lan"`` when the kernel says it can broadcast (IFF_BROADCAST)
   and it is not point-to-point; everything else is ``"p2p"``. WireGuard and tun devices are
   POINTOPOINT|NOARP without BROADCAST (docs/testbed.md section 4), and WireGuard silently drops
   255.255.255.255 (docs/reliability.md item 7): a relay reaches the far side of a p2p link only by
   unicasting to each known peer.
4. **Primary.** The interface holding the lowest-metric IPv4 default route (ties: lowest
   ifindex). Windows sends a limited broadcast out of that interface only, which is the
   behaviour this product exists to fix; we show it so users can see why games "only find
   one LAN".
5. Nothing here raises for a normal situation (no address, interface down, no match); the
   only exceptions are ``ValueError`` for malformed input, documented per function.
"""

import fnmatch
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

# Interface kinds we distinguish (IFLA_INFO_KIND, iproute2's "ip -d link" second line).
KINDS: Final = ("loopback", "ethernet", "veth", "bridge", "tun", "tap", "wireguard", "other")
Kind = Literal["loopback", "ethernet", "veth", "bridge", "tun", "tap", "wireguard", "other"]

# net_device_flags, include/uapi/linux/if.h. Order = the order ``ip link`` prints them in.
IFF_UP: Final = 0x1
IFF_BROADCAST: Final = 0x2
IFF_DEBUG: Final = 0x4
IFF_LOOPBACK: Final = 0x8
IFF_POINTOPOINT: Final = 0x10
IFF_NOTRAILERS: Final = 0x20
IFF_RUNNING: Final = 0x40
IFF_NOARP: Final = 0x80
IFF_PROMISC: Final = 0x100
IFF_ALLMULTI: Final = 0x200
IFF_MASTER: Final = 0x400
IFF_SLAVE: Final = 0x800
IFF_MULTICAST: Final = 0x1000
IFF_PORTSEL: Final = 0x2000
IFF_AUTOMEDIA: Final = 0x4000
IFF_DYNAMIC: Final = 0x8000
IFF_LOWER_UP: Final = 0x10000
IFF_DORMANT: Final = 0x20000
IFF_ECHO: Final = 0x40000
FLAG_NAMES: Final = (
    (IFF_UP, "UP"),
    (IFF_BROADCAST, "BROADCAST"),
    (IFF_DEBUG, "DEBUG"),
    (IFF_LOOPBACK, "LOOPBACK"),
    (IFF_POINTOPOINT, "POINTOPOINT"),
    (IFF_NOTRAILERS, "NOTRAILERS"),
    (IFF_RUNNING, "RUNNING"),
    (IFF_NOARP, "NOARP"),
    (IFF_PROMISC, "PROMISC"),
    (IFF_ALLMULTI, "ALLMULTI"),
    (IFF_MASTER, "MASTER"),
    (IFF_SLAVE, "SLAVE"),
    (IFF_MULTICAST, "MULTICAST"),
    (IFF_PORTSEL, "PORTSEL"),
    (IFF_AUTOMEDIA, "AUTOMEDIA"),
    (IFF_DYNAMIC, "DYNAMIC"),
    (IFF_LOWER_UP, "LOWER_UP"),
    (IFF_DORMANT, "DORMANT"),
    (IFF_ECHO, "ECHO"),
)

# ifinfomsg.ifi_type, include/uapi/linux/if_arp.h
ARPHRD_ETHER: Final = 1
ARPHRD_LOOPBACK: Final = 772
ARPHRD_NONE: Final = 0xFFFE  # tun (layer 3) and WireGuard

# RFC 2863 operstates as pyroute2 decodes IFLA_OPERSTATE. UNKNOWN is what drivers without
# carrier reporting say while working: lo, wireguard-go's tun, a bridge (docs/testbed.md).
OPERSTATES_UP: Final = frozenset({"UP", "UNKNOWN"})

_LIMITED_BROADCAST: Final = ipaddress.IPv4Address("255.255.255.255")


def broadcast_for(address: str, prefixlen: int, peer: str | None = None) -> str:
    """The directed broadcast of an on-link prefix, or ``""`` when there is none.

    The prefix is ``peer/prefixlen`` when a point-to-point peer is given (that is the route
    the kernel installs for ``ip addr add A peer P/len``), else ``address/prefixlen``.
    /31 and /32 have no broadcast (RFC 3021), and a result equal to the box's own address
    is refused too: sending there only loops back (docs/reliability.md item 8).

    Raises:
        ValueError: ``address``/``peer`` is not IPv4 or ``prefixlen`` is outside 0-32.
    """
    net = _on_link(address, prefixlen, peer)
    if net.prefixlen >= 31:
        return ""
    bcast = str(net.broadcast_address)
    return "" if bcast == str(ipaddress.IPv4Address(address)) else bcast


def _on_link(address: str, prefixlen: int, peer: str | None) -> ipaddress.IPv4Network:
    if not 0 <= prefixlen <= 32:
        raise ValueError(f"prefix length {prefixlen} is outside 0-32")
    base = peer if peer is not None else address
    ipaddress.IPv4Address(address)  # validates the local address as well
    return ipaddress.IPv4Network(f"{base}/{prefixlen}", strict=False)


@dataclass(frozen=True)
class InterfaceAddress:
    """One IPv4 address on one interface.

    ``broadcast`` must be the computed value (:func:`broadcast_for`); build instances with
    :meth:`compute` unless you already hold that value.

    Raises:
        ValueError: (on construction) a malformed address, or a ``broadcast`` that is not
            the computed one (for example the kernel's 0.0.0.0).
    """

    address: str  # IFA_LOCAL: this box's address
    prefixlen: int
    broadcast: str  # computed from the prefix; "" for /31, /32
    peer: str | None = None  # IFA_ADDRESS when it differs from IFA_LOCAL (p2p peer)

    def __post_init__(self) -> None:
        expected = broadcast_for(self.address, self.prefixlen, self.peer)
        if self.broadcast != expected:
            raise ValueError(
                f"broadcast {self.broadcast!r} for {self.address}/{self.prefixlen} must be the "
                f"computed {expected!r}"
            )

    @classmethod
    def compute(cls, address: str, prefixlen: int, peer: str | None = None) -> "InterfaceAddress":
        """Build from IFA_LOCAL, the prefix length and IFA_ADDRESS (the peer, if different).

        Raises:
            ValueError: malformed address or prefix length.
        """
        if peer is not None and peer == address:
            peer = None  # the kernel repeats IFA_LOCAL in IFA_ADDRESS on non-p2p addresses
        return cls(address, prefixlen, broadcast_for(address, prefixlen, peer), peer)

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The on-link prefix (the peer's prefix for a ``peer`` address)."""
        return _on_link(self.address, self.prefixlen, self.peer)

    def contains(self, ip: ipaddress.IPv4Address) -> bool:
        """Whether ``ip`` is on-link through this address (or is this address)."""
        return ip in self.network or ip == ipaddress.IPv4Address(self.address)


@dataclass(frozen=True)
class Interface:
    """One network interface as the bridge sees it."""

    index: int
    name: str
    kind: Kind
    up: bool  # administratively up and the lower layer works (see is_up)
    broadcast_capable: bool  # IFF_BROADCAST
    pointopoint: bool  # IFF_POINTOPOINT
    noarp: bool  # IFF_NOARP
    mtu: int
    addresses: tuple[InterfaceAddress, ...]
    default_route_metric: int | None  # lowest metric of an IPv4 default route via it
    flags: tuple[str, ...] = ()  # every IFF_* name set, for display (flag_names)
    operstate: str = ""  # IFLA_OPERSTATE as the kernel reports it ("" if unknown)

    @property
    def role(self) -> Literal["lan", "p2p"]:
        """``lan`` = can broadcast and is not point-to-point; otherwise ``p2p`` (rule 3)."""
        return "lan" if self.broadcast_capable and not self.pointopoint else "p2p"

    @property
    def is_loopback(self) -> bool:
        """Loopback interfaces are never used by the relay."""
        return self.kind == "loopback"


@dataclass(frozen=True)
class Topology:
    """Every interface of the box, in ifindex order as the kernel dumps them."""

    interfaces: tuple[Interface, ...]

    def by_index(self, index: int) -> Interface | None:
        """The interface with this ifindex, if any."""
        for iface in self.interfaces:
            if iface.index == index:
                return iface
        return None

    def by_name(self, name: str) -> Interface | None:
        """The interface with this name, if any."""
        for iface in self.interfaces:
            if iface.name == name:
                return iface
        return None

    @property
    def primary(self) -> Interface | None:
        """The interface with the lowest-metric default route (ties: lowest index), rule 4."""
        candidates = [i for i in self.interfaces if i.default_route_metric is not None]
        if not candidates:
            return None
        return min(candidates, key=lambda i: (i.default_route_metric, i.index))


def flag_names(flags: int) -> tuple[str, ...]:
    """The IFF_* names set in ``flags``, in ``ip link`` order."""
    return tuple(name for bit, name in FLAG_NAMES if flags & bit)


def is_up(flags: int, operstate: str) -> bool:
    """Usable for traffic: IFF_UP, and the lower layer is up.

    "Lower layer up" is IFF_RUNNING or IFF_LOWER_UP, or an operstate of UP/UNKNOWN. A tun
    device nobody has opened is IFF_UP but NO-CARRIER, operstate DOWN: not up.
    """
    if not flags & IFF_UP:
        return False
    if flags & (IFF_RUNNING | IFF_LOWER_UP):
        return True
    return operstate.upper() in OPERSTATES_UP


def classify_kind(
    link_kind: str | None, flags: int, link_type: int, *, wireguard_uapi: bool
) -> Kind:
    """Map IFLA_INFO_KIND (+ flags, ifi_type) to one of :data:`KINDS`.

    Args:
        link_kind: IFLA_INFO_KIND, ``None`` for devices without one (lo, physical NICs).
        flags: ``ifi_flags``.
        link_type: ``ifi_type`` (ARPHRD_*); an ARPHRD_ETHER device without a kind is a NIC.
        wireguard_uapi: a wireguard-go UAPI socket exists for this name. wireguard-go
            creates an ordinary tun device (kind "tun"), so the socket is the only sign.
    """
    if flags & IFF_LOOPBACK or link_type == ARPHRD_LOOPBACK:
        return "loopback"
    if link_kind == "wireguard" or (link_kind == "tun" and wireguard_uapi):
        return "wireguard"
    if link_kind == "veth":
        return "veth"
    if link_kind == "bridge":
        return "bridge"
    if link_kind == "tun":
        # The tun driver makes both (OpenVPN's dev tun and dev tap, tinc's router and switch
        # modes): a tap device carries Ethernet frames (ARPHRD_ETHER), a tun device bare IP
        # packets (ARPHRD_NONE).
        return "tap" if link_type == ARPHRD_ETHER else "tun"
    if link_kind is None and link_type == ARPHRD_ETHER:
        return "ethernet"
    return "other"


def build_interface(
    *,
    index: int,
    name: str,
    link_kind: str | None,
    link_type: int,
    flags: int,
    operstate: str,
    mtu: int,
    addresses: Iterable[InterfaceAddress],
    default_route_metric: int | None,
    wireguard_uapi: bool = False,
) -> Interface:
    """Interpret one link's raw netlink values (see :func:`classify_kind` for the args)."""
    return Interface(
        index=index,
        name=name,
        kind=classify_kind(link_kind, flags, link_type, wireguard_uapi=wireguard_uapi),
        up=is_up(flags, operstate),
        broadcast_capable=bool(flags & IFF_BROADCAST),
        pointopoint=bool(flags & IFF_POINTOPOINT),
        noarp=bool(flags & IFF_NOARP),
        mtu=mtu,
        addresses=tuple(addresses),
        default_route_metric=default_route_metric,
        flags=flag_names(flags),
        operstate=operstate,
    )


def _matches(iface: Interface, pattern: str) -> bool:
    if "/" in pattern:  # Linux interface names cannot contain "/": this is a CIDR
        try:
            net = ipaddress.IPv4Network(pattern, strict=False)
        except ValueError:
            raise ValueError(f"{pattern!r} is not an IPv4 CIDR (like 10.1.2.0/24)") from None
        return any(ipaddress.IPv4Address(a.address) in net for a in iface.addresses)
    return iface.name == pattern or fnmatch.fnmatchcase(iface.name, pattern)


def select(topology: Topology, patterns: Sequence[str]) -> list[Interface]:
    """The interfaces matching any pattern, in topology order, each once; loopback never.

    A pattern is an exact name (``eth0``), a glob (``wg*``, case-sensitive like the
    kernel's names) or an IPv4 CIDR (``10.1.2.0/24``: interfaces with an address inside it).
    No patterns selects every non-loopback interface (the ``probe_interfaces: []``
    convention of config.py). Down or address-less interfaces are still returned; callers
    decide what to do with them.

    Raises:
        ValueError: a pattern with "/" that is not an IPv4 CIDR.
    """
    candidates = [i for i in topology.interfaces if not i.is_loopback]
    if not patterns:
        return candidates
    return [i for i in candidates if any(_matches(i, p) for p in patterns)]


@dataclass(frozen=True)
class Unmatched:
    """A selection pattern that selects no interface; ``str()`` says so in words."""

    pattern: str
    loopback: tuple[str, ...] = ()  # the loopback interfaces it matches (never selected)

    def __str__(self) -> str:
        if self.loopback:
            names = ", ".join(self.loopback)
            return f"{self.pattern!r} matches only loopback ({names}), which is excluded"
        return f"{self.pattern!r} matches no interface"


def unmatched(topology: Topology, patterns: Sequence[str]) -> tuple[Unmatched, ...]:
    """The patterns that :func:`select` alone finds nothing for, in the order given.

    Each says which loopback interfaces it matches: a name like ``lo`` or a CIDR like
    ``127.0.0.0/8`` matches one, and still selects nothing, because loopback is never used.

    Raises:
        ValueError: a pattern with "/" that is not an IPv4 CIDR.
    """
    out: list[Unmatched] = []
    for pattern in dict.fromkeys(patterns):
        if select(topology, [pattern]):
            continue
        loopback = tuple(
            i.name for i in topology.interfaces if i.is_loopback and _matches(i, pattern)
        )
        out.append(Unmatched(pattern, loopback))
    return tuple(out)


def owner_of(topology: Topology, ip: str) -> Interface | None:
    """The interface through which ``ip`` is on-link: longest matching prefix wins.

    An address matches its own interface, its on-link subnet, or (``peer`` addresses) the
    peer's prefix. Ties go to an interface that is up, then to the lowest position in the
    topology. Loopback is considered like any other interface (127.0.0.0/8 is on-link there).
    Returns ``None`` for an unparsable or off-link address.
    """
    try:
        target = ipaddress.IPv4Address(ip)
    except ValueError:
        return None
    best: Interface | None = None
    best_key: tuple[int, int] = (-1, -1)
    for iface in topology.interfaces:
        for addr in iface.addresses:
            if not addr.contains(target):
                continue
            length = 32 if target == ipaddress.IPv4Address(addr.address) else addr.prefixlen
            key = (length, int(iface.up))
            if key > best_key:
                best, best_key = iface, key
    return best


def unicast_targets(allowed_ips: Iterable[str]) -> list[str]:
    """The host addresses among WireGuard AllowedIPs: sorted, unique IPv4 strings.

    Only /32 entries name a peer's tunnel address; a wider prefix is a subnet *behind* the
    peer, and a relay cannot unicast to a whole subnet (WireGuard drops limited broadcast,
    docs/reliability.md item 7). IPv6, unparsable, unspecified, multicast and broadcast entries
    are skipped.
    """
    found: set[ipaddress.IPv4Address] = set()
    for text in allowed_ips:
        try:
            net = ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            continue
        if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen != 32:
            continue
        host = net.network_address
        if host.is_unspecified or host.is_multicast or host == _LIMITED_BROADCAST:
            continue
        found.add(host)
    return [str(h) for h in sorted(found)]
