"""Browser players behind a reverse proxy: nginx from Debian in front of two bridges.

docs/ipx.md, "Many bridges behind one proxy": rooms are independent IPX networks, so nginx
sends each room to one bridge (``hash $request_uri consistent``); every player of a room
lands on the same bridge and they hear each other, and the rooms are spread over both. Each
bridge lists nginx in ``websocket.trusted_proxies``, so it sees each player's own address
(``X-Forwarded-For``), not the proxy's.

The players are WebSocket clients that behave as js-dos does (register with the first
message, docs/protocols.md 4.10); js-dos itself is driven in test_browser_players.py.

Topology::

    players (10.63.0.11) --- proxy (nginx :1900) --- b1 (bridge, 10.63.1.2)
                                                 \\-- b2 (bridge, 10.63.2.2)
"""

import asyncio
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from scripts.harness import BridgeProcess, LoggedProcess, Netns, bridge_get, inside
from tests.integration.conftest import require
from tests.integration.test_websocket_bounds import REGISTRATION, broadcast

NGINX_CONF = """\
worker_processes 1;
pid {work}/nginx.pid;
error_log stderr notice;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    upstream ipxbridges {{
        hash $request_uri consistent;
        server 10.63.1.2:1900;
        server 10.63.2.2:1900;
    }}
    server {{
        listen 10.63.0.1:1900;
        location /ipx/ {{
            proxy_pass http://ipxbridges;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 1h;
        }}
    }}
}}
"""


class Nginx(LoggedProcess):
    """Debian's nginx in the foreground, in a namespace, on a configuration of the test's."""

    name = "nginx"

    def __init__(self, net: Netns, ns: str, work: Path) -> None:
        conf = work / "nginx.conf"
        conf.write_text(NGINX_CONF.format(work=work))
        command = ["nginx", "-t", "-c", str(conf), "-g", "daemon off;"]
        checked = subprocess.run(
            net.exec_args(ns, *command), capture_output=True, text=True, timeout=30, check=False
        )
        assert checked.returncode == 0, checked.stderr
        self._start(net.exec_args(ns, *command[:1], *command[2:]), work / "nginx.log")
        self.wait_for(r"start worker process", 15)  # listening by then


@pytest.fixture
def proxied(net: Netns, workdir: Path) -> Iterator[tuple[Netns, str, str, str]]:
    """nginx and two bridges; yields (net, players, b1, b2)."""
    require("nginx")
    players, proxy, b1, b2 = (net.add(n) for n in ("players", "proxy", "b1", "b2"))
    net.link(proxy, "front", "10.63.0.1/24", players, "eth0", "10.63.0.11/24")
    net.link(proxy, "to1", "10.63.1.1/24", b1, "eth0", "10.63.1.2/24")
    net.link(proxy, "to2", "10.63.2.1/24", b2, "eth0", "10.63.2.2/24")
    started: list[LoggedProcess] = []
    try:
        for ns, proxy_ip in ((b1, "10.63.1.1"), (b2, "10.63.2.1")):
            config = workdir / f"{ns}.yaml"
            config.write_text(
                json.dumps(
                    {
                        "ipx": {"listen": "0.0.0.0:213"},
                        "websocket": {"trusted_proxies": [f"{proxy_ip}/32"]},
                    }
                )
            )
            started.append(
                BridgeProcess(net, ns, "--config", str(config), log_dir=workdir, ready="browser")
            )
        nginx_work = workdir / "nginx"
        nginx_work.mkdir()
        started.append(Nginx(net, proxy, nginx_work))
        yield net, players, b1, b2
    finally:
        for process in reversed(started):
            process.stop()


async def _play(rooms: list[str], ask: Callable[[], None]) -> list[list[bytes]]:
    """Three players in the first room and one in each other room, through nginx; each of
    the three broadcasts once. Returns what each of the three heard; ``ask`` runs (in a
    thread) while every player is connected."""
    async with aiohttp.ClientSession() as session:
        players: list[tuple[aiohttp.ClientWebSocketResponse, bytes]] = []
        for room in [rooms[0], rooms[0], *rooms]:
            ws = await session.ws_connect(f"ws://10.63.0.1:1900/ipx/{room}")
            await ws.send_bytes(REGISTRATION)
            reply = await asyncio.wait_for(ws.receive(), 5)
            players.append((ws, reply.data[10:16]))
        three = players[:3]
        for n, (ws, node) in enumerate(three):
            await ws.send_bytes(broadcast(node, f"PLAYER{n}".encode()))
        heard = []
        for ws, _ in three:
            got = [(await asyncio.wait_for(ws.receive(), 5)).data[30:] for _ in range(2)]
            heard.append(sorted(got))
        await asyncio.get_running_loop().run_in_executor(None, ask)
        for ws, _ in players:
            await ws.close()
        return heard


@pytest.mark.netns
def test_each_room_on_one_bridge_and_rooms_on_both(
    proxied: tuple[Netns, str, str, str],
) -> None:
    """12 rooms through nginx: each room's players on one bridge, hearing each other; the
    rooms on both bridges; the players' own address on the bridges, not nginx's."""
    _, players, b1, b2 = proxied
    rooms = [f"room{n}" for n in range(12)]
    seen: dict[str, list[dict[str, Any]]] = {}

    def ask() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for ns in (b1, b2):
                listed = json.loads(bridge_get(ns, "/api/clients"))
                seen[ns] = [c for c in listed if c["kind"] == "browser"]
            if sum(len(v) for v in seen.values()) == len(rooms) + 2:
                return
            time.sleep(0.1)

    with inside(players):
        heard = asyncio.run(_play(rooms, ask))
    assert heard == [
        [b"PLAYER1", b"PLAYER2"],
        [b"PLAYER0", b"PLAYER2"],
        [b"PLAYER0", b"PLAYER1"],
    ]
    assert sum(len(v) for v in seen.values()) == len(rooms) + 2, seen
    on = {ns: {c["room"] for c in seen[ns]} for ns in (b1, b2)}
    assert on[b1], on  # both bridges carry rooms
    assert on[b2], on
    assert not on[b1] & on[b2], on  # and no room is split between them
    assert sorted(on[b1] | on[b2]) == sorted(rooms)
    assert {c["address"].split(":")[0] for v in seen.values() for c in v} == {"10.63.0.11"}
