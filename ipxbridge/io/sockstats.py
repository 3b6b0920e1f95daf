"""Datagrams the kernel dropped at the bridge's own UDP sockets.

A datagram that arrives while a socket's receive buffer is full is discarded by the kernel
and never reaches the bridge, so the bridge's own counters cannot see it. The kernel keeps a
count per socket: the ``drops`` column of /proc/net/udp (proc(5); the number SO_RXQ_OVFL
reports). It is read at scrape time and once a tick (the log's overload watch), never on the
packet path, so "received" plus these accounts for every datagram that reached the host
(docs/reliability.md R3, R13).
"""

import os
import socket
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final

# IPv4 only: every bridge socket is AF_INET (and udp6 is absent when IPv6 is disabled).
PROC_UDP: Final = Path("/proc/self/net/udp")
_INODE, _DROPS = 9, 12  # column indexes in /proc/net/udp lines
# SO_MEMINFO (linux/sock_diag.h): u32 sk_meminfo[SK_MEMINFO_VARS]; SK_MEMINFO_DROPS is the
# same per-socket counter as the drops column, read without scanning /proc.
SO_MEMINFO: Final = 55
_MEMINFO: Final = struct.Struct("=9I")
_MEMINFO_DROPS: Final = 8


def parse_drops(text: str) -> dict[int, int]:
    """``inode -> drops`` from the text of /proc/net/udp; malformed lines skipped."""
    out: dict[int, int] = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) <= _DROPS:
            continue
        try:
            out[int(fields[_INODE])] = int(fields[_DROPS])
        except ValueError:
            continue
    return out


def socket_drops(socks: Iterable[socket.socket]) -> int | None:
    """Kernel receive drops summed over ``socks``; None if /proc cannot be read."""
    inodes = set()
    for sock in socks:
        if sock.fileno() >= 0:
            inodes.add(os.fstat(sock.fileno()).st_ino)
    if not inodes:
        return 0
    try:
        table = parse_drops(PROC_UDP.read_text(encoding="ascii", errors="replace"))
    except OSError:
        return None
    return sum(table.get(inode, 0) for inode in inodes)


def socket_drop_count(sock: socket.socket) -> int:
    """The kernel's drop count of one socket (0 if it cannot be read). One getsockopt.

    Cheap enough for every close and every tick: a socket that closes takes its count with
    it, so callers that report a sum over sockets which come and go (the relay's flow and
    return sockets) fold this in first, and their total never goes back. The tunnel socket
    and the relay ports are read each tick, to say in the log when the bridge falls behind.
    """
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, _MEMINFO.size)
    except OSError:
        return 0
    if len(raw) < _MEMINFO.size:
        return 0
    drops: int = _MEMINFO.unpack_from(raw)[_MEMINFO_DROPS]
    return drops
