"""Rule 8 under attack: a recorded beacon cannot silence a segment (policy/bridges.py).

Two bridges X and Y share the key (``ipx.bridge_key_file``) and peer with a remote site's
bridge B, whose DOSBox-protocol client broadcasts 10 times a second; a native station counts
what reaches its segment. The attacker is a raw socket on the segments:

* **replayed later**: X and Y on one segment S. The attacker records X's signed beacon;
  X is switched off (the lower id: it served S for B's packets), and the recording is
  replayed every 2 s. Before, Y believed X was there for as long as the replays came and
  left B's packets to it: 0 of 80 reached S. Now the replay is refused (the sequence is
  remembered beyond the record's expiry) and, while Y's belief lasts, what X does not put
  on S Y sends itself after 0.2 s (the delivery watch).
* **failover**: L is killed, loses its link to B, or loses its port on the segment while B's
  client broadcasts; H sends what L no longer does after 0.2 s, while it still believes L
  is there (up to BEACON_TTL).
* **another segment**: X on S, Y on T; the attacker hears S and forwards every beacon of X
  onto T as it comes (fresh, signed: the key proves who, not where; and without a key, the
  tag X declared to its peers confirms it just as well). Before, Y believed X was on T and
  left B's packets to it: 0 of 80 on T, with the key and without. Now X's beacon echoes the
  tags of the bridges X hears on S, not Y's tag on T, and Y refuses it (``beacon_unbound``);
  were it believed, the delivery watch would still send each broadcast 0.2 s later.

Bridge ids are random: the attack is aimed at whichever bridge has the lower id (the one
the other leaves B's packets to), on its wire.
"""

import select
import socket
import struct
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from ipxbridge.wire import ipx
from scripts.harness import BridgeProcess, Netns, inside, sh
from tests.integration.test_ipx_segments import (
    ETH_P_ALL,
    ETHERNET_II,
    Chatter,
    DosboxClient,
    Station,
    Tally,
    frame_ipx,
    metric,
    metrics,
    port_bridges,
    segment_port,
    stopping,
    up,
    verified,
    wait_until,
)

BEACON_SOCKET = ipx.SOCKET_BEACON
SENT = 80  # broadcasts from B's client, 10 a second


def beacon_source(frame: bytes) -> bytes | None:
    """The bridge id (IPX source node) of a beacon frame in any framing, else None."""
    found = frame_ipx(frame)
    if found is None:
        return None
    packet = found[1]
    if struct.unpack_from("!H", packet, 16)[0] != BEACON_SOCKET:
        return None
    return packet[22:28]


class Attacker:
    """Raw sockets on the segments' wires: records and replays frames as they are."""

    def __init__(self, ns: str, ifaces: tuple[str, ...]) -> None:
        self.socks: dict[str, socket.socket] = {}
        for iface in ifaces:
            with inside(ns):
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            sock.bind((iface, ETH_P_ALL))
            sock.settimeout(0.2)
            self.socks[iface] = sock

    def beacons(self, macs: dict[bytes, str], seconds: float) -> dict[str, tuple[bytes, bytes]]:
        """namespace -> (its bridge id, its latest beacon frame), for the bridges whose port
        MACs ``macs`` names, heard on any wire; as soon as each has been heard."""
        out: dict[str, tuple[bytes, bytes]] = {}
        deadline = time.monotonic() + seconds
        while len(out) < len(macs) and time.monotonic() < deadline:
            ready, _, _ = select.select(list(self.socks.values()), [], [], 0.2)
            for sock in ready:
                frame = sock.recv(2048)
                bridge = beacon_source(frame)
                if bridge is not None and frame[6:12] in macs:
                    out[macs[frame[6:12]]] = (bridge, frame)
        return out

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()


def mac_of(ns: str, iface: str) -> bytes:
    line = sh("ip", "-n", ns, "-o", "link", "show", iface).stdout
    return bytes.fromhex(line.split("link/ether ")[1].split()[0].replace(":", ""))


class Sites:
    """S (and T), X and Y on them, the remote bridge B with its client, the attacker."""

    def __init__(self, net: Netns, workdir: Path, *, two_segments: bool, key: bool) -> None:
        self.net, self.workdir = net, workdir
        names = ("segS", "segT", "nS", "nT", "x", "y", "rb", "c", "atk")
        self.seg_s, self.seg_t, self.n_s, self.n_t, self.x, self.y, self.rb, self.c, self.atk = (
            net.add(n) for n in names
        )
        for seg in (self.seg_s, self.seg_t):
            sh("ip", "-n", seg, "link", "add", "br0", "type", "bridge")
            up(seg, "br0")
        y_seg = self.seg_t if two_segments else self.seg_s
        for seg, ns, iface, port in (
            (self.seg_s, self.n_s, "eth0", "p-n"),
            (self.seg_t, self.n_t, "eth0", "p-n"),
            (self.seg_s, self.x, "lan0", "p-x"),
            (y_seg, self.y, "lan0", "p-y"),
            (self.seg_s, self.atk, "s0", "p-a"),
            (self.seg_t, self.atk, "t0", "p-a"),
        ):
            segment_port(seg, ns, iface, port)
            up(ns, iface)
        # X, Y and B on one network (B has one address, so X and Y name it alike)
        self.wan = net.add("wan")
        sh("ip", "-n", self.wan, "link", "add", "br0", "type", "bridge")
        up(self.wan, "br0")
        for ns, address in (
            (self.x, "10.47.0.1/24"),
            (self.y, "10.47.0.2/24"),
            (self.rb, "10.47.0.3/24"),
        ):
            segment_port(self.wan, ns, "up0", f"p-{ns[-2:]}")
            up(ns, "up0", address)
        net.link(self.rb, "cl0", "10.48.0.1/24", self.c, "eth0", "10.48.0.11/24")
        self.env: dict[str, str] = {}
        if key:
            path = workdir / "bridge.key"
            path.write_bytes(b"a secret the LAN's bridges share, 32+ bytes long")
            path.chmod(0o600)
            self.env["IPXBRIDGE_IPX__BRIDGE_KEY_FILE"] = str(path)
        self.b = BridgeProcess(
            net, self.rb, "--peer", "10.47.0.1", "--peer", "10.47.0.2", log_dir=workdir,
            env=self.env,
        )  # fmt: skip

    def start(self, ns: str) -> BridgeProcess:
        peers = {self.x: ("10.47.0.3", "10.47.0.2"), self.y: ("10.47.0.3", "10.47.0.1")}[ns]
        bridge = BridgeProcess(
            self.net,
            ns,
            *("--ipx-iface", "lan0:ethernet"),
            *(a for p in peers for a in ("--peer", p)),
            log_dir=self.workdir,
            env=self.env,
        )
        bridge.wait_for(r"IPX interface ports: .*lan0/ethernet", 10)
        return bridge


@pytest.mark.netns
@pytest.mark.parametrize(
    "attack",
    [
        "replayed_later",
        "another_segment",
        "another_segment_no_key",
        "low_bridge_dies",
        "low_loses_peer_link",
        "low_loses_its_port",
    ],
)
def test_a_recorded_beacon_cannot_silence_a_segment(net: Netns, workdir: Path, attack: str) -> None:
    two = attack.startswith("another_segment")
    sites = Sites(net, workdir, two_segments=two, key=not attack.endswith("no_key"))
    attacker = Attacker(sites.atk, ("s0", "t0"))
    macs = {mac_of(sites.x, "lan0"): sites.x, mac_of(sites.y, "lan0"): sites.y}
    with ExitStack() as stack:
        stack.callback(attacker.close)
        stack.enter_context(stopping(sites.b))
        bridges = {sites.x: sites.start(sites.x), sites.y: sites.start(sites.y)}
        for bridge in bridges.values():
            stack.callback(bridge.stop)  # whatever happens; exit codes checked below
        heard = attacker.beacons(macs, 8.0)  # a bridge announces itself as it starts
        assert len(heard) == 2, heard
        # Ids are random: the lower one (L) is the bridge the other (H) leaves B's packets to.
        low, high = sorted((sites.x, sites.y), key=lambda ns: heard[ns][0])
        low_id, recorded = heard[low]
        stack.enter_context(stopping(bridges[high]))
        if attack != "low_bridge_dies":  # (killed there)
            stack.enter_context(stopping(bridges[low]))
        wire = {sites.x: "s0", sites.y: "t0" if two else "s0"}
        station_ns = {"s0": sites.n_s, "t0": sites.n_t}[wire[high]]
        station = Station("N", station_ns, "eth0")
        client = DosboxClient("C", sites.c, ("10.48.0.1", 213))
        verified(client)
        station.announce()
        stop = threading.Event()
        failover = attack.startswith("low_")
        if failover:
            # L dies, loses its link to B, or loses its port on S while B's client broadcasts;
            # H may still believe L for up to BEACON_TTL, and what L no longer puts on S, H
            # sends after the watch's window.
            def fail_low() -> None:
                if stop.wait(3.0):
                    return
                if attack == "low_bridge_dies":
                    bridges[low].proc.kill()
                elif attack == "low_loses_peer_link":
                    sh("ip", "-n", low, "link", "set", "up0", "down")
                else:
                    sh("ip", "-n", low, "link", "del", "lan0")

            attack_thread = threading.Thread(target=fail_low, daemon=True)
        elif two:

            def forward() -> None:  # every beacon of L heard on its wire, onto H's as it comes
                src, dst = attacker.socks[wire[low]], attacker.socks[wire[high]]
                while not stop.is_set():
                    try:
                        frame = src.recv(2048)
                    except TimeoutError:
                        continue
                    if beacon_source(frame) == low_id:
                        dst.send(frame)

            attack_thread = threading.Thread(target=forward, daemon=True)
        else:
            bridges[low].stop()  # L switched off (the stopping() above checks its exit)
            # H takes over once L's beacons expire (BEACON_TTL); then the recording plays
            wait_until("H forgets L", lambda: port_bridges(high) == 0.0, 30)

            def replay() -> None:
                while not stop.wait(2.0):
                    attacker.socks["s0"].send(recorded)

            attacker.socks["s0"].send(recorded)
            attack_thread = threading.Thread(target=replay, daemon=True)
        dst_ns = high

        # On the way out: stop the attack, wait for its thread, then (registered first) close
        # the attacker's sockets.
        def join_attack() -> None:
            if attack_thread.is_alive():
                attack_thread.join(5)

        stack.callback(join_attack)
        stack.callback(stop.set)
        if not failover:
            attack_thread.start()
            time.sleep(3.0)  # the attack takes hold (a forwarded beacon every 5 s)
        tally = stack.enter_context(Tally([station]))
        chatter = Chatter([client], 0.1)
        if failover:
            attack_thread.start()
        with chatter:
            deadline = time.monotonic() + SENT * 0.1 + 5
            while chatter.sent < SENT and time.monotonic() < deadline:
                time.sleep(0.1)
        time.sleep(0.5)
        got = {c.payload for c in tally.copies if c.framing == ETHERNET_II}
        sent = {f"churn C {n}".encode() for n in range(chatter.sent)}
        delivered = len(sent & got)
        lost = sorted(sent - got, key=lambda p: int(p.split()[-1]))
        text = metrics(dst_ns)
        missing = metric(text, "ipxbridge_ipx_delegated_total", outcome="missing") or 0.0
        replays = metric(
            text, "ipxbridge_dropped_packets_total", path="ipx", reason="beacon_replay"
        )
        unbound = metric(
            text, "ipxbridge_dropped_packets_total", path="ipx", reason="beacon_unbound"
        )
        print(
            f"{attack}: {delivered}/{chatter.sent} on the segment; H sent {missing:.0f} itself;"
            f" beacon replays refused {replays}, unbound refused {unbound}; lost {lost[:5]}"
        )
        assert chatter.sent >= SENT - 2
        # A failover has cost one broadcast once in 16 runs (the peer link cut; the cause was
        # not found: docs/reliability.md R25), so it may cost one; an attack may cost none.
        allowed = chatter.sent - 1 if failover else 0.99 * chatter.sent
        assert delivered >= allowed, (delivered, chatter.sent, missing, lost)
        if attack == "replayed_later":
            assert (replays or 0) >= 1
        elif two:  # L's beacons echo the tags heard on L's wire, not H's tag on its own
            assert (unbound or 0) >= 1
        else:  # H's own copies, after the window, while it believed L was there
            assert missing >= 1
