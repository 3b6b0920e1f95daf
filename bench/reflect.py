#!/usr/bin/env python3
"""Reflection campaign against the IPX tunnel (docs/reliability.md R7): can a spoofer aim the bridge
at a third party?

Own namespaces (created and deleted here; traffic stays inside them): ``box`` runs one
``ipxbridge run``; ``player`` (10.71.1.10) is a verified DOSBox-protocol client that broadcasts
game traffic; ``victim`` (10.71.2.10) answers nothing and counts, with a raw socket, every UDP
byte that reaches it from the bridge; ``attacker`` (10.71.3.10) sends datagrams whose IP source
is the victim's, through a raw socket. Attacks, one bridge each:

* ``rejoin``: one spoofed data packet carrying the node the bridge assigns to the victim's
  address (it used to make the victim a verified client until idle_timeout);
* ``register``: spoofed registrations from the victim's address, many ports.

BAF = UDP payload bytes the bridge sent the victim / UDP payload bytes spoofed as the victim.
Printed for the configuration given (default: the embedded defaults). ``--strict`` sets the
unverified budget to 0 and the credit ratio to 1 (docs/ipx.md, "Verification").

    python3 bench/reflect.py [--seconds 20] [--registrations 1000] [--strict]
"""

import argparse
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator

from benchlib.bridge import READY_IPX, start_bridge
from benchlib.frames import ipv4_udp, ipx_broadcast
from benchlib.netns import namespaces, sh, socket_in, veth

from ipxbridge.wire import ipx

PREFIX = f"rfl{os.getpid() % 100000}"
BOX_IPS = ("10.71.1.1", "10.71.2.1", "10.71.3.1")
PLAYER, VICTIM, ATTACKER = "10.71.1.10", "10.71.2.10", "10.71.3.10"
VICTIM_PORT = 40000
STRICT_ENV = {
    "IPXBRIDGE_IPX__UNVERIFIED_PACKETS_PER_SECOND": "0",
    "IPXBRIDGE_IPX__UNVERIFIED_PACKET_BURST": "0",
    "IPXBRIDGE_IPX__UNVERIFIED_BYTES_PER_SECOND": "0",
    "IPXBRIDGE_IPX__UNVERIFIED_BYTE_BURST": "0",
    "IPXBRIDGE_IPX__UNVERIFIED_CREDIT_RATIO": "1",
}


@contextlib.contextmanager
def topology() -> Iterator[dict[str, str]]:
    names = {n: f"{PREFIX}_{n}" for n in ("box", "player", "victim", "attacker")}
    with namespaces(*names.values()):
        for i, (who, ip) in enumerate(
            (("player", PLAYER), ("victim", VICTIM), ("attacker", ATTACKER))
        ):
            box_end = (names["box"], f"l{i}", f"{BOX_IPS[i]}/24")
            veth(box_end, (names[who], "eth0", f"{ip}/24"), brd=False)
            sh("ip", "-n", names[who], "route", "add", "default", "via", BOX_IPS[i])
        yield names


def spoofed(src: str, sport: int, dst: str, dport: int, payload: bytes) -> bytes:
    """An IPv4/UDP datagram with a chosen source (no UDP checksum)."""
    return ipv4_udp((src, sport), (dst, dport), payload, udp_checksum="none")


class VictimCounter(threading.Thread):
    """Counts UDP payload bytes from the bridge reaching the victim's address, any port."""

    def __init__(self, ns: str) -> None:
        super().__init__(daemon=True)
        self.sock = socket_in(ns, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        self.sock.settimeout(0.2)
        self.packets = 0
        self.bytes = 0
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            try:
                data, (src, _) = self.sock.recvfrom(70_000)
            except TimeoutError:
                continue
            if src in BOX_IPS:
                ihl = (data[0] & 0x0F) * 4
                self.packets += 1
                self.bytes += len(data) - ihl - 8


def attack(
    names: dict[str, str], kind: str, seconds: float, registrations: int, env: dict[str, str]
) -> dict[str, float]:
    bridge = start_bridge(
        *("--metrics-listen", "off"),
        name=f"{PREFIX}-{kind}",
        ns=names["box"],
        ready=READY_IPX,
        env=env,
    )
    try:
        counter = VictimCounter(names["victim"])
        counter.start()
        player = socket_in(names["player"], socket.AF_INET, socket.SOCK_DGRAM)
        player.settimeout(2)
        server = (BOX_IPS[0], 213)
        player.sendto(ipx.build_registration(), server)
        node = ipx.parse_header(player.recvfrom(2048)[0]).dst_node
        raw = socket_in(names["attacker"], socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        target = BOX_IPS[2]
        spoofed_bytes = 0
        if kind == "rejoin":
            victim_node = ipx.dosbox_node(VICTIM, VICTIM_PORT)
            pkt = ipx_broadcast(victim_node, b"x" * 30)
            raw.sendto(spoofed(VICTIM, VICTIM_PORT, target, 213, pkt), (target, 0))
            spoofed_bytes += len(pkt)
        else:
            reg = ipx.build_registration()
            for i in range(registrations):
                raw.sendto(spoofed(VICTIM, VICTIM_PORT + i, target, 213, reg), (target, 0))
                spoofed_bytes += len(reg)
        # The player plays: 20 broadcasts/s of 200 bytes, and answers the bridge's probes.
        player.setblocking(False)
        end = time.monotonic() + seconds
        seq = 0
        while time.monotonic() < end:
            payload = seq.to_bytes(4, "big") + bytes(196)
            player.sendto(ipx_broadcast(node, payload), server)
            seq += 1
            with contextlib.suppress(BlockingIOError):
                while True:
                    data = player.recv(2048)
                    header = ipx.parse_header(data)
                    if header.is_echo and header.is_broadcast:
                        player.sendto(ipx.build_ping_reply(header.src_node, node), server)
            time.sleep(0.05)
        time.sleep(0.5)
        counter.stop = True
        counter.join()
        return {
            "spoofed_bytes": spoofed_bytes,
            "victim_bytes": counter.bytes,
            "victim_packets": counter.packets,
            "player_broadcasts": seq,
        }
    finally:
        bridge.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--registrations", type=int, default=1000)
    ap.add_argument("--strict", action="store_true", help="unverified budget 0, credit ratio 1")
    args = ap.parse_args()
    env = STRICT_ENV if args.strict else {}
    print(
        f"configuration: {'strict (budget 0, credit 1)' if args.strict else 'defaults'}; "
        f"player: 20 broadcasts/s of 200 B for {args.seconds:g} s"
    )
    worst = 0.0
    with topology() as names:
        for kind in ("rejoin", "register"):
            r = attack(names, kind, args.seconds, args.registrations, env)
            baf = r["victim_bytes"] / r["spoofed_bytes"]
            worst = max(worst, baf)
            print(
                f"{kind:9s} spoofed {r['spoofed_bytes']:,} B -> victim got "
                f"{r['victim_bytes']:,} B in {r['victim_packets']:,} datagrams: BAF {baf:.2f}"
            )
    print(f"worst BAF {worst:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
