"""Batched UDP I/O through libc's ``sendmmsg`` and ``recvmmsg`` (ctypes), or plain calls.

Every copy of a packet goes out in one ``sendmmsg``, and a wake-up's datagrams come in through
``recvmmsg`` in batches of ``RECV_BATCH``. Why: the IPX tunnel's broadcast fan-out spends most
of its time in one ``sendto`` per copy, and part of each call is Python's and the syscall's
overhead, not the kernel's UDP work.
The ctypes structures are built once per socket and reused: a ``struct mmsghdr`` per slot whose
``msg_name`` points at its own ``sockaddr_in`` and whose ``msg_iov`` all point at one iovec over
one payload buffer, so a send is two buffer copies, one field store and one foreign call.

``HAVE_MMSG`` is the module-level probe (Linux, a libc with both calls); ``sender_for`` and
``receiver_for`` pick the batched or the plain path by it. Both paths give the same results:
``send`` returns the copies the kernel refused as ``(index, errno)``, each copy once, and
``recv`` the datagrams read, and whether an error ended the read.
"""

import ctypes
import ctypes.util
import errno
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Final, Protocol

Address = tuple[str, int]

BATCH: Final = 1024  # UIO_MAXIOV: the kernel sends at most this many messages a call
RECV_BATCH: Final = 16  # datagrams per recvmmsg; a 64 KiB buffer each (1 MiB in all)
RECV_BUFSIZE: Final = 65_535  # datagrams up to 65,507 bytes are accepted: none truncated
_SOCKADDR_LEN: Final = 16  # sizeof(struct sockaddr_in)
_MAX_NAMES: Final = 4096  # packed addresses kept (cleared whole beyond: clients come and go)
_MAX_BLOCKS: Final = 256  # target lists kept (the switch caches one per ingress port)
_MIN_CACHED: Final = 4  # shorter target lists (unicasts: a new tuple each) are not cached
_NO_FAILURES: Final[list[tuple[int, int]]] = []  # shared: callers only read it


class _Iovec(ctypes.Structure):
    _fields_ = (("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t))


class _Msghdr(ctypes.Structure):
    _fields_ = (
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.c_void_p),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    )


class _Mmsghdr(ctypes.Structure):
    _fields_ = (("msg_hdr", _Msghdr), ("msg_len", ctypes.c_uint))


_MSG_SIZE: Final = ctypes.sizeof(_Mmsghdr)


def _probe() -> ctypes.CDLL | None:
    """Libc with ``sendmmsg`` and ``recvmmsg``, or None (not Linux, or no such libc)."""
    if not sys.platform.startswith("linux") or ctypes.sizeof(_Mmsghdr) != 16 * 4:
        return None  # not Linux, or not the LP64 layout that _MSG_LEN_WORD assumes
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        for name in ("sendmmsg", "recvmmsg"):
            func = getattr(libc, name)
            func.restype = ctypes.c_int
        libc.sendmmsg.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int)
        libc.recvmmsg.argtypes = (
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_void_p,
        )
    except (OSError, AttributeError):
        return None
    return libc


_LIBC: Final = _probe()
# The probe's verdict; tests set it False to run the plain path (monkeypatch).
HAVE_MMSG: bool = _LIBC is not None


class Sender(Protocol):
    """Sends one payload to many addresses from one socket."""

    def send(self, payload: bytes, addrs: Sequence[Address]) -> list[tuple[int, int]]:
        """Send ``payload`` to every address; returns the refused ones as (index, errno)."""


class PlainSender:
    """The fallback: one ``sendto`` per copy."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def send(self, payload: bytes, addrs: Sequence[Address]) -> list[tuple[int, int]]:
        """One ``sendto`` per address; an ``OSError`` is that copy's errno."""
        sendto = self._sock.sendto
        failures = _NO_FAILURES
        for index, addr in enumerate(addrs):
            try:
                sendto(payload, addr)
            except OSError as exc:  # BlockingIOError carries EAGAIN
                if failures is _NO_FAILURES:
                    failures = []
                failures.append((index, exc.errno or 0))
        return failures


def sockaddr_in(addr: Address) -> bytes:
    """``struct sockaddr_in`` of an IPv4 address: family (host order), port, address, zeros.

    Raises:
        OSError: not a dotted-quad IPv4 address.
        OverflowError: the port is out of range.
    """
    ip, port = addr
    return (
        socket.AF_INET.to_bytes(2, sys.byteorder)
        + port.to_bytes(2, "big")
        + socket.inet_aton(ip)
        + bytes(8)
    )


class MmsgSender:
    """One ``sendmmsg`` per payload, on arrays preallocated once for ``BATCH`` copies."""

    __slots__ = (
        "_blocks",
        "_buf",
        "_buf_mv",
        "_call",
        "_fd",
        "_iov",
        "_msgs",
        "_msgs_at",
        "_names",
        "_names_mv",
        "_packed",
        "_plain",
    )

    def __init__(self, sock: socket.socket) -> None:
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "sendmmsg is not available")
        self._fd = sock.fileno()
        # sendmmsg(fd, msgvec, vlen, flags); a test puts a scripted stand-in here.
        self._call: Callable[[int, int, int, int], int] = _LIBC.sendmmsg
        self._plain = PlainSender(sock)
        self._buf = bytearray(65_535)  # the payload; from_buffer pins its address
        self._buf_mv = memoryview(self._buf)
        self._iov = _Iovec(ctypes.addressof(ctypes.c_char.from_buffer(self._buf)), 0)
        self._names = (ctypes.c_char * (_SOCKADDR_LEN * BATCH))()
        self._names_mv = memoryview(self._names).cast("B")
        self._msgs = (_Mmsghdr * BATCH)()
        self._msgs_at = ctypes.addressof(self._msgs)
        names_at = ctypes.addressof(self._names)
        iov_at = ctypes.addressof(self._iov)
        for slot, msg in enumerate(self._msgs):
            msg.msg_hdr.msg_name = names_at + slot * _SOCKADDR_LEN
            msg.msg_hdr.msg_namelen = _SOCKADDR_LEN
            msg.msg_hdr.msg_iov = iov_at
            msg.msg_hdr.msg_iovlen = 1
        # Address -> packed sockaddr_in; id(target tuple) -> (the tuple, its packed block).
        # Holding the tuple keeps its id from being reused while the entry exists.
        self._packed: dict[Address, bytes] = {}
        self._blocks: dict[int, tuple[Sequence[Address], bytes]] = {}

    def _block(self, addrs: Sequence[Address]) -> bytes:
        """The packed addresses of a target list (raises OSError for a non-IPv4 one)."""
        cached = self._blocks.get(id(addrs))
        if cached is not None and cached[0] is addrs:
            return cached[1]
        packed = self._packed
        if len(packed) > _MAX_NAMES:
            packed.clear()
        parts = []
        for addr in addrs:
            name = packed.get(addr)
            if name is None:
                try:
                    name = packed[addr] = sockaddr_in(addr)
                except (OverflowError, TypeError, ValueError) as exc:
                    raise OSError(errno.EINVAL, str(exc)) from None
            parts.append(name)
        block = b"".join(parts)
        if len(addrs) >= _MIN_CACHED:
            if len(self._blocks) >= _MAX_BLOCKS:
                self._blocks.clear()
            self._blocks[id(addrs)] = (addrs, block)
        return block

    def send(self, payload: bytes, addrs: Sequence[Address]) -> list[tuple[int, int]]:
        """Send ``payload`` to every address in as few ``sendmmsg`` calls as the kernel takes.

        A short count means the next message failed: it is retried alone, and its errno is
        that copy's (EINTR: tried again); the rest go on. One copy, or an address that is
        not IPv4 (a peer given by name), goes through ``sendto`` as before.
        """
        count = len(addrs)
        if count <= 1 or len(payload) > len(self._buf):
            return self._plain.send(payload, addrs)
        try:
            block = self._block(addrs)
        except OSError:
            return self._plain.send(payload, addrs)
        self._buf_mv[: len(payload)] = payload
        self._iov.iov_len = len(payload)
        failures = _NO_FAILURES
        call = self._call
        fd = self._fd
        names = self._names_mv
        for base in range(0, count, BATCH):
            chunk = min(BATCH, count - base)
            names[: chunk * _SOCKADDR_LEN] = block[
                base * _SOCKADDR_LEN : (base + chunk) * _SOCKADDR_LEN
            ]
            done = 0
            while done < chunk:
                sent = call(fd, self._msgs_at + done * _MSG_SIZE, chunk - done, 0)
                if sent > 0:
                    done += sent
                    continue
                code = ctypes.get_errno() if sent < 0 else errno.EIO
                if code == errno.EINTR:
                    continue
                if failures is _NO_FAILURES:
                    failures = []
                failures.append((base + done, code))
                done += 1
        return failures


class Receiver(Protocol):
    """Reads the datagrams waiting on one socket."""

    def recv(self) -> tuple[list[tuple[bytes, Address]], bool]:
        """Up to ``RECV_BATCH`` datagrams with their sources, and whether an error ended it.

        An empty socket is no error; fewer than ``RECV_BATCH`` datagrams: nothing is left.
        """


class PlainReceiver:
    """The fallback: ``recvfrom`` until the socket is empty or the batch is full."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def recv(self) -> tuple[list[tuple[bytes, Address]], bool]:
        """As ``Receiver.recv``."""
        recvfrom = self._sock.recvfrom
        got: list[tuple[bytes, Address]] = []
        for _ in range(RECV_BATCH):
            try:
                got.append(recvfrom(RECV_BUFSIZE))
            except BlockingIOError:
                break
            except OSError:
                # e.g. a queued ICMP error; the datagram itself was never delivered to us.
                return got, True
        return got, False


_MSG_LEN_WORD: Final = 14  # msg_len's index in an mmsghdr seen as 32-bit words (offset 56)


class MmsgReceiver:
    """``recvmmsg`` into ``RECV_BATCH`` buffers preallocated once; sources decoded once each."""

    __slots__ = (
        "_call",
        "_fd",
        "_keep",
        "_lens",
        "_msgs",
        "_msgs_at",
        "_names",
        "_sources",
        "_views",
    )

    def __init__(self, sock: socket.socket) -> None:
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "recvmmsg is not available")
        self._fd = sock.fileno()
        self._call = _LIBC.recvmmsg
        bufs = [bytearray(RECV_BUFSIZE) for _ in range(RECV_BATCH)]
        self._views = [memoryview(buf) for buf in bufs]
        iovs = (_Iovec * RECV_BATCH)()
        names = (ctypes.c_char * (_SOCKADDR_LEN * RECV_BATCH))()
        self._msgs = (_Mmsghdr * RECV_BATCH)()
        for slot, msg in enumerate(self._msgs):
            iovs[slot].iov_base = ctypes.addressof(ctypes.c_char.from_buffer(bufs[slot]))
            iovs[slot].iov_len = RECV_BUFSIZE
            msg.msg_hdr.msg_name = ctypes.addressof(names) + slot * _SOCKADDR_LEN
            msg.msg_hdr.msg_namelen = _SOCKADDR_LEN
            msg.msg_hdr.msg_iov = ctypes.addressof(iovs) + slot * ctypes.sizeof(_Iovec)
            msg.msg_hdr.msg_iovlen = 1
        self._keep = (bufs, iovs, names)  # what the structures point into stays alive
        self._msgs_at = ctypes.addressof(self._msgs)
        self._lens = memoryview(self._msgs).cast("B").cast("I")
        self._names = memoryview(names).cast("B")
        # Raw sockaddr (family, port, address) -> (ip, port): one tuple per source, reused.
        self._sources: dict[bytes, Address] = {}

    def recv(self) -> tuple[list[tuple[bytes, Address]], bool]:
        """As ``Receiver.recv``: one ``recvmmsg``."""
        while True:
            count = self._call(self._fd, self._msgs_at, RECV_BATCH, 0, None)
            if count >= 0:
                break
            code = ctypes.get_errno()
            if code == errno.EINTR:
                continue
            return [], code not in (errno.EAGAIN, errno.EWOULDBLOCK)
        sources = self._sources
        if len(sources) > _MAX_NAMES:
            sources.clear()
        names = self._names
        lens = self._lens
        views = self._views
        got: list[tuple[bytes, Address]] = []
        for slot in range(count):
            raw = bytes(names[slot * _SOCKADDR_LEN : slot * _SOCKADDR_LEN + 8])
            addr = sources.get(raw)
            if addr is None:
                addr = sources[raw] = (socket.inet_ntoa(raw[4:8]), int.from_bytes(raw[2:4], "big"))
            got.append((bytes(views[slot][: lens[slot * 16 + _MSG_LEN_WORD]]), addr))
        return got, False


def receiver_for(sock: socket.socket) -> Receiver:
    """The batched receiver if the probe found ``recvmmsg``, else the plain one."""
    if HAVE_MMSG:
        return MmsgReceiver(sock)
    return PlainReceiver(sock)


def sender_for(sock: socket.socket) -> Sender:
    """The batched sender if the probe found ``sendmmsg``, else the plain one."""
    if HAVE_MMSG:
        return MmsgSender(sock)
    return PlainSender(sock)


def errno_name(code: int) -> str:
    """``EAGAIN`` for 11: how send errors are labelled (``EUNKNOWN`` if it has no name)."""
    return errno.errorcode.get(code, "EUNKNOWN")
