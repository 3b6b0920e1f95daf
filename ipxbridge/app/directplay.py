"""The DirectPlay service: the inspector, the live game list and the prober."""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ipxbridge.config import Config
from ipxbridge.games import game_table
from ipxbridge.io.interfaces import select_ipv4
from ipxbridge.io.probe import DirectPlayProber, dp4_probe
from ipxbridge.obs.metrics import DirectPlaySnapshot
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.reassembly import Reassembler
from ipxbridge.policy.sessions import SessionTable, session_json

logger = logging.getLogger(__name__)


class DirectPlayService:
    """Owns the inspector every other path feeds, and probes for sessions when asked to.

    The IPX and relay services are built with ``inspector``; ``probe_ipx`` is set by the
    Bridge when the IPX tunnel runs, so a probe round also reaches the IPX clients.
    """

    def __init__(self, config: Config) -> None:
        dp = config.directplay
        self.config = config
        self.sessions = SessionTable(game_table(dp.games), dp.session_expiry, dp.max_sessions)
        self.inspector = Inspector(self.sessions, Reassembler())
        self.prober: DirectPlayProber | None = None
        self.probe_ipx: Callable[[bytes], object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_probe = 0.0
        self._started = False

    def _now(self) -> float:
        return self._loop.time() if self._loop is not None else 0.0

    async def start(self) -> None:
        """Start the prober when ``directplay.probe_interval`` is set."""
        self._loop = asyncio.get_running_loop()
        dp = self.config.directplay
        if dp.probe_interval > 0:
            self.prober = DirectPlayProber(
                self._loop,
                self.inspector,
                lambda: select_ipv4(self.config.directplay.probe_interfaces),
            )
            await self.prober.start()
            logger.info(
                "DirectPlay probing every %gs (replies on tcp %d)",
                dp.probe_interval,
                self.prober.tcp_port,
            )
        self._started = True

    async def stop(self) -> None:
        """Close the prober and log what was inspected."""
        if self.prober is not None:
            await self.prober.close()
        if not self._started:
            return
        seen = ", ".join(
            f"dp{v}/{name}={n}" for (v, name), n in sorted(self.inspector.messages.items())
        )
        errors = ", ".join(f"{k}={n}" for k, n in sorted(self.inspector.errors.items()))
        logger.info(
            "DirectPlay: %s; malformed: %s; sessions listed now: %d",
            seen or "none",
            errors or "none",
            len(self.sessions),
        )

    def reconfigure(self, config: Config) -> None:
        """Game table, session expiry and limits, probe interfaces: all live."""
        dp = config.directplay
        self.config = config
        self.sessions.expiry = dp.session_expiry
        self.sessions.max_sessions = dp.max_sessions
        self.sessions.games = game_table(dp.games)

    def tick(self, now: float) -> None:
        """Expire sessions and reassembly state; probe when a round is due."""
        self.inspector.tick(now)
        interval = self.config.directplay.probe_interval
        if interval > 0 and now >= self._next_probe:
            self._next_probe = now + interval
            self.probe_once()

    def probe_once(self) -> None:
        """One probe round: UDP on the selected interfaces, and the IPX clients."""
        if self.prober is not None:
            self.prober.probe()
            if self.probe_ipx is not None and self.config.directplay.probe_ipx:
                self.probe_ipx(dp4_probe(0, bare=True))

    def snapshot(self) -> DirectPlaySnapshot:
        """Messages and malformed payloads seen; live sessions and players by game."""
        now = self._now()
        return DirectPlaySnapshot(
            messages=dict(self.inspector.messages),
            errors=dict(self.inspector.errors),
            sessions=dict(self.sessions.sessions_by_game_and_open(now)),
            players={g: n for g, (_c, n) in self.sessions.players_by_game(now).items()},
        )

    def sessions_json(self) -> list[dict[str, Any]]:
        """The live game list, as ``GET /api/sessions`` returns it."""
        now = self._now()
        wall = time.time()
        return [session_json(s, now, wall) for s in self.sessions.snapshot(now)]
