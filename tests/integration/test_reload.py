"""SIGHUP reload under traffic: clients stay, a bad file changes nothing and says why."""

import signal
import socket
from pathlib import Path

import pytest

from ipxbridge.wire import ipx
from scripts.harness import BridgeProcess, Client, Netns, bridge_get, inside
from tests.integration.test_metrics import value

GOOD = """\
ipx:
  listen: "0.0.0.0:213"
  keepalive_interval: 5
"""
CHANGED = """\
ipx:
  listen: "0.0.0.0:2130"      # needs a restart: reported, not applied
  keepalive_interval: 7
  peers: ["10.56.0.99"]
"""
BROKEN = """\
ipx:
  listen: "0.0.0.0:213"
  keepalive_interval: soon
"""


def exchange(a: Client, b: Client, text: bytes) -> None:
    a.send(ipx.BROADCAST_NODE, text)
    assert b.receive()[1] == text


@pytest.mark.netns
def test_reload_keeps_clients_and_rejects_a_bad_file(net: Netns, workdir: Path) -> None:
    box, c1 = net.add("box"), net.add("c1")
    net.link(box, "lan", "10.56.0.1/24", c1, "eth0", "10.56.0.11/24")
    config = workdir / "config.yaml"
    config.write_text(GOOD)
    bridge = BridgeProcess(net, box, "--config", str(config), log_dir=workdir)
    try:
        alice = Client(c1, ("10.56.0.1", 213))
        bob = Client(c1, ("10.56.0.1", 213))
        bob.announce()  # its game, before it listens (alice's first packet verifies her)
        exchange(alice, bob, b"before")

        config.write_text(CHANGED)
        bridge.proc.send_signal(signal.SIGHUP)
        bridge.wait_for(r"configuration reloaded", 5)
        assert "need a restart and keep their running values: ipx.listen" in bridge.log()
        exchange(bob, alice, b"after a good reload")  # same registrations, same port
        metrics = bridge_get(box, "/metrics")
        assert value(metrics, "ipxbridge_config_last_reload_successful") == 1
        assert value(metrics, "ipxbridge_ipx_peers") == 1  # the new peer is in

        config.write_text(BROKEN)
        bridge.proc.send_signal(signal.SIGHUP)
        bridge.wait_for(r"reload rejected: keeping the running configuration", 5)
        log = bridge.log()
        assert f"{config}:3: ipx.keepalive_interval: Input should be a valid number" in log
        exchange(alice, bob, b"after a bad reload")
        metrics = bridge_get(box, "/metrics")
        assert value(metrics, "ipxbridge_config_last_reload_successful") == 0
        assert value(metrics, 'ipxbridge_ipx_clients{dialect="dosbox"}') == 2
    finally:
        assert bridge.stop() == 0
    assert "registered as" in bridge.log()
    assert bridge.log().count("registered as") == 2  # nobody had to register again
    assert "Traceback" not in bridge.log()


ALLOW_LAN1 = """\
ipx:
  clients_allow: ["10.57.1.0/24"]
"""


@pytest.mark.netns
def test_clients_allow_admits_listed_networks_and_a_reload_narrows_it(
    net: Netns, workdir: Path
) -> None:
    box, c1, c2 = net.add("box"), net.add("c1"), net.add("c2")
    net.link(box, "lan1", "10.57.1.1/24", c1, "eth0", "10.57.1.11/24")
    net.link(box, "lan2", "10.57.2.1/24", c2, "eth0", "10.57.2.12/24")
    config = workdir / "config.yaml"
    config.write_text(ALLOW_LAN1)
    bridge = BridgeProcess(net, box, "--config", str(config), log_dir=workdir)
    try:
        alice = Client(c1, ("10.57.1.1", 213))
        with inside(c2):
            stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stranger.settimeout(0.5)
        for _ in range(3):
            stranger.sendto(ipx.build_registration(), ("10.57.2.1", 213))
        with pytest.raises(TimeoutError):  # not even a registration reply
            stranger.recvfrom(2048)
        stranger.close()
        drops = 'ipxbridge_dropped_packets_total{path="ipx",reason="not_allowed"}'
        assert value(bridge_get(box, "/metrics"), drops) == 3

        config.write_text(ALLOW_LAN1.replace("10.57.1.0/24", "10.57.2.0/24"))
        bridge.proc.send_signal(signal.SIGHUP)
        bridge.wait_for(r"client 10\.57\.1\.11:\d+ is outside ipx.clients_allow now", 5)
        bob = Client(c2, ("10.57.2.1", 213))  # now allowed
        alice.send(ipx.BROADCAST_NODE, b"still here?")  # alice is out: counted, not relayed
        bob.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            bob.receive()
        metrics = bridge_get(box, "/metrics")
        assert value(metrics, drops) == 4
        assert value(metrics, 'ipxbridge_ipx_clients{dialect="dosbox"}') == 1
    finally:
        assert bridge.stop() == 0
    assert "Traceback" not in bridge.log()
