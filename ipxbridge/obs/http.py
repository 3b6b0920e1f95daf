"""HTTP/1.1 for the bridge's routes, served by aiohttp's low-level server on the bridge's loop.

Contract:

- Routes are exact paths. A route is a plain function of the raw query string and runs on
  the relay loop on purpose (docs/architecture.md B1): if the loop is stuck, nothing answers, and a
  health checker times out. Nothing here moves work to a thread.
- GET and HEAD only: any other method gets 405 (with ``Allow``), an unknown path 404, a
  request aiohttp cannot parse (or with a header line over ``MAX_FIELD_SIZE``) a 4xx, after
  which the connection is closed. A route that raises gets 500 and is logged.
- Connections are kept alive per HTTP/1.1. One that is idle, or whose next request head is
  not complete, for ``KEEPALIVE_TIMEOUT`` is closed, so slow clients cannot pile up.
- No route takes a body. Bodies are never read; a connection that sent one is closed after
  its response instead of draining it.
- With a ``registry``, ``/metrics`` is served from it by prometheus-client's own encoders:
  OpenMetrics when the Accept header asks for it, the text format 0.0.4 otherwise, and
  ``?name[]=`` restricts the output to the named series.

``start`` may raise OSError (address in use, not available, permission); nothing else in
this module is expected to raise to the caller.
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qs

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import RawRequestMessage
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

logger = logging.getLogger(__name__)

# Limits on what a client may send. A browser's head is well under 2 KiB; 8190 per line is
# aiohttp's (and about nginx's) default and leaves room for localhost cookies of other apps.
MAX_LINE_SIZE: Final = 8190  # request line, query string included
MAX_FIELD_SIZE: Final = 8190  # one header line
MAX_HEADERS: Final = 32
MAX_BODY: Final = 1024  # no route reads a body; the cap is there in case one ever does
# Bounds an idle connection and the time to send a complete request head. Short: a scrape
# or a status-page refresh reconnects cheaply, and a stuck peer frees its socket soon.
KEEPALIVE_TIMEOUT: Final = 2.0
SHUTDOWN_TIMEOUT: Final = 2.0  # close() waits this long for requests in flight
METRICS_PATH: Final = "/metrics"
ALLOWED_METHODS: Final = frozenset({hdrs.METH_GET, hdrs.METH_HEAD})


@dataclass(frozen=True, slots=True)
class Response:
    """What a route returns."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()  # extra headers (the status page's CSP)


Route = Callable[[str], Response]  # receives the raw (still percent-encoded) query string


def text(status: int, body: str) -> Response:
    """A plain-text response."""
    return Response(status, "text/plain; charset=utf-8", body.encode())


class _PeerErrorsAtDebug(logging.Filter):
    """Keep requests that aiohttp could not parse out of the log unless DEBUG is on.

    aiohttp logs each one at ERROR with a traceback; they come from the peer, not from a
    bug here, so a scanner or a flood of garbage would otherwise flood the log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info = record.exc_text = None
            return logger.isEnabledFor(logging.DEBUG)
        return True


_protocol_logger = logging.getLogger(f"{__name__}.protocol")
_protocol_logger.addFilter(_PeerErrorsAtDebug())


class HttpServer:
    """Serves ``routes`` (exact paths), and ``/metrics`` from ``registry`` if one is given."""

    def __init__(self, routes: dict[str, Route], registry: CollectorRegistry | None = None) -> None:
        if registry is not None and METRICS_PATH in routes:
            raise ValueError(f"{METRICS_PATH} given both as a route and by a registry")
        self.routes = routes
        self.registry = registry
        self._runner: web.ServerRunner | None = None

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host``:``port`` (0 picks a free port, see ``port``).

        Raises:
            OSError: the address cannot be bound.
        """
        server = web.Server(
            self._handle,
            request_factory=self._make_request,
            max_line_size=MAX_LINE_SIZE,
            max_field_size=MAX_FIELD_SIZE,
            max_headers=MAX_HEADERS,
            keepalive_timeout=KEEPALIVE_TIMEOUT,
            lingering_time=0,  # close a connection with an unread body, do not drain it
            access_log=None,  # one line per scrape would drown the bridge's own log
            logger=_protocol_logger,
        )
        runner = web.ServerRunner(server, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        if self._runner is None:
            raise RuntimeError("HttpServer.port before start()")
        return int(self._runner.addresses[0][1])

    async def close(self) -> None:
        """Stop listening, close idle connections, give requests in flight a moment."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @staticmethod
    def _make_request(
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: "asyncio.Task[None]",
    ) -> web.BaseRequest:
        # aiohttp's own factory, but with a small body cap instead of its 1 MiB default.
        loop = asyncio.get_running_loop()
        return web.BaseRequest(
            message, payload, protocol, writer, task, loop, client_max_size=MAX_BODY
        )

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method not in ALLOWED_METHODS:
            return _reply(text(405, "only GET and HEAD\n"), {hdrs.ALLOW: "GET, HEAD"})
        path = request.rel_url.raw_path
        query = request.rel_url.raw_query_string
        try:
            if path == METRICS_PATH and self.registry is not None:
                response = self._metrics(self.registry, request.headers.get(hdrs.ACCEPT, ""), query)
            elif (route := self.routes.get(path)) is not None:
                response = route(query)
            else:
                response = text(404, f"no such page: {path}\n")
        except Exception:
            logger.exception("HTTP route %s failed", path)
            response = text(500, "internal error\n")
        return _reply(response)

    @staticmethod
    def _metrics(registry: CollectorRegistry, accept: str, query: str) -> Response:
        try:
            encoder, content_type = choose_encoder(accept)
        except (TypeError, ValueError):  # e.g. "version=abc": answer as if nothing was asked
            encoder, content_type = choose_encoder("")
        names = parse_qs(query).get("name[]")
        return Response(
            200, content_type, encoder(registry.restricted_registry(names) if names else registry)
        )


def _reply(response: Response, extra: dict[str, str] | None = None) -> web.Response:
    # Content-Type goes in as a header: aiohttp's content_type= refuses a charset parameter.
    headers: dict[str, str] = {
        hdrs.CONTENT_TYPE: response.content_type,
        hdrs.CACHE_CONTROL: "no-store",
        **dict(response.headers),
    }
    return web.Response(status=response.status, body=response.body, headers=headers | (extra or {}))
