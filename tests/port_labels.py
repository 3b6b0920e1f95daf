"""One label value per port across the metric families (docs/metrics.md, "Port labels").

Shared by the unit test (the collector on a made-up snapshot) and the integration test (a
running bridge's /metrics), so both hold the exposition to the same rules.
"""

from collections import defaultdict
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

Port = tuple[str, str]  # (kind, interface)

# The inventory of ports: every IPX port, and every relay interface, up or not.
INVENTORY = ("ipxbridge_ipx_port_up", "ipxbridge_interface_up")
# Families that label only some ports: per-errno samples exist once an error happened; the
# learned stations and bridges belong to interface ports; info only to relay ports in use.
PARTIAL = frozenset(
    {
        "ipxbridge_send_errors",
        "ipxbridge_ipx_port_stations",
        "ipxbridge_ipx_port_bridges",
        "ipxbridge_interface_info",
    }
)
IPX_KINDS = frozenset(
    {"dosbox", "peer", "uplink", "ethernet", "ipxwrapper", "rfc1234", "websocket"}
)
RELAY_KIND = "relay"


def families(text: str) -> list[Metric]:
    return list(text_string_to_metric_families(text))


def ports_by_family(metrics: Iterable[Metric]) -> dict[tuple[str, str], set[Port]]:
    """{(family, path or ""): the (kind, interface) tuples its samples carry}."""
    found: dict[tuple[str, str], set[Port]] = defaultdict(set)
    for family in metrics:
        for sample in family.samples:
            labels = sample.labels
            if "interface" in labels or "kind" in labels:
                port = (labels.get("kind", ""), labels.get("interface", ""))
                name = family.name.removesuffix("_total")  # as the exposition's parser names it
                found[name, labels.get("path", "")].add(port)
    return dict(found)


def port_label_problems(metrics: Iterable[Metric]) -> list[str]:
    """Every way the families disagree about which label values name a port (empty: none)."""
    by_family = ports_by_family(metrics)
    problems: list[str] = []
    for (name, path), ports in sorted(by_family.items()):
        for kind, interface in sorted(ports):
            if not kind or not interface:
                problems.append(f"{name}{{path={path!r}}}: port ({kind!r}, {interface!r})")
            elif kind not in {*IPX_KINDS, RELAY_KIND}:
                problems.append(f"{name}: unknown port kind {kind!r}")
            elif path and (path == "relay") != (kind == RELAY_KIND):
                problems.append(f"{name}{{path={path!r}}}: port kind {kind!r}")
    inventory: set[Port] = set()
    for name in INVENTORY:
        inventory |= by_family.get((name, ""), set())
    if not inventory:
        problems.append(f"no ports in {INVENTORY}")
    for (name, path), ports in sorted(by_family.items()):
        wanted = _scope(name, path, inventory)
        if name in PARTIAL:
            if not ports <= wanted:
                problems.append(f"{name}{{path={path!r}}}: ports {sorted(ports - wanted)}")
        elif ports != wanted:
            problems.append(
                f"{name}{{path={path!r}}}: missing {sorted(wanted - ports)},"
                f" extra {sorted(ports - wanted)}"
            )
    return problems


def _scope(name: str, path: str, inventory: set[Port]) -> set[Port]:
    """The ports a family (or its ``path``'s samples) is about: IPX, relay or both."""
    if path == "ipx" or name.startswith("ipxbridge_ipx_port_"):
        return {p for p in inventory if p[0] != RELAY_KIND}
    if path == "relay" or name.startswith("ipxbridge_interface_"):
        return {p for p in inventory if p[0] == RELAY_KIND}
    return inventory
