"""A small HTTP/1.1 server on the bridge's own event loop.

It runs on the relay loop on purpose (house style B1): if the loop is stuck, the health
check stops answering. GET and HEAD only; one request per connection; bounded request size
and time, so a slow or hostile client cannot hold resources.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

logger = logging.getLogger(__name__)

MAX_REQUEST: Final = 8192
REQUEST_TIMEOUT: Final = 5.0
REASONS: Final = {
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    400: "Bad Request",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class Response:
    """What a route returns."""

    status: int
    content_type: str
    body: bytes


Route = Callable[[str], Response]  # receives the query string


def text(status: int, body: str) -> Response:
    """A plain-text response."""
    return Response(status, "text/plain; charset=utf-8", body.encode())


class HttpServer:
    """Serves ``routes`` (exact paths) on one TCP address."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        """Listen. Raises OSError when the address cannot be bound."""
        self._server = await asyncio.start_server(self._handle, host, port)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None  # noqa: S101 - only after start()
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            except (
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
                TimeoutError,
                ConnectionError,
            ):
                return
            if len(head) > MAX_REQUEST:
                await self._send(writer, text(400, "request too large\n"), head_only=False)
                return
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) != 3:
                await self._send(writer, text(400, "bad request line\n"), head_only=False)
                return
            method, target, _version = parts
            if method not in ("GET", "HEAD"):
                await self._send(writer, text(405, "only GET\n"), head_only=False)
                return
            path, _, query = target.partition("?")
            route = self.routes.get(path)
            if route is None:
                response = text(404, f"no such page: {path}\n")
            else:
                try:
                    response = route(query)
                except Exception:
                    logger.exception("HTTP route %s failed", path)
                    response = text(500, "internal error\n")
            await self._send(writer, response, head_only=method == "HEAD")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, response: Response, *, head_only: bool) -> None:
        reason = REASONS.get(response.status, "Error")
        header = (
            f"HTTP/1.1 {response.status} {reason}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
        ).encode()
        writer.write(header if head_only else header + response.body)
        with contextlib.suppress(ConnectionError, TimeoutError):
            await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT)
