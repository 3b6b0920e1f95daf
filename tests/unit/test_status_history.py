"""The live status page's history and API (docs/status-page.md): bounded rings, sampling,
per-client books, departures with why, ``/api/status`` shapes, and hostile names kept text."""

import asyncio
import json
import re
import socket
import uuid
from pathlib import Path
from typing import Any

from ipxbridge.app import Bridge
from ipxbridge.app.http import PAGE_CSP, STATIC_FILES, static_routes
from ipxbridge.config import load_config
from ipxbridge.obs.history import (
    MAX_DEPARTED,
    MAX_EVENTS,
    MAX_SERIES,
    MAX_SPARKLINES,
    OTHER,
    SPARK_PERIOD,
    SPARK_SLOTS,
    TRAFFIC_SLOTS,
    ClientBooks,
    EventLog,
    Ring,
    TrafficHistory,
    client_key,
)
from ipxbridge.policy.sessions import stale_after
from ipxbridge.policy.switch import IpxSwitch, SwitchSettings
from ipxbridge.wire import ipx
from ipxbridge.wire.directplay import EnumSessionsReply, SessionDesc, build_enum_sessions_reply

STATIC = Path(__file__).resolve().parents[2] / "ipxbridge" / "obs" / "static"


def test_ring_keeps_the_last_values_in_fixed_memory() -> None:
    ring = Ring(5)
    size = ring.nbytes
    assert size == 40
    for v in range(12):
        ring.push(v)
    assert ring.values() == [7, 8, 9, 10, 11]
    assert ring.last(2) == [10, 11]
    assert ring.nbytes == size  # never grows


def test_traffic_history_samples_deltas_and_is_bounded() -> None:
    history = TrafficHistory()
    assert history.due(0.0)
    assert not history.due(4.9)  # one slot per period
    assert history.due(5.0)
    forwarded = 0
    for i in range(TRAFFIC_SLOTS + 50):
        forwarded += i % 7
        drops = {f"reason{r}": i for r in range(MAX_SERIES + 10)}  # more reasons than series
        history.sample(1000.0 + i * 5, {"forwarded": forwarded}, {"drops": drops, "copies": {}})
    data = history.json()
    assert len(data["times"]) == TRAFFIC_SLOTS
    assert len(data["totals"]["forwarded"]) == TRAFFIC_SLOTS
    assert data["totals"]["forwarded"][-1] == (TRAFFIC_SLOTS + 49) % 7  # a delta, not a total
    assert len(history.families["drops"]) == MAX_SERIES + 1  # the rest fold into "other"
    assert OTHER in history.families["drops"]
    assert len(data["drops"]) == 4  # the top few only
    assert data["drops"][next(iter(data["drops"]))][-1] == 10 * 1  # "other" leads: 10 reasons
    # The documented cap: (3 totals + 2 families x (MAX_SERIES + 1)) rings + the time ring.
    assert history.nbytes <= (1 + 3 + 2 * (MAX_SERIES + 1)) * TRAFFIC_SLOTS * 8 <= 100 * 1024


def test_traffic_counter_reset_counts_zero_and_recent_sums_a_minute() -> None:
    history = TrafficHistory(slots=30, period=5.0)
    for i, total in enumerate([0, 10, 20, 5, 15]):
        history.sample(float(i), {"dropped": total}, {"drops": {}, "copies": {}})
    assert history.totals["dropped"].values() == [10, 10, 0, 10]
    assert history.recent("dropped", 60.0) == 30  # twelve 5 s slots cover all four
    assert history.recent("dropped", 5.0) == 10


def test_a_new_series_is_aligned_with_the_time_ring() -> None:
    history = TrafficHistory(slots=10)
    for i in range(4):
        history.sample(float(i), {"f": i}, {"drops": {"late": 3} if i == 3 else {}, "copies": {}})
    assert len(history.families["drops"]["late"].values()) == len(history.times.values()) == 3


def _row(port: int) -> dict[str, Any]:
    return {"kind": "dosbox", "address": f"10.0.0.9:{port}", "node": f"02:00:00:00:00:{port:02x}"}


def test_client_books_rates_sparklines_departures() -> None:
    books = ClientBooks()
    a, b = _row(1), _row(2)
    joined, left = books.update([(a, (0, 0, 0, 0)), (b, (0, 0, 0, 0))], 0.0, 100.0)
    assert [e.key for e in joined] == [client_key(a), client_key(b)]
    books.update([(a, (50, 5000, 10, 800)), (b, (0, 0, 0, 0))], SPARK_PERIOD, 105.0)
    entry = books.live[client_key(a)]
    assert entry.rates == (10.0, 1000.0, 2.0, 160.0)
    assert entry.spark_in is not None
    assert entry.spark_in.values() == [50]
    books.note_reason(client_key(b), "shutdown")
    joined, left = books.update([(a, (60, 6000, 10, 800))], SPARK_PERIOD + 1, 106.0)
    assert [(e.key, e.reason) for e in left] == [(client_key(b), "shutdown")]
    # Stable order: b keeps its place after a, marked gone.
    assert [(e.key, e.gone_at) for e in books.entries()] == [
        (client_key(a), None),
        (client_key(b), 106.0),
    ]
    # A station that goes silent, with no event: expired.
    station = {"kind": "ethernet", "interface": "eth0", "node": "00:a0:c9:12:34:56"}
    books.update([(a, None), (station, None)], 20.0, 120.0)
    _, left = books.update([(a, None)], 21.0, 121.0)
    assert [e.reason for e in left] == ["expired"]
    # Departed entries go after DEPARTED_SECONDS.
    books.update([(a, None)], 500.0, 600.0)
    assert list(books.departed) == []


def test_client_books_are_bounded() -> None:
    books = ClientBooks()
    rows: list[tuple[dict[str, Any], tuple[int, int, int, int] | None]] = [
        ({"kind": "dosbox", "address": f"10.1.{i // 250}.{i % 250}:1"}, (i, i, i, i))
        for i in range(400)
    ]
    books.update(rows, 0.0, 0.0)
    assert books.sparklines == MAX_SPARKLINES
    assert books.nbytes == MAX_SPARKLINES * 2 * SPARK_SLOTS * 8
    books.update([], 1.0, 1.0)  # everybody leaves at once
    assert len(books.departed) == MAX_DEPARTED
    assert books.sparklines <= MAX_DEPARTED
    for i in range(MAX_DEPARTED * 3):
        books.note_reason(f"k{i}", "evicted")
    assert len(books.reasons) <= MAX_DEPARTED


def test_event_log_keeps_the_newest() -> None:
    log = EventLog()
    for i in range(MAX_EVENTS + 10):
        log.add(float(i), "join", f"client {i} joined")
    items = log.json()
    assert len(items) == MAX_EVENTS
    assert items[0]["text"] == f"client {MAX_EVENTS + 9} joined"  # newest first


def test_stale_after() -> None:
    assert stale_after(60.0, 10.0) == 25.0
    assert stale_after(60.0, 0.0) == 30.0
    assert stale_after(20.0, 30.0) == 20.0


def test_client_counters_on_the_switch() -> None:
    switch = IpxSwitch(
        SwitchSettings(), node_for=lambda addr: bytes([2, 0, 0, 0, 0, addr[1] % 256])
    )
    a, b = ("10.0.0.1", 1001), ("10.0.0.2", 1002)
    for addr in (a, b):
        switch.handle(ipx.build_registration(), addr, 0.0)
    client = switch.clients[a]
    packet = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE, dst_socket=0x4545, src_node=client.node, src_socket=0x4545
    )
    switch.handle(packet, a, 1.0)
    switch.handle(packet, a, 2.0)
    assert (client.rx_packets, client.rx_bytes) == (2, 2 * len(packet))
    assert switch.clients[b].rx_packets == 0  # registered, sent nothing as a client yet


def _bridge(tmp_path: Path) -> tuple[Bridge, int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f'ipx:\n  listen: "127.0.0.1:{port}"\nhttp:\n  listen: "off"\n')
    return Bridge(load_config(cfg)), port


HOSTILE = "<script>alert(1)</script>\"'&"


def test_api_status_shape_and_hostile_names(tmp_path: Path) -> None:
    bridge, port = _bridge(tmp_path)

    async def run() -> dict[str, Any]:
        await bridge.ipx.start()
        try:
            loop = asyncio.get_running_loop()
            status = bridge.status
            status.tick(loop.time())
            endpoint = bridge.ipx.endpoint
            assert endpoint is not None
            switch = endpoint.switch
            now = loop.time()
            host = ("10.9.0.1", 40000)
            switch.handle(ipx.build_registration(), host, now)
            node = switch.clients[host].node
            desc = SessionDesc(0, uuid.uuid4(), uuid.uuid4(), 8, 2, (0, 0, 0, 0))
            reply = build_enum_sessions_reply(EnumSessionsReply(desc, HOSTILE), bare=True)
            bridge.directplay.inspector.inspect(
                memoryview(reply),
                transport="ipx",
                host=f"00000000.{node.hex()}:4002",
                source=("ipx", node),
                now=now,
            )
            switch.handle(ipx.build_registration(), ("10.9.0.2", 40001), now)
            status.tick(now + 1)
            switch.remove_client(("10.9.0.2", 40001), "evicted")
            endpoint._log_events()
            status.tick(now + 2)
            return status.status_json()
        finally:
            await bridge.ipx.stop()

    data = asyncio.run(run())
    json.dumps(data)  # all JSON
    assert set(data) >= {"version", "now", "sessions", "clients", "traffic", "events", "health"}
    (game,) = data["sessions"]
    assert game["name"] == HOSTILE  # JSON carries the name as is; the page sets it as text
    assert game["host_client"]["kind"] == "dosbox"
    assert game["host_client"]["address"] == "10.9.0.1:40000"
    assert set(game) >= {"game", "map", "players", "status", "open", "first_seen", "stale"}
    live, gone = data["clients"]
    assert live["gone"] is False
    assert live["address"] == "10.9.0.1:40000"
    assert set(live) >= {"kind", "address", "node", "connected_seconds", "rates", "totals"}
    assert gone["gone"] is True
    assert gone["reason"] == "evicted"
    kinds = [e["kind"] for e in data["events"]]
    assert "leave" in kinds
    assert "join" in kinds
    assert "game" in kinds
    assert any("left (evicted)" in e["text"] for e in data["events"])
    health = data["health"]
    assert health["ports"][0] == {"name": f"IPX tunnel udp 127.0.0.1:{port}", "up": True, "why": ""}
    assert health["fast_path"] is None  # no relay
    assert health["history_bytes"] < 200 * 1024


def test_page_files_never_put_data_into_markup() -> None:
    js = (STATIC / "status.js").read_text()
    # Data only goes in as text: no innerHTML/outerHTML/insertAdjacentHTML/document.write/eval.
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", js)
    html = (STATIC / "index.html").read_text()
    # Nothing inline (the CSP forbids it) and nothing from elsewhere.
    assert "<style" not in html
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/status.js" defer>']
    for text in (html, js, (STATIC / "status.css").read_text()):
        assert not re.search(r"(?:https?:)?//(?!www\.w3\.org/2000/svg)[a-z0-9.-]+\.[a-z]", text)


def test_page_routes_carry_a_strict_csp() -> None:
    routes = static_routes()
    assert set(STATIC_FILES) <= set(routes)
    for path in STATIC_FILES:
        response = routes[path]("")
        headers = dict(response.headers)
        assert headers["Content-Security-Policy"] == PAGE_CSP
        assert headers["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'none'" in PAGE_CSP
    assert "'unsafe-inline'" not in PAGE_CSP
    assert routes["/"]("").content_type.startswith("text/html")
