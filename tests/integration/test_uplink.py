"""ipxbox's uplink protocol end to end (docs/protocols.md 3.9), two ipxbridges in namespaces.

Topology (private to this file): ``sa`` is bridge A (underlay 10.40.0.1, LAN 10.41.1.1)
with DOSBox-protocol client ``a1`` 10.41.1.11; ``sb`` is bridge B (underlay 10.40.0.2, LAN
10.42.1.1) with client ``b1`` 10.42.1.11. A has ``ipx.uplink_password_file`` (server side);
B has ``ipx.uplinks`` pointing at A (client side). They are not RFC 1234 peers: the uplink
is the only path between the sites.
"""

import base64
import hashlib
import json
import re
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from ipxbridge.wire import ipx
from scripts.harness import BridgeProcess, Client, Netns, bridge_get, inside

PASSWORD = "correct horse battery staple"  # noqa: S105 - a test secret
A_TUNNEL = ("10.40.0.1", 213)


def sites(net: Netns) -> tuple[str, str, str, str]:
    sa, sb, a1, b1 = net.add("sa"), net.add("sb"), net.add("a1"), net.add("b1")
    net.link(sa, "wan", "10.40.0.1/24", sb, "wan", "10.40.0.2/24")
    net.link(sa, "lan", "10.41.1.1/24", a1, "eth0", "10.41.1.11/24")
    net.link(sb, "lan", "10.42.1.1/24", b1, "eth0", "10.42.1.11/24")
    return sa, sb, a1, b1


def server_bridge(net: Netns, ns: str, workdir: Path) -> BridgeProcess:
    secret = workdir / "a.password"
    secret.write_text(PASSWORD + "\n")
    conf = workdir / "a.yaml"
    conf.write_text(f"ipx:\n  uplink_password_file: {secret}\n")
    return BridgeProcess(net, ns, "--config", str(conf), log_dir=workdir)


def client_bridge(net: Netns, ns: str, workdir: Path, password: str) -> BridgeProcess:
    secret = workdir / "b.password"
    secret.write_text(password + "\n")
    conf = workdir / "b.yaml"
    conf.write_text(
        "ipx:\n  uplinks:\n"
        f'    - server: "{A_TUNNEL[0]}:{A_TUNNEL[1]}"\n'
        f"      password_file: {secret}\n"
    )
    return BridgeProcess(net, ns, "--config", str(conf), log_dir=workdir)


def metric(ns: str, name: str, **labels: str) -> float:
    """One sample of ``/metrics`` inside ``ns``."""
    text = bridge_get(ns, "/metrics")
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not want and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{want}}} not in /metrics")


def receive_once(client: Client, sock: int = 0x4545) -> tuple[ipx.IpxHeader, bytes]:
    """The next data packet, and no second copy of it within half a second."""
    header, payload = client.receive(sock)
    client.sock.settimeout(0.5)
    try:
        extra = client.receive(sock)
    except TimeoutError:
        extra = None
    finally:
        client.sock.settimeout(2.0)
    assert extra is None, f"a second copy: {extra}"
    return header, payload


def nothing_arrives(client: Client, wait: float = 1.5) -> None:
    client.sock.settimeout(wait)
    try:
        with pytest.raises(TimeoutError):
            client.receive()
    finally:
        client.sock.settimeout(2.0)


@pytest.mark.netns
def test_two_bridges_over_an_uplink_exchange_broadcasts_and_unicasts(
    net: Netns, workdir: Path
) -> None:
    sa, sb, a1, b1 = sites(net)
    bridge_a = server_bridge(net, sa, workdir)
    bridge_b = client_bridge(net, sb, workdir, PASSWORD)
    try:
        bridge_b.wait_for(r"uplink 10\.40\.0\.1:213: connected", 10)
        bridge_a.wait_for(r"uplink client 10\.40\.0\.2:\d+ authenticated", 5)
        alice = Client(a1, ("10.41.1.1", 213))
        bob = Client(b1, ("10.42.1.1", 213))
        bob.announce()  # bob's game says it is there before it listens
        alice.announce()
        bob.receive(0x4546)
        alice.receive(0x4546)

        alice.send(ipx.BROADCAST_NODE, b"broadcast from a")
        header, payload = receive_once(bob)
        assert (payload, header.src_node, header.hops) == (b"broadcast from a", alice.node, 2)

        bob.send(alice.node, b"unicast from b")
        header, payload = receive_once(alice)
        assert (payload, header.src_node, header.dst_node) == (
            b"unicast from b",
            bob.node,
            alice.node,
        )
        alice.send(bob.node, b"unicast from a")
        assert receive_once(bob)[1] == b"unicast from a"
        bob.send(ipx.BROADCAST_NODE, b"broadcast from b")
        assert receive_once(alice)[1] == b"broadcast from b"

        # Each end lists the uplink, with the far client's node learned behind it.
        (on_a,) = [c for c in json.loads(bridge_get(sa, "/api/clients")) if c["kind"] == "uplink"]
        assert (on_a["role"], on_a["authenticated"], on_a["nodes"]) == ("server", True, 1)
        (on_b,) = [c for c in json.loads(bridge_get(sb, "/api/clients")) if c["kind"] == "uplink"]
        assert (on_b["role"], on_b["authenticated"], on_b["address"]) == (
            "client",
            True,
            "10.40.0.1:213",
        )
        assert on_b["nodes"] == 1
        assert metric(sa, "ipxbridge_uplinks", role="server", state="authenticated") == 1
        assert metric(sb, "ipxbridge_uplinks", role="client", state="connected") == 1
        assert (
            metric(sa, "ipxbridge_uplink_handshakes_total", role="server", outcome="accepted") == 1
        )
        assert (
            metric(sb, "ipxbridge_uplink_handshakes_total", role="client", outcome="accepted") == 1
        )
        assert (
            metric(
                sb, "ipxbridge_ipx_port_received_packets_total", kind="uplink", interface="tunnel"
            )
            >= 2
        )
    finally:
        assert bridge_b.stop() == 0
        assert bridge_a.stop() == 0
    # B said goodbye (close-connection), and A logged it.
    assert re.search(r"uplink client 10\.40\.0\.2:\d+ closed the connection", bridge_a.log())
    for bridge in (bridge_a, bridge_b):
        books = bridge.summary()
        assert books["received"] == books["forwarded"] + books["control"] + books["dropped"]


@pytest.mark.netns
def test_wrong_uplink_password_is_rejected_logged_counted_and_passes_nothing(
    net: Netns, workdir: Path
) -> None:
    sa, sb, a1, b1 = sites(net)
    bridge_a = server_bridge(net, sa, workdir)
    bridge_b = client_bridge(net, sb, workdir, "not the password")
    try:
        bridge_b.wait_for(r"uplink 10\.40\.0\.1:213: password rejected", 10)
        assert (
            metric(sb, "ipxbridge_uplink_handshakes_total", role="client", outcome="rejected") == 1
        )
        assert (
            metric(sa, "ipxbridge_uplink_handshakes_total", role="server", outcome="rejected") == 1
        )
        assert metric(sb, "ipxbridge_uplinks", role="client", state="rejected") == 1
        assert metric(sa, "ipxbridge_uplinks", role="server", state="authenticated") == 0
        alice = Client(a1, ("10.41.1.1", 213))
        bob = Client(b1, ("10.42.1.1", 213))
        bob.announce()
        alice.announce()
        alice.send(ipx.BROADCAST_NODE, b"must not cross")
        nothing_arrives(bob)
        bob.send(ipx.BROADCAST_NODE, b"must not cross either")
        nothing_arrives(alice)
    finally:
        assert bridge_b.stop() == 0
        assert bridge_a.stop() == 0
    assert bridge_b.log().count("password rejected") == 1  # one line, not one per packet


# --- a station that speaks the uplink protocol as ipxbox_uplink does -------------------------


class IpxboxUplinkStation:
    """Written from the protocol facts (docs/protocols.md 3.9), byte for byte as ipxbox's
    ``ipxbox_uplink`` sends them, independent of ``ipxbridge.wire.uplink``. It reproduces:

    * control header: 30 bytes, checksum 0x0000 and Length 0x0000, everything zero but the
      destination node ``UpLiNK``;
    * JSON exactly as Go's encoding/json writes the struct: compact, keys in the order
      message-type, challenge, solution, and ``null`` for an absent field;
    * the solutions: SHA-256("client" ‖ server challenge ‖ password ‖ server challenge) and
      SHA-256("server" ‖ client challenge ‖ password ‖ client challenge);
    * a client challenge of 64 random bytes, sent as 88 base64 characters;
    * data from a pcap-bridged segment: checksum 0, transport control 127, Ethernet padding.
    """

    HEADER = struct.pack(
        "!HHBB4s6sH4s6sH", 0, 0, 0, 0, bytes(4), b"UpLiNK", 0, bytes(4), bytes(6), 0
    )

    def __init__(self, ns: str, server: tuple[str, int]) -> None:
        with inside(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(2.0)
        self.sock.connect(server)

    def control(
        self, kind: str, challenge: bytes | None = None, solution: bytes | None = None
    ) -> None:
        def b64(v: bytes | None) -> str:
            return "null" if v is None else '"' + base64.b64encode(v).decode() + '"'

        body = (
            f'{{"message-type":"{kind}","challenge":{b64(challenge)},"solution":{b64(solution)}}}'
        )
        self.sock.send(self.HEADER + body.encode())

    def read_control(self) -> dict[str, Any]:
        while True:
            data = self.sock.recv(70_000)
            if data[10:16] == b"UpLiNK":
                assert data[:4] == b"\x00\x00\x00\x00", data[:4]  # checksum 0, Length 0
                message: dict[str, Any] = json.loads(data[30:])
                return message

    def read_data(self) -> bytes:
        while True:
            data = self.sock.recv(70_000)
            if data[10:16] != b"UpLiNK":
                return data


@pytest.mark.netns
def test_ipxbox_uplink_station_connects_to_our_server_side(net: Netns, workdir: Path) -> None:
    sa, sb, a1, _ = sites(net)
    bridge_a = server_bridge(net, sa, workdir)
    try:
        alice = Client(a1, ("10.41.1.1", 213))  # only listens (docs/protocols.md 4.4)
        station = IpxboxUplinkStation(sb, A_TUNNEL)
        station.control("get-challenge-request")
        response = station.read_control()
        assert list(response) == ["message-type", "challenge", "solution"]
        assert response["message-type"] == "get-challenge-response"
        assert response["solution"] is None
        assert len(response["challenge"]) == 88
        server_challenge = base64.b64decode(response["challenge"])
        assert len(server_challenge) == 64
        pw = PASSWORD.encode()
        ours = bytes(range(64))
        solution = hashlib.sha256(b"client" + server_challenge + pw + server_challenge).digest()
        station.control("submit-solution", ours, solution)
        accepted = station.read_control()
        assert accepted["message-type"] == "submit-solution-accepted"
        assert (
            base64.b64decode(accepted["solution"])
            == hashlib.sha256(b"server" + ours + pw + ours).digest()
        )
        assert accepted["challenge"] is None

        # A station behind the uplink, as ipxbox forwards it from its pcap-bridged segment.
        behind = bytes.fromhex("00a0c9112233")
        packet = ipx.build_packet(
            dst_node=ipx.BROADCAST_NODE,
            dst_socket=0x4545,
            src_node=behind,
            src_socket=0x4545,
            payload=b"from ipxbox",
        )
        framed = b"\x00\x00" + packet[2:4] + b"\x7f" + packet[5:] + bytes(5)
        station.sock.send(framed)
        header, payload = receive_once(alice)
        assert (payload, header.src_node, header.hops, header.checksum) == (
            b"from ipxbox",
            behind,
            1,
            0xFFFF,
        )
        # Back: a unicast to the node learned behind the uplink, and a broadcast.
        alice.send(behind, b"to ipxbox")
        got = ipx.parse_header(station.read_data())
        assert (got.src_node, got.dst_node) == (alice.node, behind)
        alice.send(ipx.BROADCAST_NODE, b"everyone")
        assert station.read_data()[30:] == b"everyone"
        assert metric(sa, "ipxbridge_uplink_normalised_packets_total", what="ipxbox_mark") == 1
        # Idle for over 5 s: the server keeps the NAT mapping open with a keepalive.
        station.sock.settimeout(9.0)
        assert station.read_control()["message-type"] == "keepalive"
        station.control("close-connection")
    finally:
        assert bridge_a.stop() == 0
    assert re.search(r"uplink client 10\.40\.0\.2:\d+ closed the connection", bridge_a.log())


@pytest.mark.netns
def test_unreachable_uplink_server_is_one_log_line_per_attempt(net: Netns, workdir: Path) -> None:
    _, sb, _, _ = sites(net)  # nothing listens on A: its kernel answers ICMP port unreachable
    bridge_b = client_bridge(net, sb, workdir, PASSWORD)
    try:
        bridge_b.wait_for(
            r"uplink 10\.40\.0\.1:213: no answer from server \(.*\), retrying in 1 s", 10
        )
        bridge_b.wait_for(r"retrying in 2 s", 10)
        assert metric(sb, "ipxbridge_uplinks", role="client", state="connected") == 0
        assert (
            metric(sb, "ipxbridge_uplink_handshakes_total", role="client", outcome="no_answer") >= 2
        )
    finally:
        assert bridge_b.stop() == 0
    assert bridge_b.log().count("no answer from server") <= 3
