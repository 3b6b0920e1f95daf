"""Prometheus exposition: a custom collector reading the bridge's plain counters at scrape time.

Hot paths count in plain integers (~40 ns) instead of labelled prometheus_client counters
(~2.7 us, docs/architecture.md B1); this collector turns them into metric families when /metrics is
scraped. Metric names live only in this module. Labels come from closed sets: paths, drop
reasons, interfaces the operator selected, DirectPlay command labels, game titles from the
table plus ``other`` — never peer IPs, IPX nodes or session names.

Every family that names a port labels it the same way, ``kind`` and ``interface``
(docs/metrics.md): an IPX port is (dosbox|peer, ``tunnel``) for the tunnel's UDP socket or
(ethernet|ipxwrapper|rfc1234, its OS interface); a relay port is (``relay``, its OS
interface). Families booked per port list every known port, at 0 until it counts, so the
same port tuples appear in each and ``rate()`` works from the start.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ipxbridge import __version__, build
from ipxbridge.obs.counters import BUCKETS, TUNNEL, IpxCounters, LatencyHistogram
from ipxbridge.policy.bridges import WATCH_OUTCOMES
from ipxbridge.policy.budget import BOUND_ADDRESS, BOUND_TOTAL
from ipxbridge.policy.clients import UNVERIFIED_KINDS
from ipxbridge.policy.flows import FLOW_EVICTION_REASONS, FLOW_REFUSAL_REASONS
from ipxbridge.policy.pacing import READ_MODES
from ipxbridge.policy.relay import RELAY_DROP_REASONS as RELAY_POLICY_DROPS
from ipxbridge.policy.relay import RELAY_IO_DROP_REASONS, Egress
from ipxbridge.policy.relay_peers import HEARD_EVENTS
from ipxbridge.policy.rooms import REFUSALS
from ipxbridge.policy.switch import POLICY_DROP_REASONS
from ipxbridge.policy.uplink import HANDSHAKE_OUTCOMES, UPLINK_DROP_REASONS, ClientState
from ipxbridge.wire.errors import WIRE_REASONS
from ipxbridge.wire.websocket import CLOSE_REASONS, WEBSOCKET_DROP_REASONS

IPX_DROP_REASONS: Final = frozenset(
    r
    for r in (*WIRE_REASONS, *POLICY_DROP_REASONS, *UPLINK_DROP_REASONS, *WEBSOCKET_DROP_REASONS)
    if not r.startswith(("dplay", "not_dplay"))
)
# ipxbridge_uplinks{role,state}: every pair exported, at 0 when there is none.
UPLINK_STATES: Final = (
    *(("server", state) for state in ("pending", "authenticated")),
    *(("client", str(state)) for state in ClientState),
)
# Every reason the relay path can give, exported from the start at 0 (policy/relay.py).
RELAY_DROP_REASONS: Final = frozenset({*RELAY_POLICY_DROPS, *RELAY_IO_DROP_REASONS})
# The ports of the tunnel's UDP socket, there whenever the IPX path is (io/ipx_endpoint.py).
TUNNEL_PORTS: Final = (("dosbox", TUNNEL), ("peer", TUNNEL), ("uplink", TUNNEL))
# The ``kind`` of a relay port: its ``interface`` is the OS interface (docs/metrics.md).
RELAY_KIND: Final = "relay"
# Why a port could not carry a copy (io/segments.py, io/ipx_endpoint.py), each exported from 0.
PORT_COPY_DROP_REASONS: Final = (
    "frame_too_large",
    "internal_error",
    "queue_full",  # a browser player's buffer was full (io/websocket.py)
    "unproven_host",
)
# The browser players' ports (app/websocket.py): the bridge's room, and all others together.
WEBSOCKET_PORTS: Final = (("websocket", "bridge"), ("websocket", "rooms"))
# Outcomes every port exports from 0; drop reasons appear per port as they happen.
PORT_OUTCOMES: Final = (("control", ""), ("forwarded", ""))

_K = TypeVar("_K", bound=tuple[str, ...])


@dataclass(frozen=True, slots=True)
class RelaySnapshot:
    """Relay numbers at scrape time."""

    enabled: bool = False
    received: int = 0
    received_bytes: int = 0
    relayed: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    copies: dict[str, int] = field(default_factory=dict)  # Python and kernel copies by egress
    send_errors: dict[tuple[str, str], int] = field(default_factory=dict)
    plan: tuple[Egress, ...] = ()
    selected_down: tuple[str, ...] = ()  # selected interfaces that exist but are down
    kinds: dict[str, str] = field(default_factory=dict)
    netlink_events: dict[str, int] = field(default_factory=dict)
    received_by_interface: dict[str, int] = field(default_factory=dict)
    kernel_drops: int | None = None  # at the relay's sockets; None: unknown (no /proc)
    # nftables fast path drops before the socket, by reason; None: no fast path
    fastpath_dropped: dict[str, int] | None = None
    # rewrite-mode flow table (policy/flows.py): open flows by standing, return sockets,
    # flows evicted and refused by reason
    flows: dict[str, int] = field(default_factory=dict)
    return_sockets: int = 0
    flow_evictions: dict[str, int] = field(default_factory=dict)
    flows_refused: dict[str, int] = field(default_factory=dict)
    # p2p peers in the plan by (interface, source: listed, wireguard, tinc, nebula, openvpn,
    # heard, point_to_point), and the heard-peer table's events (policy/relay_peers.py HEARD_EVENTS)
    peers: Mapping[tuple[str, str], int] = field(default_factory=dict)
    heard_peers: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IpxSnapshot:
    """The IPX tunnel at scrape time: membership, and its live counters (read as collected)."""

    enabled: bool = False
    clients: int = 0
    peers: int = 0
    kernel_drops: int | None = None  # at the IPX socket; None: unknown (no /proc)
    counters: IpxCounters = field(default_factory=IpxCounters)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    # Interface ports: (kind, interface, stations learned, other bridges seen)
    ports: tuple[tuple[str, str, int, int], ...] = ()
    ports_down: tuple[tuple[str, str], ...] = ()  # selected but not open: (kind, interface)
    # Uplinks (docs/protocols.md 3.9): how many by (role, state), handshakes by (role,
    # outcome), data packets changed on entry by what (wire.uplink.normalise_data).
    uplinks: dict[tuple[str, str], int] = field(default_factory=dict)
    uplink_handshakes: dict[tuple[str, str], int] = field(default_factory=dict)
    uplink_normalised: dict[str, int] = field(default_factory=dict)
    # The reflection limit (policy/budget.py): what was let through toward unproven
    # addresses (bytes, datagrams), and what it refused, by (what, bound).
    unverified_sent: tuple[int, int] = (0, 0)
    unverified_limited: dict[tuple[str, str], int] = field(default_factory=dict)
    # Broadcasts left to another bridge on a segment, by outcome (policy/bridges.py
    # WATCH_OUTCOMES): its copy seen there, missing (sent from here), or the watch full.
    delegated: dict[str, int] = field(default_factory=dict)
    # The browser players' ports while the WebSocket listener runs (WEBSOCKET_PORTS).
    websocket_ports: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class WebSocketSnapshot:
    """The listener's numbers for /metrics (``ipxbridge_ws_*``, docs/metrics.md)."""

    enabled: bool = False
    tls: bool = False
    connections: dict[str, int] = field(default_factory=dict)  # "bridge" | "other" -> open
    rooms: int = 0  # open rooms besides the bridge's
    opened: int = 0
    closed: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DirectPlaySnapshot:
    """The DirectPlay inspector and the game list at scrape time."""

    messages: dict[tuple[int, str], int] = field(default_factory=dict)  # (version, command)
    errors: dict[str, int] = field(default_factory=dict)  # malformed, by reason
    sessions: dict[tuple[str, bool], int] = field(default_factory=dict)  # (game, open)
    players: dict[str, int] = field(default_factory=dict)  # by game


@dataclass(frozen=True, slots=True)
class BridgeSnapshot:
    """Everything the collector reads, taken from the feature services at each scrape."""

    ipx: IpxSnapshot = field(default_factory=IpxSnapshot)
    relay: RelaySnapshot = field(default_factory=RelaySnapshot)
    directplay: DirectPlaySnapshot = field(default_factory=DirectPlaySnapshot)
    reload_ok: bool = True
    reload_success_at: float = 0.0
    websocket: WebSocketSnapshot = field(default_factory=WebSocketSnapshot)


class BridgeCollector(Collector):
    """Builds every ipxbridge metric family from the live counters."""

    def __init__(self, snapshot: Callable[[], BridgeSnapshot]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        """Yield the families (called by prometheus_client on each scrape)."""
        src = self.snapshot()
        ipx_state = src.ipx
        ipx = ipx_state.counters
        relay = src.relay
        dplay = src.directplay

        info = GaugeMetricFamily(
            "ipxbridge_build_info",
            "Build information (always 1): the version, and the build (compiled: ipxbridge/wire"
            " and ipxbridge/policy compiled with mypyc; pure: pure Python).",
            labels=["version", "build"],
        )
        info.add_metric([__version__, build.build()], 1)
        yield info

        ipx_ports = _ipx_ports(ipx_state)
        relay_ports = _relay_ports(relay)
        yield _by_path_and_port(
            "ipxbridge_received_packets",
            "Datagrams received, by path and ingress port (kind, interface). An IPX packet in"
            " a coalesced batch counts on its own.",
            (ipx_ports, ipx.port_received),
            (relay_ports, relay.received_by_interface),
        )

        forwarded = CounterMetricFamily(
            "ipxbridge_forwarded_packets",
            "Datagrams forwarded (IPX) or relayed (broadcast relay), by path.",
            labels=["path"],
        )
        forwarded.add_metric(["ipx"], ipx.forwarded)
        forwarded.add_metric(["relay"], relay.relayed)
        yield forwarded

        control = CounterMetricFamily(
            "ipxbridge_control_packets",
            "IPX datagrams handled by the bridge itself (registration, ping, keepalive reply).",
        )
        control.add_metric([], ipx.control)
        yield control

        dropped = CounterMetricFamily(
            "ipxbridge_dropped_packets",
            "Datagrams dropped, by path and reason.",
            labels=["path", "reason"],
        )
        # Known reasons are always exported (0 until seen) so rate() works from the start.
        if ipx_state.enabled:
            for reason in sorted({*IPX_DROP_REASONS, *ipx.dropped}):
                dropped.add_metric(["ipx", reason], ipx.dropped.get(reason, 0))
        if relay.enabled:
            for reason in sorted({*RELAY_DROP_REASONS, *relay.dropped}):
                dropped.add_metric(["relay", reason], relay.dropped.get(reason, 0))
        yield dropped

        # Never received, so not in the families above (nothing is lost silently).
        kernel = CounterMetricFamily(
            "ipxbridge_kernel_dropped_packets",
            "Datagrams the kernel dropped at the bridge's sockets before the bridge could read"
            " them (receive buffer full), by path.",
            labels=["path"],
        )
        for path, state in (("ipx", ipx_state), ("relay", relay)):
            if state.enabled and state.kernel_drops is not None:
                kernel.add_metric([path], state.kernel_drops)
        yield kernel

        # Also never received: on the fast path, what nftables dropped before the relay socket
        # (R13's books: received + kernel drops + these = every datagram on a relay port).
        fastpath = CounterMetricFamily(
            "ipxbridge_fastpath_dropped_packets",
            "Datagrams on the relay ports the nftables fast path dropped before the bridge's"
            " socket, by reason (marked: a relayed copy, looped back or another bridge's;"
            " uninspected: an original the kernel copied, beyond the inspection rate).",
            labels=["reason"],
        )
        if relay.enabled and relay.fastpath_dropped is not None:
            for reason, n in sorted(relay.fastpath_dropped.items()):
                fastpath.add_metric([reason], n)
        yield fastpath

        flows = GaugeMetricFamily(
            "ipxbridge_relay_flows",
            "Rewrite-mode flow sockets open, by standing (proven: the player came back after a"
            " host answered).",
            labels=["standing"],
        )
        returns = GaugeMetricFamily(
            "ipxbridge_relay_return_sockets", "Rewrite-mode return sockets open (host to player)."
        )
        evictions = CounterMetricFamily(
            "ipxbridge_relay_flow_evictions",
            "Rewrite-mode flows closed to make room for another, by reason (unproven_full,"
            " proven_full: that pool was full; per_source: the player address's own limit).",
            labels=["reason"],
        )
        refused = CounterMetricFamily(
            "ipxbridge_relay_flows_refused",
            "Rewrite-mode copies that got no flow socket and were not sent, by reason (no_fd:"
            " out of descriptors; socket_error: the kernel refused the socket).",
            labels=["reason"],
        )
        if relay.enabled:
            for standing in ("proven", "unproven"):
                flows.add_metric([standing], relay.flows.get(standing, 0))
            returns.add_metric([], relay.return_sockets)
            for reason in sorted({*FLOW_EVICTION_REASONS, *relay.flow_evictions}):
                evictions.add_metric([reason], relay.flow_evictions.get(reason, 0))
            for reason in sorted({*FLOW_REFUSAL_REASONS, *relay.flows_refused}):
                refused.add_metric([reason], relay.flows_refused.get(reason, 0))
        yield flows
        yield returns
        yield evictions
        yield refused

        peers = GaugeMetricFamily(
            "ipxbridge_relay_peers",
            "Unicast targets of the relay's p2p interfaces, by interface and where they came"
            " from (listed, wireguard, tinc, nebula, openvpn, heard, point_to_point).",
            labels=["interface", "source"],
        )
        heard = CounterMetricFamily(
            "ipxbridge_relay_heard_peers",
            "Peers learned from broadcasts arriving on a p2p interface, by event (learned;"
            " expired: not heard for relay.heard_peer_seconds; evicted: the interface had"
            " relay.heard_peers).",
            labels=["event"],
        )
        if relay.enabled:
            for (name, source), n in sorted(relay.peers.items()):
                peers.add_metric([name, source], n)
            for event in HEARD_EVENTS:
                heard.add_metric([event], relay.heard_peers.get(event, 0))
        yield peers
        yield heard

        yield _by_path_and_port(
            "ipxbridge_sent_copies",
            "Copies sent, by path and egress port (kind, interface).",
            (ipx_ports, ipx.port_copies),
            (relay_ports, relay.copies),
        )

        held = CounterMetricFamily(
            "ipxbridge_held_copies",
            "Copies not sent, by path and reason (unverified_rate: toward a client that has"
            " not proven it receives at its address, over the bytes-per-second limit;"
            " egress_repeat: a copy that came back by another way, the loop bound).",
            labels=["path", "reason"],
        )
        held.add_metric(["ipx", "unverified_rate"], ipx.held_unverified)
        held.add_metric(["ipx", "egress_repeat"], ipx.held_repeat)
        yield held

        sent_bytes, sent_packets = ipx_state.unverified_sent
        yield CounterMetricFamily(
            "ipxbridge_unverified_sent_bytes",
            "Bytes the IPX switch let through toward addresses that have not proven they"
            " receive there (registration replies, probes, copies), within the limits of"
            " ipx.unverified_*_bytes_per_second.",
            value=sent_bytes,
        )
        yield CounterMetricFamily(
            "ipxbridge_unverified_sent_packets",
            "Datagrams the IPX switch let through toward unproven addresses.",
            value=sent_packets,
        )
        limited = CounterMetricFamily(
            "ipxbridge_unverified_limited",
            "Datagrams toward unproven addresses not sent, by what they were (copy,"
            " registration_reply, probe, ping_reply, dplay_probe) and the bound that held"
            " them (address: that IPv4 address's rate; total: the whole bridge's).",
            labels=["what", "bound"],
        )
        limited_counts = ipx_state.unverified_limited
        for what in UNVERIFIED_KINDS:
            for limit in (BOUND_ADDRESS, BOUND_TOTAL):
                limited.add_metric([what, limit], limited_counts.get((what, limit), 0))
        yield limited
        yield _closed_set(
            "ipxbridge_ipx_delegated",
            "Broadcasts left to another bridge on one of this bridge's segments (rule 8), by"
            " outcome: seen (its copy appeared there), missing (it did not within the window,"
            " so this bridge sent it itself), full (too many watched: sent at once).",
            "outcome",
            WATCH_OUTCOMES,
            ipx_state.delegated,
        )

        errors = CounterMetricFamily(
            "ipxbridge_send_errors",
            "Copies the kernel refused, by path, egress port (kind, interface) and errno.",
            labels=["path", "kind", "interface", "errno"],
        )
        for (kind, iface, name), n in sorted(ipx.send_errors.items()):
            errors.add_metric(["ipx", kind, iface, name], n)
        for (iface, name), n in sorted(relay.send_errors.items()):
            errors.add_metric(["relay", RELAY_KIND, iface, name], n)
        yield errors

        traffic = CounterMetricFamily(
            "ipxbridge_bytes",
            "UDP payload bytes, by path and direction.",
            labels=["path", "direction"],
        )
        traffic.add_metric(["ipx", "rx"], ipx.received_bytes)
        traffic.add_metric(["ipx", "tx"], ipx.bytes_sent)
        traffic.add_metric(["relay", "rx"], relay.received_bytes)
        yield traffic

        clients = GaugeMetricFamily(
            "ipxbridge_ipx_clients", "Connected IPX clients, by dialect.", labels=["dialect"]
        )
        clients.add_metric(["dosbox"], ipx_state.clients)
        yield clients
        peers = GaugeMetricFamily("ipxbridge_ipx_peers", "Configured RFC 1234 peers.")
        peers.add_metric([], ipx_state.peers)
        yield peers
        yield from _ipx_port_metrics(ipx_state)
        yield from websocket_metrics(src.websocket)

        messages = CounterMetricFamily(
            "ipxbridge_directplay_messages",
            "DirectPlay messages seen, by version and command.",
            labels=["version", "command"],
        )
        for (version, command), n in sorted(dplay.messages.items()):
            messages.add_metric([str(version), command], n)
        yield messages
        yield _by_label(
            "ipxbridge_directplay_malformed",
            "Malformed DirectPlay payloads, by reason.",
            "reason",
            dplay.errors,
        )

        sessions = GaugeMetricFamily(
            "ipxbridge_directplay_sessions",
            "Live DirectPlay sessions, by game and whether listed as open (no password,"
            " not closed, not started).",
            labels=["game", "open"],
        )
        players = GaugeMetricFamily(
            "ipxbridge_directplay_players",
            "Players in live DirectPlay sessions, by game.",
            labels=["game"],
        )
        for (game, is_open), count in sorted(dplay.sessions.items()):
            sessions.add_metric([game, "true" if is_open else "false"], count)
        for game, n in sorted(dplay.players.items()):
            players.add_metric([game], n)
        yield sessions
        yield players

        up = GaugeMetricFamily(
            "ipxbridge_interface_up",
            "1 if a selected relay interface is up with an address (kind is always relay).",
            labels=["kind", "interface"],
        )
        iface_info = GaugeMetricFamily(
            "ipxbridge_interface_info",
            "Relay interfaces in use (always 1), with their link type (ethernet, wireguard,"
            " ...) and role.",
            labels=["kind", "interface", "link", "role"],
        )
        for egress in relay.plan:
            up.add_metric([RELAY_KIND, egress.name], 1)
            iface_info.add_metric(
                [RELAY_KIND, egress.name, relay.kinds.get(egress.name, "other"), egress.role], 1
            )
        for name in relay.selected_down:
            up.add_metric([RELAY_KIND, name], 0)
        yield up
        yield iface_info

        yield _by_label(
            "ipxbridge_netlink_events",
            "Link, address and route events seen, by type.",
            "type",
            relay.netlink_events,
        )

        hist = ipx_state.latency
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*BUCKETS, float("inf")), hist.counts, strict=True):
            running += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        latency = HistogramMetricFamily(
            "ipxbridge_forward_duration_seconds",
            "Time from receipt to the last copy sent (IPX path, sampled 1 in 16).",
            buckets=buckets,
            sum_value=hist.total,
        )
        yield latency

        reload_ok = GaugeMetricFamily(
            "ipxbridge_config_last_reload_successful", "1 if the last configuration load succeeded."
        )
        reload_ok.add_metric([], 1 if src.reload_ok else 0)
        yield reload_ok
        reload_ts = GaugeMetricFamily(
            "ipxbridge_config_last_reload_success_timestamp_seconds",
            "When the configuration was last loaded successfully.",
        )
        reload_ts.add_metric([], src.reload_success_at)
        yield reload_ts


def make_registry(snapshot: Callable[[], BridgeSnapshot]) -> CollectorRegistry:
    """A private registry: the bridge's metrics (``snapshot`` at each scrape), process too."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BridgeCollector(snapshot))
    ProcessCollector(registry=registry)
    return registry


def _ipx_ports(state: IpxSnapshot) -> tuple[tuple[str, str], ...]:
    """Every IPX port known now: the tunnel's two, and each interface port, open or not."""
    ws = state.websocket_ports
    if not state.enabled:
        return ws
    interface_ports = tuple((kind, iface) for kind, iface, _, _ in state.ports)
    return (*TUNNEL_PORTS, *interface_ports, *state.ports_down, *ws)


def _relay_ports(state: RelaySnapshot) -> tuple[tuple[str, str], ...]:
    """Every relay port known now: each selected interface, up or down."""
    names = (*(egress.name for egress in state.plan), *state.selected_down)
    return tuple((RELAY_KIND, name) for name in names)


def _dense(ports: Iterable[_K], counts: Mapping[_K, int]) -> list[tuple[_K, int]]:
    """``counts`` with every one of ``ports`` (0 if not counted yet), sorted.

    A port removed since keeps its counts: counters never go back.
    """
    return [(key, counts.get(key, 0)) for key in sorted({*ports, *counts})]


def _by_label(name: str, doc: str, label: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    """A counter by one label: each value counted so far, in order."""
    family = CounterMetricFamily(name, doc, labels=[label])
    for value, n in sorted(counts.items()):
        family.add_metric([value], n)
    return family


def _closed_set(
    name: str, doc: str, label: str, values: Iterable[str], counts: Mapping[str, int]
) -> CounterMetricFamily:
    """A counter by one label whose values are a closed set: each one exported, 0 until seen.

    So ``rate()`` works from the start.
    """
    family = CounterMetricFamily(name, doc, labels=[label])
    for value in values:
        family.add_metric([value], counts.get(value, 0))
    return family


def _by_path_and_port(
    name: str,
    doc: str,
    ipx: tuple[Iterable[tuple[str, str]], Mapping[tuple[str, str], int]],
    relay: tuple[Iterable[tuple[str, str]], Mapping[str, int]],
) -> CounterMetricFamily:
    """A family by path and port, every port known now exported (0 until counted, ``_dense``).

    The IPX ports' counts are by (kind, interface), the relay's by interface name.
    """
    family = CounterMetricFamily(name, doc, labels=["path", "kind", "interface"])
    ipx_ports, ipx_counts = ipx
    for port, n in _dense(ipx_ports, ipx_counts):
        family.add_metric(["ipx", *port], n)
    relay_ports, by_name = relay
    relay_counts = {(RELAY_KIND, iface): n for iface, n in by_name.items()}
    for port, n in _dense(relay_ports, relay_counts):
        family.add_metric(["relay", *port], n)
    return family


def _ipx_port_metrics(state: IpxSnapshot) -> Iterator[Metric]:
    """The IPX books per port: each port's received = Σ its outcomes."""
    counters = state.counters
    ports = _ipx_ports(state)
    received = CounterMetricFamily(
        "ipxbridge_ipx_port_received_packets",
        "IPX packets received, by port kind (dosbox and peer: the tunnel socket, interface"
        " tunnel; ethernet, ipxwrapper, rfc1234: interface ports) and interface.",
        labels=["kind", "interface"],
    )
    for (kind, iface), n in _dense(ports, counters.port_received):
        received.add_metric([kind, iface], n)
    yield received
    outcomes = CounterMetricFamily(
        "ipxbridge_ipx_port_packets",
        "What became of the packets each port received: outcome forwarded, control or"
        " dropped (with its reason); per port they sum to its received packets. A coalesced"
        " batch is control with reason batch, and each packet in it counts on its own.",
        labels=["kind", "interface", "outcome", "reason"],
    )
    base = [(*port, *outcome) for port in ports for outcome in PORT_OUTCOMES]
    for (kind, iface, outcome, reason), n in _dense(base, counters.port_outcomes):
        outcomes.add_metric([kind, iface, outcome, reason], n)
    yield outcomes
    dropped = CounterMetricFamily(
        "ipxbridge_ipx_port_dropped_copies",
        "Copies an interface port could not carry (frame_too_large: over the framing's"
        " limit at the interface's MTU, never truncated; unproven_host: a unicast to an RFC"
        " 1234 host number nobody was heard from on that port; group_node: a unicast to an"
        " Ethernet group address; internal_error: copies of a"
        " packet whose handling failed after it was counted, by the port it came in on).",
        labels=["kind", "interface", "reason"],
    )
    base_drops = [(*port, reason) for port in ports for reason in PORT_COPY_DROP_REASONS]
    for (kind, iface, reason), n in _dense(base_drops, counters.copies_dropped):
        dropped.add_metric([kind, iface, reason], n)
    yield dropped
    evicted = CounterMetricFamily(
        "ipxbridge_table_evictions",
        "Entries pushed out of a bounded table of the IPX switch or its ports, by table and"
        " reason (unproven: never heard twice a second apart; proven: the table was full of"
        " proven entries; expired entries are not counted).",
        labels=["table", "reason"],
    )
    for (table, reason), n in sorted(counters.table_evictions.items()):
        evicted.add_metric([table, reason], n)
    yield evicted
    forgiven = CounterMetricFamily(
        "ipxbridge_ipx_forgiven",
        "Packets from an interface port taken although the strict IPX spec refuses them, by"
        " reason: checksum_zero (checksum 0x0000, not 0xFFFF), ipxbox_mark (that and transport"
        " control 127, as ipxbox writes on every frame it bridges; taken as hop 0).",
        labels=["kind", "interface", "reason"],
    )
    for (kind, iface, reason), n in sorted(counters.forgiven.items()):
        forgiven.add_metric([kind, iface, reason], n)
    yield forgiven
    reads = CounterMetricFamily(
        "ipxbridge_ipx_reads",
        "Reads of the tunnel socket, by mode: wakeup (the socket woke the bridge) or timed (a"
        " drain every ipx.coalesce_ms under heavy load, which delays each packet up to that).",
        labels=["mode"],
    )
    read_datagrams = CounterMetricFamily(
        "ipxbridge_ipx_read_datagrams",
        "Datagrams those reads found, by mode; over ipxbridge_ipx_reads_total: the batch size.",
        labels=["mode"],
    )
    for mode in READ_MODES:
        reads.add_metric([mode], counters.reads.get(mode, 0))
        read_datagrams.add_metric([mode], counters.read_datagrams.get(mode, 0))
    yield reads
    yield read_datagrams
    up = GaugeMetricFamily(
        "ipxbridge_ipx_port_up",
        "1 for an open port (the tunnel's two while the IPX path runs, the browser players'"
        " two while the WebSocket listener runs), 0 for an interface port selected that could"
        " not be opened.",
        labels=["kind", "interface"],
    )
    stations = GaugeMetricFamily(
        "ipxbridge_ipx_port_stations",
        "Stations learned on an interface port (native, IPXWrapper or RFC 1234 hosts).",
        labels=["kind", "interface"],
    )
    bridges = GaugeMetricFamily(
        "ipxbridge_ipx_port_bridges",
        "Other ipxbridges heard on an interface port (their beacons).",
        labels=["kind", "interface"],
    )
    if state.enabled:
        for kind, iface in TUNNEL_PORTS:
            up.add_metric([kind, iface], 1)
    for kind, iface, n_stations, n_bridges in state.ports:
        up.add_metric([kind, iface], 1)
        stations.add_metric([kind, iface], n_stations)
        bridges.add_metric([kind, iface], n_bridges)
    for kind, iface in state.ports_down:
        up.add_metric([kind, iface], 0)
    for kind, iface in state.websocket_ports:  # while the listener runs
        up.add_metric([kind, iface], 1)
    yield up
    yield stations
    yield bridges
    yield from _uplink_metrics(state)


def _uplink_metrics(state: IpxSnapshot) -> Iterator[Metric]:
    """Uplinks of either role (docs/protocols.md 3.9)."""
    uplinks = GaugeMetricFamily(
        "ipxbridge_uplinks",
        "Uplinks (ipxbox's uplink protocol) by this bridge's role (server: remote clients"
        " connected to us; client: uplinks we open) and state.",
        labels=["role", "state"],
    )
    for role, name in UPLINK_STATES:
        uplinks.add_metric([role, name], state.uplinks.get((role, name), 0))
    yield uplinks
    handshakes = CounterMetricFamily(
        "ipxbridge_uplink_handshakes",
        "Uplink handshakes by role and outcome (accepted, rejected: wrong password,"
        " short_challenge: not answered, no_answer: the client gave up after its retries,"
        " bad_server_solution: the server failed mutual authentication).",
        labels=["role", "outcome"],
    )
    for role in ("server", "client"):
        for outcome in HANDSHAKE_OUTCOMES:
            handshakes.add_metric([role, outcome], state.uplink_handshakes.get((role, outcome), 0))
    yield handshakes
    yield _closed_set(
        "ipxbridge_uplink_normalised_packets",
        "Data packets from uplinks taken after a fix (ipxbox_mark: transport control 127 and"
        " checksum 0, hops taken as 0; checksum_zero; padding: Ethernet padding trimmed).",
        "what",
        ("ipxbox_mark", "checksum_zero", "padding"),
        state.uplink_normalised,
    )


def websocket_metrics(state: WebSocketSnapshot) -> Iterator[Metric]:
    """The WebSocket listener for browser players (io/websocket.py).

    Their packets are in the IPX families, under kind ``websocket``.
    """
    up = GaugeMetricFamily(
        "ipxbridge_ws_listening",
        "1 while the WebSocket listener for browser players (js-dos) runs, by scheme.",
        labels=["scheme"],
    )
    if state.enabled:
        up.add_metric(["wss" if state.tls else "ws"], 1)
    yield up
    conns = GaugeMetricFamily(
        "ipxbridge_ws_connections",
        "Open WebSocket connections of browser players, by room (bridge: the bridge's own"
        " IPX network; other: every other room).",
        labels=["room"],
    )
    for room in ("bridge", "other"):
        conns.add_metric([room], state.connections.get(room, 0))
    yield conns
    yield GaugeMetricFamily(
        "ipxbridge_ws_rooms",
        "Rooms open besides the bridge's (a room lasts while it has connections).",
        value=state.rooms,
    )
    opened = CounterMetricFamily(
        "ipxbridge_ws_connections_opened", "WebSocket connections accepted."
    )
    opened.add_metric([], state.opened)
    yield opened
    yield _closed_set(
        "ipxbridge_ws_connections_closed",
        "WebSocket connections ended, by reason (client, ping_timeout, behind: its copies"
        " overflowed for websocket.behind_seconds, not_allowed, shutdown, error).",
        "reason",
        CLOSE_REASONS,
        state.closed,
    )
    yield _closed_set(
        "ipxbridge_ws_refused",
        "WebSocket connections refused before the handshake, by reason.",
        "reason",
        REFUSALS,
        state.refused,
    )
