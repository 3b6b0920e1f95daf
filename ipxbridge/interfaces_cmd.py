"""``ipxbridge interfaces``: every interface, and what the broadcast relay would do with it.

The command reads the same topology the relay uses (``io/netlink.py``; the netifaces view
if netlink fails), marks the PRIMARY interface (the lowest-metric IPv4 default route: the
only interface Windows sends a game's 255.255.255.255 enumeration out of) and states per
interface what a relayed broadcast would become:

- ``lan``: one subnet-directed broadcast per address, computed from the prefix (never the
  kernel's 0.0.0.0 broadcast, reliability.md item 8), sent on a socket bound to the device;
- ``p2p``: one unicast copy per known peer (WireGuard AllowedIPs /32 entries, or the
  ``peer`` of a point-to-point address). WireGuard drops 255.255.255.255 without an error
  (reliability.md item 7), so with no known peer nothing would be sent;
- otherwise why it is skipped (loopback, not selected, down, no IPv4 address).

Exit codes (house style rule 12): 0 ok, 1 the interfaces could not be read, 2 usage error
(for example a malformed ``--iface`` CIDR).

``cli.py`` wires it in with :func:`add_parser` and :func:`run`; :func:`main` runs it alone
(``python -m ipxbridge.interfaces_cmd``), which the namespace tests use.
"""

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ipxbridge.config import check_interface_pattern
from ipxbridge.policy.relay import DEFAULT_RELAY_PORTS
from ipxbridge.policy.topology import Interface, Topology, select

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
NO_PEERS: Final = "p2p: no peers known — nothing would be sent; give peers in the config"


@dataclass(frozen=True, slots=True)
class Plan:
    """What the relay would do with one interface."""

    interface: Interface
    primary: bool
    selected: bool
    action: str
    peers: tuple[str, ...]


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a UDP port (1-65535)")
    return int(text)


def _pattern(text: str) -> str:
    try:
        return check_interface_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="JSON list, one object per interface")
    parser.add_argument(
        "--iface",
        type=_pattern,
        action="append",
        default=[],
        metavar="PATTERN",
        help="interface the relay would use: name, glob (wg*) or CIDR; repeatable (default all)",
    )
    parser.add_argument(
        "--relay-port",
        action="append",
        type=_port,
        default=[],
        metavar="PORT",
        help="UDP port whose broadcasts are relayed; repeatable (default 47624 and 6073)",
    )


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``interfaces`` on the top-level ``ipxbridge`` sub-command parser."""
    _configure(
        sub.add_parser(
            "interfaces",
            help="list interfaces and what the broadcast relay would do on each",
        )
    )


def _peer_sources(
    iface: Interface, wireguard_peers: Callable[[str], list[str]]
) -> tuple[tuple[str, ...], str]:
    if iface.kind == "wireguard":
        return tuple(wireguard_peers(iface.name)), "from WireGuard AllowedIPs"
    peers = sorted({a.peer for a in iface.addresses if a.peer is not None})
    return tuple(peers), "from the point-to-point peer address"


def plan(
    topology: Topology,
    patterns: Sequence[str],
    wireguard_peers: Callable[[str], list[str]],
) -> list[Plan]:
    """The per-interface plan, in topology order.

    Raises:
        ValueError: a pattern with "/" that is not an IPv4 CIDR.
    """
    chosen = {i.index for i in select(topology, patterns)}
    primary = topology.primary
    out: list[Plan] = []
    for iface in topology.interfaces:
        selected = iface.index in chosen
        peers: tuple[str, ...] = ()
        if iface.is_loopback:
            action = "loopback: never used"
        elif not selected:
            action = "not selected: skipped"
        elif not iface.up:
            action = "down: skipped"
        elif not iface.addresses:
            action = "no IPv4 address: skipped"
        elif iface.role == "lan":
            targets = [a.broadcast for a in iface.addresses if a.broadcast]
            if targets:
                action = (
                    f"lan: re-send as subnet broadcast to {', '.join(targets)} (bound to device)"
                )
            else:
                action = "lan: no subnet broadcast (/31 or /32 only) — nothing would be sent"
        else:
            peers, source = _peer_sources(iface, wireguard_peers)
            if peers:
                action = f"p2p: unicast copy to each peer: {', '.join(peers)} ({source})"
            else:
                action = NO_PEERS
        is_primary = primary is not None and primary.index == iface.index
        out.append(Plan(iface, is_primary, selected, action, peers))
    return out


def _as_json(item: Plan) -> dict[str, Any]:
    iface = item.interface
    return {
        "name": iface.name,
        "index": iface.index,
        "kind": iface.kind,
        "up": iface.up,
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
        "role": iface.role,
        "selected": item.selected,
        "action": item.action,
        "peers": list(item.peers),
    }


def render_text(items: Sequence[Plan], ports: Sequence[int], *, filtered: bool) -> str:
    """The human-readable listing."""
    lines = [f"relayed UDP ports: {', '.join(str(p) for p in ports)}"]
    primary = next((i.interface for i in items if i.primary), None)
    if primary is not None:
        lines.append(
            f"primary: {primary.name} (default route metric {primary.default_route_metric}); "
            "Windows sends a game's 255.255.255.255 out of this interface only"
        )
    else:
        lines.append("primary: none (no IPv4 default route)")
    for item in items:
        iface = item.interface
        state = "up" if iface.up else "down"
        if iface.operstate:
            state += f" (operstate {iface.operstate})"
        metric = iface.default_route_metric
        marks = [
            f"{iface.index}: {iface.name}",
            iface.kind if iface.is_loopback else f"{iface.kind}  {iface.role}",
            state,
            f"mtu {iface.mtu}",
            "no default route" if metric is None else f"default route metric {metric}",
        ]
        if item.primary:
            marks.append("PRIMARY")
        if filtered:
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
            if a.broadcast and iface.role == "p2p" and not iface.is_loopback:
                brd += " (unused: p2p)"
            lines.append(f"    inet {where} {brd}")
        lines.append(f"    -> {item.action}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Body of ``ipxbridge interfaces`` (the namespace comes from :func:`add_parser`)."""
    # Imported here so `ipxbridge --help` does not load pyroute2 (as cli.py does for `run`).
    from ipxbridge.io.netlink import read_topology, read_topology_fallback  # noqa: PLC0415
    from ipxbridge.io.wireguard import wireguard_peers  # noqa: PLC0415

    ports = list(dict.fromkeys(args.relay_port)) or list(DEFAULT_RELAY_PORTS)
    try:
        topology = asyncio.run(read_topology())
    except Exception as exc:  # noqa: BLE001 - pyroute2 raises more than OSError
        print(
            f"ipxbridge: netlink unavailable ({exc!r}); showing the netifaces view "
            "(no kinds, link flags, MTU or route metrics)",
            file=sys.stderr,
        )
        try:
            topology = read_topology_fallback()
        except (OSError, ValueError) as exc2:
            print(f"ipxbridge: cannot read interfaces: {exc2}", file=sys.stderr)
            return EXIT_FAILURE
    try:
        items = plan(topology, args.iface, wireguard_peers)
    except ValueError as exc:
        print(f"ipxbridge: --iface: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for pattern in args.iface:
        if not select(topology, [pattern]):
            print(f"ipxbridge: --iface {pattern!r} matches no interface", file=sys.stderr)
    if args.json:
        print(json.dumps([_as_json(i) for i in items], indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(render_text(items, ports, filtered=bool(args.iface)))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``interfaces`` on its own (``python -m ipxbridge.interfaces_cmd [--json] ...``)."""
    parser = argparse.ArgumentParser(
        prog="ipxbridge interfaces",
        description="List interfaces and what the broadcast relay would do on each.",
    )
    _configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
