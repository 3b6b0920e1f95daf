"""The HTTP server (aiohttp on the bridge's loop) over real sockets on 127.0.0.1.

Requests are written as exact bytes and responses read by Content-Length, so keep-alive,
HEAD and the error paths are checked on the wire, not through a client library's view.
"""

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ipxbridge.obs import http
from ipxbridge.obs.http import HttpServer, Response, text

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
IN_CI = os.environ.get("CI", "").lower() == "true"

Head = dict[str, str]


def run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coro())


def req(method: str, target: str, *headers: str) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]
    return "\r\n".join(lines).encode()


@contextlib.asynccontextmanager
async def serving(
    routes: dict[str, http.Route], registry: CollectorRegistry | None = None
) -> AsyncIterator[HttpServer]:
    server = HttpServer(routes, registry)
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()


@contextlib.asynccontextmanager
async def connection(
    port: int,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def read_response(
    reader: asyncio.StreamReader, *, head: bool = False
) -> tuple[int, Head, bytes]:
    """One response; its body is Content-Length bytes, none after a HEAD."""
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status_line, *lines = raw.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)}
    length = 0 if head else int(headers.get("content-length", "0"))
    body = await asyncio.wait_for(reader.readexactly(length), 5)
    return int(status_line.split()[1]), headers, body


async def ask(port: int, raw: bytes, *, head: bool = False) -> tuple[int, Head, bytes]:
    """One request on a fresh connection."""
    async with connection(port) as (reader, writer):
        writer.write(raw)
        await writer.drain()
        return await read_response(reader, head=head)


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    with contextlib.suppress(ConnectionError):
        return await asyncio.wait_for(reader.read(1), 5) == b""
    return True


HELLO: dict[str, http.Route] = {"/hello": lambda q: text(200, f"hi {q}\n")}


def test_routes_404_405_head() -> None:
    async def main() -> None:
        async with serving(HELLO) as server:
            status, headers, body = await ask(server.port, req("GET", "/hello?x=1"))
            assert (status, body) == (200, b"hi x=1\n")
            assert headers["content-type"] == "text/plain; charset=utf-8"
            assert headers["cache-control"] == "no-store"
            status, _, body = await ask(server.port, req("GET", "/nope"))
            assert (status, body) == (404, b"no such page: /nope\n")
            status, headers, _ = await ask(server.port, req("POST", "/hello"))
            assert (status, headers["allow"]) == (405, "GET, HEAD")
            assert (await ask(server.port, req("DELETE", "/nope")))[0] == 405  # method first
            status, headers, _ = await ask(server.port, req("HEAD", "/hello"), head=True)
            assert (status, headers["content-length"]) == (200, "4")  # as GET's "hi \n"

    run(main)


def test_head_sends_no_body_bytes() -> None:
    """After HEAD's headers the next bytes on the connection are the next response."""

    async def main() -> None:
        async with serving(HELLO) as server, connection(server.port) as (reader, writer):
            writer.write(req("HEAD", "/hello?a") + req("GET", "/hello?b"))
            status, headers, _ = await read_response(reader, head=True)
            assert (status, headers["content-length"]) == (200, "5")  # len(b"hi a\n")
            assert (await read_response(reader))[::2] == (200, b"hi b\n")

    run(main)


def test_route_gets_the_raw_query_string() -> None:
    async def main() -> None:
        async with serving(HELLO) as server:
            _, _, body = await ask(server.port, req("GET", "/hello?name%5B%5D=a%20b&c"))
            assert body == b"hi name%5B%5D=a%20b&c\n"
            _, _, body = await ask(server.port, req("GET", "/hello"))
            assert body == b"hi \n"

    run(main)


@pytest.mark.parametrize(
    "raw",
    [
        b"garbage\r\n\r\n",
        b"GET /hel lo HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /hello HTTP/9.9\r\nHost: a\r\n\r\n",
        b"GET /hello HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host (RFC 9112 section 3.2)
        b"GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /hello HTTP/1.1\nHost: a\n\n",  # bare LF
        b"GET /hello HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
        b"GET /hello HTTP/1.1\r\nHost: a\r\nbad header\r\n\r\n",
        # both framings: the classic request-smuggling shape
        b"GET /hello HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: 3\r\n\r\n",
    ],
)
def test_malformed_request_is_400_and_closes(raw: bytes, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with serving(HELLO) as server, connection(server.port) as (reader, writer):
            writer.write(raw)
            assert (await read_response(reader))[0] == 400
            assert await closed_by_server(reader)
            assert (await ask(server.port, req("GET", "/hello")))[0] == 200  # still serving

    with caplog.at_level(logging.INFO):
        run(main)
    # the peer's garbage is no error of ours: nothing above DEBUG, no traceback
    assert [r for r in caplog.records if r.levelno > logging.DEBUG] == []


def test_http10_without_host_is_served_then_closed() -> None:
    async def main() -> None:
        async with serving(HELLO) as server, connection(server.port) as (reader, writer):
            writer.write(b"GET /hello?v=1.0 HTTP/1.0\r\n\r\n")
            assert (await read_response(reader))[::2] == (200, b"hi v=1.0\n")
            assert await closed_by_server(reader)

    run(main)


def test_two_requests_on_one_keep_alive_connection() -> None:
    async def main() -> None:
        async with serving(HELLO) as server, connection(server.port) as (reader, writer):
            writer.write(req("GET", "/hello?1"))
            status, headers, body = await read_response(reader)
            assert (status, body) == (200, b"hi 1\n")
            assert headers.get("connection", "").lower() != "close"
            writer.write(req("GET", "/hello?2", "Connection: close"))
            assert (await read_response(reader))[::2] == (200, b"hi 2\n")
            assert await closed_by_server(reader)

    run(main)


def test_pipelined_requests_are_answered_in_order() -> None:
    async def main() -> None:
        async with serving(HELLO) as server, connection(server.port) as (reader, writer):
            writer.write(req("GET", "/hello?a") + req("GET", "/nope") + req("GET", "/hello?c"))
            answers = [(await read_response(reader))[::2] for _ in range(3)]
            assert answers == [(200, b"hi a\n"), (404, b"no such page: /nope\n"), (200, b"hi c\n")]

    run(main)


@pytest.mark.parametrize(
    "extra",
    [
        [f"X-Big: {'a' * (http.MAX_FIELD_SIZE + 10)}"],
        [f"X-{i}: v" for i in range(http.MAX_HEADERS + 1)],
    ],
    ids=["long-header-line", "too-many-headers"],
)
def test_oversized_head_is_4xx_and_the_server_survives(extra: list[str]) -> None:
    async def main() -> None:
        async with serving(HELLO) as server, connection(server.port) as (reader, writer):
            writer.write(req("GET", "/hello", *extra))
            status, _, _ = await read_response(reader)
            assert 400 <= status < 500
            assert await closed_by_server(reader)
            assert (await ask(server.port, req("GET", "/hello")))[0] == 200

    run(main)


def test_long_request_line_is_4xx() -> None:
    async def main() -> None:
        async with serving(HELLO) as server:
            target = "/hello?" + "q" * http.MAX_LINE_SIZE
            status, _, _ = await ask(server.port, req("GET", target))
            assert 400 <= status < 500

    run(main)


def test_unread_body_closes_the_connection_after_the_response() -> None:
    """No route takes a body: it is not read, and the connection is not reused."""

    async def main() -> None:
        async with serving(HELLO) as server, connection(server.port) as (reader, writer):
            writer.write(req("GET", "/hello?b", "Content-Length: 100000") + b"x" * 10)
            assert (await read_response(reader))[::2] == (200, b"hi b\n")
            assert await closed_by_server(reader)

    run(main)


def test_incomplete_head_is_dropped_after_the_keepalive_timeout() -> None:
    """A client trickling a request head cannot hold a connection for long."""

    async def main() -> None:
        async with serving(HELLO) as server, connection(server.port) as (reader, writer):
            writer.write(b"GET /hello HTTP/1.1\r\nHost: a\r\n")  # never finished
            loop = asyncio.get_running_loop()
            began = loop.time()
            assert await asyncio.wait_for(reader.read(), http.KEEPALIVE_TIMEOUT + 3) == b""
            assert loop.time() - began < http.KEEPALIVE_TIMEOUT + 1.5

    run(main)


def test_route_errors_are_500_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken(_query: str) -> Response:
        raise RuntimeError("boom")

    async def main() -> None:
        async with serving({"/broken": broken, **HELLO}) as server:
            assert (await ask(server.port, req("GET", "/broken")))[::2] == (
                500,
                b"internal error\n",
            )
            assert (await ask(server.port, req("GET", "/hello")))[0] == 200

    run(main)
    assert any("HTTP route /broken failed" in r.getMessage() for r in caplog.records)


def test_routes_run_on_the_event_loop_thread() -> None:
    """So a stuck loop means no answer: the health check's honesty depends on it."""
    seen: list[int] = []

    def where(_query: str) -> Response:
        seen.append(threading.get_ident())
        return text(200, "ok\n")

    async def main() -> None:
        async with serving({"/where": where}) as server:
            await ask(server.port, req("GET", "/where"))

    run(main)
    assert seen == [threading.get_ident()]  # asyncio.run runs the loop in this thread


def test_start_raises_oserror_when_the_port_is_taken_and_close_is_idempotent() -> None:
    async def main() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            server = HttpServer(HELLO)
            with pytest.raises(OSError, match="address already in use"):
                await server.start("127.0.0.1", taken.getsockname()[1])
            with pytest.raises(RuntimeError):
                _ = server.port
            await server.close()
        async with serving(HELLO) as server:
            assert server.port > 0
        await server.close()

    run(main)


# ---- /metrics from a registry ----


def sample_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Info("ipxbridge_build", "Build.", registry=registry).info({"version": "1.2.3"})
    packets = Counter(
        "ipxbridge_test_packets", "Packets.", ["direction"], registry=registry
    )  # exposed as ipxbridge_test_packets_total
    packets.labels("rx").inc(3)
    packets.labels("tx").inc(2)
    Gauge("ipxbridge_test_peers", "Peers.", registry=registry).set(4)
    Histogram(
        "ipxbridge_test_duration_seconds", "Durations.", buckets=(0.001, 0.01), registry=registry
    ).observe(0.005)
    return registry


def test_metrics_text_format_by_default() -> None:
    async def main() -> None:
        async with serving(HELLO, sample_registry()) as server:
            status, headers, body = await ask(server.port, req("GET", "/metrics"))
            assert status == 200
            assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
            families = {f.name: f for f in parse_text(body.decode())}
            totals = {
                s.labels["direction"]: s.value
                for s in families["ipxbridge_test_packets"].samples
                if s.name == "ipxbridge_test_packets_total"
            }
            assert totals == {"rx": 3.0, "tx": 2.0}
            assert families["ipxbridge_test_peers"].samples[0].value == 4.0
            assert not body.rstrip().endswith(b"# EOF")

    run(main)


def test_metrics_openmetrics_when_asked() -> None:
    async def main() -> None:
        async with serving(HELLO, sample_registry()) as server:
            status, headers, body = await ask(
                server.port, req("GET", "/metrics", f"Accept: {OPENMETRICS}")
            )
            assert status == 200
            assert headers["content-type"].startswith(OPENMETRICS)
            assert body.endswith(b"# EOF\n")
            # the OpenMetrics parser has no annotations
            families = {f.name: f for f in parse_openmetrics(body.decode())}  # type: ignore[no-untyped-call]
            assert families["ipxbridge_test_packets"].type == "counter"
            assert families["ipxbridge_build"].type == "info"
            assert families["ipxbridge_test_duration_seconds"].type == "histogram"

    run(main)


def test_metrics_prometheus_accept_header_and_junk_versions() -> None:
    """Prometheus lists OpenMetrics first; an unparsable version falls back to text."""
    prometheus = (
        "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5,"
        "application/openmetrics-text;version=0.0.1;q=0.4,"
        "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    )

    async def main() -> None:
        async with serving(HELLO, sample_registry()) as server:
            _, headers, body = await ask(
                server.port, req("GET", "/metrics", f"Accept: {prometheus}")
            )
            assert headers["content-type"].startswith("application/openmetrics-text")
            assert body.endswith(b"# EOF\n")
            for junk in ("application/openmetrics-text; version=abc", "text/plain;version=x"):
                status, headers, _ = await ask(
                    server.port, req("GET", "/metrics", f"Accept: {junk}")
                )
                assert status == 200
                assert headers["content-type"].startswith("text/plain; version=0.0.4")

    run(main)


def test_metrics_name_filter_and_head() -> None:
    async def main() -> None:
        async with serving(HELLO, sample_registry()) as server:
            target = "/metrics?name[]=ipxbridge_test_peers&name%5B%5D=ipxbridge_build_info"
            _, _, body = await ask(server.port, req("GET", target))
            names = {s.name for f in parse_text(body.decode()) for s in f.samples}
            assert names == {"ipxbridge_test_peers", "ipxbridge_build_info"}
            status, headers, _ = await ask(server.port, req("HEAD", "/metrics"), head=True)
            assert status == 200
            assert int(headers["content-length"]) > 0

    run(main)


def test_metrics_route_and_registry_cannot_both_be_given() -> None:
    with pytest.raises(ValueError, match="/metrics"):
        HttpServer({"/metrics": lambda _q: text(200, "")}, CollectorRegistry())


def test_metrics_route_without_registry_is_an_ordinary_route() -> None:
    """What app.py does until it passes its registry."""

    async def main() -> None:
        async with serving({"/metrics": lambda q: text(200, f"own {q}\n")}) as server:
            assert (await ask(server.port, req("GET", "/metrics?x")))[2] == b"own x\n"

    run(main)


def test_metrics_text_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if IN_CI:
            pytest.fail("promtool is not installed; CI must run this check")
        pytest.skip("promtool is not installed")
    body = b""

    async def main() -> None:
        nonlocal body
        async with serving(HELLO, sample_registry()) as server:
            _, _, body = await ask(server.port, req("GET", "/metrics"))

    run(main)
    check = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, timeout=30, check=False
    )
    assert check.returncode == 0, (check.stdout + check.stderr).decode()
