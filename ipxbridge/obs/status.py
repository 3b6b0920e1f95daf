"""The status page: server-rendered HTML, no external assets, refreshes itself.

Everything shown comes from remote input at some point (session names, host addresses), so
every value is HTML-escaped; the page never embeds script.

Sections: game sessions; the tunnel's DOSBox-protocol clients and RFC 1234 peers; the stations
learned on IPX interface ports (native IPX with its framing, IPXWrapper and RFC 1234 hosts
with their address, each with its interface: the ``/api/clients`` items of those kinds); the
interface ports themselves, open or not and why (``app.http.ipx_port_rows``); the relay's
interfaces; counters.
"""

from html import escape
from typing import Any, Final

from ipxbridge.policy.sessions import players_text, status_text

REFRESH_SECONDS: Final = 5

# /api/clients kinds of stations learned on IPX interface ports, as a person says
# them; the other kinds (dosbox, peer) are UDP clients and peers of the tunnel.
STATION_KINDS: Final = {
    "ethernet": "native IPX",
    "ipxwrapper": "IPXWrapper",
    "rfc1234": "RFC 1234 host",
}

STYLE: Final = """
body{font-family:system-ui,sans-serif;margin:1.5em;background:#101418;color:#e8e8e8}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em;color:#9cd}
table{border-collapse:collapse;min-width:40em}th,td{padding:.25em .7em;text-align:left;
border-bottom:1px solid #2a3038}th{color:#9ab}.muted{color:#889}.up{color:#6d6}.down{color:#e66}
.counters td:last-child{text-align:right;font-variant-numeric:tabular-nums}
"""


def _cell(value: Any) -> str:  # noqa: ANN401 - any JSON value
    if value is None or value == "":
        return '<td class="muted">-</td>'
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, list):
        return f"<td>{escape(', '.join(str(v) for v in value)) or '-'}</td>"
    return f"<td>{escape(str(value))}</td>"


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(title)}</th>" for _, title in columns)
    body = "".join(
        "<tr>" + "".join(_cell(row.get(key)) for key, _ in columns) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s"


def render_status(data: dict[str, Any]) -> str:
    """The whole page for the data ``app.Bridge.status_data`` returns."""
    sessions = [
        {
            **s,
            "players_text": players_text(s.get("players"), s.get("max_players")),
            "status_text": status_text(s),  # "open" only without password, closed, started
            "game_text": s.get("game") or s.get("game_guid"),
        }
        for s in data.get("sessions", [])
    ]
    interfaces = [
        {
            **i,
            "state": "up" if i.get("up") else "DOWN",
            "target": i.get("broadcast") or ", ".join(i.get("peers") or []) or None,
        }
        for i in data.get("interfaces", [])
    ]
    clients = data.get("clients", [])
    stations = [
        {**c, "kind_text": STATION_KINDS[c["kind"]]}
        for c in clients
        if c.get("kind") in STATION_KINDS
    ]
    tunnel = [c for c in clients if c.get("kind") not in STATION_KINDS]
    ports = [
        {**p, "state": "open" if p.get("open") else "NOT open"} for p in data.get("ipx_ports", [])
    ]
    no_ports = (
        "No interface matches ipx.interfaces."
        if data.get("ipx_ports_configured")
        else "No IPX interface ports (ipx.interfaces, --ipx-iface)."
    )
    counters = "".join(
        f"<tr><td>{escape(k)}</td><td>{int(v)}</td></tr>"
        for k, v in data.get("counters", {}).items()
    )
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">',
        "<title>ipxbridge status</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>ipxbridge {escape(str(data.get('version', '')))}</h1>",
        f'<p class="muted">up {_uptime(float(data.get("uptime", 0)))} &middot; IPX tunnel '
        f"{escape(str(data.get('ipx_listen')))} &middot; refreshes every "
        f"{REFRESH_SECONDS} s</p>",
        "<h2>Game sessions</h2>",
        _table(
            sessions,
            [
                ("game_text", "Game"),
                ("session_name", "Session"),
                ("map", "Map"),
                ("players_text", "Players"),
                ("status_text", "Status"),
                ("host", "Host"),
                ("transport", "Transport"),
                ("last_seen", "Last seen"),
            ],
            "No DirectPlay sessions seen yet.",
        ),
        "<h2>IPX clients and peers</h2>",
        _table(
            tunnel,
            [
                ("kind", "Kind"),
                ("address", "Address"),
                ("node", "IPX node"),
                ("verified", "Verified"),
                ("idle_seconds", "Idle (s)"),
            ],
            "No IPX clients connected.",
        ),
        "<h2>IPX stations on interfaces</h2>",
        _table(
            stations,
            [
                ("kind_text", "Kind"),
                ("interface", "Interface"),
                ("node", "IPX node"),
                ("framing", "Framing"),
                ("address", "Address"),
                ("idle_seconds", "Idle (s)"),
            ],
            "No native, IPXWrapper or RFC 1234 station heard yet." if ports else no_ports,
        ),
        "<h2>IPX interface ports</h2>",
        _table(
            ports,
            [
                ("interface", "Interface"),
                ("kind", "Kind"),
                ("state", "State"),
                ("role", "Role"),
                ("detail", "Broadcasts / framing"),
                ("stations", "Stations"),
                ("bridges", "Other bridges"),
                ("why", "Why not open"),
            ],
            no_ports,
        ),
        "<h2>Relay interfaces</h2>",
        _table(
            interfaces,
            [
                ("name", "Interface"),
                ("state", "State"),
                ("role", "Role"),
                ("kind", "Kind"),
                ("address", "Address"),
                ("target", "Copies go to"),
                ("copies", "Copies sent"),
            ],
            "The broadcast relay is off (no --iface)."
            if not data.get("relay_enabled")
            else "No selected interface is present.",
        ),
        "<h2>Counters</h2>",
        f'<table class="counters">{counters}</table>',
        '<p class="muted">Prometheus: <a href="/metrics" style="color:#9cd">/metrics</a> '
        "&middot; JSON: /api/sessions, /api/clients (stations too), /api/interfaces</p>",
        "</body></html>",
    ]
    return "\n".join(parts)
