"""The IPX tunnel end to end: real sockets in namespaces, real DOSBox 0.74 clients.

Topologies (addresses are private to the namespaces this file creates):

* one bridge: ``box`` 10.31.1.1 and 10.31.2.1, clients ``c1`` 10.31.1.11, ``c2`` 10.31.2.12;
* two sites: ``sa`` (bridge A, 10.41.1.1; underlay 10.40.0.1) with client ``a1`` 10.41.1.11,
  ``sb`` (bridge B, 10.42.1.1; underlay 10.40.0.2) with client ``b1`` 10.42.1.11; the two
  bridges are RFC 1234 peers over the underlay.
"""

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipxbridge.wire import ipx
from scripts.harness import (
    ANNOUNCE_SOCKET,
    BridgeProcess,
    Client,
    DosBox,
    Netns,
    bridge_get,
    inside,
)
from tests.integration.conftest import require


def one_bridge(net: Netns) -> tuple[str, str, str]:
    box, c1, c2 = net.add("box"), net.add("c1"), net.add("c2")
    net.link(box, "lan1", "10.31.1.1/24", c1, "eth0", "10.31.1.11/24")
    net.link(box, "lan2", "10.31.2.1/24", c2, "eth0", "10.31.2.12/24")
    for ns, gw in ((c1, "10.31.1.1"), (c2, "10.31.2.1")):
        subprocess.run(["ip", "-n", ns, "route", "add", "default", "via", gw], check=True)
    return box, c1, c2


def two_sites(net: Netns) -> tuple[str, str, str, str]:
    sa, sb, a1, b1 = net.add("sa"), net.add("sb"), net.add("a1"), net.add("b1")
    net.link(sa, "wan", "10.40.0.1/24", sb, "wan", "10.40.0.2/24")
    net.link(sa, "lan", "10.41.1.1/24", a1, "eth0", "10.41.1.11/24")
    net.link(sb, "lan", "10.42.1.1/24", b1, "eth0", "10.42.1.11/24")
    return sa, sb, a1, b1


def as_dosbox_prints(node: bytes) -> str:
    """How ``ipxnet ping`` shows a responder: its node read as IPv4 + port (docs/protocols.md
    4.5)."""
    return f"Response from {socket.inet_ntoa(node[:4])}, port {int.from_bytes(node[4:], 'big')}"


def registered_node(bridge: BridgeProcess, ip: str) -> bytes:
    """The node the bridge gave the client at ``ip``, from its log."""
    found = bridge.wait_for(rf"client {re.escape(ip)}:\d+ registered as node ([0-9a-f:]+)", 40)
    return bytes.fromhex(found.group(1).replace(":", ""))


def idle_dosbox(net: Netns, ns: str, workdir: Path, server: str, *, speaks: bool) -> DosBox:
    """A DOSBox that connects and then sits at the prompt. DOSBox sends nothing after its
    registration until a program does; ``speaks``: it runs ``ipxnet ping`` once first (a
    broadcast from its node, as a game's first packet would be), which proves it receives
    at its address (policy/switch.py rule 2)."""
    commands = [f"ipxnet connect {server} > C:\\CONN.TXT"]
    if speaks:
        commands.append("ipxnet ping > C:\\PING0.TXT")
    return DosBox(net, ns, workdir, commands, exit_when_done=False)


def wait_verified(box: str, client: Client, timeout: float = 5.0) -> None:
    """Let ``client`` answer the bridge's probe (it comes 1 s after registration) until the
    bridge lists it as verified. A probe that came while the client was waiting for other
    packets was answered then (``Client.receive``): the next one would come only after
    ``keepalive_interval`` of silence, so the bridge is asked first."""
    node = client.node.hex(":")

    def verified() -> bool:
        clients = json.loads(bridge_get(box, "/api/clients"))
        return any(c["node"] == node and c["verified"] for c in clients)

    if verified():
        return
    client.answer_keepalive(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if verified():
            return
        time.sleep(0.1)
    raise AssertionError(f"{node} not verified within {timeout} s")


def wait_for_text(dosbox: DosBox, name: str, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in dosbox.read(name):
        assert time.monotonic() < deadline, (name, dosbox.read(name))
        time.sleep(0.2)


@pytest.mark.netns
@pytest.mark.dosbox
@pytest.mark.parametrize("idle_speaks", [True, False], ids=["spoke_first", "only_listens"])
def test_two_dosbox_clients_ping_each_other(net: Netns, workdir: Path, idle_speaks: bool) -> None:
    """The idle DOSBox sits at the prompt after connecting and sends nothing (docs/protocols.md
    4.4, "Silent after registration"); the other's ping reaches it all the same, and the
    emulator answers it. In one case it pings once first, as a game's first packet would."""
    box, c1, c2 = one_bridge(net)
    bridge = BridgeProcess(net, box, "--ipx-listen", "0.0.0.0:213", log_dir=workdir)
    idle = idle_dosbox(net, c2, workdir / "c2", "10.31.2.1 213", speaks=idle_speaks)
    try:
        node = registered_node(bridge, "10.31.2.12")
        if idle_speaks:
            wait_for_text(idle, "PING0.TXT", "Response from 10.31.2.1, port 213", 20)
        pinger = DosBox(
            net,
            c1,
            workdir / "c1",
            [
                "ipxnet connect 10.31.1.1 213 > C:\\CONN.TXT",
                "ipxnet ping > C:\\PING.TXT",
            ],
            exit_when_done=True,
        )
        assert pinger.wait(50) == 0
        assert "connected to server at 10.31.1.1" in pinger.read("CONN.TXT")
        ping = pinger.read("PING.TXT")
        # DOSBox decodes the responder's node as IPv4 + port (docs/protocols.md 4.5): the other
        # client answers from its keyed node, and the bridge answers from its own address.
        assert node[0] == 0x02
        assert as_dosbox_prints(node) in ping, ping
        assert "Response from 10.31.1.1, port 213" in ping, ping
    finally:
        idle.kill()
        assert bridge.stop() == 0
    counts = bridge.summary()
    assert counts["received"] == counts["forwarded"] + counts["control"] + counts["dropped"]
    # the idle client's own ping, when it was alone: answered by the bridge, heard by nobody
    assert counts["dropped"] == idle_speaks, bridge.log()
    assert ("no_destination=1" in bridge.log()) is idle_speaks


@pytest.mark.netns
@pytest.mark.dosbox
def test_dosbox_ping_crosses_two_peered_bridges(net: Netns, workdir: Path) -> None:
    sa, sb, a1, b1 = two_sites(net)
    bridge_a = BridgeProcess(net, sa, "--peer", "10.40.0.2", log_dir=workdir)
    bridge_b = BridgeProcess(net, sb, "--peer", "10.40.0.1:213", log_dir=workdir)
    idle = idle_dosbox(net, b1, workdir / "b1", "10.42.1.1", speaks=True)
    try:
        node = registered_node(bridge_b, "10.42.1.11")
        wait_for_text(idle, "PING0.TXT", "Response from 10.42.1.1, port 213", 20)
        pinger = DosBox(
            net,
            a1,
            workdir / "a1",
            [
                "ipxnet connect 10.41.1.1 > C:\\CONN.TXT",
                "ipxnet ping > C:\\PING.TXT",
            ],
            exit_when_done=True,
        )
        assert pinger.wait(50) == 0
        ping = pinger.read("PING.TXT")
        # the broadcast ping went A -> B over RFC 1234, the unicast answer came back B -> A
        assert as_dosbox_prints(node) in ping, ping
    finally:
        idle.kill()
        assert bridge_a.stop() == 0
        assert bridge_b.stop() == 0
    a, b = bridge_a.summary(), bridge_b.summary()
    # b1's own ping reached A before A had a client: no_destination there
    assert a["dropped"] == 1, bridge_a.log()
    assert "(no_destination=1)" in bridge_a.log()
    assert b["dropped"] == 0, bridge_b.log()


@pytest.mark.netns
def test_broadcast_and_unicast_between_sites_keep_payload_and_count_hops(
    net: Netns, workdir: Path
) -> None:
    sa, sb, a1, b1 = two_sites(net)
    bridge_a = BridgeProcess(net, sa, "--peer", "10.40.0.2", log_dir=workdir)
    bridge_b = BridgeProcess(net, sb, "--peer", "10.40.0.1", log_dir=workdir)
    try:
        alice = Client(a1, ("10.41.1.1", 213))
        bob = Client(b1, ("10.42.1.1", 213))  # only listens until it answers below
        # the keyed node of alice's address, from the key the bridges keep (conftest.py)
        key = Path(os.environ["IPXBRIDGE_IPX__NODE_KEY_FILE"]).read_bytes()
        assert alice.node == ipx.keyed_node(key, "10.41.1.11", alice.sock.getsockname()[1])

        big = bytes(range(256)) * 12  # 3072 bytes: fragmented on the wire
        alice.send(ipx.BROADCAST_NODE, big)
        header, payload = bob.receive()
        assert payload == big
        assert header.src_node == alice.node
        assert header.hops == 2  # incremented by each bridge

        # A 65,507-byte datagram is larger than the burst an unproven address may get
        # (32 KiB, docs/ipx.md "Verification"; DOSBox itself takes at most 1,424 bytes):
        # bob proves himself first, by answering the bridge's probe as DOSBox does.
        wait_verified(sb, bob)
        largest = bytes(ipx.MAX_DATAGRAM - ipx.HEADER_LEN)
        alice.send(ipx.BROADCAST_NODE, largest)
        assert bob.receive()[1] == largest

        bob.send(alice.node, b"unicast back")
        header, payload = alice.receive()
        assert (payload, header.src_node, header.dst_node) == (
            b"unicast back",
            bob.node,
            alice.node,
        )
        assert header.hops == 2
    finally:
        assert bridge_a.stop() == 0
        assert bridge_b.stop() == 0
    a = bridge_a.summary()
    # alice's registration and 2 broadcasts, bob's unicast via B
    assert a["received"] == 4
    assert a["dropped"] == a["copies_held_unverified"] == 0, bridge_a.log()
    b = bridge_b.summary()
    assert b["control"] == 2  # bob's registration and his answer to the probe
    # bob had sent nothing when alice's broadcasts came from the peer: served all the same
    # (a listener behind a peered bridge, docs/protocols.md 4.4)
    assert b["dropped"] == b["copies_held_unverified"] == 0, bridge_b.log()
    assert a["received"] == a["forwarded"] + a["control"] + a["dropped"]


@pytest.mark.netns
def test_malformed_flood_is_counted_and_bridge_keeps_serving(net: Netns, workdir: Path) -> None:
    box, c1, c2 = one_bridge(net)
    bridge = BridgeProcess(net, box, log_dir=workdir)
    try:
        alice = Client(c1, ("10.31.1.1", 213))
        bob = Client(c2, ("10.31.2.1", 213))
        bob.announce()  # bob's game, before it listens; alice has sent nothing and hears it
        good = ipx.build_packet(
            dst_node=ipx.BROADCAST_NODE,
            dst_socket=0x4545,
            src_node=alice.node,
            src_socket=0x4545,
            payload=b"ok",
        )
        bad = [
            b"",  # empty datagram (avahi CVE-2011-1002 lesson)
            b"\xff" * 29,  # truncated
            b"\x00\x00" + good[2:],  # checksum
            good[:2] + b"\xff\xff" + good[4:],  # length claims 65535
            ipx.build_packet(
                dst_node=ipx.BROADCAST_NODE,
                dst_socket=0x0452,
                src_node=alice.node,
                src_socket=0x0452,
            ),  # SAP, filtered
            ipx.build_packet(
                dst_node=ipx.BROADCAST_NODE, dst_socket=1, src_node=bob.node, src_socket=1
            ),  # spoofed source
        ]
        rounds = 200
        for _ in range(rounds):
            for pkt in bad:
                alice.sock.sendto(pkt, alice.server)
        alice.sock.sendto(good, alice.server)
        _, payload = bob.receive()
        assert payload == b"ok"  # still serving after the flood
        # an unregistered sender gets nothing back, not even an error
        with inside(c1):
            stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stranger.settimeout(0.5)
        stranger.sendto(good, ("10.31.1.1", 213))
        with pytest.raises(TimeoutError):
            stranger.recvfrom(2048)
        stranger.close()
    finally:
        assert bridge.stop() == 0
    log = bridge.log()
    assert "Traceback" not in log
    counts = bridge.summary()
    expected = {
        "truncated": 2 * rounds,
        "bad_checksum": rounds,
        "bad_length": rounds,
        "filtered_socket": rounds,
        "spoofed_source": rounds,
        "unregistered": 1,
    }
    for reason, n in expected.items():
        assert re.search(rf"\b{reason}={n}\b", log), (reason, log)
    assert counts["received"] == 2 + 1 + len(bad) * rounds + 1 + 1
    assert counts["dropped"] == sum(expected.values())
    assert counts["received"] == counts["forwarded"] + counts["control"] + counts["dropped"]


@pytest.mark.netns
def test_a_stalled_bridge_says_what_the_kernel_dropped_once(net: Netns, workdir: Path) -> None:
    """A bridge that cannot read for a while (stopped here with SIGSTOP: what a box short of
    CPU, or a flood, does to it) loses datagrams in the kernel before it can count them. That
    was a counter and a number at exit; the log now says it as it happens, once for all the
    drops within 10 minutes, never a line per tick."""
    box, c1, _ = one_bridge(net)
    bridge = BridgeProcess(net, box, log_dir=workdir)
    with inside(c1):
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:

        def stalled_burst() -> None:
            # 60,000 datagrams of 30 bytes: more than the 8 MiB (doubled by the kernel)
            # receive buffer holds, at about 700 bytes of kernel memory each.
            bridge.proc.send_signal(signal.SIGSTOP)
            try:
                for _ in range(60_000):
                    sender.sendto(b"\xff" * 30, ("10.31.1.1", 213))
            finally:
                bridge.proc.send_signal(signal.SIGCONT)

        stalled_burst()
        line = bridge.wait_for(r"WARNING .*the kernel dropped (\d+) datagrams at the IPX .*", 5)
        assert int(line[1]) > 0
        stalled_burst()  # more drops within the 10 minutes: counted, not said again
        time.sleep(2.5)  # two ticks
        assert bridge.log().count("the kernel dropped") == 1, bridge.log()
    finally:
        sender.close()
        assert bridge.stop() == 0
    log = bridge.log()
    assert "Traceback" not in log
    at_exit = re.search(r"stopped; IPX: .* kernel_dropped=(\d+)", log)
    assert at_exit, log
    assert int(at_exit[1]) > int(line[1])  # the second burst's drops are in the books


@pytest.mark.netns
def test_sigterm_stops_cleanly_and_logs_summary(net: Netns, workdir: Path) -> None:
    box = net.add("box")
    bridge = BridgeProcess(net, box, log_dir=workdir)
    time.sleep(0.2)
    assert bridge.stop() == 0
    assert "stopped; IPX: received=0" in bridge.log()


@pytest.mark.netns
def test_port_213_without_privilege_says_what_to_do(net: Netns) -> None:
    box = net.add("box")
    res = subprocess.run(
        # root without CAP_NET_BIND_SERVICE in its bounding set: bind(213) gets EACCES
        net.exec_args(
            box,
            "setpriv",
            "--bounding-set=-net_bind_service",
            sys.executable,
            "-m",
            "ipxbridge",
            "run",
        ),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert res.returncode == 2, res.stderr
    assert "permission denied" in res.stderr
    assert "CAP_NET_BIND_SERVICE" in res.stderr
    assert "Traceback" not in res.stderr


def wait_listening(capture: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """Block until tcpdump says it is listening (it prints that once the socket is open)."""
    assert capture.stderr is not None
    ready, _, _ = select.select([capture.stderr], [], [], timeout)
    assert ready, "tcpdump did not start"
    line = capture.stderr.readline()
    assert b"listening on" in line, line


@pytest.mark.netns
def test_tshark_decodes_what_the_bridge_forwards(net: Netns, workdir: Path) -> None:
    """tshark's IPX dissector (udp.port 213) as an independent decoder of our output."""
    require("tshark", "tcpdump")
    box, c1, c2 = one_bridge(net)
    bridge = BridgeProcess(net, box, log_dir=workdir)
    pcap = workdir / "c2.pcap"
    capture = subprocess.Popen(
        net.exec_args(
            c2, "tcpdump", "-i", "eth0", "--immediate-mode", "-U", "-n", "-w", str(pcap), "udp"
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        alice = Client(c1, ("10.31.1.1", 213))
        bob = Client(c2, ("10.31.2.1", 213))
        bob.announce()  # before it listens, as a game does
        wait_listening(capture)
        alice.send(ipx.BROADCAST_NODE, b"tshark-bcast", sock=0x4545)
        alice.send(bob.node, b"tshark-unicast", sock=0x869B)
        bob.receive(0x4545)
        bob.receive(0x869B)
        time.sleep(0.5)
    finally:
        capture.terminate()
        capture.wait(10)
        bridge.stop()
    fields = [
        "ipx.len",
        "ipx.hops",
        "ipx.packet_type",
        "ipx.dst.node",
        "ipx.dst.socket",
        "ipx.src.node",
        "ipx.src.socket",
        "data.data",
    ]
    args = [
        "tshark",
        "-r",
        str(pcap),
        "-Y",
        f"ipx.dst.socket != 0x0002 && ipx.dst.socket != {ANNOUNCE_SOCKET:#06x}",
        "-T",
        "fields",
        "-E",
        "separator=|",
    ]
    for f in fields:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines()]
    alice_node = alice.node.hex(":")
    assert rows == [
        {
            "ipx.len": str(30 + 12),
            "ipx.hops": "1",
            "ipx.packet_type": "0x00",
            "ipx.dst.node": "ff:ff:ff:ff:ff:ff",
            "ipx.dst.socket": "0x4545",
            "ipx.src.node": alice_node,
            "ipx.src.socket": "0x4545",
            "data.data": b"tshark-bcast".hex(),
        },
        {
            "ipx.len": str(30 + 14),
            "ipx.hops": "1",
            "ipx.packet_type": "0x00",
            "ipx.dst.node": bob.node.hex(":"),
            "ipx.dst.socket": "0x869b",
            "ipx.src.node": alice_node,
            "ipx.src.socket": "0x869b",
            "data.data": b"tshark-unicast".hex(),
        },
    ], out


@pytest.mark.netns
def test_clients_carry_on_after_a_bridge_restart(net: Netns, workdir: Path) -> None:
    box, c1, c2 = one_bridge(net)
    first = BridgeProcess(net, box, log_dir=workdir)
    alice = Client(c1, ("10.31.1.1", 213))
    bob = Client(c2, ("10.31.2.1", 213))
    assert first.stop() == 0
    second = BridgeProcess(net, box, log_dir=workdir)
    try:
        bob.send(ipx.BROADCAST_NODE, b"bob is still here")  # rejoins, nobody to hear it yet
        # the same key file, so the same node: only bob can know it, bob is verified
        second.wait_for(r"client 10\.31\.2\.12:\d+ rejoined .*its keyed node proves it", 5)
        alice.send(ipx.BROADCAST_NODE, b"after restart")
        assert bob.receive()[1] == b"after restart"
        bob.send(alice.node, b"reply")
        assert alice.receive()[1] == b"reply"
    finally:
        assert second.stop() == 0
    assert "registered as" not in second.log()  # nobody had to reconnect
