"""``ipxbridge interfaces``: every interface, and the plan the broadcast relay executes.

One plan, not two. The command gathers exactly the inputs ``ipxbridge run``
hands the relay and lets the relay's own planner turn them into egresses:

1. **Selections** come from the configuration as ``run`` loads it (``--config FILE``, the
   ``IPXBRIDGE_*`` environment, ``--iface`` replacing ``relay.interfaces`` and
   ``--relay-port`` replacing ``relay.ports``, as on ``run``): one
   ``policy.relay.Selection(name, role, peers)`` per ``relay.interfaces`` entry. With none the
   relay is off; the command then shows what ``--iface '*'`` (every interface) would do, and
   says so.
2. **Topology** is read once the way the relay's ``TopologyWatcher`` reads it
   (``io/netlink.read_topology``, the netifaces view if netlink fails).
3. **Peers** of p2p interfaces without listed ones: WireGuard's, read for the names
   ``policy.relay.wireguard_reads`` lists with ``io/wireguard.read_wireguard_peers``, the
   clients in OpenVPN servers' status files (``io/openvpn.openvpn_clients``) and the peers
   tinc's and Nebula's configs name (``io/vpn_files.py``), as the bridge does; each peer is
   shown with where it came from (``policy.relay.peer_sources``). Peers the running bridge
   hears are not known here, and the command says so.
4. ``policy.relay.build_plan`` turns them into ``Egress`` tuples; everything printed about
   what the relay sends comes from those (a lan interface gets the subnet broadcast of its
   *first* address only; a p2p one a unicast copy per peer), plus why each other interface is
   not used (loopback, not selected, down, no IPv4 address) and which selections match no
   interface.

It also marks the PRIMARY interface (the lowest-metric IPv4 default route: the only
interface Windows sends a game's 255.255.255.255 enumeration out of).

**IPX interface ports** are shown the same way, from the same planner the IPX
service runs: ``ipx.interfaces`` (or ``--ipx-iface NAME[:KIND,KIND]``, which replaces it as on
``run``) and the same topology and WireGuard peers go through ``policy.port_plan.plan_ports``;
each interface lists the ports planned there (kind, role, where broadcasts go, framing) and,
for each kind that gets none, the planner's ``Skipped`` reason. Whether a port then opens
(CAP_NET_RAW for ``ethernet``, UDP 54792 free for ``ipxwrapper``) is only known to ``run``.

Exit codes (docs/architecture.md rule 12): 0 ok, 1 the interfaces could not be read, 2 usage or
configuration error (for example a malformed CIDR in ``--iface``).

``cli.py`` wires it in with :func:`add_parser` and :func:`run`.
"""

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ipxbridge.commands.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    SubParsers,
    add_command,
    ipx_iface_arg,
    port_arg,
    relay_iface_arg,
)
from ipxbridge.commands.common import report as report_errors
from ipxbridge.config import (
    UPLINK_PASSWORD_ENV,
    Config,
    ConfigError,
    load_config,
    parse_host_port,
)
from ipxbridge.policy.port_plan import IpxInterface, PortPlan, Skipped, plan_ports
from ipxbridge.policy.relay import (
    LIMITED_BROADCAST,
    Egress,
    Selection,
    build_plan,
    finding_peers,
    peer_sources,
    selection_for,
    wireguard_reads,
)
from ipxbridge.policy.switch import PortKind
from ipxbridge.policy.topology import Interface, Topology, select, unmatched
from ipxbridge.wire.ipx import IPX_UDP_PORT
from ipxbridge.wire.ipxwrapper import IPXWRAPPER_UDP_PORT

EVERY_INTERFACE: Final = "*"  # the preview selection when the relay is off
NO_PEERS: Final = (
    "p2p: no peers known yet — nothing would be sent until the running bridge hears one "
    "(an address of this subnet sending a broadcast here); give peers in the config or with "
    "--iface NAME:PEER,PEER"
)
HEARD_NOTE: Final = (
    "while the bridge runs, addresses of this subnet heard sending broadcasts here become "
    "peers too (relay.heard_peers)"
)
FEW_EGRESSES: Final = "the relay needs at least two usable interfaces"
EXAMPLES: Final = (
    ("ipxbridge interfaces", "every interface, and what the relay would do with --iface '*'"),
    (
        "ipxbridge interfaces --iface eth0 --iface wg0",
        "the plan `ipxbridge run --iface eth0 --iface wg0` would execute, and why not elsewhere",
    ),
    (
        "ipxbridge interfaces --config /etc/ipxbridge/config.yaml --json",
        "the relay's and the IPX ports' plans for a configuration file, as JSON",
    ),
)


@dataclass(frozen=True, slots=True)
class IpxPortReport:
    """One kind of IPX port on one interface: planned (``plan``) or skipped, and in words."""

    kind: PortKind
    plan: PortPlan | None  # None: plan_ports skipped it
    action: str
    why: str = ""  # Skipped.why when not planned


@dataclass(frozen=True, slots=True)
class InterfaceReport:
    """One interface: whether the relay uses it, and what it does there or why not."""

    interface: Interface
    primary: bool
    selected: bool  # a selection matches it
    role: str  # the role the relay gives it (the selection's, else from the flags)
    egress: Egress | None  # its entry in the relay's plan; None when not used
    action: str
    notes: tuple[str, ...] = ()  # further lines about the action
    ipx_entry: IpxInterface | None = None  # the ipx.interfaces entry that decides for it
    ipx: tuple[IpxPortReport, ...] = ()  # per kind of that entry, in its order


@dataclass(frozen=True, slots=True)
class Report:
    """The relay's plan for one topology, and every interface's part in it."""

    selections: tuple[Selection, ...]
    configured: bool  # False: the relay is off and ``selections`` is the "*" preview
    matches: tuple[tuple[str, ...], ...]  # per selection, the interface names it matches
    egresses: tuple[Egress, ...]  # build_plan's, in its order
    own_addresses: frozenset[str]
    subnet_broadcasts: Mapping[int, frozenset[str]]
    interfaces: tuple[InterfaceReport, ...]  # topology order
    ipx_entries: tuple[IpxInterface, ...] = ()  # ipx.interfaces; empty: no interface ports
    ipx_matches: tuple[tuple[str, ...], ...] = ()  # per entry, the interface names it matches
    ipx_ports: tuple[PortPlan, ...] = ()  # plan_ports's, in its order
    ipx_skipped: tuple[Skipped, ...] = ()
    rfc1234_port: int = IPX_UDP_PORT  # the tunnel's UDP port, which rfc1234 ports speak on

    @property
    def ipx_unmatched(self) -> tuple[str, ...]:
        """``ipx.interfaces`` patterns that match no interface."""
        pairs = zip(self.ipx_entries, self.ipx_matches, strict=True)
        return tuple(e.pattern for e, m in pairs if not m)

    @property
    def unmatched(self) -> tuple[str, ...]:
        """Selection patterns that match no interface."""
        return tuple(s.pattern for s, m in zip(self.selections, self.matches, strict=True) if not m)

    @property
    def selected_down(self) -> tuple[str, ...]:
        """Selected interfaces the plan leaves out (down or without IPv4 address)."""
        return tuple(i.interface.name for i in self.interfaces if i.selected and not i.egress)


def add_parser(sub: SubParsers) -> None:
    """Register ``interfaces``."""
    parser = add_command(
        sub,
        "interfaces",
        run,
        summary="list interfaces, the broadcast relay's plan and the IPX ports on them",
        examples=EXAMPLES,
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the bridge's YAML configuration: its relay interfaces, roles, peers and ports",
    )
    parser.add_argument("--json", action="store_true", help="JSON: the plan and every interface")
    parser.add_argument(
        "--iface",
        type=relay_iface_arg,
        action="append",
        default=[],
        metavar="PATTERN[:PEER,PEER]",
        help="relay interface as on `run`: name, glob (wg*) or CIDR, with its peers if "
        "point-to-point; repeatable; replaces the config's relay.interfaces (with neither: "
        "what --iface '*' would do)",
    )
    parser.add_argument(
        "--relay-port",
        action="append",
        type=port_arg,
        default=[],
        metavar="PORT",
        help="UDP port whose broadcasts are relayed, as on `run`; repeatable (default the "
        "config's relay.ports: 47624 and 6073)",
    )
    parser.add_argument(
        "--ipx-iface",
        type=ipx_iface_arg,
        action="append",
        default=[],
        metavar="NAME[:KIND,KIND]",
        help="IPX ports on this interface as on `run`; repeatable; kinds ethernet, ipxwrapper, "
        "rfc1234 (default ethernet,ipxwrapper); replaces the config's ipx.interfaces",
    )


def _down_reason(iface: Interface) -> str:
    if not iface.flags:
        return "down: skipped"  # the netifaces view knows no flags
    if "UP" not in iface.flags:
        return "down: skipped (administratively down)"
    return f"down: skipped (no carrier, operstate {iface.operstate or 'unknown'})"


def _lan_action(iface: Interface, egress: Egress) -> tuple[str, tuple[str, ...]]:
    first = iface.addresses[0]
    if egress.broadcast:
        action = f"lan: re-send as subnet broadcast to {egress.broadcast} (bound to device)"
    else:
        action = (
            f"lan: the first address {first.address}/{first.prefixlen} has no subnet broadcast"
            " (/31, /32) — nothing would be sent"
        )
    others = [a for a in iface.addresses[1:] if a.broadcast and a.broadcast != egress.broadcast]
    notes = tuple(
        f"not to {a.broadcast} ({a.address}/{a.prefixlen}): the relay uses the first address"
        f" only, {egress.address}"
        for a in others
    )
    return action, notes


def _p2p_action(
    iface: Interface,
    egress: Egress,
    sel: Selection | None,
    found: tuple[Mapping[str, Sequence[str]], Mapping[str, Sequence[str]]],
    named: Mapping[str, Sequence[tuple[str, Sequence[str]]]],
) -> str:
    if not egress.peers:
        return NO_PEERS
    wg, openvpn = found
    chosen = sel if sel is not None else Selection(iface.name)
    sources = peer_sources(iface, chosen, wg, openvpn, {}, named=named)
    groups: dict[str, list[str]] = {}
    for peer in egress.peers:
        groups.setdefault(sources.get(peer, "listed"), []).append(peer)
    said = "; ".join(f"{', '.join(peers)} ({_source_words(s)})" for s, peers in groups.items())
    return f"p2p: unicast copy to each peer: {said}"


def _source_words(source: str) -> str:
    """Where ``peer_sources`` says a peer came from, in words."""
    kind, _, path = source.partition(" ")
    return {
        "listed": "given in the config or --iface",
        "wireguard": "from WireGuard AllowedIPs",
        "openvpn": f"connected OpenVPN clients in {path}",
        "tinc": f"other tinc nodes' host-sized Subnets in {path}/hosts",
        "nebula": f"the via of Nebula's unsafe routes in {path}",
        "point-to-point": "from the point-to-point peer address",
    }.get(kind, source)


def _arrivals(egress: Egress, bcasts: Mapping[int, frozenset[str]]) -> str:
    """What ``RelayPolicy.decide`` takes for a broadcast arriving on ``egress`` (rule 3)."""
    targets = [LIMITED_BROADCAST, *sorted(bcasts.get(egress.index, ()))]
    if egress.role == "p2p":
        targets.append(f"{egress.address} (this box: the far side's stand-in for a broadcast)")
    return "relays what arrives for " + ", ".join(dict.fromkeys(targets))


def _peer_source(
    iface: Interface,
    entry_peers: Sequence[str],
    wg: Mapping[str, Sequence[str]],
) -> str:
    """Where an IPX p2p port's peers came from (policy/port_plan.plan_ports)."""
    if entry_peers:
        return "from the config"
    if iface.kind == "wireguard" and wg.get(iface.name):
        return "from WireGuard AllowedIPs"
    return "from the point-to-point peer address"


def _framing_text(framing: str) -> str:
    if framing == "auto":
        return "framing auto (learned per station, 802.2 until one is heard)"
    return f"framing {framing} (fixed)"


def _ipx_action(
    plan: PortPlan,
    iface: Interface,
    entry: IpxInterface,
    wg: Mapping[str, Sequence[str]],
    rfc1234_port: int,
) -> str:
    """What the IPX service does with one planned port, in words (``app/ipx._describe``)."""
    kind = plan.segment.kind
    if kind is PortKind.ETHERNET:
        return (
            f"ethernet: native IPX frames, {_framing_text(plan.framing)}; promiscuous while "
            "open (CAP_NET_RAW)"
        )
    port = IPXWRAPPER_UDP_PORT if kind is PortKind.IPXWRAPPER else rfc1234_port
    head = f"{kind}: udp {port}"
    if plan.role == "lan":
        if not plan.broadcast:
            return (
                f"{head}, lan: {plan.address} has no subnet broadcast (/31, /32) — "
                "broadcasts go nowhere"
            )
        return f"{head}, lan: broadcasts to {plan.broadcast} from {plan.address}"
    if not plan.peers:
        return f"{head}, p2p: no peers known — nothing would be sent; give peers in the config"
    source = _peer_source(iface, entry.peers, wg)
    return (
        f"{head}, p2p: a unicast copy to each peer: {', '.join(plan.peers)} ({source}) "
        f"from {plan.address}"
    )


def _ipx_rows(
    iface: Interface,
    entry: IpxInterface,
    *,
    plans: Mapping[tuple[str, PortKind], PortPlan],
    skipped: Mapping[tuple[str, PortKind], Skipped],
    wg: Mapping[str, Sequence[str]],
    rfc1234_port: int,
) -> tuple[IpxPortReport, ...]:
    rows: list[IpxPortReport] = []
    for kind in entry.kinds:
        plan = plans.get((iface.name, kind))
        if plan is not None:
            rows.append(
                IpxPortReport(kind, plan, _ipx_action(plan, iface, entry, wg, rfc1234_port))
            )
            continue
        # plan_ports gives every kind of a matching entry a plan or a Skipped.
        why = skipped[iface.name, kind].why
        rows.append(IpxPortReport(kind, None, f"{kind}: not opened: {why}", why))
    return tuple(rows)


def describe(
    topology: Topology,
    selections: Sequence[Selection],
    wireguard_peers: Mapping[str, Sequence[str]],
    *,
    configured: bool = True,
    ipx: Sequence[IpxInterface] = (),
    rfc1234_port: int = IPX_UDP_PORT,
    openvpn: Mapping[str, Sequence[str]] | None = None,
    named: Mapping[str, Sequence[tuple[str, Sequence[str]]]] | None = None,
) -> Report:
    """The relay's plan (``policy.relay.build_plan``) and every interface's part in it.

    With ``ipx`` entries, also the IPX interface ports ``policy.port_plan.plan_ports`` plans
    for the same topology and peers, and why each selected kind gets none where it does not.

    Args:
        topology: the interfaces, read as the relay reads them.
        selections: the relay's selections (:func:`relay_selections`).
        wireguard_peers: peers per WireGuard interface, read for the names
            ``policy.relay.wireguard_reads`` lists for the relay's and the IPX entries'
            selections (as the bridge hands them to build_plan and plan_ports).
        configured: False when ``selections`` is the ``"*"`` preview of a relay that is off.
        ipx: the ``ipx.interfaces`` entries (``app.ipx.ipx_interfaces``); empty: no IPX ports.
        rfc1234_port: the tunnel's UDP port (``ipx.listen``), which rfc1234 ports use.
        openvpn: client addresses per OpenVPN status file (``io/openvpn.openvpn_clients``).
        named: the peers tinc's and Nebula's configs name, per interface name, with their
            source (``io/vpn_files.by_interface``).

    Raises:
        ValueError: a pattern with "/" that is not an IPv4 CIDR.
    """
    openvpn = openvpn or {}
    entries = tuple(ipx)
    ipx_selections = tuple(e.selection for e in entries)
    ipx_matches = tuple(tuple(i.name for i in select(topology, [e.pattern])) for e in entries)
    ipx_plans, ipx_skipped = plan_ports(topology, entries, wireguard_peers)
    plan_at = {(p.segment.interface, p.segment.kind): p for p in ipx_plans}
    skip_at = {(s.interface, s.kind): s for s in ipx_skipped}
    chosen = tuple(selections)
    matches = tuple(tuple(i.name for i in select(topology, [s.pattern])) for s in chosen)
    egresses, own, bcasts = build_plan(topology, chosen, wireguard_peers, openvpn, named=named)
    by_index = {e.index: e for e in egresses}
    primary = topology.primary
    rows: list[InterfaceReport] = []
    for iface in topology.interfaces:
        sel = None if iface.is_loopback else selection_for(iface, chosen)
        role = sel.role if sel is not None and sel.role != "auto" else iface.role
        egress = by_index.get(iface.index)
        notes: tuple[str, ...] = ()
        if iface.is_loopback:
            action = "loopback: never used"
        elif sel is None:
            action = "not selected: skipped"
        elif not iface.up:
            action = _down_reason(iface)
        elif egress is None:
            action = "no IPv4 address: skipped"
        elif egress.role == "lan":
            action, notes = _lan_action(iface, egress)
        else:
            action = _p2p_action(iface, egress, sel, (wireguard_peers, openvpn), named or {})
            if sel is not None and not sel.peers:
                notes = (*notes, HEARD_NOTE)
        if egress is not None:
            notes = (*notes, _arrivals(egress, bcasts))
        is_primary = primary is not None and primary.index == iface.index
        ipx_sel = None if iface.is_loopback else selection_for(iface, ipx_selections)
        entry = None if ipx_sel is None else entries[ipx_selections.index(ipx_sel)]
        ports = (
            ()
            if entry is None
            else _ipx_rows(
                iface,
                entry,
                plans=plan_at,
                skipped=skip_at,
                wg=wireguard_peers,
                rfc1234_port=rfc1234_port,
            )
        )
        rows.append(
            InterfaceReport(
                iface, is_primary, sel is not None, role, egress, action, notes, entry, ports
            )
        )
    return Report(
        chosen,
        configured,
        matches,
        egresses,
        own,
        bcasts,
        tuple(rows),
        entries,
        ipx_matches,
        ipx_plans,
        ipx_skipped,
        rfc1234_port,
    )


def relay_selections(config: Config) -> tuple[tuple[Selection, ...], bool]:
    """The selections ``ipxbridge run`` gives the relay, and whether there are any.

    The bridge builds ``Selection(name, role, peers)`` per ``relay.interfaces`` entry
    (``app.py``). With none the relay is off; the command then shows the plan of a single
    ``"*"`` selection (every interface), with False.
    """
    selections = tuple(Selection(i.name, i.role, i.peers) for i in config.relay.interfaces)
    if selections:
        return selections, True
    return (Selection(EVERY_INTERFACE),), False


def _ipx_port_json(row: IpxPortReport, rfc1234_port: int) -> dict[str, Any]:
    plan = row.plan
    if plan is None:
        return {"kind": str(row.kind), "planned": False, "action": row.action, "why": row.why}
    udp = {PortKind.IPXWRAPPER: IPXWRAPPER_UDP_PORT, PortKind.RFC1234: rfc1234_port}
    return {
        "kind": str(row.kind),
        "planned": True,
        "action": row.action,
        "role": plan.role,
        "address": plan.address,
        "broadcast": plan.broadcast,
        "peers": list(plan.peers),
        "networks": list(plan.networks),
        "mtu": plan.mtu,
        "framing": plan.framing if row.kind is PortKind.ETHERNET else None,
        "udp_port": udp.get(row.kind),
    }


def _interface_json(item: InterfaceReport, rfc1234_port: int = IPX_UDP_PORT) -> dict[str, Any]:
    iface = item.interface
    return {
        "name": iface.name,
        "index": iface.index,
        "kind": iface.kind,
        "up": iface.up,
        "operstate": iface.operstate,
        "flags": list(iface.flags),
        "mtu": iface.mtu,
        "addresses": [
            {
                "address": a.address,
                "prefixlen": a.prefixlen,
                "broadcast": a.broadcast,
                "peer": a.peer,
            }
            for a in iface.addresses
        ],
        "default_route_metric": iface.default_route_metric,
        "primary": item.primary,
        "role": item.role,
        "selected": item.selected,
        "used": item.egress is not None,
        "action": item.action,
        "notes": list(item.notes),
        "peers": list(item.egress.peers) if item.egress is not None else [],
        "ipx": {
            "selected": item.ipx_entry is not None,
            "entry": item.ipx_entry.pattern if item.ipx_entry is not None else None,
            "ports": [_ipx_port_json(r, rfc1234_port) for r in item.ipx],
        },
    }


def egress_json(egress: Egress) -> dict[str, Any]:
    """One ``Egress`` of the plan as JSON: every field, tuples as lists."""
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in dataclasses.asdict(egress).items()
    }


def uplinks_json(config: Config) -> dict[str, Any]:
    """The ipxbox uplinks the configuration asks for (docs/ipx.md, "ipxbox uplinks")."""
    ipx = config.ipx
    if ipx.uplink_password_file:
        server: str | None = f"password from {ipx.uplink_password_file}"
    elif os.environ.get(UPLINK_PASSWORD_ENV):
        server = f"password from ${UPLINK_PASSWORD_ENV}"
    else:
        server = None
    return {
        "server": None if server is None else {"listen": ipx.listen, "password": server},
        "clients": [
            {
                "server": u.server,
                "password": f"from {u.password_file}"
                if u.password_file
                else f"from ${u.password_env}",
            }
            for u in ipx.uplinks
        ],
    }


def uplink_lines(uplinks: dict[str, Any]) -> list[str]:
    """The uplinks as ``render_text`` shows them, one line each."""
    server = uplinks["server"]
    lines = [
        f"ipx uplinks, server side: udp {server['listen']}, {server['password']}"
        if server
        else "ipx uplinks, server side: off (no ipx.uplink_password_file)"
    ]
    lines += [
        f"ipx uplink -> {c['server']} (client, password {c['password']})"
        for c in uplinks["clients"]
    ]
    return lines


def render_json(
    report: Report,
    ports: Sequence[int],
    source: str,
    ipx_source: str = "not configured",
    uplinks: dict[str, Any] | None = None,
) -> str:
    """The ``--json`` document: the plan, the selections, the IPX ports, every interface."""
    primary = next((i.interface.name for i in report.interfaces if i.primary), None)
    doc = {
        "ports": list(ports),
        "configured": report.configured,
        "source": source,
        "selections": [
            {"pattern": s.pattern, "role": s.role, "peers": list(s.peers), "matches": list(m)}
            for s, m in zip(report.selections, report.matches, strict=True)
        ],
        "unmatched": list(report.unmatched),
        "selected_down": list(report.selected_down),
        "primary": primary,
        "egresses": [egress_json(e) for e in report.egresses],
        "own_addresses": sorted(report.own_addresses),
        "ipx": {
            "configured": bool(report.ipx_entries),
            "source": ipx_source,
            "entries": [
                {
                    "pattern": e.pattern,
                    "kinds": [str(k) for k in e.kinds],
                    "role": e.role,
                    "peers": list(e.peers),
                    "framing": e.framing,
                    "matches": list(m),
                }
                for e, m in zip(report.ipx_entries, report.ipx_matches, strict=True)
            ],
            "unmatched": list(report.ipx_unmatched),
            "ports": [str(p.segment) for p in report.ipx_ports],
            "skipped": [
                {"interface": s.interface, "kind": str(s.kind), "why": s.why}
                for s in report.ipx_skipped
            ],
        },
        "interfaces": [_interface_json(i, report.rfc1234_port) for i in report.interfaces],
    }
    if uplinks is not None:
        doc["uplinks"] = uplinks
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def _unmatched_lines(report: Report, patterns: Sequence[str]) -> list[str]:
    """Each pattern that selects nothing, in words (one that matches only loopback says so)."""
    topology = Topology(tuple(i.interface for i in report.interfaces))
    return [f"  {u}" for u in unmatched(topology, patterns)]


def _header(report: Report, ports: Sequence[int], source: str) -> list[str]:
    lines = [f"relayed UDP ports: {', '.join(str(p) for p in ports)}"]
    if not report.configured:
        lines.append(
            f"relay interfaces: none ({source}), so the relay is off; "
            f"the plan below is what --iface '{EVERY_INTERFACE}' would do"
        )
    else:
        shown = []
        for sel in report.selections:
            extra = [sel.role] if sel.role != "auto" else []
            extra += [f"peers {', '.join(sel.peers)}"] if sel.peers else []
            shown.append(f"{sel.pattern} ({'; '.join(extra)})" if extra else sel.pattern)
        lines.append(f"relay interfaces ({source}): {', '.join(shown)}")
    lines += _unmatched_lines(report, report.unmatched)
    primary = next((i.interface for i in report.interfaces if i.primary), None)
    if primary is not None:
        lines.append(
            f"primary: {primary.name} (default route metric {primary.default_route_metric}); "
            "Windows sends a game's 255.255.255.255 out of this interface only"
        )
    else:
        lines.append("primary: none (no IPv4 default route)")
    return lines


def _ipx_header(report: Report, source: str) -> list[str]:
    if not report.ipx_entries:
        return [f"IPX interface ports: none ({source})"]
    shown = []
    for entry in report.ipx_entries:
        extra = [",".join(str(k) for k in entry.kinds)]
        extra += [entry.role] if entry.role != "auto" else []
        extra += [f"peers {', '.join(entry.peers)}"] if entry.peers else []
        extra += [f"framing {entry.framing}"] if entry.framing != "auto" else []
        shown.append(f"{entry.pattern} ({'; '.join(extra)})")
    lines = [f"IPX interface ports ({source}): {', '.join(shown)}"]
    lines += _unmatched_lines(report, report.ipx_unmatched)
    return lines


def render_text(
    report: Report, ports: Sequence[int], source: str, ipx_source: str = "not configured"
) -> str:
    """The human-readable listing."""
    lines = _header(report, ports, source)
    lines += _ipx_header(report, ipx_source)
    for item in report.interfaces:
        iface = item.interface
        state = "up" if iface.up else "down"
        if iface.operstate:
            state += f" (operstate {iface.operstate})"
        role = item.role
        if not iface.is_loopback and role != iface.role:
            role += f" (set in the config; flags say {iface.role})"
        metric = iface.default_route_metric
        marks = [
            f"{iface.index}: {iface.name}",
            iface.kind if iface.is_loopback else f"{iface.kind}  {role}",
            state,
            f"mtu {iface.mtu}",
            "no default route" if metric is None else f"default route metric {metric}",
        ]
        if item.primary:
            marks.append("PRIMARY")
        if report.configured and not iface.is_loopback:
            marks.append("selected" if item.selected else "not selected")
        lines.append("  ".join(marks))
        lines.append(f"    flags: {','.join(iface.flags) or '(unknown)'}")
        for a in iface.addresses:
            # iproute2's spelling: the prefix belongs to the peer on a p2p address
            where = (
                f"{a.address} peer {a.peer}/{a.prefixlen}"
                if a.peer
                else f"{a.address}/{a.prefixlen}"
            )
            brd = f"brd {a.broadcast}" if a.broadcast else "no broadcast"
            if a.broadcast and item.role == "p2p" and not iface.is_loopback:
                brd += " (unused: p2p)"
            lines.append(f"    inet {where} {brd}")
        lines.append(f"    -> {item.action}")
        lines.extend(f"       {note}" for note in item.notes)
        if report.ipx_entries and not iface.is_loopback:
            if item.ipx_entry is None:
                lines.append("    ipx: not selected by ipx.interfaces")
            lines.extend(f"    ipx -> {row.action}" for row in item.ipx)
    count = len(report.egresses)
    used = ", ".join(e.name for e in report.egresses)
    lines.append(f"plan: {used} ({count} interfaces)" if count > 1 else f"plan: {used or 'none'}")
    if count < 2:
        lines.append(f"  {FEW_EGRESSES}; have {count}")
    if report.ipx_entries:
        planned = ", ".join(str(p.segment) for p in report.ipx_ports)
        lines.append(
            f"ipx ports: {planned} ({len(report.ipx_ports)} planned)"
            if planned
            else "ipx ports: none planned"
        )
    return "\n".join(lines) + "\n"


def _read_topology() -> Topology | None:
    """Read the topology once, as ``TopologyWatcher.start`` does; None if impossible."""
    # Imported here so `ipxbridge --help` does not load pyroute2 (as `run` does for the app).
    from ipxbridge.io.netlink import read_topology, read_topology_fallback  # noqa: PLC0415

    try:
        return asyncio.run(read_topology())
    except Exception as exc:  # noqa: BLE001 - pyroute2 raises more than OSError
        print(
            f"ipxbridge: netlink unavailable ({exc!r}); showing the netifaces view "
            "(no kinds, link flags, MTU or route metrics)",
            file=sys.stderr,
        )
    try:
        return read_topology_fallback()
    except (OSError, ValueError) as exc:
        print(f"ipxbridge: cannot read interfaces: {exc}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    """Body of ``ipxbridge interfaces`` (the namespace comes from :func:`add_parser`)."""
    from ipxbridge.io.openvpn import openvpn_clients  # noqa: PLC0415 - see above
    from ipxbridge.io.vpn_files import VpnFiles, by_interface  # noqa: PLC0415 - see above
    from ipxbridge.io.wireguard import read_wireguard_peers  # noqa: PLC0415 - see above

    flags: dict[str, Any] = {}
    if args.iface:  # as `run --iface` (commands.run.flags): replaces relay.interfaces
        flags.setdefault("relay", {})["interfaces"] = list(args.iface)
    if args.relay_port:
        flags.setdefault("relay", {})["ports"] = list(dict.fromkeys(args.relay_port))
    if args.ipx_iface:  # as `run --ipx-iface`: replaces ipx.interfaces
        flags.setdefault("ipx", {})["interfaces"] = list(args.ipx_iface)
    try:
        config = load_config(args.config, flags=flags)
    except ConfigError as exc:
        report_errors(exc.errors)
        return EXIT_USAGE
    selections, configured = relay_selections(config)
    if args.iface:
        source = "from --iface"
    elif args.config is not None:
        source = f"from {args.config}"
    elif configured:
        source = "from the IPXBRIDGE_* environment"
    else:
        source = "no --config, --iface or IPXBRIDGE_RELAY__INTERFACES"
    from ipxbridge.app.ipx import ipx_interfaces  # noqa: PLC0415 - see above

    entries = ipx_interfaces(config)  # exactly what the IPX service hands plan_ports
    if args.ipx_iface:
        ipx_source = "from --ipx-iface"
    elif entries and args.config is not None:
        ipx_source = f"from {args.config}"
    elif entries:
        ipx_source = "from the IPXBRIDGE_* environment"
    else:
        ipx_source = "no ipx.interfaces or --ipx-iface"
    topology = _read_topology()
    if topology is None:
        return EXIT_FAILURE
    # The bridge's order: the topology, then the peers of the names the plans need (the
    # relay's and the IPX service's reads, each as the bridge does them). A malformed CIDR
    # in either selection shows here first.
    names: list[str] = []
    for what, chosen in (
        ("relay interfaces", selections),
        ("ipx interfaces", tuple(e.selection for e in entries)),
    ):
        try:
            names += wireguard_reads(topology, chosen)
        except ValueError as exc:
            print(f"ipxbridge: {what}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    wanted = tuple(dict.fromkeys(names))
    peers = asyncio.run(read_wireguard_peers(wanted)) if wanted else {}
    # the OpenVPN servers' clients, as the bridge reads them for p2p interfaces without peers
    # and the peers tinc's and Nebula's configs name
    finding = finding_peers(topology, selections)
    openvpn = openvpn_clients(config.relay.openvpn_status) if finding else {}
    relay = config.relay
    named = by_interface(VpnFiles().read(relay.tinc_config, relay.nebula_config)) if finding else {}
    # ipx.listen is not off when there are entries (config.IpxSection refuses it).
    tunnel_port = parse_host_port(config.ipx.listen).port if entries else IPX_UDP_PORT
    report = describe(
        topology,
        selections,
        peers,
        configured=configured,
        ipx=entries,
        rfc1234_port=tunnel_port,
        openvpn=openvpn,
        named=named,
    )
    ports = config.relay.ports
    uplinks = uplinks_json(config) if config.ipx.listen != "off" else None
    if args.json:
        sys.stdout.write(render_json(report, ports, source, ipx_source, uplinks))
    else:
        sys.stdout.write(render_text(report, ports, source, ipx_source))
        if uplinks is not None and (uplinks["server"] or uplinks["clients"]):
            sys.stdout.write("\n".join(uplink_lines(uplinks)) + "\n")
    return EXIT_OK
