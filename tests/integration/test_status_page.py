"""The live status page in a real browser, against a bridge carrying real traffic.

Headless Chromium (Debian's) runs in the bridge's namespace and is driven over the DevTools
protocol on a pipe (scripts/cdp.py). It checks what a LAN-party host sees: the page
updates in place (a token set in the page survives while the numbers change), a client that
sends a shutdown is shown as gone with why, a game appears within a probe interval, hostile
names stay text, nothing is fetched from anywhere but the bridge, and the console is clean.
Screenshots at desktop and phone sizes go to tests/artifacts/ (the picture in
docs/status-page.md comes from scripts/status_screenshot.py, a made-up party).
"""

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ipxbridge.wire import ipx
from ipxbridge.wire.directplay import EnumSessionsReply, SessionDesc, build_enum_sessions_reply
from scripts.cdp import Browser
from scripts.harness import BridgeProcess, Client, Netns, bridge_get
from tests.integration.conftest import require

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
ORIGIN = "http://127.0.0.1:9213"
PROBE_INTERVAL = 2
TA = uuid.UUID("99797420-F5F5-11CF-9827-00A0241496C8")  # Total Annihilation
HOSTILE = '<img src=x onerror="document.title=1">Cup'


def shutdown(client: Client) -> None:
    """What a DOSBox-protocol client sends when it leaves (vanilla-utilities' shutdown)."""
    packet = ipx.build_packet(
        dst_node=ipx.ZERO_NODE,
        dst_socket=ipx.SOCKET_SHUTDOWN,
        src_node=client.node,
        src_socket=ipx.SOCKET_SHUTDOWN,
        packet_type=ipx.PACKET_TYPE_SHUTDOWN,
    )
    client.sock.sendto(packet, client.server)


def traffic(alice: Client, count: int) -> None:
    for i in range(count):
        alice.send(ipx.BROADCAST_NODE, f"frag {i}".encode() * 8)


def clients_text(browser: Browser) -> Any:
    return browser.evaluate("document.querySelector('#clients tbody').innerText")


@pytest.mark.netns
def test_live_status_page_in_chromium(net: Netns, workdir: Path) -> None:
    require("chromium")
    ARTIFACTS.mkdir(exist_ok=True)
    box, host = net.add("box"), net.add("host")
    net.link(box, "lan", "10.57.0.1/24", host, "eth0", "10.57.0.20/24")
    bridge = BridgeProcess(net, box, "--probe-interval", str(PROBE_INTERVAL), log_dir=workdir)
    fake: subprocess.Popen[str] | None = None
    browser: Browser | None = None
    try:
        alice = Client(host, ("10.57.0.1", 213))
        bob = Client(host, ("10.57.0.1", 213))
        alice.announce()
        bob.announce()
        # A game hosted over IPX by alice: the page names her as its host.
        desc = SessionDesc(0, uuid.uuid4(), TA, 4, 2, (0, 0, 0, 0))
        reply = build_enum_sessions_reply(EnumSessionsReply(desc, "TA <b>night</b>"), bare=True)
        alice.send(bob.node, reply, sock=0x4002)
        traffic(alice, 30)

        browser = Browser(lambda *cmd: net.exec_args(box, *cmd), workdir / "chromium-profile")
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable")
        browser.viewport(1366, 768, mobile=False)
        browser.call("Page.navigate", {"url": f"{ORIGIN}/"})
        browser.wait_for("Number(document.body.dataset.updates || 0) >= 1", 10)
        token = uuid.uuid4().hex
        browser.evaluate(f"window.__loadToken = '{token}'")

        # The IPX game and its host, both clients, their rates.
        games = browser.wait_for(
            "document.querySelector('#games tbody').innerText.includes('night') && "
            "document.querySelector('#games tbody').innerText",
            10,
        )
        assert "TA <b>night</b>" in games  # as text, not markup
        assert "Total Annihilation" in games
        assert f"node {alice.node.hex(':')}" in games  # its host is the DOSBox client
        port = alice.sock.getsockname()[1]
        first = browser.wait_for(  # the books are refreshed once a second
            f"document.querySelector('#clients tbody').innerText.includes(':{port}') && "
            "document.querySelector('#clients tbody').innerText",
            5,
        )
        assert f"10.57.0.20:{alice.sock.getsockname()[1]}" in first
        assert f"10.57.0.20:{bob.sock.getsockname()[1]}" in first

        # Numbers change in place: more traffic, a few polls later, same page load.
        updates = browser.evaluate("Number(document.body.dataset.updates)")
        traffic(alice, 60)
        browser.wait_for(
            f"Number(document.body.dataset.updates) >= {updates + 3} && "
            "/[1-9][0-9.]* pkt\\/s/.test(document.querySelector('#clients tbody').innerText)",
            15,
        )
        assert clients_text(browser) != first
        assert browser.evaluate("window.__loadToken") == token
        assert browser.evaluate("document.querySelector('#plot polyline') !== null")

        # A game appears within one probe interval (plus a poll) of its host answering.
        fake = subprocess.Popen(
            net.exec_args(
                host,
                sys.executable,
                str(Path(__file__).with_name("fake_dplay_host.py")),
                "--name",
                HOSTILE,
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert fake.stdout is not None
        assert fake.stdout.readline().strip() == "ready"
        started = time.monotonic()
        browser.wait_for(
            "document.querySelector('#games tbody').innerText.includes('Star Trek: Armada')",
            PROBE_INTERVAL + 4,
        )
        assert time.monotonic() - started <= PROBE_INTERVAL + 4
        assert HOSTILE in browser.evaluate("document.querySelector('#games tbody').innerText")
        assert browser.evaluate("document.querySelectorAll('main img').length") == 0
        assert browser.evaluate("document.title") == "ipxbridge"  # no handler ran

        # bob leaves: shown as gone, with why, without a reload.
        shutdown(bob)
        gone = browser.wait_for(
            "Array.from(document.querySelectorAll('#clients tr.gone')).map(r => r.innerText)"
            ".join('\\n')",
            8,
        )
        assert str(bob.sock.getsockname()[1]) in gone
        assert "gone: shutdown" in gone
        events = browser.evaluate("document.getElementById('events').innerText")
        assert "left (shutdown)" in events
        assert "joined" in events
        assert "appeared" in events
        assert browser.evaluate("window.__loadToken") == token

        # Screenshots: desktop, then a phone's width.
        browser.screenshot(ARTIFACTS / "status-desktop.png")
        browser.viewport(390, 844, mobile=True)
        browser.wait_for(
            f"Number(document.body.dataset.updates) >= "
            f"{browser.evaluate('Number(document.body.dataset.updates)') + 1}",
            6,
        )
        assert browser.evaluate("document.documentElement.scrollWidth <= 390 + 1")  # no overflow
        browser.screenshot(ARTIFACTS / "status-phone.png")

        # Nothing came from anywhere but the bridge; no console error, no CSP violation.
        requested = [
            e["params"]["request"]["url"] for e in browser.methods(["Network.requestWillBeSent"])
        ]
        resources = browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        urls = [u for u in [*requested, *resources] if not u.startswith("about:")]
        assert urls, "the page loaded nothing?"
        assert [u for u in urls if not u.startswith(ORIGIN + "/")] == []
        assert {f"{ORIGIN}/status.js", f"{ORIGIN}/status.css"} <= set(urls)
        errors = [
            e
            for e in browser.methods(
                ["Runtime.exceptionThrown", "Runtime.consoleAPICalled", "Log.entryAdded"]
            )
            if e["method"] == "Runtime.exceptionThrown"
            or e["params"].get("type") == "error"
            or e["params"].get("entry", {}).get("level") == "error"
        ]
        assert errors == [], json.dumps(errors, indent=1)[:3000]

        # The page's headers: a strict CSP on the page and its files.
        heads = [
            e["params"]["response"]
            for e in browser.methods(["Network.responseReceived"])
            if e["params"]["response"]["url"] == f"{ORIGIN}/"
        ]
        assert heads, "no response seen for the page"
        csp = {k.lower(): v for k, v in heads[0]["headers"].items()}["content-security-policy"]
        assert "default-src 'none'" in csp
        assert "script-src 'self'" in csp
        status = json.loads(bridge_get(box, "/api/status"))
        assert status["health"]["ports"][0]["up"] is True
    finally:
        if browser is not None:
            browser.close()
        if fake is not None:
            fake.kill()
            fake.wait(5)
        assert bridge.stop() == 0
