"""The HTTP service: the JSON API, the status page, health endpoints and /metrics."""

import asyncio
import json
import logging
import time
from typing import Any

from prometheus_client import CollectorRegistry

from ipxbridge import __version__
from ipxbridge.app.directplay import DirectPlayService
from ipxbridge.app.ipx import IpxService
from ipxbridge.app.relay import RelayService
from ipxbridge.app.service import Health
from ipxbridge.config import Config, parse_host_port
from ipxbridge.errors import StartupError
from ipxbridge.obs.http import HttpServer, Response, text
from ipxbridge.obs.status import render_status

logger = logging.getLogger(__name__)


def json_response(data: Any) -> Response:  # noqa: ANN401 - any JSON value
    """A JSON HTTP response."""
    return Response(200, "application/json", (json.dumps(data, indent=1) + "\n").encode())


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
    ) -> None:
        self.config = config
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
                "/api/clients": lambda _q: json_response(self.ipx.clients_json()),
                "/api/interfaces": lambda _q: json_response(self.relay.interfaces_json()),
                "/-/healthy": lambda _q: self._healthy(),
                "/-/ready": lambda _q: (
                    text(200, "ready\n") if self.health.started else text(503, "starting\n")
                ),
                "/": lambda _q: Response(
                    200, "text/html; charset=utf-8", render_status(self.status_data()).encode()
                ),
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
        logger.info("HTTP API on http://%s/api/sessions", listen)

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

    def status_data(self) -> dict[str, Any]:
        """Everything the status page shows."""
        ipx = self.ipx.counters
        relay = self.relay.counters
        inspector = self.directplay.inspector
        return {
            "version": __version__,
            "uptime": time.time() - self.started_at,
            "ipx_listen": self.config.ipx.listen,
            "clients": self.ipx.clients_json(),
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
