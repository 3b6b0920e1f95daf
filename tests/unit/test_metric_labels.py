"""Every metric family names a port with the same labels (docs/metrics.md, "Port labels").

The IPX counters are written by a real ``IpxEndpoint`` on loopback sockets (a client, a
peer, a segment), so the labels checked are the ones the I/O layer books under; the
relay's are a snapshot as app/relay.py builds it. tests/integration/test_metrics.py checks
the same rules on a running bridge's /metrics.
"""

import asyncio
import socket
from pathlib import Path

from prometheus_client import generate_latest

from ipxbridge.io.ipx_endpoint import IpxEndpoint, open_udp_socket
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.obs.metrics import (
    BridgeSnapshot,
    IpxSnapshot,
    RelaySnapshot,
    make_registry,
)
from ipxbridge.policy.relay import Egress
from ipxbridge.policy.switch import IpxSwitch, SwitchSettings
from tests.port_labels import families, port_label_problems, ports_by_family
from tests.unit.test_switch import SERVER_NODE
from tests.unit.test_switch_batches import BROADCAST, ETH0, raw

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _ipx_traffic() -> tuple[IpxCounters, int, int]:
    """Two clients and a peer on loopback; one client broadcasts: (counters, clients, peers)."""

    async def main() -> tuple[IpxCounters, int, int]:
        loop = asyncio.get_running_loop()
        a, b, peer = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3))
        for s in (a, b, peer):
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        sw = IpxSwitch(
            SwitchSettings(), (peer.getsockname(),), lambda _addr: SERVER_NODE, segments=(ETH0,)
        )
        counters = IpxCounters()
        endpoint = IpxEndpoint(loop, open_udp_socket("127.0.0.1", 0), sw, counters)
        endpoint.start()
        server = endpoint.address

        async def receive(s: socket.socket) -> bytes:
            return await asyncio.wait_for(loop.sock_recv(s, 2048), 5)

        try:
            nodes = {}
            for s in (a, b):  # register, then answer the probe's nonce: verified
                s.sendto(raw(bytes(6), bytes(6), sock=2), server)
                nodes[s] = (await receive(s))[10:16]
                s.sendto(raw(sw.clients[s.getsockname()].nonce, nodes[s], sock=2), server)
            a.sendto(raw(BROADCAST, nodes[a], b"game"), server)
            assert (await receive(b))[30:] == b"game"
            assert (await receive(peer))[30:] == b"game"
            return counters, len(sw.clients), len(sw.peers)
        finally:
            endpoint.close()
            for s in (a, b, peer):
                s.close()

    return asyncio.run(main())


def _snapshot() -> BridgeSnapshot:
    counters, clients, peers = _ipx_traffic()
    ipx = IpxSnapshot(
        enabled=True,
        clients=clients,
        peers=peers,
        counters=counters,
        ports=(("ethernet", "eth0", 1, 0), ("ipxwrapper", "eth0", 0, 0)),
        ports_down=(("rfc1234", "eth1"),),
        websocket_ports=(("websocket", "bridge"), ("websocket", "rooms")),
    )
    plan = (
        Egress(2, "lan0", "lan", "10.0.0.1", "10.0.0.255"),
        Egress(3, "wg0", "p2p", "10.9.0.1", "", ("10.9.0.2",)),
    )
    relay = RelaySnapshot(
        enabled=True,
        received=3,
        relayed=3,
        copies={"wg0": 3},
        send_errors={("wg0", "ENOBUFS"): 1},
        plan=plan,
        selected_down=("lan1",),
        kinds={"lan0": "ethernet", "wg0": "wireguard", "lan1": "ethernet"},
        received_by_interface={"lan0": 3},
    )
    return BridgeSnapshot(ipx=ipx, relay=relay)


def test_every_family_names_each_port_with_the_same_labels() -> None:
    snapshot = _snapshot()
    text = generate_latest(make_registry(lambda: snapshot)).decode()
    assert port_label_problems(families(text)) == []
    by_family = ports_by_family(families(text))
    tunnel = {("dosbox", "tunnel"), ("peer", "tunnel"), ("uplink", "tunnel")}
    interface_ports = {("ethernet", "eth0"), ("ipxwrapper", "eth0"), ("rfc1234", "eth1")}
    interface_ports |= {("websocket", "bridge"), ("websocket", "rooms")}  # browser players
    relay_ports = {("relay", "lan0"), ("relay", "wg0"), ("relay", "lan1")}
    assert by_family["ipxbridge_ipx_port_up", ""] == tunnel | interface_ports
    assert by_family["ipxbridge_sent_copies", "ipx"] == tunnel | interface_ports
    assert by_family["ipxbridge_received_packets", "relay"] == relay_ports
    assert by_family["ipxbridge_interface_info", ""] == relay_ports - {("relay", "lan1")}


def test_tunnel_copies_are_booked_per_port_and_sum_to_the_tunnel_total() -> None:
    counters, _, _ = _ipx_traffic()
    # a registration reply each, then the broadcast: to b (dosbox) and to the peer
    tunnel = counters.port_copies[("dosbox", "tunnel")] + counters.port_copies[("peer", "tunnel")]
    assert counters.port_copies[("peer", "tunnel")] == 1
    assert tunnel == counters.copies_sent
    received = counters.port_received[("dosbox", "tunnel")]
    assert received == counters.received == 5  # 2 registrations, 2 nonces, 1 broadcast


def test_a_problem_is_reported_for_a_port_named_two_ways() -> None:
    # Guards the checker: the exposition before docs/metrics.md named the tunnel socket
    # interface="tunnel" in one family and kind="dosbox", interface="" in another.
    text = "\n".join(
        (
            "# TYPE ipxbridge_ipx_port_up gauge",
            'ipxbridge_ipx_port_up{kind="dosbox",interface="tunnel"} 1',
            "# TYPE ipxbridge_received_packets counter",
            'ipxbridge_received_packets_total{path="ipx",interface="tunnel"} 5',
            "# TYPE ipxbridge_ipx_port_received_packets counter",
            'ipxbridge_ipx_port_received_packets_total{kind="dosbox",interface=""} 5',
            "",
        )
    )
    problems = port_label_problems(families(text))
    assert any("ipxbridge_received_packets{path='ipx'}" in p for p in problems), problems
    assert any("ipxbridge_ipx_port_received_packets" in p for p in problems), problems


def test_the_doc_lists_every_family() -> None:
    text = DOC.read_text(encoding="utf-8")
    suffix = {"counter": "_total"}
    for family in make_registry(BridgeSnapshot).collect():
        if family.name.startswith("ipxbridge_"):
            name = family.name + suffix.get(family.type, "")
            assert f"| `{name}` |" in text, f"docs/metrics.md: {name} has no row"
