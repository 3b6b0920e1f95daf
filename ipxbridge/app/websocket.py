"""Players in a browser: the WebSocket listener and its rooms (docs/ipx.md, "Rooms").

A room is an IPX network: a switch of its own (``policy/switch.IpxSwitch``, every rule
applies) in an ``IpxEndpoint`` without a socket, whose clients are the room's connections.
The bridge's room (``websocket.bridge_room``) is the IPX service's own switch instead, so its
browser players share the network with the DOSBox clients, interface ports, peers and
uplinks. A room other than the bridge's exists while it has connections.
"""

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from ipxbridge.app.ipx import IpxService, client_nodes, switch_settings
from ipxbridge.config import WEBSOCKET_PORT, Config, parse_host_port
from ipxbridge.errors import StartupError
from ipxbridge.io.ipx_endpoint import IpxEndpoint
from ipxbridge.io.websocket import (
    Connection,
    ListenerSettings,
    WebSocketListener,
    reload_tls,
    tls_context,
)
from ipxbridge.obs.logging import RateLimiter
from ipxbridge.obs.metrics import WebSocketSnapshot
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.ports import Address
from ipxbridge.policy.rooms import RoomLimits, RoomTable
from ipxbridge.policy.switch import IpxSwitch

logger = logging.getLogger(__name__)

BRIDGE: Final = ("websocket", "bridge")  # port label of the bridge's room
ROOMS: Final = ("websocket", "rooms")  # of every other room, together (bounded labels)
WEBSOCKET_PORTS_OPEN: Final = (BRIDGE, ROOMS)


def listener_settings(config: Config) -> ListenerSettings:
    """The ``websocket`` section as the listener takes it."""
    ws = config.websocket
    listen = parse_host_port(ws.listen, WEBSOCKET_PORT)
    return ListenerSettings(
        host=listen.host,
        port=listen.port,
        origins=ws.origins,
        trusted_proxies=ws.trusted_proxies,
        ping_interval=ws.ping_interval,
        max_buffer=ws.max_buffer,
        behind_seconds=ws.behind_seconds,
    )


def room_limits(config: Config) -> RoomLimits:
    """The ``websocket`` section's bounds."""
    ws = config.websocket
    return RoomLimits(
        max_connections=ws.max_connections,
        max_rooms=ws.max_rooms,
        max_connections_per_room=ws.max_connections_per_room,
        max_connections_per_address=ws.max_connections_per_address,
    )


class WebSocketService:
    """The listener (off when ``websocket.listen`` is ``off``) and its rooms."""

    def __init__(self, config: Config, ipx: IpxService, inspector: Inspector) -> None:
        self.config = config
        self.ipx = ipx
        self.inspector = inspector
        self.listener: WebSocketListener | None = None
        # The bridge's room is chosen at start: a reload cannot move players between networks.
        self.bridge_room = config.websocket.bridge_room
        self.table = RoomTable(room_limits(config), self.bridge_room)
        self.rooms: dict[str, IpxEndpoint] = {}  # rooms besides the bridge's, while open
        self._joined: dict[Address, IpxEndpoint] = {}  # each connection's room
        self._loop: asyncio.AbstractEventLoop | None = None
        self._node_for: Callable[[Address], bytes] | None = None  # read when a room opens
        self._log = RateLimiter(rate=2.0, burst=20)
        # Joins and leaves for the status page: (kind, address, room)
        self.events: list[tuple[str, Address, str]] = []

    @property
    def enabled(self) -> bool:
        """Whether the listener is configured to run."""
        return self.config.websocket.listen != "off"

    async def start(self) -> None:
        """Listen for browser players.

        Raises:
            StartupError: the address is taken, or the certificate cannot be loaded.
        """
        if not self.enabled:
            return
        self._loop = asyncio.get_running_loop()
        ws = self.config.websocket
        context = tls_context(ws.certificate, ws.key) if ws.certificate else None
        settings = listener_settings(self.config)
        self.listener = WebSocketListener(settings, self, ssl_context=context, allows=self._allows)
        await self.listener.start()
        bridge = self.ipx.endpoint
        if bridge is not None:
            bridge.connection_events = self._switch_event
            bridge.connection_label = BRIDGE
        where = f"{self.listener.scheme}://{settings.host}:{settings.port}/ipx/<room>"
        logger.info(
            "browser players (js-dos) on %s: room %r is %s; other rooms are networks of their own",
            where,
            self.bridge_room,
            "this bridge's IPX network" if bridge is not None else "a room of its own (no tunnel)",
        )

    def _allows(self, ip: str) -> bool:
        return switch_settings(self.config).allows(ip)

    async def stop(self) -> None:
        """Close every connection, then the listener."""
        if self.listener is None:
            return
        await self.listener.stop()
        listener = self.listener
        logger.info(
            "stopped; browser players: connections=%d refused=%d closed=%s",
            listener.opened,
            sum(listener.refused.values()),
            ",".join(f"{k}:{v}" for k, v in sorted(listener.closed.items())) or "0",
        )
        for endpoint in self.rooms.values():
            endpoint.close()
        self.rooms.clear()

    def reconfigure(self, config: Config) -> None:
        """New bounds, origins, proxies and certificate; rooms keep their players.

        Players now outside ``ipx.clients_allow`` are closed.
        """
        old = self.config.websocket
        self.config = config
        listener = self.listener
        if listener is None:
            return
        ws = config.websocket
        if (
            ws.listen != old.listen
            or bool(ws.certificate) != bool(old.certificate)
            or ws.bridge_room != self.bridge_room
        ):
            logger.warning(
                "reload: websocket.listen, bridge_room and turning TLS on or off take a "
                "restart (the listener keeps %s, room %r the bridge's)",
                old.listen,
                self.bridge_room,
            )
        listener.settings = listener_settings(config)  # the address stays as it is bound
        for conn in listener.connections.values():
            conn.max_buffer = listener.settings.max_buffer
        self.table.limits = room_limits(config)
        if listener.ssl_context is not None and ws.certificate:
            try:
                reload_tls(listener.ssl_context, ws.certificate, ws.key)
                logger.info("websocket TLS: certificate %s loaded", ws.certificate)
            except StartupError as exc:
                logger.warning("reload: %s (the old certificate stays)", exc)
        settings = switch_settings(config)
        for endpoint in self.rooms.values():
            endpoint.switch.reconfigure(settings, ())
        for conn in list(listener.connections.values()):
            if not settings.allows(conn.client[0]):
                listener.close(conn, "not_allowed", "outside ipx.clients_allow now")

    def tick(self, now: float) -> None:
        """Rooms' timers; connections that stayed behind."""
        if self.listener is None:
            return
        self.listener.tick(now)
        for endpoint in self.rooms.values():
            endpoint.tick(now)

    # --- what the listener asks (io/websocket.Rooms) --------------------------------------

    def admit(self, room: str, ip: str) -> str | None:
        """Room bounds (``policy/rooms.RoomTable``)."""
        return self.table.admit(room, ip)

    def join(self, conn: Connection) -> None:
        """``conn`` becomes a client of its room's switch (it registers next)."""
        endpoint = self._endpoint(conn.room)
        self._joined[conn.addr] = endpoint
        endpoint.connections[conn.addr] = conn.send
        endpoint.switch.connect(conn.addr)
        self._say("browser player %s connected", conn)

    def ingest(self, conn: Connection, data: bytes) -> None:
        """A message: switched in its room."""
        self._joined[conn.addr].ingest_connection(conn.addr, data)

    def reject(self, conn: Connection, size: int, reason: str) -> None:
        """A message that is no packet: received on the room's port and dropped."""
        endpoint = self._joined[conn.addr]
        endpoint.reject(*endpoint.connection_label, size, reason)

    def leave(self, conn: Connection, reason: str) -> None:
        """``conn`` closed: it leaves the switch; an emptied room goes."""
        endpoint = self._joined.pop(conn.addr, None)
        if endpoint is not None:
            endpoint.connections.pop(conn.addr, None)
            endpoint.switch.disconnect(conn.addr)
        self.events.append((reason, conn.addr, conn.room))
        del self.events[:-256]  # what the status page has not read yet, bounded
        self._say("browser player %s left (%s)", conn, reason)
        if self.table.release(conn.room, conn.client[0]):
            self._close_room(conn.room)

    # --- rooms ----------------------------------------------------------------------------

    def _endpoint(self, room: str) -> IpxEndpoint:
        """The room's endpoint, made when its first connection joins."""
        if room == self.bridge_room and self.ipx.endpoint is not None:
            return self.ipx.endpoint
        endpoint = self.rooms.get(room)
        if endpoint is None:
            assert self._loop is not None  # noqa: S101 - started
            counters = self.ipx.counters
            switch = IpxSwitch(
                switch_settings(self.config),
                random_bytes=os.urandom,
                evictions=counters.table_evictions,
                forgiven=counters.forgiven,
                node_for=self._room_nodes(),
            )
            endpoint = IpxEndpoint(self._loop, None, switch, counters, self.inspector)
            endpoint.connection_label = ROOMS
            endpoint.connection_events = self._switch_event
            self.rooms[room] = endpoint
        return endpoint

    def _room_nodes(self) -> Callable[[Address], bytes]:
        """The nodes the rooms' clients get, as the tunnel's (the same key, read once)."""
        if self._node_for is None:
            self._node_for = client_nodes(self.config)
        return self._node_for

    def _close_room(self, room: str) -> None:
        endpoint = self.rooms.pop(room, None)
        if endpoint is not None:
            endpoint.settle_books()
            endpoint.close()

    def _switch_event(self, kind: str, addr: Address, node: bytes) -> None:
        """A switch event of a browser player: registered, evicted, not allowed..."""
        listener = self.listener
        conn = listener.connections.get(addr) if listener is not None else None
        if conn is None:
            return
        if kind == "registered":
            self.events.append(("joined", addr, conn.room))
            self._say("browser player %s registered as node %s", conn, node.hex(":"))
        elif kind == "not_allowed" and listener is not None:
            listener.close(conn, "not_allowed", "outside ipx.clients_allow now")

    def _say(self, text: str, *args: object) -> None:
        if self._loop is not None and self._log.allow(self._loop.time()):
            logger.info(text, *args)

    def snapshot(self) -> WebSocketSnapshot:
        """The listener's numbers."""
        listener = self.listener
        if listener is None:
            return WebSocketSnapshot()
        bridge_room = self.bridge_room
        open_by: Counter[str] = Counter(
            "bridge" if c.room == bridge_room else "other" for c in listener.connections.values()
        )
        return WebSocketSnapshot(
            True,
            listener.ssl_context is not None,
            {"bridge": open_by["bridge"], "other": open_by["other"]},
            self.table.others(),
            listener.opened,
            dict(listener.closed),
            dict(listener.refused),
        )

    def clients_json(self) -> list[dict[str, Any]]:
        """Browser players, as ``GET /api/clients`` lists them (kind ``browser``)."""
        listener = self.listener
        if listener is None or self._loop is None:
            return []
        now = self._loop.time()
        out: list[dict[str, Any]] = []
        for conn in listener.connections.values():
            endpoint = self._joined.get(conn.addr)
            client = endpoint.switch.clients.get(conn.addr) if endpoint is not None else None
            item: dict[str, Any] = {
                "kind": "browser",
                "address": f"{conn.client[0]}:{conn.client[1]}",
                "room": conn.room,
                "node": client.node.hex(":") if client is not None else None,
                "idle_seconds": round(now - client.last_seen, 1) if client is not None else None,
                "queue_dropped": conn.queue_dropped,
            }
            out.append(item)
        return out

    def books(self) -> dict[str, tuple[int, int, int, int]]:
        """Each browser player's packets and bytes in and out, by its ``address``."""
        listener = self.listener
        out: dict[str, tuple[int, int, int, int]] = {}
        if listener is None:
            return out
        for conn in listener.connections.values():
            endpoint = self._joined.get(conn.addr)
            if endpoint is None:
                continue
            endpoint.settle_books()
            client = endpoint.switch.clients.get(conn.addr)
            if client is not None:
                out[f"{conn.client[0]}:{conn.client[1]}"] = (
                    client.rx_packets,
                    client.rx_bytes,
                    client.tx_packets,
                    client.tx_bytes,
                )
        return out
