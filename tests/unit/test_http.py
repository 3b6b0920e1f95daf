"""The HTTP server on the event loop: routes, errors, and the health check's honesty."""

import asyncio
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ipxbridge.app import Bridge
from ipxbridge.config import load_config


def free_port(kind: socket.SocketKind) -> int:
    """A port on 127.0.0.1 free now: these bridges run in this namespace beside other test
    runs (the pure and the compiled build's, at once: scripts/test.sh)."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def quiet_bridge(tmp_path: Path, http_port: int) -> dict[str, object]:
    """A bridge's config on free ports of 127.0.0.1, without the browser players' listener."""
    return {
        "ipx": {
            "listen": f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}",
            "node_key_file": str(tmp_path / "node.key"),
        },
        "http": {"listen": f"127.0.0.1:{http_port}"},
        "websocket": {"listen": "off"},
    }


async def request(port: int, path: str) -> tuple[int, bytes]:
    """One GET on its own connection (HTTP/1.1 wants Host; close so read() ends)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_health_turns_503_when_the_loop_heartbeat_is_stale(tmp_path: Path) -> None:
    async def main() -> None:
        http_port = free_port(socket.SOCK_STREAM)
        config = load_config(None, {}, quiet_bridge(tmp_path, http_port))
        bridge = Bridge(config)
        await bridge.start()
        try:
            assert await request(http_port, "/-/healthy") == (200, b"ok\n")
            bridge.health.heartbeat -= 10  # as if the loop had been stuck for 10 s
            status, body = await request(http_port, "/-/healthy")
            assert status == 503
            assert b"heartbeat" in body
            status, body = await request(http_port, "/api/sessions")
            assert (status, json.loads(body)) == (200, [])
        finally:
            await bridge.stop()

    asyncio.run(main())


def test_blocked_loop_fails_the_health_check_then_recovers(tmp_path: Path) -> None:
    """The endpoint runs on the relay loop: while the loop is stuck, a checker times out."""
    http_port = free_port(socket.SOCK_STREAM)

    def probe(results: list[str]) -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/-/healthy", timeout=1) as r:
                results.append(str(r.status))
        except (urllib.error.URLError, TimeoutError) as exc:
            results.append(type(exc).__name__)

    async def main() -> None:
        config = load_config(None, {}, quiet_bridge(tmp_path, http_port))
        bridge = Bridge(config)
        await bridge.start()
        try:
            during: list[str] = []
            checker = threading.Thread(target=probe, args=(during,))
            checker.start()
            time.sleep(2.0)  # noqa: ASYNC251 - blocking the loop on purpose
            checker.join(5)
            assert len(during) == 1
            assert during[0] != "200", during
            after: list[str] = []
            checker = threading.Thread(target=probe, args=(after,))
            checker.start()
            await asyncio.to_thread(checker.join, 5)
            assert after == ["200"]
        finally:
            await bridge.stop()

    asyncio.run(main())


def test_start_up_logs_the_status_page_metrics_and_api_urls_and_each_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A newcomer finds the status page and /metrics in the log, not only the API."""
    caplog.set_level("INFO")

    async def main() -> None:
        port = free_port(socket.SOCK_STREAM)
        config = load_config(None, {}, quiet_bridge(tmp_path, port))
        bridge = Bridge(config)
        await bridge.start()
        try:
            (line,) = [r.getMessage() for r in caplog.records if "HTTP API on" in r.getMessage()]
            assert line == (
                f"status page on http://127.0.0.1:{port}/, metrics on http://127.0.0.1:{port}/metrics,"
                f" HTTP API on http://127.0.0.1:{port}/api/sessions"
            )
            for url in re.findall(rf"http://127\.0\.0\.1:{port}(\S*?)(?:,|$)", line):
                status, body = await request(port, url)
                assert (status, bool(body)) == (200, True), url
        finally:
            await bridge.stop()

    asyncio.run(main())
