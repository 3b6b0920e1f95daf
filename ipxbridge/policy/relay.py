"""Broadcast fan-out decisions: which received broadcast goes where, and in what form.

Rules (issue 4; protocols.md section 7; reliability.md items 3, 7, 8), applied in order:

1. Only datagrams that arrived on a selected interface are considered (``not_selected``).
2. The bridge's own sends are never relayed again: a source address of this box
   (``own_packet``). (In preserve mode the kernel loops our broadcasts back to local sockets
   with the player's source; rule 4 catches those by their lower TTL.)
3. Only broadcasts are relayed: the limited broadcast 255.255.255.255 or the ingress subnet's
   broadcast (``not_broadcast``). Exception: on a ``p2p`` interface, which cannot carry
   broadcast, a datagram to the bridge's own address is the remote side's stand-in for one.
   Unicast to the relay port is otherwise never turned into a flood.
4. Loops: copies leave with TTL - 1, a TTL of 1 or less is not forwarded (``ttl_expired``),
   and a payload seen within the window with a higher TTL is a loop copy (``duplicate``;
   ``dedup.LoopFilter``). Retries and identical packets from other players pass.
5. A copy goes out of every other selected interface, never back out of the ingress:
   ``lan`` interfaces get the subnet broadcast address (computed, never 0.0.0.0); ``p2p``
   interfaces (WireGuard, tun: no broadcast at all) get one unicast copy per peer.
6. In ``rewrite`` source mode the copy leaves from the bridge's own address; a DirectPlay 4
   header whose SOCKADDR says 0.0.0.0 ("use the packet's source") is rewritten to the real
   player's IP so the host's TCP reply goes to the player, not to the bridge
   ([MC-DPL4CS] 2.2.6, protocols.md 1.2).
7. A DirectPlay 4 message that needs that rewrite but whose SOCKADDR is malformed (family not
   AF_INET = 2, or non-zero ``sin_zero``) is dropped as ``bad_sockaddr``, not relayed as it
   is: unchanged, its 0.0.0.0 would make the host answer the bridge, where nothing listens
   (protocols.md 7), so the copy could only mislead. A malformed SOCKADDR that names an
   address needs no rewrite and is relayed unchanged, as in preserve mode: the bridge does not
   validate what it does not touch.

``decide`` never raises on received bytes: every datagram gets one decision, and its
``drop_reason`` is ``None`` or one of ``RELAY_DROP_REASONS`` (the ``relay`` fuzz target and a
property test hold it to that in both source modes).

Pure: ``now`` is passed in.
"""

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from ipxbridge.policy.dedup import LoopFilter
from ipxbridge.policy.topology import Interface, Topology, select
from ipxbridge.wire.directplay import DPlayError, DPlayKind, classify, rewrite_sockaddr

LIMITED_BROADCAST: Final = "255.255.255.255"
DEFAULT_RELAY_PORTS: Final = (47624, 6073)  # DirectPlay 4 enumeration, DirectPlay 8 DPNSVR
RELAY_DROP_REASONS: Final = (
    "not_selected",
    "own_packet",
    "not_broadcast",
    "duplicate",
    "marked_copy",
    "ttl_expired",
    "no_destination",
    "bad_sockaddr",
)


class SourceMode(StrEnum):
    """How relayed copies are sourced."""

    PRESERVE = "preserve"  # raw IP_HDRINCL: the player's own source address and port
    REWRITE = "rewrite"  # the bridge's address; replies come back through the flow table


@dataclass(frozen=True, slots=True)
class Egress:
    """One selected interface as the relay uses it."""

    index: int
    name: str
    role: str  # "lan" | "p2p"
    address: str  # the bridge's address on it (source of rewritten copies)
    broadcast: str  # computed subnet broadcast ("" for p2p)
    peers: tuple[str, ...] = ()  # unicast targets on p2p interfaces
    mtu: int = 1500


@dataclass(frozen=True, slots=True)
class Copy:
    """One datagram to send."""

    egress: Egress
    dst: str
    payload: bytes
    ttl: int


@dataclass(frozen=True, slots=True)
class RelayDecision:
    """What to do with one received datagram."""

    drop_reason: str | None
    copies: tuple[Copy, ...] = ()
    sockaddr_rewritten: bool = False


@dataclass(frozen=True, slots=True)
class RelaySettings:
    """Tunables."""

    source_mode: SourceMode = SourceMode.REWRITE
    dedup_window: float = 2.0
    dedup_max_entries: int = 65_536
    # The kernel makes the copies (io/nftables.py); this policy then only classifies what
    # arrives: originals (relayed by the kernel) and marked copies (never relayed again).
    kernel_fanout: bool = False
    dscp_mark: int = 0x2E


class RelayPolicy:
    """Decides the fan-out of received broadcasts. See the module rules."""

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        self._egresses: dict[int, Egress] = {}
        self._own: frozenset[str] = frozenset()
        self._ingress_bcast: dict[int, frozenset[str]] = {}
        self._loops = LoopFilter(settings.dedup_window, settings.dedup_max_entries)

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
                broadcast arriving there (computed from the on-link prefixes).
        """
        self._egresses = {e.index: e for e in egresses}
        self._own = own_addresses
        self._ingress_bcast = subnet_broadcasts

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
            Nothing for any ``payload``, ``ttl`` or ``tos`` (rule 7); ``src`` is the kernel's
            IPv4 source address.
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
        if self.settings.kernel_fanout:
            # Mirrors the nft match: marked copies and TTL <= 1 were not fanned out.
            if tos >> 2 == self.settings.dscp_mark:
                return RelayDecision("marked_copy")
            if ttl <= 1:
                return RelayDecision("ttl_expired")
            return RelayDecision(None)  # the kernel made the copies
        loops = self._loops
        if loops.is_loop_copy(hash((dst_port, payload)), ttl, now):
            return RelayDecision("duplicate")
        if ttl <= 1:
            return RelayDecision("ttl_expired")
        rewritten = False
        if (
            self.settings.source_mode is SourceMode.REWRITE
            and len(payload) >= 24
            and payload[8:12] == b"\x00\x00\x00\x00"
            and classify(payload) is DPlayKind.DP4
        ):
            # The host would answer the packet's source: the bridge. Name the player.
            try:
                payload = rewrite_sockaddr(payload, src[0])
            except DPlayError:
                # classify() checked the token and 'play' only; the SOCKADDR's family and
                # sin_zero are checked here (protocols.md 1.2). Rule 7: drop, do not mislead.
                return RelayDecision("bad_sockaddr")
            loops.remember(hash((dst_port, payload)), ttl, now)
            rewritten = True
        out_ttl = ttl - 1
        copies: list[Copy] = []
        for egress in self._egresses.values():
            if egress.index == ingress:
                continue
            if egress.role == "lan":
                if egress.broadcast:
                    copies.append(Copy(egress, egress.broadcast, payload, out_ttl))
            else:
                copies.extend(Copy(egress, peer, payload, out_ttl) for peer in egress.peers)
        if not copies:
            return RelayDecision("no_destination")
        return RelayDecision(None, tuple(copies), rewritten)

    def set_window(self, seconds: float) -> None:
        """Change the loop-detection window (configuration reload)."""
        self.settings = replace(self.settings, dedup_window=seconds)
        self._loops.window = seconds

    def purge(self, now: float) -> None:
        """Forget old duplicate records."""
        self._loops.purge(now)


@dataclass(frozen=True, slots=True)
class Selection:
    """One configured relay interface pattern."""

    pattern: str
    role: str = "auto"  # auto | lan | p2p
    peers: tuple[str, ...] = ()


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


def build_plan(
    topology: Topology,
    selections: tuple[Selection, ...],
    wireguard_peers: Mapping[str, Sequence[str]],
) -> tuple[tuple[Egress, ...], frozenset[str], dict[int, frozenset[str]]]:
    """Turn the live topology and the configuration into relay egresses.

    An interface is used when it matches a selection, is up and has an IPv4 address; the
    first matching selection decides its role and peers. A p2p interface without static
    peers takes its peers from ``wireguard_peers`` (by interface name, as last read for the
    names ``wireguard_reads`` lists; a name not there has none yet), else its point-to-point
    peer address.

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
            peers = sel.peers or (
                tuple(wireguard_peers.get(iface.name, ())) if iface.kind == "wireguard" else ()
            )
            if not peers and first.peer:
                peers = (first.peer,)
        egresses.append(
            Egress(
                iface.index,
                iface.name,
                role,
                first.address,
                first.broadcast if role == "lan" else "",
                peers,
                iface.mtu,
            )
        )
    return tuple(egresses), own, bcasts
