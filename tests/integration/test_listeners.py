"""Real DOSBox clients that only listen, as DOS games do.

A DOSBox client sends its registration once (docs/protocols.md 4.2) and after that only
what its DOS program sends (4.4; it answers a socket-2 ping by itself, 4.5 and 4.6): after
`ipxnet connect` it is silent until the game sends, and a game waiting for another's
broadcast may send nothing at all. The listener here is our own IPXRECV.COM
(``tests/integration/dos/ipxrecv.asm``), which never calls IPX send; IPXSEND.COM sends
numbered broadcasts on socket 0x4545 (``dosprog.py``). Every broadcast must reach the
listener.

Topologies: those of test_ipx_tunnel.py (one bridge with ``c1`` and ``c2``; two sites
peered over RFC 1234 with ``a1`` and ``b1``).
"""

from pathlib import Path

import pytest

from scripts.harness import BridgeProcess, DosBox, Netns
from tests.integration import dosprog
from tests.integration.conftest import require
from tests.integration.test_ipx_tunnel import one_bridge, two_sites


@pytest.fixture(scope="session")
def dos_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """IPXRECV.COM and IPXSEND.COM, assembled once per session."""
    require("nasm")
    return dosprog.assemble(tmp_path_factory.mktemp("dosprog"))


def listen_then_send(
    net: Netns,
    workdir: Path,
    dos_bin: Path,
    *,
    listener: tuple[str, str],
    sender: tuple[str, str],
    count: int,
    seconds: int,
) -> tuple[dosprog.Tally, dosprog.Tally]:
    """A DOSBox in ``listener[0]`` connects to ``listener[1]`` and runs IPXRECV; once it
    listens, a DOSBox in ``sender[0]`` connects to ``sender[1]`` and sends ``count``
    broadcasts. Returns what each program counted (IPXRECV stops at ``count`` packets or
    after ``seconds``)."""
    ns, server = listener
    rx = DosBox(
        net,
        ns,
        workdir / ns,
        dosprog.listener_commands(dos_bin, server, count, seconds),
        exit_when_done=True,
    )
    tx: DosBox | None = None
    try:
        dosprog.wait_ready(rx, 20)
        assert "connected to server" in rx.read("CONN.TXT"), rx.read("CONN.TXT")
        ns, server = sender
        tx = DosBox(
            net,
            ns,
            workdir / ns,
            dosprog.sender_commands(dos_bin, server, count),
            exit_when_done=True,
        )
        assert tx.wait(30) == 0, tx.log_path.read_text()
        assert "connected to server" in tx.read("CONN.TXT"), tx.read("CONN.TXT")
        assert rx.wait(seconds + 15) == 0, rx.log_path.read_text()
    finally:
        rx.kill()
        if tx is not None:
            tx.kill()
    assert tx is not None
    sent = dosprog.parse_result(tx.read(dosprog.SENT), "SENT")
    received = dosprog.parse_result(rx.read(dosprog.RECEIVED), "RECEIVED")
    return sent, received


def expected_payloads(count: int) -> list[str]:
    return [f"IPXSEND {n}" for n in range(1, count + 1)]


def stop_line(bridge: BridgeProcess) -> str:
    """The bridge's books as its exit line gives them (what went where, and why not)."""
    return next((ln for ln in bridge.log().splitlines() if "stopped; IPX:" in ln), bridge.log())


def assert_books_balance(bridge: BridgeProcess) -> None:
    c = bridge.summary()
    assert c["received"] == c["forwarded"] + c["control"] + c["dropped"], c


def assert_every_broadcast_heard(
    sent: dosprog.Tally, received: dosprog.Tally, count: int, *bridges: BridgeProcess
) -> None:
    """IPXSEND sent ``count`` without error, IPXRECV heard each of them once, and every
    bridge's books balance."""
    where = [stop_line(b) for b in bridges]
    assert (sent.count, sent.errors) == (count, 0), sent
    assert received.errors == 0, received
    assert received.count == count, (received, where)
    assert sorted(received.payloads) == sorted(expected_payloads(count)), received
    for bridge in bridges:
        assert_books_balance(bridge)


@pytest.mark.netns
@pytest.mark.dosbox
def test_a_dosbox_that_only_listens_hears_every_broadcast(
    net: Netns, workdir: Path, dos_bin: Path
) -> None:
    """One bridge: c2 connects and only listens (docs/protocols.md 4.2, 4.4: after its
    registration a DOSBox client sends nothing its program does not send); c1 sends 5
    broadcasts once c2 listens. All 5 reach c2."""
    box, c1, c2 = one_bridge(net)
    bridge = BridgeProcess(net, box, "--ipx-listen", "0.0.0.0:213", log_dir=workdir)
    try:
        sent, received = listen_then_send(
            net,
            workdir,
            dos_bin,
            listener=(c2, "10.31.2.1 213"),
            sender=(c1, "10.31.1.1 213"),
            count=5,
            seconds=20,
        )
    finally:
        assert bridge.stop() == 0
    assert_every_broadcast_heard(sent, received, 5, bridge)


@pytest.mark.netns
@pytest.mark.dosbox
def test_a_listening_dosbox_hears_broadcasts_from_the_other_site(
    net: Netns, workdir: Path, dos_bin: Path
) -> None:
    """Two bridges peered over RFC 1234: b1 (site B) connects and only listens
    (docs/protocols.md 4.2, 4.4: a DOSBox client is silent after its registration until its
    program sends); a1 (site A) sends 20 broadcasts. All 20 cross to b1."""
    sa, sb, a1, b1 = two_sites(net)
    bridge_a = BridgeProcess(net, sa, "--peer", "10.40.0.2", log_dir=workdir)
    bridge_b = BridgeProcess(net, sb, "--peer", "10.40.0.1:213", log_dir=workdir)
    try:
        sent, received = listen_then_send(
            net,
            workdir,
            dos_bin,
            listener=(b1, "10.42.1.1"),
            sender=(a1, "10.41.1.1"),
            count=20,
            seconds=25,
        )
    finally:
        assert bridge_a.stop() == 0
        assert bridge_b.stop() == 0
    assert_every_broadcast_heard(sent, received, 20, bridge_a, bridge_b)
