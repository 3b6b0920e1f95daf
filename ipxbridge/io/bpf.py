"""Classic BPF socket filters (``SO_ATTACH_FILTER``, linux/filter.h), for packet sockets.

A filter runs in the kernel before a frame is queued to the socket: what it refuses costs no
wake-up, no copy and no Python. The program is a sequence of ``(code, jt, jf, k)``.
"""

import ctypes
import socket
from collections.abc import Sequence
from typing import Final

SO_ATTACH_FILTER: Final = 26
BPF_RET_K: Final = 0x06  # BPF_RET|BPF_K: accept k bytes of the frame (0: none)
# Accept nothing: a socket that only sends.
DROP_ALL: Final = ((BPF_RET_K, 0, 0, 0),)


class _SockFilter(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


def attach_filter(sock: socket.socket, program: Sequence[tuple[int, int, int, int]]) -> None:
    """Attach ``program`` to ``sock`` (the kernel copies it).

    Raises:
        OSError: the kernel refused the program.
    """
    code = (_SockFilter * len(program))(*(_SockFilter(*i) for i in program))
    fprog = _SockFprog(len(program), code)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(fprog))
