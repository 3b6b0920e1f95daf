#!/usr/bin/env python3
"""Games that repeat themselves (switch rule 9): identical broadcasts through the IPX tunnel.

Games resend identical packets: retries, a status with no counter, redundancy against loss. A
loop bound that takes every identical packet for a loop copy holds them back. Here N
DOSBox-protocol clients (keyed nodes, each verified by its first packet) each send the *same*
broadcast R times a second for S seconds, and every client counts the copies it receives.
Expected: R x S x (N - 1) per client. Run side by side with another checkout (``--tree``, e.g.
the tree before the change, exported with ``git worktree add``) in the same run.

Own namespace (created and deleted here; traffic stays on its loopback).

    python3 bench/repeats.py [--clients 16] [--rate 500] [--seconds 4] [--tree PATH] [--json]
"""

import argparse
import json
import os
import selectors
import socket
import time
from pathlib import Path
from typing import Any

from benchlib import ROOT
from benchlib.bridge import READY_IPX, start_bridge
from benchlib.netns import namespaces, sh, socket_in

from ipxbridge.wire import ipx

NS = f"rpt{os.getpid() % 100000}"
PORT = 21300
SOCKET = 0x4545


def register(sock: socket.socket, server: tuple[str, int]) -> bytes:
    """Register as DOSBox does (docs/protocols.md 4.2); the node from the reply."""
    sock.sendto(ipx.build_registration(), server)
    sock.settimeout(5)
    reply, _ = sock.recvfrom(2048)
    return ipx.parse_header(reply).dst_node


def run(root: Path, label: str, clients: int, rate: float, seconds: float) -> dict[str, Any]:
    """One bridge from checkout ``root``; returns what the clients received."""
    server = ("127.0.0.1", PORT)
    bridge = start_bridge(
        "--ipx-listen",
        f"127.0.0.1:{PORT}",
        "--metrics-listen",
        "off",
        name=f"{NS}-{label}",
        ns=NS,
        ready=READY_IPX,
        root=root,
        env={"IPXBRIDGE_IPX__NODE_KEY_FILE": f"/tmp/{NS}-{label}.key"},
    )
    socks: list[socket.socket] = []
    try:
        for _ in range(clients):
            sock = socket_in(NS, socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        packets = []
        for sock in socks:
            node = register(sock, server)
            sock.setblocking(False)
            # Identical every time: no counter, as a game's status broadcast may be.
            packets.append(
                ipx.build_packet(
                    dst_node=ipx.BROADCAST_NODE,
                    dst_socket=SOCKET,
                    src_node=node,
                    src_socket=SOCKET,
                    payload=b"the same status, again",
                )
            )
        received = dict.fromkeys(range(clients), 0)
        selector = selectors.DefaultSelector()
        for i, sock in enumerate(socks):
            selector.register(sock, selectors.EVENT_READ, i)
        total = int(rate * seconds)
        sent = 0
        began = time.monotonic()
        for n in range(total):
            due = began + n / rate
            while True:
                wait = due - time.monotonic()
                for key, _ in selector.select(max(0.0, wait)):
                    received[key.data] += drain(key.fileobj)  # type: ignore[arg-type]
                if wait <= 0:
                    break
            for sock, packet in zip(socks, packets, strict=True):
                try:
                    sock.sendto(packet, server)
                except BlockingIOError:
                    continue
                sent += 1
        quiet_until = time.monotonic() + 1.0
        while time.monotonic() < quiet_until:
            for key, _ in selector.select(0.1):
                received[key.data] += drain(key.fileobj)  # type: ignore[arg-type]
        selector.close()
    finally:
        for sock in socks:
            sock.close()
        log = bridge.stop()
    expected = sent * (clients - 1) // clients  # per client, of what was really sent
    got = sorted(received.values())
    return {
        "tree": label,
        "clients": clients,
        "rate": rate,
        "seconds": seconds,
        "sent": sent,
        "expected_per_client": expected,
        "median_per_client": got[len(got) // 2],
        "min_per_client": got[0],
        "delivery": sum(got) / (sent * (clients - 1)) if sent else 0.0,
        "stop_line": next((line for line in log.splitlines() if "received=" in line), ""),
    }


def drain(sock: socket.socket) -> int:
    """Data packets waiting on ``sock`` (keepalive pings not counted)."""
    count = 0
    while True:
        try:
            data = sock.recv(2048)
        except BlockingIOError:
            return count
        if len(data) >= ipx.HEADER_LEN and int.from_bytes(data[16:18], "big") == SOCKET:
            count += 1


def main() -> int:
    """Run and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rate", type=float, default=500.0, help="broadcasts/s per client")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--tree", type=Path, help="also run this checkout (the baseline)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    rows = []
    with namespaces(NS):
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        trees = [(ROOT, "this")] + ([(args.tree.resolve(), "baseline")] if args.tree else [])
        for root, label in trees:
            rows.append(run(root, label, args.clients, args.rate, args.seconds))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{args.clients} clients, each sending one identical broadcast {args.rate:g}/s for "
        f"{args.seconds:g} s"
    )
    for row in rows:
        print(
            f"  {row['tree']:<9} delivery {row['delivery']:.4f}: per client median "
            f"{row['median_per_client']:,} (min {row['min_per_client']:,}) of "
            f"{row['expected_per_client']:,}"
        )
        print(f"            {row['stop_line'].strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
