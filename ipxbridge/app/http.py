"""The HTTP service: the JSON API, the status page, health endpoints and /metrics."""

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from ipxbridge import __version__
from ipxbridge.app.directplay import DirectPlayService
from ipxbridge.app.ipx import IpxService
from ipxbridge.app.relay import RelayService
from ipxbridge.app.service import Health
from ipxbridge.config import Config, parse_host_port
from ipxbridge.errors import StartupError
from ipxbridge.io.segments import EthernetPort
from ipxbridge.obs.http import METRICS_PATH, HttpServer, Response, text
from ipxbridge.obs.status import render_status
from ipxbridge.policy.ipx_ports import PortPlan, Skipped
from ipxbridge.policy.switch import IpxSwitch, PortKind, Segment

logger = logging.getLogger(__name__)


def json_response(data: Any) -> Response:  # noqa: ANN401 - any JSON value
    """A JSON HTTP response."""
    return Response(200, "application/json", (json.dumps(data, indent=1) + "\n").encode())


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
        endpoint = self.ipx.endpoint
        framings: dict[Segment, list[str]] = {}
        if endpoint is not None:
            for segment, port in endpoint.segments.items():
                if isinstance(port, EthernetPort) and port.fixed is None and len(port.framings):
                    framings[segment] = [str(f) for f in port.framings.in_use()]
        switch = endpoint.switch if endpoint is not None else None
        return ipx_port_rows(self.ipx.plans, self.ipx.skipped, switch, framings)

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
