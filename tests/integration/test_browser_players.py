"""Players in a browser: js-dos's own emulator in Chromium, in one game with everyone else.

Each browser player is the real client: npm ``emulators`` 8.3.9 (wasm DOSBox in a worker,
docs/protocols.md 4.10) in headless Chromium (``jsdos_harness.py``), running the project's
own DOS programs (``dos/ipxrecv.asm`` only listens, ``dos/ipxsend.asm`` sends numbered
broadcasts). js-dos registers with its first message and then sends nothing its program does
not send; a listener never sends at all. The other players are real DOSBox 0.74 clients over
UDP, one of them behind a peered bridge.

Topology (one set-up for the module: the emulators are expensive)::

    web (Chromium, 10.62.1.11) --lan1-- box (bridge A: ws :1900) --lan2-- dos (DOSBox)
                                         |wan (RFC 1234 peers)
                                         sb (bridge B) --lan-- bdos (DOSBox)
    web (10.62.4.11) --tls-- tb (bridge T: wss :1900, its own certificate)

Emulators a and b are in bridge A's own room (``default``), c in room ``lobby``; d and e
connect to bridge T over ``wss://``, trusting the CA the test made.
"""

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.harness import BridgeProcess, DosBox, Netns, bridge_get
from tests.integration import dosprog
from tests.integration.conftest import require
from tests.integration.jsdos_harness import DIST, NPM_CI, Emulator, JsDos

COUNT = 5
A_WS = "ws://10.62.1.1:1900/ipx"
T_WSS = "wss://10.62.4.1:1900/ipx"


@dataclass
class Party:
    """The module's networks, bridges and emulators."""

    net: Netns
    workdir: Path
    dos_bin: Path
    bridge_a: BridgeProcess
    bridge_b: BridgeProcess
    bridge_t: BridgeProcess
    jsdos: JsDos
    a: Emulator
    b: Emulator
    c: Emulator
    d: Emulator
    e: Emulator

    def ns(self, short: str) -> str:
        """The full name of the namespace ``short`` (``Netns.add``)."""
        return f"{self.net.prefix}_{short}"


def make_tls(workdir: Path, ip: str, name: str = "") -> tuple[Path, Path, Path]:
    """A CA and a server certificate for ``ip`` signed by it: (chain, key, ca).

    ``name``: the certificate's common name (``ip`` by default).
    """
    tls = workdir / "tls"
    tls.mkdir(parents=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tls, check=True, capture_output=True, timeout=60)

    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test CA",
        "-keyout", "ca.key", "-out", "ca.pem",
    )  # fmt: skip
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name or ip}",
        "-keyout", "server.key", "-out", "server.csr",
    )  # fmt: skip
    (tls / "ext.cnf").write_text(f"subjectAltName=IP:{ip}\n")
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "server.pem",
    )  # fmt: skip
    chain = tls / "chain.pem"  # the server sends its certificate and the CA's
    chain.write_text((tls / "server.pem").read_text() + (tls / "ca.pem").read_text())
    return chain, tls / "server.key", tls / "ca.pem"


@pytest.fixture(scope="module")
def party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Party]:
    require("ip", "dosbox", "chromium", "nasm", "openssl")
    if not (DIST / "emulators.js").exists():
        pytest.fail(f"js-dos's emulator is not installed: {NPM_CI} (scripts/test.sh does it)")
    workdir = tmp_path_factory.mktemp("browser")
    dos_bin = dosprog.assemble(workdir / "bin")
    net = Netns(prefix=f"ixbw{os.getpid() % 100000}")  # apart from the per-test ``net``s
    started: list[BridgeProcess] = []
    jsdos: JsDos | None = None
    try:
        box, dos, web, sb, bdos, tb = (
            net.add(n) for n in ("box", "dos", "web", "sb", "bdos", "tb")
        )
        net.link(box, "lan1", "10.62.1.1/24", web, "eth0", "10.62.1.11/24")
        net.link(box, "lan2", "10.62.2.1/24", dos, "eth0", "10.62.2.12/24")
        net.link(box, "wan", "10.62.0.1/24", sb, "wan", "10.62.0.2/24")
        net.link(sb, "lan", "10.62.3.1/24", bdos, "eth0", "10.62.3.11/24")
        net.link(tb, "tls", "10.62.4.1/24", web, "tls", "10.62.4.11/24")
        for ns, gw in ((web, "10.62.1.1"), (dos, "10.62.2.1"), (bdos, "10.62.3.1")):
            route = ["ip", "-n", ns, "route", "add", "default", "via", gw]
            subprocess.run(route, check=True)
        chain, key, ca = make_tls(workdir, "10.62.4.1")
        config_t = workdir / "tls.yaml"
        config_t.write_text(
            "ipx: {listen: 'off'}\n"
            "http: {listen: '127.0.0.1:9213'}\n"
            f"websocket: {{listen: '0.0.0.0:1900', certificate: '{chain}', key: '{key}'}}\n"
        )
        for ns, args in (
            (box, ("--peer", "10.62.0.2", "--ws-listen", "0.0.0.0:1900")),
            (sb, ("--peer", "10.62.0.1", "--ws-listen", "off")),
        ):
            started.append(
                BridgeProcess(net, ns, "--ipx-listen", "0.0.0.0:213", *args, log_dir=workdir)
            )
        started.append(
            BridgeProcess(
                net, tb, "--config", str(config_t), log_dir=workdir, ready="browser players"
            )
        )
        jsdos = JsDos(lambda *cmd: net.exec_args(web, *cmd), workdir, ca_cert=ca)
        emulators = [jsdos.emulator(dos_bin) for _ in range(5)]
        rooms = [f"{A_WS}/default", f"{A_WS}/default", f"{A_WS}/lobby"]
        rooms += [f"{T_WSS}/default", f"{T_WSS}/default"]
        for emulator, url in zip(emulators, rooms, strict=True):
            emulator.connect(url, timeout=10)
            emulator.pause()  # an idle emulator keeps a core busy (jsdos_harness.py)
        bridge_a, bridge_b, bridge_t = started
        one, two, three, four, five = emulators
        yield Party(
            net, workdir, dos_bin, bridge_a, bridge_b, bridge_t, jsdos, one, two, three, four, five
        )
    finally:
        if jsdos is not None:
            jsdos.close()
        for bridge in started:
            bridge.stop()
        net.close()


def listen(emulator: Emulator, count: int = COUNT, seconds: int = 20) -> None:
    """The emulator runs IPXRECV (it never sends) and has posted its listen ECBs."""
    emulator.resume()
    for name in (dosprog.READY, dosprog.RECEIVED, dosprog.SENT):
        emulator.delete(name)
    emulator.type(f"IPXRECV {count} {seconds}")
    emulator.wait_file(dosprog.READY, 20)


def send(emulator: Emulator, count: int = COUNT) -> dosprog.Tally:
    """The emulator runs IPXSEND: ``count`` numbered broadcasts, 2 ticks apart."""
    emulator.resume()
    emulator.delete(dosprog.SENT)
    emulator.type(f"IPXSEND {count} 2")
    return dosprog.parse_result(emulator.wait_file(dosprog.SENT, 30), "SENT")


def heard(emulator: Emulator, seconds: float = 40) -> dosprog.Tally:
    """What the emulator's IPXRECV counted (it stops at its count or its time)."""
    try:
        return dosprog.parse_result(emulator.wait_file(dosprog.RECEIVED, seconds), "RECEIVED")
    finally:
        emulator.pause()


def dosbox_listener(party: Party, ns: str, server: str, seconds: int = 25) -> DosBox:
    """A real DOSBox that connects over UDP and runs IPXRECV; returned once it listens."""
    rx = DosBox(
        party.net,
        party.ns(ns),
        party.workdir / f"{ns}-rx-{len(list(party.workdir.glob(f'{ns}-rx-*')))}",
        dosprog.listener_commands(party.dos_bin, server, COUNT, seconds),
        exit_when_done=True,
    )
    dosprog.wait_ready(rx, 30)
    return rx


def dosbox_send(party: Party, ns: str, server: str) -> dosprog.Tally:
    """A real DOSBox connects over UDP and sends ``COUNT`` broadcasts."""
    workdir = party.workdir / f"{ns}-tx-{len(list(party.workdir.glob(f'{ns}-tx-*')))}"
    tx = DosBox(
        party.net,
        party.ns(ns),
        workdir,
        dosprog.sender_commands(party.dos_bin, server, COUNT),
        exit_when_done=True,
    )
    try:
        assert tx.wait(40) == 0, tx.log_path.read_text()
    finally:
        tx.kill()
    assert "connected to server" in tx.read("CONN.TXT"), tx.read("CONN.TXT")
    return dosprog.parse_result(tx.read(dosprog.SENT), "SENT")


def dosbox_heard(rx: DosBox, seconds: float = 40) -> dosprog.Tally:
    try:
        assert rx.wait(seconds) == 0, rx.log_path.read_text()
    finally:
        rx.kill()
    return dosprog.parse_result(rx.read(dosprog.RECEIVED), "RECEIVED")


def assert_all(sent: dosprog.Tally, got: dosprog.Tally, what: str) -> None:
    assert (sent.count, sent.errors) == (COUNT, 0), (what, sent)
    assert (got.count, got.errors) == (COUNT, 0), (what, got)
    assert sorted(got.payloads) == [f"IPXSEND {n}" for n in range(1, COUNT + 1)], (what, got)


@pytest.mark.netns
@pytest.mark.dosbox
def test_two_browsers_in_one_room_hear_each_other(party: Party) -> None:
    """a and b in the bridge's room: each one's 5 broadcasts reach the other, who only
    listens (a receiver that never sends)."""
    for tx, rx, what in ((party.a, party.b, "a to b"), (party.b, party.a, "b to a")):
        listen(rx)
        assert_all(send(tx), heard(rx), what)
        tx.pause()


@pytest.mark.netns
@pytest.mark.dosbox
def test_browser_and_real_dosbox_over_udp_both_ways(party: Party) -> None:
    """The browser in the bridge's room and DOSBox 0.74 on the tunnel's UDP are one network:
    5/5 each way, and the books balance."""
    listen(party.a)
    assert_all(dosbox_send(party, "dos", "10.62.2.1"), heard(party.a), "DOSBox to browser")
    rx = dosbox_listener(party, "dos", "10.62.2.1")
    sent = send(party.a)
    party.a.pause()
    assert_all(sent, dosbox_heard(rx), "browser to DOSBox")
    # Seen where people look: the status page lists the browser players with their room and
    # rates, and its events say they joined.
    status = json.loads(bridge_get(party.ns("box"), "/api/status"))
    rooms = sorted(
        c["detail"] for c in status["clients"] if c["kind"] == "browser" and not c["gone"]
    )
    assert rooms == ["room default", "room default", "room lobby"], status["clients"]
    books = [c["totals"] for c in status["clients"] if c["kind"] == "browser"]
    assert any(b["rx_packets"] >= COUNT and b["tx_packets"] >= COUNT for b in books), books
    joined = [e for e in status["events"] if "browser" in str(e) and "joined" in str(e)]
    assert len(joined) >= 3, status["events"]


@pytest.mark.netns
@pytest.mark.dosbox
def test_a_browser_in_another_room_hears_nothing(party: Party) -> None:
    """c is in room ``lobby``: neither a browser nor a DOSBox client of the bridge's room
    reaches it (each room is a network of its own, as on js-dos's own server), while b,
    in the bridge's room, hears both."""
    listen(party.c, count=2 * COUNT, seconds=12)
    listen(party.b, count=2 * COUNT, seconds=12)
    sent_browser = send(party.a)
    party.a.pause()
    sent_dosbox = dosbox_send(party, "dos", "10.62.2.1")
    assert (sent_browser.count, sent_dosbox.count) == (COUNT, COUNT)
    assert heard(party.b).count == 2 * COUNT
    assert heard(party.c, seconds=30).count == 0


@pytest.mark.netns
@pytest.mark.dosbox
def test_browser_and_a_peered_bridges_dosbox_in_one_game(party: Party) -> None:
    """bdos is a DOSBox client of bridge B, an RFC 1234 peer of A: the browser on A hears
    its 5 broadcasts, and it hears the browser's."""
    listen(party.a)
    assert_all(dosbox_send(party, "bdos", "10.62.3.1"), heard(party.a), "peer's DOSBox to browser")
    rx = dosbox_listener(party, "bdos", "10.62.3.1")
    sent = send(party.a)
    party.a.pause()
    assert_all(sent, dosbox_heard(rx), "browser to peer's DOSBox")


@pytest.mark.netns
@pytest.mark.dosbox
def test_two_browsers_over_wss(party: Party) -> None:
    """d and e reach bridge T over wss:// (its certificate from the test's CA, which the
    browser trusts): 5/5 each way."""
    for tx, rx, what in ((party.d, party.e, "d to e"), (party.e, party.d, "e to d")):
        listen(rx)
        assert_all(send(tx), heard(rx), what)
        tx.pause()
    metrics = bridge_get(party.ns("tb"), "/metrics")
    assert 'ipxbridge_ws_listening{scheme="wss"} 1.0' in metrics
