#!/usr/bin/env python3
"""A deliberately naive broadcast relay on a raw socket: the floor ``relay_bench.py`` measures
against.

    python3 bench/naive_relay.py --port 47624 --from lanA --to lanB

A UDP socket receives on PORT, on interface FROM only; each datagram is written again, one
``sendto`` at a time, through a raw socket out of TO, to TO's subnet broadcast, from the
sender's own address and port (as a relay must, so that a game host's answer reaches the
player). Nothing else: default buffers, no batching, no checks, no UDP checksum, one
direction. Listening on FROM only is what keeps it from relaying its own copies, which the
kernel loops back on TO.
"""

import argparse
import json
import socket
import struct
import subprocess
import sys
from typing import Any

HEADERS = struct.Struct("!BBHHHBBH4s4sHHHH")  # IPv4 (20 bytes) and UDP (8 bytes)


def ipv4_link(ifname: str) -> dict[str, Any]:
    """``ip -j -4 addr show dev IFNAME``: the link, its first address under ``addr_info``."""
    out = subprocess.run(
        ["ip", "-j", "-4", "addr", "show", "dev", ifname],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    link: dict[str, Any] = json.loads(out)[0]
    return link


def broadcast_of(ifname: str) -> str:
    """The subnet broadcast of ``ifname``'s first IPv4 address."""
    broadcast: str = ipv4_link(ifname)["addr_info"][0]["broadcast"]
    return broadcast


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--from", dest="src", required=True, help="interface to listen on")
    parser.add_argument("--to", dest="dst", required=True, help="interface to re-send on")
    args = parser.parse_args()
    broadcast = broadcast_of(args.dst)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, args.src.encode())
    rx.bind(("0.0.0.0", args.port))
    tx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)  # IP header is ours
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, args.dst.encode())
    dst = socket.inet_aton(broadcast)
    print(f"naive relay: {args.src} -> {args.dst} ({broadcast}:{args.port})", flush=True)
    while True:
        data, (src, sport) = rx.recvfrom(65535)
        size = len(data)
        # The kernel fills in the IP id and checksum; a UDP checksum of 0 means "none".
        headers = HEADERS.pack(
            *(0x45, 0, 28 + size, 0, 0, 64, socket.IPPROTO_UDP, 0, socket.inet_aton(src), dst),
            *(sport, args.port, 8 + size, 0),
        )
        try:
            tx.sendto(headers + data, (broadcast, 0))
        except OSError:  # ENOBUFS under load: the datagram is lost, as in any naive relay
            continue


if __name__ == "__main__":
    sys.exit(main())
