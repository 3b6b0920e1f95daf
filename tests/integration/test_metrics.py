"""Observability end to end: a bridge in a namespace carries real traffic; its /metrics passes
``promtool check metrics`` and its counters equal what the test sent and dropped; the status
page and JSON APIs show the clients and sessions."""

import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ipxbridge.wire import ipx
from ipxbridge.wire.directplay import EnumSessionsReply, SessionDesc, build_enum_sessions_reply
from scripts.harness import BridgeProcess, Client, Netns, bridge_get, sh
from tests.integration.conftest import require
from tests.port_labels import families, port_label_problems, ports_by_family

TA = uuid.UUID("99797420-F5F5-11CF-9827-00A0241496C8")


def value(metrics: str, series: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in /metrics")


@pytest.mark.netns
def test_metrics_match_traffic_and_pass_promtool(net: Netns, workdir: Path) -> None:
    require("promtool")
    box, c1 = net.add("box"), net.add("c1")
    net.link(box, "lan", "10.54.0.1/24", c1, "eth0", "10.54.0.11/24")
    bridge = BridgeProcess(net, box, log_dir=workdir)
    try:
        alice = Client(c1, ("10.54.0.1", 213))
        bob = Client(c1, ("10.54.0.1", 213))
        # bob's game announces itself before it listens; alice has sent nothing yet and gets
        # it all the same, within the reflection limit (docs/ipx.md, "Verification")
        bob.announce()
        for i in range(40):
            alice.send(ipx.BROADCAST_NODE, f"hello {i}".encode())
        for _ in range(40):
            bob.receive()
        for _ in range(7):
            alice.sock.sendto(b"\x00" * 10, alice.server)  # truncated
        for _ in range(5):
            alice.sock.sendto(
                ipx.build_packet(
                    dst_node=ipx.BROADCAST_NODE,
                    dst_socket=0x452,
                    src_node=alice.node,
                    src_socket=0x452,
                ),
                alice.server,
            )  # SAP: filtered
        desc = SessionDesc(0, uuid.uuid4(), TA, 4, 3, (0, 0, 0, 0))
        reply = build_enum_sessions_reply(EnumSessionsReply(desc, "TA <b>night</b>"), bare=True)
        alice.send(bob.node, reply, sock=0x4002)
        bob.receive(0x4002)

        metrics = bridge_get(box, "/metrics")
        check = subprocess.run(
            ["promtool", "check", "metrics"],
            input=metrics,
            text=True,
            capture_output=True,
            timeout=30,
            check=False,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert (
            value(
                metrics,
                'ipxbridge_received_packets_total{interface="tunnel",kind="dosbox",path="ipx"}',
            )
            == 2 + 1 + 40 + 12 + 1
        )
        assert value(metrics, 'ipxbridge_forwarded_packets_total{path="ipx"}') == 42
        assert value(metrics, "ipxbridge_control_packets_total") == 2  # 2 registrations
        assert (
            value(metrics, 'ipxbridge_dropped_packets_total{path="ipx",reason="unverified_rate"}')
            == 0
        )
        # toward addresses not yet proven: the two registration replies and bob's
        # announcement to alice; nothing held
        assert value(metrics, "ipxbridge_unverified_sent_packets_total") == 3
        announce = ipx.HEADER_LEN + len(b"here")  # Client.announce
        assert value(metrics, "ipxbridge_unverified_sent_bytes_total") == 2 * 30 + announce
        assert 'ipxbridge_unverified_limited_total{bound="address",what="copy"} 0.0' in metrics
        assert value(metrics, 'ipxbridge_dropped_packets_total{path="ipx",reason="truncated"}') == 7
        assert (
            value(metrics, 'ipxbridge_dropped_packets_total{path="ipx",reason="filtered_socket"}')
            == 5
        )
        assert (
            value(
                metrics, 'ipxbridge_sent_copies_total{interface="tunnel",kind="dosbox",path="ipx"}'
            )
            == 2 + 42
        )  # two registration replies, one copy per forward (no probe: both proved themselves)
        assert value(metrics, 'ipxbridge_ipx_clients{dialect="dosbox"}') == 2
        sessions = 'ipxbridge_directplay_sessions{game="Total Annihilation",open="true"}'
        assert value(metrics, sessions) == 1  # no password, not closed: listed as open
        assert value(metrics, 'ipxbridge_directplay_players{game="Total Annihilation"}') == 3
        assert (
            value(
                metrics,
                'ipxbridge_directplay_messages_total{command="EnumSessionsReply",version="4"}',
            )
            == 1
        )
        assert value(metrics, "ipxbridge_forward_duration_seconds_count") >= 1
        assert value(metrics, 'ipxbridge_kernel_dropped_packets_total{path="ipx"}') == 0
        # no per-IP or per-node labels anywhere
        assert not re.search(r"\{[^}]*10\.54\.", metrics)

        page = bridge_get(box, "/plain")  # the server-rendered page (the live one: JS)
        assert "Total Annihilation" in page
        assert "TA &lt;b&gt;night&lt;/b&gt;" in page  # escaped, never markup
        assert "10.54.0.11" in page  # the connected clients
        assert '<meta http-equiv="refresh"' in page
        assert "<script" not in page
    finally:
        assert bridge.stop() == 0


@pytest.mark.netns
def test_every_family_names_a_port_with_the_same_labels(net: Netns, workdir: Path) -> None:
    """One label value per port across the families (docs/metrics.md, "Port labels"): the
    tunnel socket's two ports, interface ports open and not, relay interfaces up and down."""
    box, c1, c2, s1 = net.add("box"), net.add("c1"), net.add("c2"), net.add("s1")
    net.link(box, "lan", "10.61.0.1/24", c1, "eth0", "10.61.0.11/24")
    net.link(box, "lan2", "10.62.0.1/24", c2, "eth0", "10.62.0.11/24")
    net.link(box, "seg0", "10.63.0.1/24", s1, "eth0", "10.63.0.11/24")
    for down in ("seg9", "lan9"):  # selected, but down: not open (no dummy module here)
        sh("ip", "-n", box, "link", "add", down, "type", "veth", "peer", "name", f"{down}p")
    bridge = BridgeProcess(
        net,
        box,
        *("--iface", "lan", "--iface", "lan2", "--iface", "lan9"),
        *("--ipx-iface", "seg0:ethernet,ipxwrapper,rfc1234", "--ipx-iface", "seg9:ethernet"),
        *("--peer", "10.62.0.11"),
        log_dir=workdir,
    )
    try:
        bridge.wait_for(r"relaying between: .*lan", 10)
        bridge.wait_for(r"IPX interface ports: .*seg0/ethernet.*seg9/ethernet NOT open", 10)
        alice, bob = Client(c1, ("10.61.0.1", 213)), Client(c1, ("10.61.0.1", 213))
        bob.announce()
        alice.announce()
        alice.send(ipx.BROADCAST_NODE, b"hello")
        bob.receive()
        exposition = families(bridge_get(box, "/metrics"))
        assert port_label_problems(exposition) == []
        ports = ports_by_family(exposition)
        assert ports["ipxbridge_ipx_port_up", ""] == {
            *(("dosbox", "tunnel"), ("peer", "tunnel"), ("uplink", "tunnel")),
            *(("ethernet", "seg0"), ("ipxwrapper", "seg0"), ("rfc1234", "seg0")),
            ("ethernet", "seg9"),
            *(("websocket", "bridge"), ("websocket", "rooms")),  # browser players, on by default
        }
        assert ports["ipxbridge_interface_up", ""] == {
            ("relay", "lan"),
            ("relay", "lan2"),
            ("relay", "lan9"),
        }
    finally:
        assert bridge.stop() == 0


@pytest.mark.netns
def test_status_page_in_headless_chromium(net: Netns, workdir: Path) -> None:
    """A person's view of the page without JavaScript (``/plain``): the session and the
    client. The live page at ``/`` has its own test (test_status_page.py)."""
    require("chromium")
    box, host = net.add("box"), net.add("host")
    net.link(box, "lan", "10.55.0.1/24", host, "eth0", "10.55.0.20/24")
    bridge = BridgeProcess(net, box, "--probe-interval", "1", log_dir=workdir)
    fake = subprocess.Popen(
        net.exec_args(
            host,
            sys.executable,  # the one that has ipxbridge: not whatever python3 is on PATH
            str(Path(__file__).with_name("fake_dplay_host.py")),
            "--name",
            "Chromium Cup",
        ),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fake.stdout is not None
        assert fake.stdout.readline().strip() == "ready"
        player = Client(host, ("10.55.0.1", 213))  # a DOSBox-protocol client
        bridge.wait_for(r"client 10\.55\.0\.20:\d+ registered", 5)
        deadline = time.monotonic() + 10
        while "Chromium Cup" not in bridge_get(box, "/api/sessions"):
            assert time.monotonic() < deadline, "the probe found no session"
            time.sleep(0.5)
        profile = workdir / "chromium-profile"
        res = subprocess.run(
            net.exec_args(
                box,
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--dump-dom",
                "http://127.0.0.1:9213/plain",
            ),
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        dom = res.stdout
        assert "Chromium Cup" in dom, res.stderr[-2000:]
        assert "Star Trek: Armada" in dom
        assert f"10.55.0.20:{player.sock.getsockname()[1]}" in dom
        assert "<table" in dom
    finally:
        fake.kill()
        fake.wait(5)
        assert bridge.stop() == 0


@pytest.mark.netns
def test_datagrams_the_kernel_drops_while_the_bridge_is_stalled_are_counted(
    net: Netns, workdir: Path
) -> None:
    """received + kernel drops = sent: even a datagram that never reached the bridge is
    accounted for (docs/reliability.md R3/R13). The bridge is stopped with SIGSTOP so its
    8 MiB receive buffer fills, as it would under a flood or a CPU stall."""
    box, c1 = net.add("box"), net.add("c1")
    net.link(box, "lan", "10.58.0.1/24", c1, "eth0", "10.58.0.11/24")
    bridge = BridgeProcess(net, box, log_dir=workdir)
    try:
        alice = Client(c1, ("10.58.0.1", 213))
        packet = ipx.build_packet(
            dst_node=ipx.BROADCAST_NODE, dst_socket=0x4545, src_node=alice.node, src_socket=0x4545
        )
        sent = 30_000
        bridge.proc.send_signal(signal.SIGSTOP)
        try:
            for i in range(sent):
                alice.sock.sendto(packet, alice.server)
                if i % 200 == 199:
                    time.sleep(0.001)  # let veth's backlog drain: drops only at the socket
        finally:
            bridge.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 20
        while True:
            metrics = bridge_get(box, "/metrics")
            received = value(
                metrics,
                'ipxbridge_received_packets_total{interface="tunnel",kind="dosbox",path="ipx"}',
            )
            kernel = value(metrics, 'ipxbridge_kernel_dropped_packets_total{path="ipx"}')
            if received - 1 + kernel >= sent or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert kernel > 0  # the buffer did overflow
        assert received - 1 + kernel == sent  # minus the registration
    finally:
        assert bridge.stop() == 0
    assert bridge.summary()["kernel_dropped"] == kernel  # and the stop line says so too
