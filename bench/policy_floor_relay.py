#!/usr/bin/env python3
"""The Python relay's floor: ipxbridge's own per-datagram work and nothing else.

    python3 bench/policy_floor_relay.py --port 47624 --from lanA --to lanB [--no-decide]

What ``relay_bench.py`` runs as ``floor`` (and ``floor_nodecide``), beside the naive loop, to
show where the Python path's time goes. One blocking ``recvmsg`` per datagram with the same
ancillary data the bridge asks for, then the bridge's own code: ``RelayPolicy.decide``
(``ipxbridge/policy/relay.py``, every rule), ``build_ip_udp`` and a send through the packet
socket of ``open_link`` (``ipxbridge/io/relay.py``). Left out, and so not paid: asyncio, the
per-source fair queues, the DirectPlay inspector, the books. With ``--no-decide`` the
decision is left out too (every datagram from FROM is copied to TO's broadcast): the I/O
alone, which the naive loop's two calls also pay. No relay built from these parts in Python
can relay more, or sooner, than this.
"""

import argparse
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's ipxbridge

from naive_relay import ipv4_link  # beside this script

from ipxbridge.io.relay import (  # after the path above
    ANC_SIZE,
    IP_PKTINFO,
    IP_RECVTOS,
    IP_RECVTTL,
    RECV_SIZE,
    build_ip_udp,
    open_link,
    parse_ancillary,
)
from ipxbridge.policy.relay import Egress, RelayPolicy, RelaySettings, SourceMode


def egress_of(ifname: str) -> Egress:
    """``ifname`` as the relay's plan describes it (first IPv4 address, a LAN)."""
    link = ipv4_link(ifname)
    addr = link["addr_info"][0]
    local, prefix = addr["local"], addr["prefixlen"]
    return Egress(
        link["ifindex"],
        ifname,
        "lan",
        local,
        addr["broadcast"],
        mtu=link.get("mtu", 1500),
        networks=(f"{local}/{prefix}",),
        addresses=(local,),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--from", dest="src", required=True, help="interface to listen on")
    parser.add_argument("--to", dest="dst", required=True, help="interface to re-send on")
    parser.add_argument("--no-decide", action="store_true", help="the I/O alone")
    args = parser.parse_args()
    ingress, egress = egress_of(args.src), egress_of(args.dst)
    policy = RelayPolicy(RelaySettings(source_mode=SourceMode.PRESERVE))
    policy.set_plan(
        (ingress, egress),
        frozenset({ingress.address, egress.address}),
        {
            ingress.index: frozenset({ingress.broadcast}),
            egress.index: frozenset({egress.broadcast}),
        },
    )
    link = open_link(args.dst)
    if link is None:
        print("no packet socket on", args.dst, file=sys.stderr)
        return 1
    out, head = link
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for option in (IP_PKTINFO, IP_RECVTTL, IP_RECVTOS):
        rx.setsockopt(socket.IPPROTO_IP, option, 1)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # as the bridge's (forced)
    rx.bind(("0.0.0.0", args.port))
    what = "I/O alone" if args.no_decide else "decide + build + send"
    print(f"floor relay: {args.src} -> {args.dst} ({what})", flush=True)
    recvmsg, send, decide, clock = rx.recvmsg, out.send, policy.decide, time.monotonic
    port, ident, to = args.port, 0, (egress.broadcast, args.port)
    while True:
        data, anc, _, src = recvmsg(RECV_SIZE, ANC_SIZE)
        ifindex, dst_ip, ttl, tos = parse_ancillary(anc)
        if args.no_decide:
            if ifindex != ingress.index:
                continue
            targets = [(to, ttl - 1)]
        else:
            decision = decide(
                data, src=src, dst_ip=dst_ip, dst_port=port, ingress=ifindex, ttl=ttl,
                now=clock(), tos=tos,
            )  # fmt: skip
            if decision.drop_reason is not None:
                continue
            targets = [((c.dst, port), c.ttl) for c in decision.copies]
        for dst, out_ttl in targets:
            ident = (ident + 1) & 0xFFFF
            for packet in build_ip_udp(src, dst, data, ttl=out_ttl, ident=ident, mtu=1500):
                try:  # noqa: SIM105 - contextlib.suppress costs a context manager a packet
                    send(head + packet)
                except OSError:  # ENOBUFS, EAGAIN under load: lost, as in the naive loop
                    pass


if __name__ == "__main__":
    sys.exit(main())
