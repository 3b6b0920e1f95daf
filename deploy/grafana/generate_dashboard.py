#!/usr/bin/env python3
"""Generate the ipxbridge Grafana dashboard, ``deploy/grafana/ipxbridge.json``.

The JSON is committed; this script is its source. Edit the panels here, then run::

    python deploy/grafana/generate_dashboard.py           # rewrite ipxbridge.json
    python deploy/grafana/generate_dashboard.py --check   # exit 1 if ipxbridge.json is stale

The dashboard follows the grafana/dashboard-linter rules (checked by
``tests/unit/test_deploy_observability.py``): a templated Prometheus data source used by
every panel and target, ``job``/``instance`` variables matched by every query,
``[$__rate_interval]`` in every ``rate()``, and a title, description and unit on every panel.
Every family the bridge exports (ipxbridge/obs/metrics.py) is used by a panel, or listed in
``NOT_CHARTED`` with the reason (the same test checks it against the real registry). Ports
are labelled ``kind`` + ``interface`` in every family (docs/metrics.md), so per-port legends
read ``{{kind}} {{interface}}``. Only the standard library is used, so the script runs
anywhere Python 3.11 does.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

Json = dict[str, object]

UID: Final = "ipxbridge"
TITLE: Final = "ipxbridge"
SCHEMA_VERSION: Final = 39
OUTPUT: Final = Path(__file__).resolve().with_name("ipxbridge.json")

DATASOURCE: Final[Json] = {"type": "prometheus", "uid": "${datasource}"}
SEL: Final = 'job=~"$job", instance=~"$instance"'
RATE_INTERVAL: Final = "[$__rate_interval]"

PANEL_HEIGHT: Final = 8
STAT_HEIGHT: Final = 4

# Exported families no panel charts, and why (checked against the registry by the tests).
NOT_CHARTED: Final[dict[str, str]] = {}

GREEN: Final = "green"
RED: Final = "red"


def sel(metric: str) -> str:
    """Return ``metric`` with the dashboard's job and instance matchers."""
    return f"{metric}{{{SEL}}}"


def rate(metric: str) -> str:
    """Return the per-second rate of counter ``metric`` over ``$__rate_interval``."""
    return f"rate({sel(metric)}{RATE_INTERVAL})"


def sum_rate(by: str, metric: str, where: str = "") -> str:
    """Return ``rate(metric)`` summed by the comma-separated labels ``by``.

    ``where``: more label matchers, e.g. ``kind="websocket"``.
    """
    matchers = f"{SEL}, {where}" if where else SEL
    return f"sum by ({by}) (rate({metric}{{{matchers}}}{RATE_INTERVAL}))"


def quantile(q: float) -> str:
    """Return the ``q`` quantile of the forwarding-latency histogram per instance."""
    buckets = sum_rate("instance, le", "ipxbridge_forward_duration_seconds_bucket")
    return f"histogram_quantile({q}, {buckets})"


@dataclass(frozen=True)
class Query:
    """One Prometheus query of a panel and the legend of its series."""

    expr: str
    legend: str
    table: bool = False  # an instant query whose labels become the columns of a table

    def target(self, ref_id: str) -> Json:
        """Return the Grafana target for this query."""
        target: Json = {
            "datasource": dict(DATASOURCE),
            "editorMode": "code",
            "expr": self.expr,
            "legendFormat": self.legend,
            "range": not self.table,
            "refId": ref_id,
        }
        if self.table:
            target |= {"format": "table", "instant": True}
        return target


@dataclass(frozen=True)
class Panel:
    """A timeseries or stat panel, before it is placed on the grid."""

    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    width: int
    kind: str = "timeseries"
    mappings: tuple[tuple[int, str, str], ...] = ()
    threshold: float | None = None
    overrides: tuple[Json, ...] = field(default=())
    text_mode: str = "value_and_name"

    def thresholds(self) -> Json:
        """Return the threshold steps: green, then red from ``threshold`` on, if set."""
        steps: list[Json] = [{"color": GREEN, "value": None}]
        if self.threshold is not None:
            steps.append({"color": RED, "value": self.threshold})
        return {"mode": "absolute", "steps": steps}

    def value_mappings(self) -> list[Json]:
        """Return Grafana value mappings for ``mappings`` (value, text, colour)."""
        if not self.mappings:
            return []
        options: Json = {
            str(value): {"color": color, "index": index, "text": text}
            for index, (value, text, color) in enumerate(self.mappings)
        }
        return [{"options": options, "type": "value"}]

    def field_config(self) -> Json:
        """Return the ``fieldConfig`` of the panel: unit, thresholds, mappings, style."""
        defaults: Json = {
            "mappings": self.value_mappings(),
            "thresholds": self.thresholds(),
            "unit": self.unit,
        }
        if self.kind == "timeseries":
            defaults["color"] = {"mode": "palette-classic"}
            if self.unit != "Bps":  # tx is drawn below the axis on the bytes panel
                defaults["min"] = 0
            defaults["custom"] = {
                "drawStyle": "line",
                "fillOpacity": 10,
                "lineWidth": 1,
                "showPoints": "never",
                "spanNulls": False,
                "thresholdsStyle": {"mode": "off" if self.threshold is None else "line"},
            }
        else:
            defaults["color"] = {"mode": "thresholds"}
        return {"defaults": defaults, "overrides": list(self.overrides)}

    def options(self) -> Json:
        """Return the panel-type specific ``options``."""
        if self.kind == "table":
            return {"cellHeight": "sm", "showHeader": True}
        if self.kind == "stat":
            return {
                "colorMode": "background",
                "graphMode": "none",
                "justifyMode": "auto",
                "orientation": "auto",
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "textMode": self.text_mode,
            }
        return {
            "legend": {
                "calcs": [],
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        }

    def render(self, panel_id: int, x: int, y: int, height: int) -> Json:
        """Return the panel JSON with its id and grid position."""
        panel: Json = {
            "datasource": dict(DATASOURCE),
            "description": self.description,
            "fieldConfig": self.field_config(),
            "gridPos": {"h": height, "w": self.width, "x": x, "y": y},
            "id": panel_id,
            "options": self.options(),
            "targets": [
                query.target(chr(ord("A") + index)) for index, query in enumerate(self.queries)
            ],
            "title": self.title,
            "type": self.kind,
        }
        if self.kind == "table":
            # the labels are the columns; the sample's time, value (always 1) and name are not
            hidden = {"Time": True, "Value": True, "__name__": True}
            panel["transformations"] = [
                {"id": "organize", "options": {"excludeByName": hidden, "renameByName": {}}}
            ]
        return panel


UP_DOWN: Final = ((0, "DOWN", RED), (1, "UP", GREEN))
OK_FAILED: Final = ((0, "FAILED", RED), (1, "OK", GREEN))

TX_BELOW_AXIS: Final[Json] = {
    "matcher": {"id": "byRegexp", "options": ".* tx$"},
    "properties": [{"id": "custom.transform", "value": "negative-Y"}],
}

STATUS_ROW: Final = (
    Panel(
        title="Relay interfaces up",
        description=(
            "ipxbridge_interface_up per relay interface, driven by netlink link events: UP"
            " when the interface is usable for relaying, DOWN when it is not."
        ),
        unit="none",
        kind="stat",
        width=8,
        mappings=UP_DOWN,
        queries=(Query(sel("ipxbridge_interface_up"), "{{instance}} {{interface}}"),),
    ),
    Panel(
        title="Last config reload",
        description="Whether the last configuration reload succeeded (OK) or failed (FAILED).",
        unit="none",
        kind="stat",
        width=4,
        mappings=OK_FAILED,
        queries=(Query(sel("ipxbridge_config_last_reload_successful"), "{{instance}}"),),
    ),
    Panel(
        title="Last successful reload",
        description="When the configuration was last loaded or reloaded successfully.",
        unit="dateTimeFromNow",
        kind="stat",
        width=4,
        queries=(
            Query(
                f"{sel('ipxbridge_config_last_reload_success_timestamp_seconds')} * 1000",
                "{{instance}}",
            ),
        ),
    ),
    Panel(
        title="Uptime",
        description="Time since the ipxbridge process started (process_start_time_seconds).",
        unit="s",
        kind="stat",
        width=4,
        queries=(Query(f"time() - {sel('process_start_time_seconds')}", "{{instance}}"),),
    ),
    Panel(
        title="Version",
        description="ipxbridge versions running in the selected instances (ipxbridge_build_info).",
        unit="none",
        kind="stat",
        width=4,
        text_mode="name",
        queries=(Query(f"count by (version) ({sel('ipxbridge_build_info')})", "{{version}}"),),
    ),
)

TRAFFIC_ROWS: Final = (
    (
        Panel(
            title="Traffic by path",
            description=(
                "Packets received and forwarded per second on each path: ipx is the IPX-over-UDP"
                " tunnel, relay the LAN broadcast fan-out. Control counts the IPX registrations,"
                " pings and keepalive replies the bridge handles itself."
            ),
            unit="pps",
            width=12,
            queries=(
                Query(
                    sum_rate("instance, path", "ipxbridge_received_packets_total"),
                    "{{instance}} received {{path}}",
                ),
                Query(
                    sum_rate("instance, path", "ipxbridge_forwarded_packets_total"),
                    "{{instance}} forwarded {{path}}",
                ),
                Query(
                    sum_rate("instance", "ipxbridge_control_packets_total"),
                    "{{instance}} control",
                ),
            ),
        ),
        Panel(
            title="Copies sent by port",
            description=(
                "Copies of forwarded datagrams emitted per second, by path and outgoing port"
                " (kind, interface). One relayed broadcast becomes one copy per target"
                " interface (kind relay); IPX copies go out of the tunnel socket (kind dosbox"
                " or peer, interface 'tunnel') or an interface port (ethernet, ipxwrapper,"
                " rfc1234)."
            ),
            unit="pps",
            width=12,
            queries=(
                Query(
                    sum_rate("instance, path, kind, interface", "ipxbridge_sent_copies_total"),
                    "{{instance}} {{path}} to {{kind}} {{interface}}",
                ),
            ),
        ),
    ),
    (
        Panel(
            title="Bytes by path and direction",
            description=(
                "UDP payload bytes per second by path; rx above the axis, tx drawn below it."
            ),
            unit="Bps",
            width=8,
            overrides=(TX_BELOW_AXIS,),
            queries=(
                Query(
                    sum_rate("instance, path, direction", "ipxbridge_bytes_total"),
                    "{{instance}} {{path}} {{direction}}",
                ),
            ),
        ),
        Panel(
            title="Forwarding latency",
            description=(
                "p50 and p99 of the time from receiving a datagram to the last sendto() of its"
                " copies (sampled ipxbridge_forward_duration_seconds). The red line is the 5 ms"
                " threshold of the IpxbridgeSlowForwarding alert. Under heavy load a packet"
                " first waits up to ipx.coalesce_ms for a timed drain, which is not in this"
                " figure (see Tunnel socket reads)."
            ),
            unit="s",
            width=8,
            threshold=0.005,
            queries=(
                Query(quantile(0.5), "{{instance}} p50"),
                Query(quantile(0.99), "{{instance}} p99"),
            ),
        ),
        Panel(
            title="Tunnel socket reads",
            description=(
                "Datagrams per read of the tunnel socket, by mode: wakeup (the socket woke the"
                " bridge) or timed (drains every ipx.coalesce_ms under heavy load; each packet"
                " then waits up to that long). Timed drains with large batches: the load that"
                " coalescing is for."
            ),
            unit="short",
            width=8,
            queries=(
                Query(
                    f"{sum_rate('instance, mode', 'ipxbridge_ipx_read_datagrams_total')}"
                    f" / {sum_rate('instance, mode', 'ipxbridge_ipx_reads_total')}",
                    "{{instance}} {{mode}}",
                ),
            ),
        ),
    ),
    (
        Panel(
            title="Drops by reason",
            description=(
                'Packets dropped per second, by path and drop reason; "kernel" counts those'
                " the kernel discarded at the bridge's socket before it could read them"
                ' (receive buffer full, IpxbridgeKernelDrops); "fast path" those the nftables'
                " fast path dropped before the socket (marked copies, originals beyond the"
                " inspection rate: the kernel still copied them)."
            ),
            unit="pps",
            width=12,
            queries=(
                Query(
                    sum_rate("instance, path, reason", "ipxbridge_dropped_packets_total"),
                    "{{instance}} {{path}}: {{reason}}",
                ),
                Query(
                    sum_rate("instance, path", "ipxbridge_kernel_dropped_packets_total"),
                    "{{instance}} {{path}}: kernel",
                ),
                Query(
                    sum_rate("instance, reason", "ipxbridge_fastpath_dropped_packets_total"),
                    "{{instance}} fast path: {{reason}}",
                ),
            ),
        ),
        Panel(
            title="Drop ratio",
            description=(
                "Dropped over received packets per path. The red line is the 5% threshold of"
                " the IpxbridgeHighDropRatio alert (which also needs more than 1 received packet"
                " per second)."
            ),
            unit="percentunit",
            width=12,
            threshold=0.05,
            queries=(
                Query(
                    f"{sum_rate('instance, path', 'ipxbridge_dropped_packets_total')}"
                    f" / ({sum_rate('instance, path', 'ipxbridge_received_packets_total')} > 0)",
                    "{{instance}} {{path}}",
                ),
            ),
        ),
    ),
    (
        Panel(
            title="Send errors by port",
            description=(
                "Failed sends of packet copies per second, by outgoing port (kind, interface)"
                " and errno (ENOBUFS: socket buffer full, ENETUNREACH/EHOSTUNREACH: routing,"
                " ...)."
            ),
            unit="pps",
            width=12,
            queries=(
                Query(
                    sum_rate(
                        "instance, path, kind, interface, errno", "ipxbridge_send_errors_total"
                    ),
                    "{{instance}} {{path}} {{kind}} {{interface}} {{errno}}",
                ),
            ),
        ),
        Panel(
            title="Netlink events",
            description=(
                "Link and address events per second received from the kernel over netlink;"
                " bursts mean interfaces are flapping or being reconfigured."
            ),
            unit="cps",
            width=12,
            queries=(
                Query(
                    sum_rate("instance, type", "ipxbridge_netlink_events_total"),
                    "{{instance}} {{type}}",
                ),
            ),
        ),
    ),
)

GAME_ROW: Final = (
    Panel(
        title="IPX clients and peers",
        description=(
            "IPX tunnel clients connected to this bridge, by dialect, and IPX peer bridges."
        ),
        unit="short",
        width=8,
        queries=(
            Query(
                f"sum by (instance, dialect) ({sel('ipxbridge_ipx_clients')})",
                "{{instance}} clients ({{dialect}})",
            ),
            Query(f"sum by (instance) ({sel('ipxbridge_ipx_peers')})", "{{instance}} peers"),
        ),
    ),
    Panel(
        title="DirectPlay sessions and players",
        description=(
            "DirectPlay sessions seen on the LAN and the players in them, per game ('other'"
            " for titles ipxbridge does not know)."
        ),
        unit="short",
        width=8,
        queries=(
            Query(
                f"sum by (instance, game) ({sel('ipxbridge_directplay_sessions')})",
                "{{instance}} {{game}} sessions",
            ),
            Query(
                f"sum by (instance, game) ({sel('ipxbridge_directplay_players')})",
                "{{instance}} {{game}} players",
            ),
        ),
    ),
    Panel(
        title="DirectPlay messages by command",
        description="DirectPlay messages inspected per second, by protocol version and command.",
        unit="cps",
        width=8,
        queries=(
            Query(
                sum_rate("instance, version, command", "ipxbridge_directplay_messages_total"),
                "{{instance}} {{version}} {{command}}",
            ),
        ),
    ),
)

PORT_ROWS: Final = (
    (
        Panel(
            title="IPX ports up",
            description=(
                "ipxbridge_ipx_port_up per IPX port (kind, interface): the tunnel socket's"
                " dosbox and peer ports, and each interface port selected (DOWN: it could not"
                " be opened)."
            ),
            unit="none",
            kind="stat",
            width=8,
            mappings=UP_DOWN,
            queries=(Query(sel("ipxbridge_ipx_port_up"), "{{instance}} {{kind}} {{interface}}"),),
        ),
        Panel(
            title="Received by port",
            description=(
                "Datagrams received per second on each port (kind, interface), both paths:"
                " IPX ports and relay interfaces (kind relay)."
            ),
            unit="pps",
            width=8,
            queries=(
                Query(
                    sum_rate("instance, path, kind, interface", "ipxbridge_received_packets_total"),
                    "{{instance}} {{path}} {{kind}} {{interface}}",
                ),
            ),
        ),
        Panel(
            title="IPX books by port",
            description=(
                "Per IPX port, the packets received per second and what became of them:"
                " forwarded, control (registration, ping, a coalesced batch) or dropped with"
                " its reason. Per port the outcomes sum to the received packets."
            ),
            unit="pps",
            width=8,
            queries=(
                Query(
                    sum_rate(
                        "instance, kind, interface", "ipxbridge_ipx_port_received_packets_total"
                    ),
                    "{{instance}} {{kind}} {{interface}} received",
                ),
                Query(
                    sum_rate(
                        "instance, kind, interface, outcome, reason",
                        "ipxbridge_ipx_port_packets_total",
                    ),
                    "{{instance}} {{kind}} {{interface}} {{outcome}} {{reason}}",
                ),
            ),
        ),
    ),
    (
        Panel(
            title="Stations and bridges on IPX interface ports",
            description=(
                "Stations learned on each IPX interface port (native, IPXWrapper or RFC 1234"
                " hosts) and the other ipxbridges heard there (their beacons); broadcasts per"
                " second left to those bridges, by outcome (missing: their copy did not appear,"
                " so this bridge sent it: the log says where)."
            ),
            unit="short",
            width=4,
            queries=(
                Query(
                    f"sum by (instance, kind, interface) ({sel('ipxbridge_ipx_port_stations')})",
                    "{{instance}} {{kind}} {{interface}} stations",
                ),
                Query(
                    f"sum by (instance, kind, interface) ({sel('ipxbridge_ipx_port_bridges')})",
                    "{{instance}} {{kind}} {{interface}} bridges",
                ),
                Query(
                    sum_rate("instance, outcome", "ipxbridge_ipx_delegated_total"),
                    "{{instance}} left to a bridge: {{outcome}}/s",
                ),
            ),
        ),
        Panel(
            title="Copies held or not carried",
            description=(
                "Copies not sent per second: held (unverified_rate: toward a client not yet"
                " proven to receive there, over the bytes-per-second limit; egress_repeat:"
                " a copy back by another way, the loop bound), and those an IPX"
                " port could not carry (frame_too_large, unproven_host, internal_error)."
            ),
            unit="pps",
            width=5,
            queries=(
                Query(
                    sum_rate("instance, path, reason", "ipxbridge_held_copies_total"),
                    "{{instance}} {{path}} held: {{reason}}",
                ),
                Query(
                    sum_rate(
                        "instance, kind, interface, reason",
                        "ipxbridge_ipx_port_dropped_copies_total",
                    ),
                    "{{instance}} {{kind}} {{interface}}: {{reason}}",
                ),
            ),
        ),
        Panel(
            title="Toward unproven addresses",
            description=(
                "Bytes per second the IPX switch sent to clients that have not proven they"
                " receive at their address (listeners, silent hosts, or spoofed"
                " registrations), within ipx.unverified_*_bytes_per_second; and datagrams per"
                " second the limit held, by what and by bound (address: one IPv4 address's"
                " rate; total: the bridge's). Steady holds under 'total' mean many unproven"
                " addresses: a spoofing flood, or a party that needs a higher limit."
            ),
            unit="Bps",
            width=5,
            queries=(
                Query(
                    sum_rate("instance", "ipxbridge_unverified_sent_bytes_total"),
                    "{{instance}} sent",
                ),
                Query(
                    sum_rate("instance", "ipxbridge_unverified_sent_packets_total"),
                    "{{instance}} datagrams sent",
                ),
                Query(
                    sum_rate("instance, what, bound", "ipxbridge_unverified_limited_total"),
                    "{{instance}} held {{what}} ({{bound}})",
                ),
            ),
        ),
        Panel(
            title="Table evictions",
            description=(
                "Entries pushed out of a bounded table of the IPX switch or its ports per"
                " second, by table and reason; steady evictions mean a table is too small or"
                " someone is filling it."
            ),
            unit="cps",
            width=5,
            queries=(
                Query(
                    sum_rate("instance, table, reason", "ipxbridge_table_evictions_total"),
                    "{{instance}} {{table}}: {{reason}}",
                ),
            ),
        ),
        Panel(
            title="Packets taken against the strict spec",
            description=(
                "Packets per second an interface port took although the strict IPX spec"
                " refuses them, by reason: checksum 0x0000, or that and transport control 127"
                " (ipxbox's frames, docs/protocols.md 3.8). Shows an ipxbox on the LAN."
            ),
            unit="pps",
            width=5,
            queries=(
                Query(
                    sum_rate("instance, kind, interface, reason", "ipxbridge_ipx_forgiven_total"),
                    "{{instance}} {{kind}} {{interface}}: {{reason}}",
                ),
            ),
        ),
    ),
)

UPLINK_ROW: Final = (
    Panel(
        title="Uplinks",
        description=(
            "ipxbox-protocol uplinks (docs/protocols.md 3.9) by role (server: remote networks"
            " connected to this bridge; client: this bridge's network connected to a server)"
            " and state."
        ),
        unit="short",
        width=8,
        queries=(
            Query(
                f"sum by (instance, role, state) ({sel('ipxbridge_uplinks')})",
                "{{instance}} {{role}} {{state}}",
            ),
        ),
    ),
    Panel(
        title="Uplink handshakes",
        description=(
            "Uplink handshakes per second by role and outcome; rejected means a wrong"
            " password, no_answer a server that did not answer."
        ),
        unit="cps",
        width=8,
        queries=(
            Query(
                sum_rate("instance, role, outcome", "ipxbridge_uplink_handshakes_total"),
                "{{instance}} {{role}}: {{outcome}}",
            ),
        ),
    ),
    Panel(
        title="Uplink packets taken after a fix",
        description=(
            "Data packets per second from uplinks taken after a fix: ipxbox's checksum 0 and"
            " transport control 127, or its Ethernet padding trimmed."
        ),
        unit="pps",
        width=8,
        queries=(
            Query(
                sum_rate("instance, what", "ipxbridge_uplink_normalised_packets_total"),
                "{{instance}} {{what}}",
            ),
        ),
    ),
)

BROWSER_ROW: Final = (
    Panel(
        title="Browser players",
        description=(
            "Open WebSocket connections of browser players (js-dos), in the bridge's own room"
            " and in every other room, and the other rooms open; 0 listening means the"
            " listener is off."
        ),
        unit="short",
        width=6,
        queries=(
            Query(
                f"sum by (instance, room) ({sel('ipxbridge_ws_connections')})",
                "{{instance}} {{room}} room",
            ),
            Query(f"sum by (instance) ({sel('ipxbridge_ws_rooms')})", "{{instance}} other rooms"),
            Query(
                f"sum by (instance, scheme) ({sel('ipxbridge_ws_listening')})",
                "{{instance}} listening ({{scheme}})",
            ),
        ),
    ),
    Panel(
        title="Browser connections opened and closed",
        description=(
            "Connections opened per second, and closed by reason: behind means a player whose"
            " copies overflowed for websocket.behind_seconds, ping_timeout one that vanished."
        ),
        unit="cps",
        width=6,
        queries=(
            Query(sum_rate("instance", "ipxbridge_ws_connections_opened_total"), "{{instance}}"),
            Query(
                sum_rate("instance, reason", "ipxbridge_ws_connections_closed_total"),
                "{{instance}} closed: {{reason}}",
            ),
        ),
    ),
    Panel(
        title="Browser connections refused",
        description=(
            "Connections refused per second before the handshake, by reason: a room name, an"
            " Origin or an address not allowed, or a bound (rooms, room, address, in all)."
        ),
        unit="cps",
        width=6,
        queries=(
            Query(
                sum_rate("instance, reason", "ipxbridge_ws_refused_total"),
                "{{instance}} {{reason}}",
            ),
        ),
    ),
    Panel(
        title="Browser messages and copies",
        description=(
            "IPX packets per second from browser players and copies sent to them, and the"
            " copies dropped because a player's buffer was full (queue_full)."
        ),
        unit="pps",
        width=6,
        queries=(
            Query(
                sum_rate(
                    "instance, interface",
                    "ipxbridge_ipx_port_received_packets_total",
                    'kind="websocket"',
                ),
                "{{instance}} {{interface}} in",
            ),
            Query(
                sum_rate(
                    "instance, interface",
                    "ipxbridge_ipx_port_dropped_copies_total",
                    'kind="websocket"',
                ),
                "{{instance}} {{interface}} dropped",
            ),
        ),
    ),
)

RELAY_ROW: Final = (
    Panel(
        title="Relay flows (rewrite mode)",
        description=(
            "Rewrite-mode flow sockets open, by standing (proven: the player came back after a"
            " host answered), and the return sockets (host to player)."
        ),
        unit="short",
        width=6,
        queries=(
            Query(
                f"sum by (instance, standing) ({sel('ipxbridge_relay_flows')})",
                "{{instance}} {{standing}} flows",
            ),
            Query(
                f"sum by (instance) ({sel('ipxbridge_relay_return_sockets')})",
                "{{instance}} return sockets",
            ),
        ),
    ),
    Panel(
        title="Relay flow evictions and refusals",
        description=(
            "Rewrite-mode flows closed per second to make room for another (by reason), and"
            " copies that got no flow socket and were not sent (no_fd, socket_error)."
        ),
        unit="cps",
        width=6,
        queries=(
            Query(
                sum_rate("instance, reason", "ipxbridge_relay_flow_evictions_total"),
                "{{instance}} evicted: {{reason}}",
            ),
            Query(
                sum_rate("instance, reason", "ipxbridge_relay_flows_refused_total"),
                "{{instance}} refused: {{reason}}",
            ),
        ),
    ),
    Panel(
        title="Relay peers on p2p interfaces",
        description=(
            "Unicast targets of the relay's p2p interfaces by where they came from (listed,"
            " wireguard, tinc, nebula, openvpn, heard, point_to_point), and peers learned,"
            " expired and"
            " evicted per second from what arrives there (relay.heard_peers bounds them)."
        ),
        unit="short",
        width=6,
        queries=(
            Query(
                f"sum by (instance, interface, source) ({sel('ipxbridge_relay_peers')})",
                "{{instance}} {{interface}} {{source}}",
            ),
            Query(
                sum_rate("instance, event", "ipxbridge_relay_heard_peers_total"),
                "{{instance}} heard: {{event}}/s",
            ),
        ),
    ),
    Panel(
        title="Relay interfaces",
        description=(
            "The relay interfaces in use (ipxbridge_interface_info): link type (ethernet,"
            " wireguard, ...) and role (lan: subnet broadcast; p2p: unicast to its peers)."
        ),
        unit="none",
        kind="table",
        width=6,
        queries=(
            Query(
                f"max by (instance, interface, link, role) ({sel('ipxbridge_interface_info')})",
                "",
                table=True,
            ),
        ),
    ),
)

PROCESS_ROW: Final = (
    Panel(
        title="Malformed DirectPlay messages",
        description="DirectPlay messages per second that failed to parse, by reason.",
        unit="cps",
        width=6,
        queries=(
            Query(
                sum_rate("instance, reason", "ipxbridge_directplay_malformed_total"),
                "{{instance}} {{reason}}",
            ),
        ),
    ),
    Panel(
        title="Process memory",
        description=(
            "Resident (process_resident_memory_bytes) and virtual"
            " (process_virtual_memory_bytes) memory of the ipxbridge process."
        ),
        unit="bytes",
        width=6,
        queries=(
            Query(sel("process_resident_memory_bytes"), "{{instance}} resident"),
            Query(sel("process_virtual_memory_bytes"), "{{instance}} virtual"),
        ),
    ),
    Panel(
        title="Process CPU",
        description="CPU time used by the ipxbridge process; 100% is one full core.",
        unit="percentunit",
        width=6,
        queries=(Query(rate("process_cpu_seconds_total"), "{{instance}}"),),
    ),
    Panel(
        title="Open file descriptors",
        description=(
            "File descriptors (sockets included) open in the ipxbridge process, and its limit"
            " (rewrite-mode flows refused with no_fd when it is reached)."
        ),
        unit="short",
        width=6,
        queries=(
            Query(sel("process_open_fds"), "{{instance}} open"),
            Query(sel("process_max_fds"), "{{instance}} limit"),
        ),
    ),
)


def layout() -> list[Json]:
    """Place every panel on the 24-column grid, row by row, and number them."""
    rows: list[tuple[tuple[Panel, ...], int]] = [(STATUS_ROW, STAT_HEIGHT)]
    rows += [(row, PANEL_HEIGHT) for row in TRAFFIC_ROWS]
    rows += [(row, PANEL_HEIGHT) for row in PORT_ROWS]
    rows += [(UPLINK_ROW, PANEL_HEIGHT), (BROWSER_ROW, PANEL_HEIGHT)]
    rows += [(RELAY_ROW, PANEL_HEIGHT), (GAME_ROW, PANEL_HEIGHT), (PROCESS_ROW, PANEL_HEIGHT)]
    panels: list[Json] = []
    y = 0
    for row, height in rows:
        x = 0
        for panel in row:
            panels.append(panel.render(len(panels) + 1, x, y, height))
            x += panel.width
        if x != 24:
            raise ValueError(f"row at y={y} is {x} columns wide, not 24")
        y += height
    return panels


def query_variable(name: str, query: str) -> Json:
    """Return a multi-select ``label_values`` variable whose All value matches anything."""
    return {
        "allValue": ".+",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": dict(DATASOURCE),
        "definition": query,
        "hide": 0,
        "includeAll": True,
        "label": name.title(),
        "multi": True,
        "name": name,
        "options": [],
        "query": query,
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }


def templating() -> Json:
    """Return the data source, job and instance variables."""
    datasource: Json = {
        "current": {"selected": False, "text": "default", "value": "default"},
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
        "type": "datasource",
    }
    return {
        "list": [
            datasource,
            query_variable("job", "label_values(ipxbridge_build_info, job)"),
            query_variable("instance", 'label_values(ipxbridge_build_info{job=~"$job"}, instance)'),
        ]
    }


def restart_annotations() -> Json:
    """Return the restart annotation: a marker wherever process_start_time_seconds changed."""
    restarts: Json = {
        "datasource": dict(DATASOURCE),
        "enable": True,
        "expr": f"changes({sel('process_start_time_seconds')}[2m]) > 0",
        "hide": False,
        "iconColor": "orange",
        "name": "Restarts",
        "step": "1m",
        "tagKeys": "instance",
        "textFormat": "ipxbridge on {{instance}} restarted",
        "titleFormat": "Restart",
        "useValueForTime": False,
    }
    return {"list": [restarts]}


def dashboard() -> Json:
    """Return the whole dashboard model."""
    return {
        "annotations": restart_annotations(),
        "description": (
            "ipxbridge: IPX-over-UDP bridge, LAN broadcast relay and DirectPlay inspection."
            " Generated by deploy/grafana/generate_dashboard.py; do not edit the JSON."
        ),
        "editable": False,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "liveNow": False,
        "panels": layout(),
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["ipxbridge", "ipx", "directplay", "network"],
        "templating": templating(),
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": TITLE,
        "uid": UID,
        "version": 1,
        "weekStart": "",
    }


def render() -> str:
    """Return the dashboard as the exact text committed in ipxbridge.json."""
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ipxbridge.json, or with ``--check`` report whether it is up to date."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if the file differs from what would be generated",
    )
    parser.add_argument(
        "--output", type=Path, default=OUTPUT, help=f"dashboard file (default: {OUTPUT})"
    )
    args = parser.parse_args(argv)
    output: Path = args.output
    wanted = render()
    if args.check:
        current = output.read_text(encoding="utf-8") if output.exists() else ""
        if current == wanted:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=f"{output} (on disk)",
            tofile=f"{output} (generated)",
        )
        sys.stderr.writelines(list(diff)[:60])
        sys.stderr.write(f"\n{output} is stale: run {Path(__file__).name} to regenerate it\n")
        return 1
    output.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
