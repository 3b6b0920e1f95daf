"""The switch against clients that behave the way real ones do (real clients and games).

Each stand-in client reproduces a documented behaviour of a real one (docs/protocols.md):

* a DOS program under DOSBox leaves garbage in the transport-control byte and, answering from
  its receive buffer, sends back the hop count it received (4.1);
* a DOSBox client does not check the destination node of what it receives (4.4);
* IPXWrapper registers with packet type 2, never answers socket-2 pings, sends no keepalive,
  and a DirectPlay host behind it stays silent until someone enumerates (6, 1.9).

Topology: ``box`` (bridge; 10.61.1.1 and 10.61.2.1) with clients ``c1`` 10.61.1.11 and ``c2``
10.61.2.12 on their own veth links.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ipxbridge.wire import directplay as dp
from ipxbridge.wire import ipx
from scripts.harness import (
    ROOT,
    BridgeProcess,
    Client,
    Netns,
    bridge_get,
    inside,
    register_as_ipxwrapper,
)

DISCOVERY = 0xA57F  # DirectPlay's IPX enumeration socket (docs/protocols.md 1.9)
HOST_SOCKET = 0x4002  # an ephemeral socket for the host's game traffic and replies
ARMADA = uuid.UUID("76F93801-9340-11D2-AE34-00600895C779")


def one_bridge(net: Netns) -> tuple[str, str, str]:
    box, c1, c2 = net.add("box"), net.add("c1"), net.add("c2")
    net.link(box, "lan1", "10.61.1.1/24", c1, "eth0", "10.61.1.11/24")
    net.link(box, "lan2", "10.61.2.1/24", c2, "eth0", "10.61.2.12/24")
    for ns, gw in ((c1, "10.61.1.1"), (c2, "10.61.2.1")):
        subprocess.run(["ip", "-n", ns, "route", "add", "default", "via", gw], check=True)
    return box, c1, c2


def start_bridge(net: Netns, box: str, workdir: Path, **env: str) -> BridgeProcess:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return BridgeProcess(net, box, log_dir=workdir)
    finally:
        for key, value in saved.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value


def packet(src: Client, dst_node: bytes, payload: bytes, hops: int, sock: int = 0x4545) -> bytes:
    return ipx.build_packet(
        dst_node=dst_node,
        dst_socket=sock,
        src_node=src.node,
        src_socket=sock,
        payload=payload,
        hops=hops,
    )


def receive_raw(client: Client, sock: int = 0x4545) -> bytes:
    """The next whole datagram for ``sock`` (keepalive pings skipped)."""
    while True:
        data, _ = client.sock.recvfrom(70_000)
        if ipx.parse_header(data).dst_socket == sock:
            return data


def count_until_quiet(sock: socket.socket, dst_socket: int, quiet: float) -> int:
    """Packets for ``dst_socket`` received until nothing arrives for ``quiet`` seconds."""
    sock.settimeout(quiet)
    got = 0
    try:
        while True:
            data, _ = sock.recvfrom(2048)
            got += ipx.parse_header(data).dst_socket == dst_socket
    except TimeoutError:
        return got


def api(box: str, path: str) -> Any:
    return json.loads(bridge_get(box, path))


@pytest.mark.netns
def test_garbage_hop_byte_and_a_40_round_trip_ping_pong_get_through(
    net: Netns, workdir: Path
) -> None:
    box, c1, c2 = one_bridge(net)
    bridge = start_bridge(net, box, workdir)
    try:
        alice = Client(c1, ("10.61.1.1", 213))
        bob = Client(c2, ("10.61.2.1", 213))
        # bob's game announces itself before it listens; alice has sent nothing yet and is
        # served all the same (a listener, docs/protocols.md 4.4); her first packet verifies
        # her.
        bob.announce()
        # Garbage left in the transport-control byte by a DOS program (docs/protocols.md 4.1).
        alice.sock.sendto(packet(alice, ipx.BROADCAST_NODE, b"garbage tc", 0x5A), alice.server)
        got = receive_raw(bob)
        assert ipx.parse_header(got).hops == 1  # counted from 0: one trip through the bridge
        assert got[30:] == b"garbage tc"
        # Each side answers from its receive buffer: the hop byte it received goes back out.
        data = packet(alice, bob.node, b"0", 0)
        sender, receiver = alice, bob
        for trip in range(80):  # 40 round trips
            sender.sock.sendto(data, sender.server)
            got = receive_raw(receiver)
            assert got[30:] == str(trip).encode(), trip
            hops = ipx.parse_header(got).hops
            sender, receiver = receiver, sender
            data = packet(sender, receiver.node, str(trip + 1).encode(), hops)
    finally:
        assert bridge.stop() == 0
    counts = bridge.summary()
    assert counts["forwarded"] == 82  # bob's announcement reached alice too
    assert counts["dropped"] == 0, bridge.log()
    assert counts["copies_held_unverified"] == 0


@pytest.mark.netns
def test_unknown_unicast_never_reaches_a_dosbox_client(net: Netns, workdir: Path) -> None:
    box, c1, c2 = one_bridge(net)
    bridge = start_bridge(net, box, workdir)
    try:
        alice = Client(c1, ("10.61.1.1", 213))
        bob = Client(c2, ("10.61.2.1", 213))
        bob.announce()  # its game, before it listens
        # To a node nobody has: DOSBox would hand it to bob's game as if addressed to it.
        alice.sock.sendto(
            packet(alice, bytes.fromhex("0a0b0c0d0e0f"), b"not yours", 0), alice.server
        )
        alice.sock.sendto(packet(alice, ipx.BROADCAST_NODE, b"marker", 0), alice.server)
        assert receive_raw(bob)[30:] == b"marker"  # nothing arrived before the marker
        bob.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            receive_raw(bob)
    finally:
        assert bridge.stop() == 0
    log = bridge.log()
    assert "unknown_destination=1" in log, log
    counts = bridge.summary()
    assert counts["received"] == counts["forwarded"] + counts["control"] + counts["dropped"]


class IpxWrapperHost:
    """Stands in for a DirectPlay host behind IPXWrapper in DOSBox mode (docs/protocols.md 6, 1.9).

    Registers with packet type 2, never answers a ping, sends no keepalive, and says nothing
    until an EnumSessions arrives on the discovery socket; it answers that with a bare
    EnumSessionsReply from its game socket to the enumerating node.
    """

    def __init__(self, ns: str, server: tuple[str, int]) -> None:
        self.server = server
        self.sock, reply = register_as_ipxwrapper(ns, server)
        self.node = ipx.parse_header(reply).dst_node
        self.pings_ignored = 0

    def answer_one_enumeration(self, timeout: float) -> bytes:
        """Wait for an EnumSessions; answer it. Returns the enumerating node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data, _ = self.sock.recvfrom(70_000)
            header, payload = ipx.parse_packet(data)
            if header.is_echo:
                self.pings_ignored += 1  # IPXWrapper never answers socket-2 pings
                continue
            if header.dst_socket != DISCOVERY:
                continue
            assert dp.parse_dp4(payload, bare=True).command == dp.DP4Command.ENUMSESSIONS
            desc = dp.SessionDesc(
                flags=0,
                instance_guid=uuid.uuid4(),
                application_guid=ARMADA,
                max_players=8,
                current_players=1,
                user=(0, 0, 0, 0),
            )
            body = dp.build_enum_sessions_reply(
                dp.EnumSessionsReply(desc, "Silent host"), bare=True
            )
            reply = ipx.build_packet(
                dst_node=header.src_node,
                dst_socket=header.src_socket,
                src_node=self.node,
                src_socket=HOST_SOCKET,
                payload=body,
            )
            self.sock.sendto(reply, self.server)
            return header.src_node
        raise TimeoutError("no EnumSessions arrived")


@pytest.mark.netns
@pytest.mark.parametrize("silence", [0, 12], ids=["at_once", "after_silence"])
def test_silent_ipxwrapper_host_stays_registered_and_is_found(
    net: Netns, workdir: Path, silence: int
) -> None:
    # A DirectPlay host behind IPXWrapper (DOSBox mode) says nothing until it is enumerated
    # (docs/protocols.md 6), and is found by the first enumeration, right after it registers
    # and after a long silence, with the defaults. Keepalives every second: the old switch
    # dropped a client after 3 unanswered ones (~4 s here, ~20 s at the default 5 s). 12 s
    # of silence = 12 keepalive intervals, the same number as 60 s at the default; the unit
    # test runs the full 60 s on an injected clock. Its answer carries its keyed node,
    # which verifies it.
    box, c1, c2 = one_bridge(net)
    bridge = start_bridge(net, box, workdir, IPXBRIDGE_IPX__KEEPALIVE_INTERVAL="1")
    try:
        host = IpxWrapperHost(c2, ("10.61.2.1", 213))
        time.sleep(silence)
        clients = api(box, "/api/clients")
        (listed_host,) = [c for c in clients if c["address"].startswith("10.61.2.12:")]
        assert listed_host["verified"] is False  # still listed though it never answered
        player = Client(c1, ("10.61.1.1", 213))
        enum = dp.build_enum_sessions(dp.EnumSessions(ARMADA, 0x41, None), bare=True)
        player.sock.sendto(
            packet(player, ipx.BROADCAST_NODE, enum, 0, sock=DISCOVERY), player.server
        )
        assert host.answer_one_enumeration(5) == player.node
        if silence:
            assert host.pings_ignored == 3  # it really was probed, 3 times, never answered
        header, payload = player.receive(sock=DISCOVERY)
        assert header.src_node == host.node
        (listed_host,) = [c for c in api(box, "/api/clients") if c["node"] == host.node.hex(":")]
        assert listed_host["verified"] is True  # only our reply told it that node
        reply = dp.parse_dp4(payload, bare=True)
        assert reply.command == dp.DP4Command.ENUMSESSIONSREPLY
        listed = subprocess.run(
            net.exec_args(box, sys.executable, "-m", "ipxbridge", "sessions", "--json"),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            cwd=ROOT,
        )
        names = [s["session_name"] for s in json.loads(listed.stdout)]
        assert names == ["Silent host"], listed.stdout
    finally:
        assert bridge.stop() == 0
    log = bridge.log()
    assert "Traceback" not in log
    assert "10.61.2.12" not in "".join(line for line in log.splitlines() if "expired" in line)


@pytest.mark.netns
@pytest.mark.parametrize("tight", [False, True], ids=["defaults", "tight_limit"])
def test_a_listener_gets_the_game_within_the_reflection_limit(
    net: Netns, workdir: Path, tight: bool
) -> None:
    # A registration is one spoofable datagram: until the address proves it receives, what
    # the bridge aims at it is held to a rate per address (docs/ipx.md, "Verification"). A
    # listener that never sends and never answers a probe (IPXWrapper) gets every one of 50
    # small broadcasts with the defaults; with a 600-byte burst and 100 B/s, what fits, and
    # the rest is held and counted.
    box, c1, c2 = one_bridge(net)
    env = (
        {
            "IPXBRIDGE_IPX__UNVERIFIED_ADDRESS_BYTES_PER_SECOND": "100",
            "IPXBRIDGE_IPX__UNVERIFIED_ADDRESS_BYTE_BURST": "600",
        }
        if tight
        else {}
    )
    bridge = start_bridge(net, box, workdir, **env)
    try:
        alice = Client(c1, ("10.61.1.1", 213))
        silent = IpxWrapperHost(c2, ("10.61.2.1", 213))  # never answers the probe
        for i in range(50):  # 32 bytes each, well within a second
            alice.sock.sendto(packet(alice, ipx.BROADCAST_NODE, b"%02d" % i, 0), alice.server)
        got = count_until_quiet(silent.sock, 0x4545, quiet=1.0)
        if tight:
            # 600 less its 30-byte reply, 60 kept for a probe and a reply: 15 at once, and
            # what 100 B/s adds while the 50 arrive
            assert 15 <= got <= 18, got
        else:
            assert got == 50
    finally:
        assert bridge.stop() == 0
    counts = bridge.summary()
    assert counts["copies_held_unverified"] == 50 - got
    assert counts["dropped"] == 50 - got  # those reached nobody: unverified_rate
    assert (f"unverified_rate={50 - got}" in bridge.log()) is tight


@pytest.mark.netns
def test_spoofed_registrations_do_not_lock_real_players_out(net: Netns, workdir: Path) -> None:
    # docs/reliability.md R7: ~255 spoofed registrations used to fill max_clients (clients_full
    # for every real player after them). Spoofed sources on c1's subnet, sent from a raw
    # socket; none of them answers a probe.
    box, c1, c2 = one_bridge(net)
    bridge = start_bridge(net, box, workdir, IPXBRIDGE_IPX__MAX_CLIENTS="4")
    try:
        with inside(c1):
            raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        registration = ipx.build_registration()
        for i in range(300):
            src = f"10.61.1.{100 + i % 100}"
            udp = struct.pack("!HHHH", 20000 + i, 213, 8 + len(registration), 0) + registration
            header = struct.pack(
                "!BBHHHBBH4s4s",
                0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0,
                socket.inet_aton(src), socket.inet_aton("10.61.1.1"),
            )  # fmt: skip
            raw.sendto(header + udp, ("10.61.1.1", 0))
        time.sleep(3.5)  # each spoofed entry has 2 s to prove itself, then it may make room
        players = [Client(ns, (gw, 213)) for ns, gw in ((c1, "10.61.1.1"), (c2, "10.61.2.1"))]
        for player in players:
            player.announce()  # its game's first packet carries its keyed node: verified
        clients = api(box, "/api/clients")
        verified = sorted(c["address"].split(":")[0] for c in clients if c["verified"])
        assert verified == ["10.61.1.11", "10.61.2.12"], clients
        players[0].send(ipx.BROADCAST_NODE, b"still playing")
        assert players[1].receive()[1] == b"still playing"
    finally:
        assert bridge.stop() == 0
    log = bridge.log()
    assert "clients_full" not in log, log
    assert "unverified_full=" in log  # the table of the unproven filled up, not max_clients
