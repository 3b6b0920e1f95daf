"""Log setup: readable text by default, one JSON object per line with ``--log-format json``."""

import json
import logging
import sys
import time
from typing import Final

from ipxbridge.policy.bucket import TokenBucket

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        """Render the record as a JSON line."""
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup_logging(level: str, fmt: str) -> None:
    """Configure the root logger once; safe to call again (e.g. on reload)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


class RateLimiter:
    """Token bucket for log lines: at most ``burst`` at once, ``rate`` per second after.

    Keeps a flood of registrations or malformed packets from flooding the log
    (docs/reliability.md R3: logs at most about one line per second per reason).
    """

    __slots__ = ("_bucket", "suppressed")

    def __init__(self, rate: float = 1.0, burst: int = 10) -> None:
        self._bucket = TokenBucket(rate, burst)
        self.suppressed = 0

    def allow(self, now: float) -> bool:
        """Take a token if one is available; count the line as suppressed otherwise."""
        if self._bucket.take(now):
            return True
        self.suppressed += 1
        return False


# Kernel drops at a socket are watched each tick and said at most once per this many seconds,
# with the count since the last line: a number an operator can act on, never a line per tick
# under a flood.
DROP_LOG_SECONDS: Final = 600.0


class DropWatch:
    """A socket's kernel drop count (receive buffer full), read each tick: what to log.

    The count only grows while the socket lives. Drops not said because of the rate limit
    are carried into the next line, so the lines add up to the count.
    """

    __slots__ = ("_last", "_limit", "_unsaid")

    def __init__(self, seconds: float = DROP_LOG_SECONDS) -> None:
        self._last = 0
        self._unsaid = 0
        self._limit = RateLimiter(rate=1 / seconds, burst=1)

    def update(self, total: int, now: float) -> int:
        """Take the count at ``now``; the drops to say in a line now (0: say nothing)."""
        new, self._last = total - self._last, total
        self._unsaid += max(0, new)
        # Held drops are said once the interval is over, even if none came since.
        if not self._unsaid or not self._limit.allow(now):
            return 0
        said, self._unsaid = self._unsaid, 0
        return said
