"""The thin ``Bridge``: builds the feature services, ticks them, fans a reload out, serves."""

import asyncio
import gc
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import replace

from ipxbridge.app.directplay import DirectPlayService
from ipxbridge.app.http import HttpService
from ipxbridge.app.ipx import IpxService
from ipxbridge.app.relay import RelayService
from ipxbridge.app.reload import keep_restart_only, restart_only_changes
from ipxbridge.app.service import TICK_SECONDS, Health, Service
from ipxbridge.app.status import StatusService
from ipxbridge.app.websocket import WEBSOCKET_PORTS_OPEN, WebSocketService
from ipxbridge.config import Config, ConfigError
from ipxbridge.errors import StartupError
from ipxbridge.obs.logging import setup_logging
from ipxbridge.obs.metrics import BridgeSnapshot, make_registry

logger = logging.getLogger(__name__)


class Bridge:
    """The running appliance: its services, one clock tick, reloads."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.health = Health()
        self.reload_ok = True
        self.reload_success_at = time.time()
        # The inspector belongs to the DirectPlay service; the IPX and relay paths feed it.
        self.directplay = DirectPlayService(config)
        self.ipx = IpxService(config, self.directplay.inspector)
        self.relay = RelayService(config, self.directplay.inspector)
        self.directplay.probe_ipx = self.ipx.probe
        # Browser players: rooms, one of them the IPX service's own network.
        self.websocket = WebSocketService(config, self.ipx, self.directplay.inspector)
        self.status = StatusService(
            config,
            directplay=self.directplay,
            ipx=self.ipx,
            relay=self.relay,
            websocket=self.websocket,
        )
        self.http = HttpService(
            config,
            self.health,
            make_registry(self.snapshot),
            directplay=self.directplay,
            ipx=self.ipx,
            relay=self.relay,
            status=self.status,
            websocket=self.websocket,
        )
        # Start order. The relay goes first: it removes a table an earlier run left in the
        # kernel before any service says the bridge is up (docs/reliability.md R18). Stopped in
        # reverse, so the DirectPlay summary is the last line. The status page's history
        # ticks last, after the services it samples.
        self.services: tuple[Service, ...] = (
            self.relay,
            self.ipx,
            self.websocket,
            self.http,
            self.directplay,
            self.status,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        """Start every service, then the tick.

        Raises:
            StartupError: nothing is configured to run, or a service cannot start.
        """
        cfg = self.config
        idle = (
            cfg.ipx.listen == "off"
            and cfg.websocket.listen == "off"
            and cfg.directplay.probe_interval == 0
        )
        if idle and not cfg.relay.interfaces:
            raise StartupError(
                "nothing to run: the IPX tunnel is off (--ipx-listen off), so is the "
                "listener for browser players (--ws-listen off), no relay interface is given "
                "(--iface) and probing is off"
            )
        self._loop = asyncio.get_running_loop()
        for service in self.services:
            await service.start()
        self.health.heartbeat = self._loop.time()
        self._timer = self._loop.call_later(TICK_SECONDS, self._tick)
        self.health.started = True
        # One line that means "all of it": each service logs its own start, in order, and a
        # supervisor or a test waiting for one of those lines may otherwise act before the
        # services after it (the HTTP endpoints) are listening.
        logger.info("started: every service is up (/-/ready answers 200)")

    async def stop(self) -> None:
        """Stop the tick, then every service in reverse order (each logs its books)."""
        if self._timer is not None:
            self._timer.cancel()
        for service in reversed(self.services):
            await service.stop()

    def _tick(self) -> None:
        assert self._loop is not None  # noqa: S101 - scheduled by start()
        now = self._loop.time()
        self.health.heartbeat = now
        try:
            for service in self.services:
                try:
                    service.tick(now)
                except Exception:  # one service's bug must not stop the others' timers
                    logger.exception("%s tick failed", type(service).__name__)
        finally:
            self._timer = self._loop.call_later(TICK_SECONDS, self._tick)

    def snapshot(self) -> BridgeSnapshot:
        """Every service's numbers, for one /metrics scrape."""
        ipx = self.ipx.snapshot()
        websocket = self.websocket.snapshot()
        if websocket.enabled:
            ipx = replace(ipx, websocket_ports=WEBSOCKET_PORTS_OPEN)
        return BridgeSnapshot(
            ipx,
            self.relay.snapshot(),
            self.directplay.snapshot(),
            self.reload_ok,
            self.reload_success_at,
            websocket,
        )

    def reload(self, load: Callable[[], Config]) -> None:
        """SIGHUP: validate the new configuration first, then hand it to every service.

        An invalid file changes nothing: every error is logged and the old configuration
        stays in force. Restart-only settings are reported and keep their running values.
        """
        errors: list[str] = []
        try:
            new = load()
        except ConfigError as exc:
            errors = exc.errors
        except Exception:
            self.reload_ok = False
            logger.exception("reload failed; keeping the running configuration")
            return
        if errors:
            self.reload_ok = False
            for line in errors:
                logger.error("reload rejected: %s", line)
            logger.error("reload rejected: keeping the running configuration")
            return
        pending = restart_only_changes(self.config, new)
        if pending:
            logger.warning(
                "reload: these settings need a restart and keep their running values: %s",
                ", ".join(pending),
            )
        self.config = new = keep_restart_only(self.config, new)
        setup_logging(new.logging.level, new.logging.format)
        for service in self.services:
            service.reconfigure(new)
        self.reload_ok = True
        self.reload_success_at = time.time()
        logger.info("configuration reloaded")


async def serve(config: Config, reload: Callable[[], Config] | None = None) -> int:
    """Run the bridge until SIGTERM or SIGINT; SIGHUP reloads; returns the exit code."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    bridge = Bridge(config)
    if reload is not None:
        loop.add_signal_handler(signal.SIGHUP, bridge.reload, reload)
    try:
        await bridge.start()
        # Everything built so far (modules, config, tables) lives until exit: keep it out of
        # the garbage collector's full passes, which otherwise stall the loop for tens of ms
        # under a flood (R13's 50 ms p99 budget).
        gc.freeze()
        await stopping.wait()
    finally:
        await bridge.stop()
    return 0
