"""The HTTP service: the JSON API, the status page, health endpoints and /metrics."""

import asyncio
import json
import logging
import time
from importlib import resources
from typing import Any, Final

from prometheus_client import CollectorRegistry

from ipxbridge import __version__
from ipxbridge.app.directplay import DirectPlayService
from ipxbridge.app.ipx import IpxService
from ipxbridge.app.relay import RelayService
from ipxbridge.app.service import Health
from ipxbridge.app.status import StatusService, ipx_port_rows
from ipxbridge.app.websocket import WebSocketService
from ipxbridge.config import Config, parse_host_port
from ipxbridge.errors import StartupError
from ipxbridge.obs.http import METRICS_PATH, HttpServer, Response, Route, text
from ipxbridge.obs.status import render_status

logger = logging.getLogger(__name__)


# The live page loads only its own files from the bridge and talks only to the bridge: no
# inline script or style, no other origin, no frames, no forms (docs/status-page.md).
PAGE_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS: Final = (
    ("Content-Security-Policy", PAGE_CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)
# The page's own files (ipxbridge/obs/static), by path, with their content types.
STATIC_FILES: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/status.js": ("status.js", "text/javascript; charset=utf-8"),
    "/status.css": ("status.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}


def json_response(data: Any) -> Response:  # noqa: ANN401 - any JSON value
    """A JSON HTTP response."""
    return Response(
        200,
        "application/json",
        (json.dumps(data, indent=1) + "\n").encode(),
        (("X-Content-Type-Options", "nosniff"),),
    )


def _constant(response: Response) -> Route:
    return lambda _q: response


def static_routes() -> dict[str, Route]:
    """The status page's files, read once: every route answers the same bytes."""
    folder = resources.files("ipxbridge.obs") / "static"
    routes: dict[str, Route] = {}
    for path, (name, content_type) in STATIC_FILES.items():
        routes[path] = _constant(
            Response(200, content_type, (folder / name).read_bytes(), PAGE_HEADERS)
        )
    # Browsers ask for it whatever the page says; an answer keeps their console clean.
    routes["/favicon.ico"] = routes["/favicon.svg"]
    return routes


__all__ = ["HttpService", "ipx_port_rows", "json_response", "static_routes"]


class HttpService:
    """Serves the other services' views on ``http.listen`` (off: nothing).

    Every route runs on the bridge's loop: a stuck loop answers nothing and the health
    check also judges the loop's heartbeat, so it fails rather than lies.
    """

    def __init__(
        self,
        config: Config,
        health: Health,
        registry: CollectorRegistry,
        *,
        directplay: DirectPlayService,
        ipx: IpxService,
        relay: RelayService,
        status: StatusService,
        websocket: WebSocketService | None = None,
    ) -> None:
        self.config = config
        self.websocket = websocket
        self.status = status
        self.health = health
        self.registry = registry
        self.directplay = directplay
        self.ipx = ipx
        self.relay = relay
        self.server: HttpServer | None = None
        self.started_at = time.time()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Listen (``http.listen``; loopback by default)."""
        if self.config.http.listen == "off":
            return
        self._loop = asyncio.get_running_loop()
        listen = parse_host_port(self.config.http.listen)
        self.server = HttpServer(
            {
                "/api/sessions": lambda _q: json_response(self.directplay.sessions_json()),
                "/api/clients": lambda _q: json_response(self.clients_json()),
                "/api/interfaces": lambda _q: json_response(self.relay.interfaces_json()),
                "/-/healthy": lambda _q: self._healthy(),
                "/-/ready": lambda _q: (
                    text(200, "ready\n") if self.health.started else text(503, "starting\n")
                ),
                "/api/status": lambda _q: json_response(self.status.status_json()),
                # The server-rendered page for browsers without JavaScript (text consoles).
                "/plain": lambda _q: Response(
                    200, "text/html; charset=utf-8", render_status(self.status_data()).encode()
                ),
                **static_routes(),
            },
            registry=self.registry,
        )
        try:
            await self.server.start(listen.host, listen.port)
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {listen}/tcp for HTTP: {exc.strerror} "
                "(choose another with --metrics-listen, or off)"
            ) from None
        # Every URL a newcomer looks for, on the one line operators wait for.
        logger.info(
            "status page on http://%s/, metrics on http://%s%s, HTTP API on http://%s/api/sessions",
            listen,
            listen,
            METRICS_PATH,
            listen,
        )

    async def stop(self) -> None:
        """Stop listening."""
        if self.server is not None:
            await self.server.close()

    def reconfigure(self, config: Config) -> None:
        """Nothing changes live here (``http.listen`` needs a restart)."""
        self.config = config

    def tick(self, now: float) -> None:
        """No timers."""

    def snapshot(self) -> None:
        """No numbers of its own (aiohttp keeps none worth exporting)."""

    def _healthy(self) -> Response:
        assert self._loop is not None  # noqa: S101 - routes run on the started loop
        stale = self.health.stale_for(self._loop.time())
        if stale is not None:
            return text(503, f"event loop heartbeat is {stale:.1f}s old\n")
        return text(200, "ok\n")

    def ipx_ports(self) -> list[dict[str, Any]]:
        """The IPX service's interface ports as the status page lists them."""
        return self.status.ipx_port_rows()

    def clients_json(self) -> list[dict[str, Any]]:
        """IPX clients, peers, uplinks and stations, then browser players."""
        browsers = self.websocket.clients_json() if self.websocket is not None else []
        return self.ipx.clients_json() + browsers

    def status_data(self) -> dict[str, Any]:
        """Everything the status page shows."""
        ipx = self.ipx.counters
        relay = self.relay.counters
        inspector = self.directplay.inspector
        return {
            "version": __version__,
            "uptime": time.time() - self.started_at,
            "ipx_listen": self.config.ipx.listen,
            "clients": self.clients_json(),
            "ipx_ports": self.ipx_ports(),
            "ipx_ports_configured": bool(self.config.ipx.interfaces),
            "sessions": self.directplay.sessions_json(),
            "interfaces": self.relay.interfaces_json(),
            "relay_enabled": self.relay.relay is not None,
            "counters": {
                "IPX received": ipx.received,
                "IPX forwarded": ipx.forwarded,
                "IPX control": ipx.control,
                "IPX dropped": ipx.dropped_total,
                "relay received": relay.received,
                "relay relayed": relay.relayed,
                "relay dropped": sum(relay.dropped.values()),
                "DirectPlay messages": sum(inspector.messages.values()),
                "DirectPlay malformed": sum(inspector.errors.values()),
            },
        }
