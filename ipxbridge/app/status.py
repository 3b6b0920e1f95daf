"""The status page's service: samples the other services once a tick into bounded history.

It keeps what a live page needs and the JSON API alone cannot give (docs/status-page.md):
traffic per second over 15 minutes, per-client rates and sparklines, who left and why, and
the recent events (joins, leaves, games, interface changes). ``status_json`` is
``GET /api/status``. The hot paths only bump plain integers (``Client.rx_packets``...,
``IpxEndpoint.event_tap``); everything else happens here, once a second.
"""

import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ipxbridge import __version__
from ipxbridge.app.directplay import DirectPlayService
from ipxbridge.app.ipx import IpxService
from ipxbridge.app.relay import RelayService
from ipxbridge.app.websocket import WebSocketService
from ipxbridge.config import Config
from ipxbridge.io.segments import EthernetPort
from ipxbridge.obs.history import ClientBooks, EventLog, Tracked, TrafficHistory
from ipxbridge.policy.port_plan import PortPlan, Skipped
from ipxbridge.policy.sessions import players_text, stale_after, status_text
from ipxbridge.policy.switch import Client, IpxSwitch, Peer, PortKind, Segment

# Switch and uplink events that end a client, and the word the page shows for each.
LEAVE_REASONS: Final = {
    ("dosbox", "expired"): "expired",
    ("dosbox", "evicted"): "evicted",
    ("dosbox", "shutdown"): "shutdown",
    ("dosbox", "not_allowed"): "not allowed",
    ("uplink", "closed"): "closed",
    ("uplink", "expired"): "expired",
    ("uplink", "rejected"): "rejected",
}
MAX_TAP: Final = 1024  # switch events buffered between two ticks (a burst is cut, not grown)
DROPS_WINDOW: Final = 60.0  # "drops in the last minute"
KIND_ORDER: Final = ("dosbox", "browser", "peer", "uplink", "ethernet", "ipxwrapper", "rfc1234")


# The kinds whose packets are counted per address (clients and peers; not stations)
_BOOKED: Final = frozenset(("dosbox", "browser", "peer"))


def _ago(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m"
    return f"{minutes // 60}h {minutes % 60:02d}m"


def _who(row: dict[str, Any]) -> str:
    """How an event names a client or station: kind and address, or interface and node."""
    kind = row.get("kind", "?")
    if row.get("address"):
        return f"{kind} {row['address']}"
    return f"{kind} {row.get('interface', '')} {row.get('node', '')}".strip()


class StatusService:
    """History for the status page; reads the other services, owns no socket."""

    def __init__(
        self,
        config: Config,
        *,
        directplay: DirectPlayService,
        ipx: IpxService,
        relay: RelayService,
        websocket: WebSocketService | None = None,
    ) -> None:
        self.config = config
        self.directplay = directplay
        self.ipx = ipx
        self.relay = relay
        self.websocket = websocket
        self.traffic = TrafficHistory()
        self.books = ClientBooks()
        self.events = EventLog()
        self.tap: deque[tuple[str, str, tuple[str, int]]] = deque(maxlen=MAX_TAP)
        self._sessions: dict[str, str] = {}  # instance GUID -> how the event named it
        self._ports: dict[str, tuple[bool, str]] | None = None  # name -> (up, why)
        self._now = 0.0

    async def start(self) -> None:
        """Nothing to open; the first tick takes the baselines."""

    async def stop(self) -> None:
        """Nothing to close."""

    def reconfigure(self, config: Config) -> None:
        """Only the session staleness threshold reads the configuration."""
        self.config = config

    def snapshot(self) -> None:
        """No numbers for /metrics: this is a view of the others'."""

    def tick(self, now: float) -> None:
        """Once a second: events, clients, sessions, ports; traffic when a slot is due."""
        self._now = now
        wall = time.time()
        endpoint = self.ipx.endpoint
        if endpoint is not None and endpoint.event_tap is not self.tap:
            endpoint.event_tap = self.tap
        self._drain_tap()
        self._clients(now, wall)
        self._games(wall)
        self._port_changes(wall)
        if self.traffic.due(now):
            self._sample_traffic(wall)

    # --- sampling --------------------------------------------------------------------------

    def _drain_tap(self) -> None:
        if self.websocket is not None:
            events, self.websocket.events = self.websocket.events, []
            for why, addr, _room in events:
                if why != "joined":
                    ip, port = addr[0], addr[1] & 0xFFFF  # connections.connection_address
                    self.books.note_reason(f"browser||{ip}:{port}", why)
        while self.tap:
            source, kind, addr = self.tap.popleft()
            reason = LEAVE_REASONS.get((source, kind))
            if reason is not None:
                role = "server" if source == "uplink" else ""  # client_key's middle part
                self.books.note_reason(f"{source}|{role}|{addr[0]}:{addr[1]}", reason)

    def _client_items(self) -> list[tuple[dict[str, Any], tuple[int, int, int, int] | None]]:
        rows = self.ipx.clients_json()
        endpoint = self.ipx.endpoint
        books: dict[str, tuple[int, int, int, int]] = {}
        browsers: dict[str, tuple[int, int, int, int]] = {}
        if self.websocket is not None:
            rows += self.websocket.clients_json()
            browsers = self.websocket.books()
        if endpoint is not None:
            endpoint.settle_books()  # copies owed to the clients' books (io/ipx_endpoint.py)
            switch = endpoint.switch
            booked: list[Client | Peer] = [*switch.clients.values(), *switch.peers.values()]
            for c in booked:
                books[f"{c.addr[0]}:{c.addr[1]}"] = (
                    c.rx_packets,
                    c.rx_bytes,
                    c.tx_packets,
                    c.tx_bytes,
                )
        return [
            (
                row,
                (browsers if row.get("kind") == "browser" else books).get(row.get("address", ""))
                if row.get("kind") in _BOOKED
                else None,
            )
            for row in rows
        ]

    def _clients(self, now: float, wall: float) -> None:
        joined, left = self.books.update(self._client_items(), now, wall)
        for entry in joined:
            self.events.add(wall, "join", f"{_who(entry.row)} joined")
        for entry in left:
            self.events.add(wall, "leave", f"{_who(entry.row)} left ({entry.reason})")

    def _games(self, wall: float) -> None:
        current = {str(s.instance_guid): s for s in self.directplay.sessions.snapshot(self._now)}
        for guid, s in current.items():
            if guid not in self._sessions:
                name = f"{s.game or 'unknown game'}: {s.session_name or 'unnamed'}"
                self._sessions[guid] = name
                self.events.add(wall, "game", f"game {name} appeared (host {s.host})")
        for guid in [g for g in self._sessions if g not in current]:
            self.events.add(wall, "game_end", f"game {self._sessions.pop(guid)} ended")

    def ipx_port_rows(self) -> list[dict[str, Any]]:
        """The IPX service's interface ports, open or not, with the framings heard."""
        return _ipx_port_rows(self.ipx)

    def ports(self) -> list[dict[str, Any]]:
        """Every port and relay interface: up or down, and why (health at a glance)."""
        out: list[dict[str, Any]] = []
        listen = self.config.ipx.listen
        if listen != "off":
            up = self.ipx.endpoint is not None
            out.append(
                {"name": f"IPX tunnel udp {listen}", "up": up, "why": "" if up else "not open"}
            )
        for row in self.ipx_port_rows():
            out.append(
                {
                    "name": f"{row['interface']}/{row['kind']}",
                    "up": bool(row.get("open")),
                    "why": row.get("why") or "",
                }
            )
        for link in self.ipx.uplinks:
            policy = link.policy
            out.append(
                {
                    "name": f"uplink {link.name}",
                    "up": bool(policy.connected),
                    "why": "" if policy.connected else (policy.reason or str(policy.state)),
                }
            )
        if self.relay.relay is not None:
            for i in self.relay.interfaces_json():
                out.append(
                    {
                        "name": f"relay {i['name']}",
                        "up": bool(i["up"]),
                        "why": "" if i["up"] else "selected, but down or without an address",
                    }
                )
        return out

    def _port_changes(self, wall: float) -> None:
        current = {p["name"]: (p["up"], p["why"]) for p in self.ports()}
        before, self._ports = self._ports, current
        if before is None:
            return  # the first look is the baseline, not a change
        for name, (up, why) in current.items():
            if before.get(name, (None, ""))[0] == up:
                continue
            if up:
                self.events.add(wall, "port_up", f"{name} up")
            else:
                self.events.add(wall, "port_down", f"{name} down" + (f": {why}" if why else ""))
        for name in before.keys() - current.keys():
            self.events.add(wall, "port_down", f"{name} removed")

    def _sample_traffic(self, wall: float) -> None:
        ipx, relay = self.ipx.counters, self.relay.counters
        drops: dict[str, int] = dict(ipx.dropped)
        for reason, n in relay.dropped.items():
            drops[f"relay {reason}"] = drops.get(f"relay {reason}", 0) + n
        copies: dict[str, int] = {}
        if self.relay.relay is not None:
            copies = dict(self.relay.snapshot().copies)
        self.traffic.sample(
            wall,
            {
                "received": ipx.received + relay.received,
                "forwarded": ipx.forwarded,
                "dropped": ipx.dropped_total + sum(relay.dropped.values()),
                "relayed": relay.relayed,
            },
            {"drops": drops, "copies": copies},
        )

    # --- the view --------------------------------------------------------------------------

    @staticmethod
    def _host_client(host: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The connected client or station that hosts a session found over IPX.

        Only an exact IPX node counts (``net.node:socket``, io/ipx_endpoint.ipx_host): a session
        found over UDP names its host's IP, and guessing which of that IP's programs hosts
        it would be a guess, so the page shows that address instead.
        """
        net, dot, rest = host.partition(".")
        if not dot or len(net) != 8:
            return None
        raw = rest.split(":", 1)[0]
        node = ":".join(raw[i : i + 2] for i in range(0, len(raw), 2))
        for row in rows:
            if row.get("node") == node:
                return {k: row[k] for k in ("kind", "address", "node", "interface") if row.get(k)}
        return None

    def sessions_json(self) -> list[dict[str, Any]]:
        """The games, oldest first (stable), with their host client and staleness."""
        dp = self.config.directplay
        threshold = stale_after(dp.session_expiry, dp.probe_interval)
        rows = self.ipx.clients_json()  # as they are now: a new host is found at once
        out = []
        for s in sorted(
            self.directplay.sessions_json(),
            key=lambda s: (s["first_seen"], s["instance_guid"]),
        ):
            out.append(
                {
                    "id": s["instance_guid"],
                    "game": s.get("game") or s.get("game_guid"),
                    "name": s.get("session_name"),
                    "map": s.get("map"),
                    "players": players_text(s.get("players"), s.get("max_players")),
                    "status": status_text(s),
                    "open": s.get("open"),
                    "host": s.get("host"),
                    "host_client": self._host_client(str(s.get("host", "")), rows),
                    "transport": s.get("transport"),
                    "first_seen": s.get("first_seen"),
                    "age_seconds": s.get("age_seconds"),
                    "stale": float(s.get("age_seconds") or 0) > threshold,
                }
            )
        return out

    def _client_json(self, entry: Tracked, wall: float) -> dict[str, Any]:
        row = entry.row
        item: dict[str, Any] = {
            "key": entry.key,
            "kind": row.get("kind"),
            "address": row.get("address"),
            "node": row.get("node"),
            "interface": row.get("interface"),
            "detail": row.get("framing")
            or row.get("role")
            or (f"room {row['room']}" if row.get("room") else None),
            "connected_seconds": round((entry.gone_at or wall) - entry.first_seen, 1),
            "gone": entry.gone_at is not None,
        }
        if entry.gone_at is not None:
            item["gone_seconds"] = round(wall - entry.gone_at, 1)
            item["reason"] = entry.reason
        rates = entry.rates
        item["rates"] = (
            {
                "rx_pps": round(rates[0], 1),
                "rx_bps": round(rates[1], 1),
                "tx_pps": round(rates[2], 1),
                "tx_bps": round(rates[3], 1),
            }
            if rates is not None
            else None
        )
        totals = entry.totals
        item["totals"] = (
            dict(zip(("rx_packets", "rx_bytes", "tx_packets", "tx_bytes"), totals, strict=True))
            if totals is not None
            else None
        )
        if entry.spark_in is not None and entry.spark_out is not None:
            item["spark"] = {"in": entry.spark_in.values(), "out": entry.spark_out.values()}
        return item

    def clients_json(self, wall: float) -> list[dict[str, Any]]:
        """Clients and stations, live and recently gone: by kind, then first seen."""
        entries = sorted(
            self.books.entries(),
            key=lambda e: (
                KIND_ORDER.index(k) if (k := e.row.get("kind")) in KIND_ORDER else 99,
                e.order,
            ),
        )
        return [self._client_json(e, wall) for e in entries]

    def status_json(self) -> dict[str, Any]:
        """Everything the page shows, in one answer (``GET /api/status``)."""
        wall = time.time()
        relay = self.relay
        fast_path = None if relay.relay is None else relay.fanout is not None
        return {
            "version": __version__,
            "now": wall,
            "ipx_listen": self.config.ipx.listen,
            "sessions": self.sessions_json(),
            "clients": self.clients_json(wall),
            "traffic": self.traffic.json(),
            "events": self.events.json(),
            "health": {
                "ports": self.ports(),
                "drops_last_minute": self.traffic.recent("dropped", DROPS_WINDOW),
                "fast_path": fast_path,
                "relay_mode": relay.mode.source_mode if relay.mode is not None else None,
                "history_bytes": self.traffic.nbytes + self.books.nbytes,
            },
        }


def _port_detail(plan: PortPlan, heard: Sequence[str] | None) -> str:
    """Where one open port puts a broadcast (UDP) or which frame types it speaks (Ethernet)."""
    if plan.segment.kind is PortKind.ETHERNET:
        if plan.framing != "auto":
            return f"framing {plan.framing} (fixed)"
        if heard:
            return f"framing auto: {', '.join(heard)} heard"
        return "framing auto: none heard yet (802.2 until one is)"
    if plan.role == "lan":
        return f"broadcast {plan.broadcast or 'none (/31, /32)'} from {plan.address}"
    return f"peers {', '.join(plan.peers)}" if plan.peers else "no peers known: nothing sent"


def ipx_port_rows(
    plans: Mapping[Segment, PortPlan],
    skipped: Sequence[Skipped],
    switch: IpxSwitch | None,
    framings: Mapping[Segment, Sequence[str]],
) -> list[dict[str, Any]]:
    """The IPX interface ports for the status page: open ones, then those that are not.

    Args:
        plans: the open ports (``IpxService.plans``).
        skipped: what was selected but is not open, with why (``IpxService.skipped``).
        switch: for the stations learned behind each port and the other bridges heard there.
        framings: per auto-framing Ethernet port, the framings its stations were heard in.
    """
    rows: list[dict[str, Any]] = []
    for segment, plan in sorted(plans.items(), key=lambda item: str(item[0])):
        rows.append(
            {
                "interface": segment.interface,
                "kind": str(segment.kind),
                "open": True,
                "role": plan.role,
                "detail": _port_detail(plan, framings.get(segment)),
                "stations": switch.learned_on(segment) if switch is not None else None,
                "bridges": len(switch.bridges_on(segment)) if switch is not None else None,
                "why": "",
            }
        )
    rows += [
        {"interface": s.interface, "kind": str(s.kind), "open": False, "why": s.why}
        for s in skipped
    ]
    return rows


def _ipx_port_rows(ipx: IpxService) -> list[dict[str, Any]]:
    """The IPX service's interface ports, open or not, with the framings heard."""
    endpoint = ipx.endpoint
    framings: dict[Segment, list[str]] = {}
    if endpoint is not None:
        for segment, port in endpoint.segments.items():
            if isinstance(port, EthernetPort) and port.fixed is None and len(port.framings):
                framings[segment] = [str(f) for f in port.framings.in_use()]
    switch = endpoint.switch if endpoint is not None else None
    return ipx_port_rows(ipx.plans, ipx.skipped, switch, framings)
