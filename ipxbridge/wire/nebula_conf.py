"""Nebula's configuration: its interface, and the addresses its unsafe routes go via.

docs/relay.md, "Peers".

Debian's ``nebula@NAME.service`` runs ``nebula -config /etc/nebula/NAME.yml`` (or ``.yaml``).
Of that YAML (nebula.yml(5), and the example ``config.yml`` nebula ships) two keys matter:

* ``tun.dev``: the interface, ``nebula1`` when unset;
* ``tun.unsafe_routes``: ``- route: 192.168.2.0/24`` with ``via: 10.42.0.2``, the LAN behind
  another Nebula node and that node's Nebula address. With a bridge at each site that node
  is the other site's bridge box, so each ``via`` is a peer to send a copy to. Newer Nebula
  also takes ``via`` as a list of ``{gateway: ADDRESS, weight: N}``: each gateway counts.

``static_host_map`` is not read: it says where a node can be dialled (its underlay address),
for the lighthouses in practice (nebula's own guide: static entries reach the lighthouses,
which find every other node), not which nodes want the LAN's broadcasts.

The YAML is parsed by the caller (``io/vpn_files.py``); this takes the parsed document. Pure;
never raises on any document: what it cannot take is returned as a problem.
"""

import ipaddress
from typing import Final

# What Debian's nebula@NAME unit reads (the default of relay.nebula_config).
NEBULA_CONFIGS: Final = ("/etc/nebula/*.yml", "/etc/nebula/*.yaml")
DEFAULT_DEV: Final = "nebula1"
MAX_ROUTES: Final = 1024  # unsafe routes taken per file


def _ipv4(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return str(ipaddress.IPv4Address(value.strip()))
    except ValueError:
        return None


def _gateways(via: object) -> list[object]:
    """``via`` as a list of addresses: a string, or a list of ``{gateway, weight}``."""
    if isinstance(via, list):
        return [g.get("gateway") if isinstance(g, dict) else g for g in via]
    return [via]


def nebula_peers(doc: object) -> tuple[str, tuple[str, ...], list[str]]:
    """``(tun.dev, the via addresses of its unsafe routes, problems)`` of a parsed config."""
    problems: list[str] = []
    if not isinstance(doc, dict):
        return DEFAULT_DEV, (), ["not a YAML mapping"]
    tun = doc.get("tun")
    if tun is None:
        tun = {}
    if not isinstance(tun, dict):
        return DEFAULT_DEV, (), ["tun: not a mapping"]
    dev = tun.get("dev")
    if dev is None or dev == "":
        dev = DEFAULT_DEV
    if not isinstance(dev, str):
        problems.append(f"tun.dev: not a name: {dev!r}")
        dev = DEFAULT_DEV
    routes = tun.get("unsafe_routes")
    if routes is None:
        routes = []
    if not isinstance(routes, list):
        return dev, (), [*problems, "tun.unsafe_routes: not a list"]
    found: dict[str, None] = {}
    for i, route in enumerate(routes[:MAX_ROUTES]):
        if not isinstance(route, dict):
            problems.append(f"tun.unsafe_routes[{i}]: not a mapping")
            continue
        for gateway in _gateways(route.get("via")):
            address = _ipv4(gateway)
            if address is None:
                problems.append(f"tun.unsafe_routes[{i}].via: not an IPv4 address: {gateway!r}")
                continue
            found[address] = None
    return dev, tuple(found), problems
