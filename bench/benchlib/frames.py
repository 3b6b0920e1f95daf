"""Frames the bench writes itself: raw IPv4/UDP (any source, any length field) and IPX."""

import socket
import struct
from typing import Final

from ipxbridge.wire import ipx

GAME_SOCKET: Final = 0x4545  # the IPX socket the benches' synthetic games use


def inet_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4_udp(
    src: tuple[str, int],
    dst: tuple[str, int],
    payload: bytes,
    *,
    ttl: int = 64,
    udp_checksum: str = "good",  # good | bad | none
    udp_length: int | None = None,  # the UDP length field, if it is to lie
    ip_length: int | None = None,  # the IP total length field, if it is to lie
) -> bytes:
    """One IPv4/UDP packet with both checksums computed (unless told to lie).

    Written to a raw ``IPPROTO_RAW`` socket it goes out as it is, but for the IP checksum and
    a zero IP id, which the kernel fills in.
    """
    saddr, daddr = socket.inet_aton(src[0]), socket.inet_aton(dst[0])
    length = 8 + len(payload)
    header = struct.pack("!HHHH", src[1], dst[1], length, 0)
    pseudo = saddr + daddr + struct.pack("!BBH", 0, socket.IPPROTO_UDP, length)
    check = inet_checksum(pseudo + header + payload) or 0xFFFF
    check = {"good": check, "bad": check ^ 0x5A5A, "none": 0}[udp_checksum]
    udp = struct.pack("!HHHH", src[1], dst[1], udp_length or length, check) + payload
    total = ip_length or 20 + len(udp)
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, ttl, socket.IPPROTO_UDP, 0, saddr, daddr
    )
    ip = ip[:10] + struct.pack("!H", inet_checksum(ip)) + ip[12:]
    return ip + udp


def ipx_broadcast(src_node: bytes, payload: bytes, *, sock: int = GAME_SOCKET) -> bytes:
    """An IPX broadcast from ``src_node``, same socket at both ends."""
    return ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=sock,
        src_node=src_node,
        src_socket=sock,
        payload=payload,
    )
