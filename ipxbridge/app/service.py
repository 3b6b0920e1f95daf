"""What every feature service offers the ``Bridge``, and the loop's heartbeat."""

from dataclasses import dataclass
from typing import Final, Protocol

from ipxbridge.config import Config

TICK_SECONDS: Final = 1.0


class Service(Protocol):
    """One feature of the bridge (IPX switch, broadcast relay, DirectPlay, HTTP).

    The Bridge starts the services in order and stops them in reverse, calls ``tick`` once
    a second with the loop's clock (policy code never reads a clock itself), and hands each
    a reload that is already validated. A service that its configuration turns off starts
    nothing and reports itself disabled in its snapshot.
    """

    async def start(self) -> None:
        """Open sockets and tasks; raises ``StartupError`` with a one-line reason."""

    async def stop(self) -> None:
        """Close everything it opened and log its accounting summary."""

    def reconfigure(self, config: Config) -> None:
        """Apply what can change live (restart-only settings are already kept as running)."""

    def tick(self, now: float) -> None:
        """Timers: expiry, refreshes, probes (``now`` is the loop's monotonic clock)."""

    def snapshot(self) -> object:
        """Its numbers for /metrics and the API, taken at call time."""


@dataclass(slots=True)
class Health:
    """Readiness and liveness as the HTTP health endpoints report them.

    ``heartbeat`` is stamped by the tick; a stale one means the event loop is stuck (a
    handler that runs on that loop cannot notice, so it is judged by age).
    """

    started: bool = False
    heartbeat: float = 0.0

    def stale_for(self, now: float) -> float | None:
        """Seconds the heartbeat is overdue by more than three ticks, else None."""
        age = now - self.heartbeat
        return age if age > 3 * TICK_SECONDS else None
