"""io/mmsg.py: batched sends and reads, and the plain fallback, give the same results.

Correctness only (no timings): every copy reaches its address once, refused copies come back
with their errno (a partial ``sendmmsg`` is resumed after the refused copy, EINTR retried),
reads return every datagram with its source, and the IPX endpoint books the same counters on
either path.
"""

import asyncio
import ctypes
import errno
import os
import socket
from collections.abc import Callable, Iterator

import pytest

from ipxbridge.io import mmsg
from ipxbridge.io.ipx_endpoint import IpxEndpoint, open_udp_socket
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.policy.switch import IpxSwitch, SwitchSettings
from tests.unit.test_switch_batches import BROADCAST, raw

SERVER_NODE = bytes.fromhex("7f0000017a69")
BAD = ("127.0.0.1", 0)  # sendto refuses port 0 with EINVAL

# Skipped only off CI: under CI=true a libc without them must fail these tests, not pass them.
needs_mmsg = pytest.mark.skipif(
    not mmsg.HAVE_MMSG and os.environ.get("CI", "").lower() != "true",
    reason="no sendmmsg/recvmmsg in libc (with CI=true this fails instead)",
)
SENDERS: list[Callable[[socket.socket], mmsg.Sender]] = [
    mmsg.PlainSender,
    pytest.param(mmsg.MmsgSender, marks=needs_mmsg),  # type: ignore[list-item]
]
RECEIVERS: list[Callable[[socket.socket], mmsg.Receiver]] = [
    mmsg.PlainReceiver,
    pytest.param(mmsg.MmsgReceiver, marks=needs_mmsg),  # type: ignore[list-item]
]


def udp(bufsize: int = 1 << 20) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, bufsize)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


def drain(sock: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(sock.recv(65_535))
        except BlockingIOError:
            return got


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, list[socket.socket]]]:
    tx = udp()
    rxs = [udp() for _ in range(20)]
    yield tx, rxs
    for sock in (tx, *rxs):
        sock.close()


@pytest.mark.parametrize("make", SENDERS)
def test_every_copy_reaches_its_address_once(
    make: Callable[[socket.socket], mmsg.Sender],
    sockets: tuple[socket.socket, list[socket.socket]],
) -> None:
    tx, rxs = sockets
    sender = make(tx)
    addrs = tuple(rx.getsockname() for rx in rxs)
    for n in range(3):  # the second and third sends reuse the cached address block
        assert sender.send(b"copy %d" % n, addrs) == []
    for rx in rxs:
        assert drain(rx) == [b"copy 0", b"copy 1", b"copy 2"]
    assert sender.send(b"alone", addrs[:1]) == []  # one copy: plain sendto
    assert drain(rxs[0]) == [b"alone"]


@pytest.mark.parametrize("make", SENDERS)
def test_more_copies_than_one_call_takes(
    make: Callable[[socket.socket], mmsg.Sender],
    sockets: tuple[socket.socket, list[socket.socket]],
) -> None:
    tx, rxs = sockets
    rx = udp(8 << 20)
    try:
        addrs = (rx.getsockname(), rxs[0].getsockname()) * (mmsg.BATCH // 2 + 40)
        assert make(tx).send(b"x" * 30, addrs) == []
        assert len(drain(rx)) == len(drain(rxs[0])) == mmsg.BATCH // 2 + 40
    finally:
        rx.close()


@pytest.mark.parametrize("make", SENDERS)
def test_refused_copies_come_back_with_their_errno(
    make: Callable[[socket.socket], mmsg.Sender],
    sockets: tuple[socket.socket, list[socket.socket]],
) -> None:
    tx, rxs = sockets
    good = [rx.getsockname() for rx in rxs[:4]]
    addrs = (good[0], BAD, good[1], good[2], BAD, good[3])
    assert make(tx).send(b"data", addrs) == [(1, errno.EINVAL), (4, errno.EINVAL)]
    for rx in rxs[:4]:
        assert drain(rx) == [b"data"]  # the copies after a refused one still went


@needs_mmsg
def test_partial_sendmmsg_is_resumed_and_every_errno_counted(
    sockets: tuple[socket.socket, list[socket.socket]],
) -> None:
    """A short count: the next copy is retried alone; its errno is that copy's (EINTR:
    tried again), then the rest go on."""
    tx, rxs = sockets
    sender = mmsg.MmsgSender(tx)
    calls: list[tuple[int, int]] = []
    # sent counts, or (errno,) for a call that fails
    script: Iterator[int | tuple[int]] = iter(
        [2, (errno.EINTR,), (errno.EAGAIN,), 1, (errno.ENOBUFS,), 3]
    )

    def fake(_fd: int, at: int, count: int, _flags: int) -> int:
        calls.append(((at - sender._msgs_at) // ctypes.sizeof(mmsg._Mmsghdr), count))
        step = next(script)
        if isinstance(step, tuple):
            ctypes.set_errno(step[0])
            return -1
        return min(step, count)

    sender._call = fake
    addrs = tuple(rx.getsockname() for rx in rxs[:8])
    assert sender.send(b"p", addrs) == [(2, errno.EAGAIN), (4, errno.ENOBUFS)]
    assert calls == [(0, 8), (2, 6), (2, 6), (3, 5), (4, 4), (5, 3)]


@pytest.mark.parametrize("make", RECEIVERS)
def test_reads_return_every_datagram_with_its_source(
    make: Callable[[socket.socket], mmsg.Receiver],
) -> None:
    rx = udp(8 << 20)
    senders = [udp() for _ in range(3)]
    try:
        receiver = make(rx)
        assert receiver.recv() == ([], False)  # empty: no error
        sent = []
        for n in range(40):
            src = senders[n % 3]
            src.sendto(b"%d" % n, rx.getsockname())
            sent.append((b"%d" % n, src.getsockname()))
        big = bytes(range(256)) * 255  # 65,280 bytes: nothing is cut short
        senders[0].sendto(big, rx.getsockname())
        sent.append((big, senders[0].getsockname()))
        got: list[tuple[bytes, tuple[str, int]]] = []
        while True:
            batch, error = receiver.recv()
            assert not error
            assert len(batch) <= mmsg.RECV_BATCH
            got += batch
            if len(batch) < mmsg.RECV_BATCH:
                break
        assert got == sent
    finally:
        for sock in (rx, *senders):
            sock.close()


@pytest.mark.parametrize("make", RECEIVERS)
def test_a_read_error_is_reported(make: Callable[[socket.socket], mmsg.Receiver]) -> None:
    closed = udp()
    port = closed.getsockname()
    closed.close()
    sock = udp()
    try:
        sock.connect(port)
        sock.send(b"to nobody")  # the ICMP port unreachable is queued as ECONNREFUSED
        receiver = make(sock)
        for _ in range(100):
            batch, error = receiver.recv()
            if error:
                break
        assert (batch, error) == ([], True)
        assert receiver.recv() == ([], False)  # reported once
    finally:
        sock.close()


def test_the_probe_picks_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = udp()
    try:
        monkeypatch.setattr(mmsg, "HAVE_MMSG", False)
        assert isinstance(mmsg.sender_for(sock), mmsg.PlainSender)
        assert isinstance(mmsg.receiver_for(sock), mmsg.PlainReceiver)
        if mmsg._LIBC is not None:
            monkeypatch.setattr(mmsg, "HAVE_MMSG", True)
            assert isinstance(mmsg.sender_for(sock), mmsg.MmsgSender)
            assert isinstance(mmsg.receiver_for(sock), mmsg.MmsgReceiver)
    finally:
        sock.close()


# --- the IPX endpoint on either path -----------------------------------------------------------


def endpoint_books(*, batched: bool, with_peer: bool) -> tuple[IpxCounters, list[bytes]]:
    """Three verified clients (and a peer); one broadcasts 20 packets, then the endpoint sends
    a packet to one client, the peer and twice to port 0 (refused).

    Returns the counters and what the other two clients (and the peer) received.
    """
    old = mmsg.HAVE_MMSG
    mmsg.HAVE_MMSG = batched

    async def main() -> tuple[IpxCounters, list[bytes]]:
        loop = asyncio.get_running_loop()
        clients = [udp() for _ in range(3)]
        peer = udp()
        sw = IpxSwitch(
            SwitchSettings(),
            (peer.getsockname(),) if with_peer else (),
            lambda _addr: SERVER_NODE,
        )
        counters = IpxCounters()
        endpoint = IpxEndpoint(loop, open_udp_socket("127.0.0.1", 0), sw, counters)
        assert isinstance(endpoint._sender, mmsg.MmsgSender if batched else mmsg.PlainSender)
        endpoint.start()
        server = endpoint.address

        async def receive(s: socket.socket) -> bytes:
            return await asyncio.wait_for(loop.sock_recv(s, 2048), 5)

        try:
            nodes = {}
            for s in clients:  # register, then answer the probe's nonce: verified
                s.sendto(raw(bytes(6), bytes(6), sock=2), server)
                nodes[s] = (await receive(s))[10:16]
                s.sendto(raw(sw.clients[s.getsockname()].nonce, nodes[s], sock=2), server)
            await asyncio.sleep(0.05)  # the answers to the probes are read
            counters.__init__()  # type: ignore[misc]  # count from here: the game
            endpoint.settle_books()
            books = {s: sw.clients[s.getsockname()] for s in clients}
            base = {s: (c.tx_packets, c.tx_bytes) for s, c in books.items()}
            a = clients[0]
            for n in range(20):
                a.sendto(raw(BROADCAST, nodes[a], b"game %d" % n), server)
            others = (*clients[1:], *((peer,) * with_peer))
            got = [await receive(s) for s in others for _ in range(20)]
            # Each client's books (status page): owed per target list, settled when read.
            endpoint.settle_books()
            tx = [books[s].tx_packets - base[s][0] for s in clients]
            size = len(raw(BROADCAST, nodes[a], b"game 10"))
            assert tx == [0, 20, 20]
            assert books[clients[2]].tx_bytes - base[clients[2]][1] == 10 * (size - 1) + 10 * size
            refused = (BAD, clients[1].getsockname(), BAD, *((peer.getsockname(),) * with_peer))
            endpoint._send_many(raw(BROADCAST, SERVER_NODE, b"odd"), refused)
            got += [await receive(clients[1])]
            if with_peer:
                got += [await receive(peer)]
            return counters, got
        finally:
            endpoint.close()
            for s in (*clients, peer):
                s.close()

    try:
        return asyncio.run(main())
    finally:
        mmsg.HAVE_MMSG = old


@pytest.mark.parametrize("with_peer", [False, True], ids=["clients", "clients+peer"])
@needs_mmsg
def test_endpoint_books_the_same_on_both_paths(with_peer: bool) -> None:
    books = {}
    for batched in (True, False):
        counters, got = endpoint_books(batched=batched, with_peer=with_peer)
        copies = 2 + with_peer
        assert len(got) == 20 * copies + 1 + with_peer
        assert counters.forwarded == 20
        assert counters.copies_sent == 20 * copies + 1 + with_peer
        assert counters.port_copies[("dosbox", "tunnel")] == 40 + 1
        assert counters.port_copies[("peer", "tunnel")] == (20 + 1) * with_peer
        # The two copies to port 0: refused, booked on the dosbox port by errno name.
        assert counters.send_errors == {("dosbox", "tunnel", "EINVAL"): 2}
        books[batched] = (
            counters.received,
            counters.copies_sent,
            counters.bytes_sent,
            dict(counters.port_copies),
            dict(counters.send_errors),
            dict(counters.port_outcomes),
        )
    assert books[True] == books[False]
