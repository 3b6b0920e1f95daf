"""A fake DirectPlay game host for the integration tests (run inside a namespace).

It answers session enumeration the way the specifications say real hosts do:

* DirectPlay 4 over UDP: EnumSessions arrives on UDP 47624; the reply goes over **TCP** to the
  port in the request's SOCKADDR, at the UDP source address when the SOCKADDR address is
  0.0.0.0 ([MC-DPL4CS] 3.1.4.1, docs/protocols.md 7).
* DirectPlay 8: EnumQuery arrives on UDP 6073 (DPNSVR); the EnumResponse is sent to the query's
  source **from the game port** (2302), not from 6073 ([MC-DPLHP] 2.2.2).
* DirectPlay 4 over IPX (``--ipx SERVER``): registers with a DOSBox-protocol server, and
  answers an EnumSessions on socket 0xA57F with a bare EnumSessionsReply to the sender's node.

Prints ``ready`` once listening; runs until killed.
"""

import argparse
import dataclasses
import select
import socket
import sys
import uuid

from ipxbridge.wire import ipx
from ipxbridge.wire.directplay import (
    DP4Message,
    DP8EnumQuery,
    DP8EnumResponse,
    EnumSessions,
    EnumSessionsReply,
    SessionDesc,
    SockAddr,
    build_dp8_enum_response,
    build_enum_sessions_reply,
    parse_dplay,
)

ARMADA = uuid.UUID("76F93801-9340-11D2-AE34-00600895C779")
DP8_GAME = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="Fake LAN")
    ap.add_argument("--players", type=int, default=3)
    ap.add_argument("--max", type=int, default=8)
    ap.add_argument("--password", action="store_true")
    ap.add_argument(
        "--user",
        default="1,2,3,4",
        help="dwUser1..4 of the DP4 session, comma-separated (0x... allowed)",
    )
    ap.add_argument("--ipx", metavar="HOST:PORT", help="also serve DirectPlay over IPX")
    args = ap.parse_args()
    instance = uuid.uuid4()
    user = [int(word, 0) for word in args.user.split(",")]
    flags = 0x0400 if args.password else 0
    desc = SessionDesc(
        flags=flags,
        instance_guid=instance,
        application_guid=ARMADA,
        max_players=args.max,
        current_players=args.players,
        user=(user[0], user[1], user[2], user[3]),
    )

    dp4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dp4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    dp4.bind(("0.0.0.0", 47624))
    dpnsvr = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dpnsvr.bind(("0.0.0.0", 6073))
    game = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    game.bind(("0.0.0.0", 2302))
    socks = [dp4, dpnsvr]
    ipx_sock = None
    ipx_node = b""
    if args.ipx:
        host, port = args.ipx.rsplit(":", 1)
        ipx_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        ipx_sock.connect((host, int(port)))
        ipx_sock.send(ipx.build_registration())
        ipx_node = ipx.parse_header(ipx_sock.recv(2048)).dst_node
        socks.append(ipx_sock)
    print("ready", flush=True)

    while True:
        readable, _, _ = select.select(socks, [], [], 1.0)
        for sock in readable:
            if sock is ipx_sock:
                data = sock.recv(65535)
                header, payload = ipx.parse_packet(data)
                if header.is_echo and header.is_broadcast:
                    sock.send(ipx.build_ping_reply(header.src_node, ipx_node))
                    continue
                if header.dst_socket != ipx.SOCKET_DPLAY_DISCOVERY:
                    continue
                msg = parse_dplay(bytes(payload))
                if isinstance(msg, DP4Message) and isinstance(msg.parsed, EnumSessions):
                    # a session lives on one service provider: its own instance GUID
                    ipx_desc = dataclasses.replace(desc, instance_guid=uuid.uuid5(instance, "ipx"))
                    reply = build_enum_sessions_reply(
                        EnumSessionsReply(ipx_desc, args.name + " (IPX)"), bare=True
                    )
                    sock.send(
                        ipx.build_packet(
                            dst_net=header.src_net,
                            dst_node=header.src_node,
                            dst_socket=header.src_socket,
                            src_node=ipx_node,
                            src_socket=0x4002,
                            payload=reply,
                        )
                    )
                continue
            data, (src_ip, src_port) = sock.recvfrom(65535)
            msg = parse_dplay(data, dp8_context=sock is dpnsvr)
            if sock is dp4 and isinstance(msg, DP4Message) and isinstance(msg.parsed, EnumSessions):
                assert msg.header is not None
                addr = msg.header.sockaddr.address
                target = (src_ip if addr == "0.0.0.0" else addr, msg.header.sockaddr.port)
                reply = build_enum_sessions_reply(
                    EnumSessionsReply(desc, args.name), sockaddr=SockAddr(2, 2300, "0.0.0.0")
                )
                with socket.create_connection(target, timeout=3) as tcp:
                    tcp.sendall(reply)
            elif sock is dpnsvr and isinstance(msg, DP8EnumQuery):
                resp = DP8EnumResponse(
                    cookie=msg.cookie,
                    flags=0x80 if args.password else 0,
                    max_players=args.max,
                    current_players=args.players,
                    session_name=args.name + " (DP8)",
                    password=b"",
                    reserved_data=b"",
                    app_reserved_data=b"",
                    instance_guid=uuid.uuid5(instance, "dp8"),
                    application_guid=DP8_GAME,
                    reply_data=b"",
                )
                game.sendto(build_dp8_enum_response(resp), (src_ip, src_port))


if __name__ == "__main__":
    sys.exit(main())
