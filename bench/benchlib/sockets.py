"""UDP sockets as the benches use them: large buffers, broadcasters, receive timestamps."""

import socket
import struct
import time
from typing import Final

from benchlib.netns import socket_in

SO_RCVBUFFORCE: Final = 33
SO_SNDBUFFORCE: Final = 32
SO_TIMESTAMPNS: Final = 35  # also the control message type (SCM_TIMESTAMPNS)
_TIMESPEC: Final = struct.Struct("=qq")


def set_buffer(sock: socket.socket, size: int) -> None:
    """Large socket buffers; the FORCE variants pass rmem_max/wmem_max as root."""
    for opt, force in ((socket.SO_RCVBUF, SO_RCVBUFFORCE), (socket.SO_SNDBUF, SO_SNDBUFFORCE)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, opt, size)


def broadcaster(ns: str | None, ifname: str, address: str, port: int = 0) -> socket.socket:
    """A UDP socket in ``ns`` that may broadcast, sending out of ``ifname`` only (a limited
    broadcast would otherwise leave by the default route) from ``address:port``."""
    sock = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    sock.bind((address, port))
    return sock


def timestamped_receiver(ns: str | None, port: int, rcvbuf: int) -> socket.socket:
    """A UDP socket in ``ns`` on ``0.0.0.0:port`` that stamps each datagram with the kernel's
    receive time (read it with ``recvmsg`` and ``received_ns``)."""
    sock = socket_in(ns, socket.AF_INET, socket.SOCK_DGRAM)
    set_buffer(sock, rcvbuf)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind(("0.0.0.0", port))
    return sock


def received_ns(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The kernel's receive time (ns since the epoch) from ``recvmsg``'s control messages; now
    if there is none. Every namespace shares this clock, so it can be set against a sender's
    ``time.time_ns()`` and the latency does not depend on when Python reads the datagram."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return int(sec) * 1_000_000_000 + int(nsec)
    return time.time_ns()
