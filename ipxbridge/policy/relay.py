"""Broadcast fan-out decisions: which received broadcast goes where, and in what form.

Rules (docs/protocols.md section 7; docs/reliability.md items 3, 7, 8, R7, R9), applied in
order:

1. Only datagrams that arrived on a selected interface are considered (``not_selected``).
2. The bridge's own sends are never relayed again: a source address of this box
   (``own_packet``). (In preserve mode the kernel loops our broadcasts back to local sockets
   with the player's source; rule 6 catches those by their lower TTL.)
3. Only broadcasts are relayed: the limited broadcast 255.255.255.255 or the ingress subnet's
   broadcast (``not_broadcast``). Exception: on a ``p2p`` interface, which cannot carry
   broadcast, a datagram to the bridge's own address is the remote side's stand-in for one.
   Unicast to the relay port is otherwise never turned into a flood.
4. Sources (docs/reliability.md R9), checked in the same order as the fast path's nft rules:

   * ``source_invalid``: 0.0.0.0/8 ("this network"), 127.0.0.0/8 (loopback), 224.0.0.0/3
     (multicast, class E and the limited broadcast) or a directed broadcast of one of the
     box's subnets: no host sends from these (RFC 1122 3.2.1.3).
   * ``source_off_link``: on a ``lan`` ingress, a source outside every on-link prefix of
     that interface (8.8.8.8, or a host of another segment spoofed onto this one). Not on a
     ``p2p`` ingress: a remote site's players arrive with their own addresses there, and
     WireGuard has already held the inner source to the peer's AllowedIPs.
   * ``source_port_zero``: UDP source port 0 (RFC 768): nothing can answer it.

   A source that passes on a ``p2p`` ingress and is in that interface's own subnet is a
   peer of the tunnel, remembered as one (``heard``, policy/relay_peers.py; bounded, expiring).

   Linux drops loopback, multicast, limited-broadcast and own sources as martians before a
   socket sees them; the kernel fast path runs before that, so it needs these rules most.
5. Copies of copies. Every copy carries the shared DSCP mark (``DSCP_MARK``, kernel or
   Python). A marked datagram that arrives on a ``lan`` interface is a copy some bridge made
   onto that segment (this one's, looped back by the kernel, or a parallel bridge's): never
   relayed again (``marked_copy``). One that arrives on a ``p2p`` interface is another
   site's bridge's copy (a VPN carries the mark unchanged): it is relayed once more, to the
   ``lan`` interfaces only, so two sites with a bridge each find each other's games while a
   broadcast still crosses at most two bridges (``marked_copy`` when there is no LAN to
   give it to). The loop bound this gives is in io/nftables.py.
   Kernel fast path (``kernel_fanout``): TTL <= 1 (``ttl_expired``) was not copied by the
   kernel. Neither was a datagram that ``kernel_hands_over``: one that carries a DP4 SP
   header or is a DP8 EnumQuery, because rules 7 and 8 need what nftables cannot do
   (compare a SOCKADDR with the IP source, keep a bucket per source); those go on through
   the rules below and are copied in Python. Everything else: the kernel made the copies
   (marked ones were never handed to this socket at all but for p2p arrivals).
6. Loops: copies leave with TTL - 1 (the kernel's too: nf_dup decrements it in
   prerouting), a TTL of 1 or less is not forwarded (``ttl_expired``), and a payload seen
   within the window with a higher TTL is a loop copy (``duplicate``; ``dedup.LoopFilter``).
   Retries and identical packets from other players pass.
7. DP4 SOCKADDR (docs/reliability.md D6, R7): every host a DP4 EnumSessions reaches opens a TCP
   connection to its SOCKADDR. A DP4 message whose SOCKADDR names an address other than
   0.0.0.0 or its own IP source is a reflection attempt and is dropped
   (``dp4_sockaddr_mismatch``), in every mode, however malformed the rest of the SOCKADDR.
8. In ``rewrite`` source mode the copy leaves from the bridge's own address; a DirectPlay 4
   header whose SOCKADDR says 0.0.0.0 ("use the packet's source") is rewritten to the real
   player's IP so the host's TCP reply goes to the player, not to the bridge
   ([MC-DPL4CS] 2.2.6, docs/protocols.md 1.2). One that needs that rewrite but whose SOCKADDR is
   malformed (family not AF_INET = 2, or non-zero ``sin_zero``) is dropped as
   ``bad_sockaddr``, not relayed as it is: unchanged, its 0.0.0.0 would make the host answer
   the bridge, where nothing listens (docs/protocols.md 7), so the copy could only mislead. A
   malformed SOCKADDR that names the sender needs no rewrite and is relayed unchanged, as in
   preserve mode: the bridge does not validate what it does not touch.
9. Enumerations (DP4 EnumSessions, DP8 EnumQuery) are bounded per source IP: a token bucket
   of ``enum_rate`` per second and ``enum_burst`` (defaults 10 and 20; a real client
   enumerates once or twice a second), for at most ``enum_sources`` sources, the least
   recently seen forgotten first (``enum_rate``). Each enumeration makes every host answer,
   so this caps what one address can draw from them (R7). A rewrite-mode bridge on the far
   side of a p2p link sends all its players' enumerations from its own address.
10. A copy goes out of every other selected interface, never back out of the ingress:
    ``lan`` interfaces get the subnet broadcast address (computed, never 0.0.0.0); ``p2p``
    interfaces (WireGuard, tun: no broadcast at all) get one unicast copy per peer
    (``no_destination`` when there is none).

``decide`` never raises on received bytes: every datagram gets one decision, and its
``drop_reason`` is ``None`` or one of ``RELAY_DROP_REASONS`` (the ``relay`` fuzz target and a
property test hold it to that in both source modes).

Pure: ``now`` is passed in.
"""

import ipaddress
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final, NamedTuple

from ipxbridge.errors import StartupError
from ipxbridge.policy.bucket import TokenBucket
from ipxbridge.policy.dedup import LoopFilter
from ipxbridge.policy.relay_peers import EXPIRE_SECONDS, MAX_PER_INTERFACE, HeardPeers
from ipxbridge.policy.topology import Interface, Topology, select
from ipxbridge.wire.directplay import (
    DP4_ENUM_PORT,
    DP4Command,
    DPlayError,
    DPlayKind,
    classify,
    has_dplay_lead,
    peek_dp4,
    rewrite_sockaddr,
)
from ipxbridge.wire.dplay8 import DP8_ENUM_PORT, is_dp8_port

LIMITED_BROADCAST: Final = "255.255.255.255"
# DSCP of every relayed copy, kernel or Python (EF): a marked datagram is relayed again only
# from a p2p interface to the LANs (rule 5). Any value works as long as all bridges agree.
DSCP_MARK: Final = 0x2E
DEFAULT_RELAY_PORTS: Final = (DP4_ENUM_PORT, DP8_ENUM_PORT)  # DP4 enumeration, DP8 DPNSVR
RELAY_DROP_REASONS: Final = (
    "not_selected",
    "own_packet",
    "not_broadcast",
    "duplicate",
    "marked_copy",
    "ttl_expired",
    "no_destination",
    "bad_sockaddr",
    "source_invalid",
    "source_off_link",
    "source_port_zero",
    "dp4_sockaddr_mismatch",
    "enum_rate",
)
# Reasons the relay's I/O gives (io/relay.py) around the decision: a truncated read; the
# rewrite-mode flow table full, or a stranger writing to a return socket; no flow socket for
# any copy; a source over its fair share of a relay port's backlog (R13).
RELAY_IO_DROP_REASONS: Final = (
    "truncated",
    "flow_limit",
    "return_not_player",
    "flow_refused",
    "fair_share",
)
# Rule 4: sources no host sends from ("this network", loopback, multicast + class E + the
# limited broadcast). io/nftables.py puts the same prefixes in the fast path's rules.
INVALID_SOURCES: Final = ("0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/3")
_INVALID_NETS: Final = tuple(ipaddress.IPv4Network(n) for n in INVALID_SOURCES)
_ANY: Final = "0.0.0.0"
SOURCE_CACHE: Final = 4096  # remembered source verdicts (rule 4)


def kernel_hands_over(payload: bytes) -> bool:
    """Whether the kernel fast path leaves this datagram to the Python path (rule 5).

    The same two byte matches as the nft rules (io/nftables.py ``ruleset``): ``play`` at
    byte 20, where a DP4 SP header has it, or ``00 02`` at byte 0, a DP8 EnumQuery's lead.
    A payload that matches but is not DirectPlay only costs a copy made in Python.
    """
    return has_dplay_lead(payload)


class SourceMode(StrEnum):
    """How relayed copies are sourced."""

    PRESERVE = "preserve"  # raw IP_HDRINCL: the player's own source address and port
    REWRITE = "rewrite"  # the bridge's address; replies come back through the flow table


@dataclass(frozen=True)
class RelayMode:
    """How the relay runs: its source mode, and whether the kernel makes the copies."""

    source_mode: SourceMode
    fast_path: bool


def choose_relay_mode(
    source_mode: str, fast_path: str, raw_sockets: bool, fast_path_unavailable: str | None
) -> RelayMode:
    """The relay's mode from the configuration and what this host allows.

    ``auto`` source mode is preserve when raw sockets may be opened (CAP_NET_RAW), else
    rewrite. The nftables fast path copies only in preserve mode (the kernel keeps the
    player's source); ``auto`` uses it when ``fast_path_unavailable`` is None, ``on`` insists.

    Args:
        source_mode: ``relay.source_mode``: auto, preserve or rewrite.
        fast_path: ``relay.fast_path``: auto, on or off.
        raw_sockets: whether raw sockets may be opened here.
        fast_path_unavailable: why nft cannot change rules here, or None when it can (only
            asked when ``fast_path`` is not off).

    Raises:
        StartupError: a mode that was asked for explicitly cannot run here.
    """
    if source_mode == "auto":
        source_mode = "preserve" if raw_sockets else "rewrite"
    elif source_mode == "preserve" and not raw_sockets:
        raise StartupError(
            "--source-mode preserve needs raw sockets: run as root or grant "
            "CAP_NET_RAW (docker --cap-add NET_RAW), or use rewrite"
        )
    why_not = fast_path_unavailable if fast_path != "off" else "off in the config"
    fast = source_mode == "preserve" and why_not is None
    if fast_path == "on" and not fast:
        raise StartupError(
            "relay.fast_path is on but cannot be used: "
            f"{why_not or 'it needs --source-mode preserve'}"
        )
    return RelayMode(SourceMode(source_mode), fast)


@dataclass(frozen=True)
class Egress:
    """One selected interface as the relay uses it."""

    index: int
    name: str
    role: str  # "lan" | "p2p"
    address: str  # the bridge's address on it (source of rewritten copies)
    broadcast: str  # computed subnet broadcast ("" for p2p)
    peers: tuple[str, ...] = ()  # unicast targets on p2p interfaces
    mtu: int = 1500
    # On-link prefixes (CIDR) of its addresses: the only sources a lan ingress accepts (rule 4)
    networks: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()  # every address of the box on it (``address`` is the first)


class Copy(NamedTuple):
    """One datagram to send.

    Named tuples, not frozen dataclasses, for the two built per datagram (this and
    ``RelayDecision``): a frozen dataclass's ``__init__`` (an ``object.__setattr__`` per
    field) was 4 % of the Python path's time at saturation (py-spy).
    """

    egress: Egress
    dst: str
    payload: bytes
    ttl: int


class RelayDecision(NamedTuple):
    """What to do with one received datagram (a named tuple, as ``Copy``)."""

    drop_reason: str | None
    copies: tuple[Copy, ...] = ()
    sockaddr_rewritten: bool = False
    # The payload's DirectPlay kind when the decision got as far as classifying it, so the
    # inspector does not classify the same bytes again (None: not classified).
    kind: DPlayKind | None = None


@dataclass(frozen=True)
class RelaySettings:
    """Tunables."""

    source_mode: SourceMode = SourceMode.REWRITE
    dedup_window: float = 2.0
    dedup_max_entries: int = 65_536
    # The kernel makes the copies (io/nftables.py); this policy then only classifies what
    # arrives: originals (relayed by the kernel) and marked copies (rule 5).
    kernel_fanout: bool = False
    dscp_mark: int = DSCP_MARK
    enum_rate: float = 10.0  # enumerations per second and source IP (rule 9)
    enum_burst: int = 20
    enum_sources: int = 4096  # sources with a bucket; the least recently seen go first
    heard_peers: int = MAX_PER_INTERFACE  # peers learned per p2p interface (policy/relay_peers.py)
    heard_expiry: float = EXPIRE_SECONDS


@dataclass
class EnumerationLimit:
    """Token buckets per source IP (rule 9), bounded; the clock is passed in."""

    rate: float
    burst: int
    max_sources: int
    # source -> its bucket; insertion order = least recently seen first
    # (an OrderedDict: evicting the front is O(1), policy/dedup.py says why)
    _buckets: OrderedDict[str, TokenBucket] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, source: str, now: float) -> bool:
        """Spend one token of ``source``'s bucket; False when it has none."""
        buckets = self._buckets
        bucket = buckets.pop(source, None)
        if bucket is None:
            bucket = TokenBucket(self.rate, self.burst, now)
        allowed = bucket.take(now)
        buckets[source] = bucket
        if len(buckets) > self.max_sources:
            buckets.popitem(last=False)
        return allowed


class RelayPolicy:
    """Decides the fan-out of received broadcasts. See the module rules."""

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        self._egresses: dict[int, Egress] = {}
        self._lan_out = False  # a lan egress with a broadcast address: rule 5's copies go there
        self._own: frozenset[str] = frozenset()
        self._ingress_bcast: dict[int, frozenset[str]] = {}
        self._any_bcast: frozenset[str] = frozenset()
        self._on_link: dict[int, tuple[ipaddress.IPv4Network, ...]] = {}
        # (ingress, source IP) -> rule 4's verdict; bounded, oldest first out, reset per plan
        self._sources: OrderedDict[tuple[int, str], tuple[str | None, bool]] = OrderedDict()
        self.heard = HeardPeers(settings.heard_peers, settings.heard_expiry)
        self._loops = LoopFilter(settings.dedup_window, settings.dedup_max_entries)
        self._enums = EnumerationLimit(
            settings.enum_rate, settings.enum_burst, settings.enum_sources
        )

    @property
    def egresses(self) -> tuple[Egress, ...]:
        """The current plan."""
        return tuple(self._egresses.values())

    def set_plan(
        self,
        egresses: tuple[Egress, ...],
        own_addresses: frozenset[str],
        subnet_broadcasts: dict[int, frozenset[str]],
    ) -> None:
        """Replace the plan after a topology change.

        Args:
            egresses: selected interfaces that have an IPv4 address and are up.
            own_addresses: every IPv4 address of this box (echo suppression).
            subnet_broadcasts: per interface index, the broadcast addresses that count as a
                broadcast arriving there (computed from the on-link prefixes); all of them
                are invalid sources (rule 4).

        Raises:
            ValueError: an egress network that is not an IPv4 prefix.
        """
        self._egresses = {e.index: e for e in egresses}
        self._lan_out = any(e.role == "lan" and e.broadcast for e in egresses)
        self._own = own_addresses
        self._ingress_bcast = subnet_broadcasts
        self._any_bcast = frozenset().union(*subnet_broadcasts.values())
        self._on_link = {
            e.index: tuple(ipaddress.IPv4Network(n, strict=False) for n in e.networks)
            for e in egresses
        }
        self._sources = OrderedDict()

    def is_own(self, ip: str) -> bool:
        """Rule 2's test alone: ``ip`` is an address of this box (its own copies, looped back).

        The receive path asks it before a datagram joins the fair queues: in rewrite mode
        every copy comes back from the bridge's own address, and would count as a second
        source there (io/relay.py).
        """
        return ip in self._own

    def _source_reason(self, ingress: Egress, ip: str) -> tuple[str | None, bool]:
        """Rule 4's verdict on the source, and whether it is on-link there.

        Cached: a few players send most datagrams.
        """
        key = (ingress.index, ip)
        cache = self._sources
        if key in cache:
            return cache[key]
        on_link = False
        try:
            addr = ipaddress.IPv4Address(ip)
        except ValueError:
            reason: str | None = "source_invalid"
        else:
            on_link = any(addr in net for net in self._on_link.get(ingress.index, ()))
            if ip in self._any_bcast or any(addr in net for net in _INVALID_NETS):
                reason = "source_invalid"
            elif ingress.role == "lan" and not on_link:
                reason = "source_off_link"
            else:
                reason = None
        cache[key] = (reason, on_link)
        if len(cache) > SOURCE_CACHE:
            cache.popitem(last=False)
        return reason, on_link

    def decide(
        self,
        payload: bytes,
        *,
        src: tuple[str, int],
        dst_ip: str,
        dst_port: int,
        ingress: int,
        ttl: int,
        now: float,
        tos: int = 0,
    ) -> RelayDecision:
        """Decide the copies for one datagram received on a relay port.

        Raises:
            Nothing for any ``payload``, ``src``, ``ttl`` or ``tos`` (module docstring).
        """
        egress_in = self._egresses.get(ingress)
        if egress_in is None:
            return RelayDecision("not_selected")
        if src[0] in self._own:
            return RelayDecision("own_packet")
        if (
            dst_ip != LIMITED_BROADCAST
            and dst_ip not in self._ingress_bcast.get(ingress, frozenset())
            and not (egress_in.role == "p2p" and dst_ip == egress_in.address)
        ):
            return RelayDecision("not_broadcast")
        bad_source, on_link = self._source_reason(egress_in, src[0])
        if bad_source is not None:
            return RelayDecision(bad_source)
        if src[1] == 0:
            return RelayDecision("source_port_zero")
        if on_link and egress_in.role == "p2p":
            self.heard.hear(egress_in.name, src[0], now)  # a peer of the tunnel (relay_peers.py)
        settings = self.settings
        marked = tos >> 2 == settings.dscp_mark
        if marked and (egress_in.role != "p2p" or not self._lan_out):
            return RelayDecision("marked_copy")  # rule 5: a copy onto a segment, or no LAN
        if settings.kernel_fanout:
            # Mirrors the nft rules: TTL <= 1 was not fanned out, and DirectPlay is left to
            # the rules below (rule 5).
            if ttl <= 1:
                return RelayDecision("ttl_expired")
            if not kernel_hands_over(payload):
                return RelayDecision(None)  # the kernel made the copies
        loops = self._loops
        if loops.is_loop_copy(hash((dst_port, payload)), ttl, now):  # rule 6
            return RelayDecision("duplicate")
        if ttl <= 1:
            return RelayDecision("ttl_expired")
        # With the port's DirectPlay 8 context, so this is the kind the inspector needs too
        # (the context only adds DP8 session frames, after every kind tested below).
        kind = classify(payload, dp8_context=is_dp8_port(dst_port))
        enumeration = kind is DPlayKind.DP8_ENUM_QUERY
        rewritten = False
        if kind is DPlayKind.DP4:
            address, command = peek_dp4(payload)  # classify() saw the 24 bytes it needs
            if address not in (_ANY, src[0]):
                return RelayDecision("dp4_sockaddr_mismatch", kind=kind)  # rule 7
            enumeration = command == DP4Command.ENUMSESSIONS
            if address == _ANY and settings.source_mode is SourceMode.REWRITE:
                # The host would answer the packet's source: the bridge. Name the player.
                try:
                    payload = rewrite_sockaddr(payload, src[0])
                except DPlayError:
                    # classify() checked the token and 'play' only; the SOCKADDR's family and
                    # sin_zero are checked here (docs/protocols.md 1.2). Rule 8: drop, not mislead.
                    return RelayDecision("bad_sockaddr", kind=kind)
                rewritten = True
        if enumeration and not self._enums.allow(src[0], now):
            return RelayDecision("enum_rate", kind=kind)
        if rewritten:
            loops.remember(hash((dst_port, payload)), ttl, now)
        out_ttl = ttl - 1
        copies: list[Copy] = []
        for egress in self._egresses.values():
            if egress.index == ingress:
                continue
            if egress.role == "lan":
                if egress.broadcast:
                    copies.append(Copy(egress, egress.broadcast, payload, out_ttl))
            elif not marked:  # a copy of a copy goes to the LANs only (rule 5)
                copies.extend(Copy(egress, peer, payload, out_ttl) for peer in egress.peers)
        if not copies:
            return RelayDecision("no_destination", kind=kind)
        return RelayDecision(None, tuple(copies), rewritten, kind)

    def set_window(self, seconds: float) -> None:
        """Change the loop-detection window (configuration reload)."""
        self.settings = replace(self.settings, dedup_window=seconds)
        self._loops.window = seconds

    def purge(self, now: float) -> None:
        """Forget old duplicate records and peers not heard for long."""
        self._loops.purge(now)
        self.heard.expire(now)


@dataclass(frozen=True)
class Selection:
    """One configured relay interface pattern."""

    pattern: str
    role: str = "auto"  # auto | lan | p2p
    peers: tuple[str, ...] = ()


def selection_for(iface: Interface, selections: Sequence[Selection]) -> Selection | None:
    """The selection that decides ``iface``'s role and peers: the first that matches it.

    The same rule ``_chosen`` applies while it walks the selections in order (``ipxbridge
    interfaces`` uses this one to say where a role or peers came from).
    """
    alone = Topology((iface,))
    return next((s for s in selections if select(alone, [s.pattern])), None)


def _chosen(
    topology: Topology, selections: tuple[Selection, ...]
) -> Iterator[tuple[Interface, Selection, str]]:
    """(interface, its selection, role) for every interface the relay uses.

    That is every interface that matches a selection, is up and has an IPv4 address; the
    first matching selection decides its role.
    """
    seen: set[int] = set()
    for sel in selections:
        for iface in select(topology, [sel.pattern]):
            if iface.index in seen or not iface.up or not iface.addresses:
                continue
            seen.add(iface.index)
            yield iface, sel, iface.role if sel.role == "auto" else sel.role


def wireguard_reads(topology: Topology, selections: tuple[Selection, ...]) -> tuple[str, ...]:
    """The WireGuard interfaces whose peers ``build_plan`` needs: p2p, no static peers.

    Reading them is I/O (a UAPI socket or generic netlink, ``io/wireguard.py``) that can take
    seconds, so the caller does it off the event loop and hands the result to ``build_plan``.
    """
    return tuple(
        iface.name
        for iface, sel, role in _chosen(topology, selections)
        if role == "p2p" and not sel.peers and iface.kind == "wireguard"
    )


def peer_sources(
    iface: Interface,
    sel: Selection,
    wireguard_peers: Mapping[str, Sequence[str]],
    openvpn: Mapping[str, Sequence[str]],
    heard: Mapping[str, Sequence[str]],
    *,
    named: Mapping[str, Sequence[tuple[str, Sequence[str]]]] | None = None,
) -> dict[str, str]:
    """A p2p interface's peers, each with where it came from, in the order they are used.

    Listed peers (the config's or the command line's, ``listed``) are the only ones when
    there are any. Otherwise: WireGuard's /32 AllowedIPs (``wireguard``), the peers the
    VPN's own files name for this interface (``named``: ``tinc <net dir>``, the other
    nodes' host-sized Subnets; ``nebula <config>``, its unsafe routes' via), the connected
    clients of an OpenVPN server whose virtual address is in the interface's subnet
    (``openvpn <status file>``), and the addresses of that subnet heard sending broadcasts
    there (``heard``, policy/relay_peers.py); with none of those, the point-to-point peer
    address (``point-to-point``). The box's own addresses are never its peers.
    """
    if sel.peers:
        return dict.fromkeys(sel.peers, "listed")
    found: dict[str, str] = {}
    if iface.kind == "wireguard":
        found.update(dict.fromkeys(wireguard_peers.get(iface.name, ()), "wireguard"))
    nets = [a.network for a in iface.addresses]
    own = {a.address for a in iface.addresses}
    for source, addresses in (named or {}).get(iface.name, ()):
        for address in addresses:
            if address not in own:
                found.setdefault(address, source)
    for path, addresses in openvpn.items():
        for address in addresses:
            ip = ipaddress.IPv4Address(address)
            if address not in own and any(ip in net for net in nets):
                found.setdefault(address, f"openvpn {path}")
    for address in heard.get(iface.name, ()):
        found.setdefault(address, "heard")
    first = iface.addresses[0]
    if not found and first.peer:
        found[first.peer] = "point-to-point"
    return found


def plan_peer_sources(
    topology: Topology,
    selections: tuple[Selection, ...],
    wireguard_peers: Mapping[str, Sequence[str]],
    openvpn: Mapping[str, Sequence[str]],
    heard: Mapping[str, Sequence[str]],
    *,
    named: Mapping[str, Sequence[tuple[str, Sequence[str]]]] | None = None,
) -> dict[str, dict[str, str]]:
    """``peer_sources`` of every p2p interface ``build_plan`` uses, by interface name."""
    return {
        iface.name: peer_sources(iface, sel, wireguard_peers, openvpn, heard, named=named)
        for iface, sel, role in _chosen(topology, selections)
        if role == "p2p"
    }


def finding_peers(topology: Topology, selections: tuple[Selection, ...]) -> bool:
    """Whether a p2p interface in use has no listed peers (``peer_sources`` finds them)."""
    return any(role == "p2p" and not sel.peers for _, sel, role in _chosen(topology, selections))


def build_plan(
    topology: Topology,
    selections: tuple[Selection, ...],
    wireguard_peers: Mapping[str, Sequence[str]],
    openvpn: Mapping[str, Sequence[str]] | None = None,
    heard: Mapping[str, Sequence[str]] | None = None,
    *,
    named: Mapping[str, Sequence[tuple[str, Sequence[str]]]] | None = None,
) -> tuple[tuple[Egress, ...], frozenset[str], dict[int, frozenset[str]]]:
    """Turn the live topology and the configuration into relay egresses.

    An interface is used when it matches a selection, is up and has an IPv4 address; the
    first matching selection decides its role and peers. A p2p interface's peers are
    ``peer_sources``': listed ones, else those found from ``wireguard_peers`` (by interface
    name, as last read for the names ``wireguard_reads`` lists), ``openvpn`` (client
    addresses per status file), ``heard`` (per interface name) and ``named`` (the peers
    tinc's and Nebula's files name, per interface name).

    Returns:
        (egresses, every IPv4 address of the box, subnet broadcasts per interface index).
    """
    own = frozenset(a.address for i in topology.interfaces for a in i.addresses)
    bcasts = {
        i.index: frozenset(a.broadcast for a in i.addresses if a.broadcast)
        for i in topology.interfaces
    }
    egresses: list[Egress] = []
    for iface, sel, role in _chosen(topology, selections):
        first = iface.addresses[0]
        peers: tuple[str, ...] = ()
        if role == "p2p":
            peers = tuple(
                peer_sources(iface, sel, wireguard_peers, openvpn or {}, heard or {}, named=named)
            )
        egresses.append(
            Egress(
                iface.index,
                iface.name,
                role,
                first.address,
                first.broadcast if role == "lan" else "",
                peers,
                iface.mtu,
                tuple(dict.fromkeys(str(a.network) for a in iface.addresses)),
                tuple(a.address for a in iface.addresses),
            )
        )
    return tuple(egresses), own, bcasts
