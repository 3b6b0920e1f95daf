"""Read coalescing of the tunnel socket: the pure rules (policy/pacing.py) and the endpoint
that follows them on a real socket in a real event loop (io/ipx_endpoint.py)."""

import asyncio
import socket

from ipxbridge.io.ipx_endpoint import IpxEndpoint, open_udp_socket
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.policy.pacing import (
    ENTER_BATCH,
    FIRST_BACKOFF,
    MAX_BACKOFF,
    SMALL_DRAINS,
    STAY_BATCH,
    TIMED,
    WAKEUP,
    WINDOW,
    ReadPacer,
)
from ipxbridge.policy.switch import IpxSwitch, SwitchSettings
from tests.unit.test_switch_batches import BROADCAST, raw

MS = 0.001


def timed(pacer: ReadPacer) -> bool:
    """Whether timed drains are on (a call: the attribute changes under mypy's narrowing)."""
    return pacer.timed


def feed(pacer: ReadPacer, rate: float, seconds: float, start: float = 0.0) -> float:
    """Wake-ups of one datagram each at ``rate`` per second; returns the clock at the end.

    Stops at the first wake-up that starts timed drains.
    """
    now = start
    step = 1 / rate
    while now < start + seconds:
        now += step
        if pacer.woken(1, now):
            return now
    return now


def test_light_traffic_is_read_as_it_arrives() -> None:
    pacer = ReadPacer(MS)
    # Just under the entry rate: ENTER_BATCH datagrams per interval would be 4,000/s.
    feed(pacer, rate=0.9 * ENTER_BATCH / MS, seconds=2)
    assert not timed(pacer)


def test_heavy_traffic_starts_timed_drains_within_a_window() -> None:
    pacer = ReadPacer(MS)
    when = feed(pacer, rate=8000, seconds=1)
    assert timed(pacer)
    assert when <= 2 * WINDOW


def test_timed_drains_go_on_while_each_finds_a_batch_and_end_when_the_load_stops() -> None:
    pacer = ReadPacer(MS)
    now = feed(pacer, rate=8000, seconds=1)
    for _ in range(1000):
        now += MS
        assert pacer.drained(8, now)
    now += MS
    assert not pacer.drained(0, now)  # nothing came: the next datagram wakes the bridge
    assert not timed(pacer)
    # No back-off after a lull: the next heavy window drains on a timer again.
    assert feed(pacer, rate=8000, seconds=1, start=now) <= now + 2 * WINDOW
    assert timed(pacer)


def test_a_ping_pong_ends_timed_drains_and_backs_off() -> None:
    """Each datagram waits for the bridge to forward the one before: a drain finds one."""
    pacer = ReadPacer(MS)
    now = feed(pacer, rate=10_000, seconds=1)
    assert timed(pacer)
    for _ in range(SMALL_DRAINS - 1):
        now += MS
        assert pacer.drained(1, now)
    now += MS
    assert not pacer.drained(1, now)
    left = now
    # Not again within the back-off, however heavy the traffic...
    now = feed(pacer, rate=10_000, seconds=FIRST_BACKOFF * 0.9, start=now)
    assert not timed(pacer)
    # ...and the back-off doubles each time a try finds the same, up to MAX_BACKOFF.
    backoffs = []
    for _ in range(12):
        now = feed(pacer, rate=10_000, seconds=60, start=now)
        assert timed(pacer)
        backoffs.append(now - left)
        for _ in range(SMALL_DRAINS):
            now += MS
            pacer.drained(1, now)
        left = now
    assert backoffs[0] >= FIRST_BACKOFF
    assert backoffs[1] >= 2 * FIRST_BACKOFF
    assert max(backoffs) < MAX_BACKOFF + 2 * WINDOW
    assert backoffs[-1] >= MAX_BACKOFF


def test_a_batch_resets_the_back_off() -> None:
    pacer = ReadPacer(MS)
    now = feed(pacer, rate=10_000, seconds=1)
    for _ in range(SMALL_DRAINS):
        now += MS
        pacer.drained(1, now)
    now = feed(pacer, rate=10_000, seconds=60, start=now)
    assert timed(pacer)
    now += MS
    assert pacer.drained(STAY_BATCH, now)  # real load this time
    for _ in range(SMALL_DRAINS):
        now += MS
        pacer.drained(1, now)
    start = now
    now = feed(pacer, rate=10_000, seconds=60, start=now)
    assert now - start < FIRST_BACKOFF + 2 * WINDOW


def test_an_interval_of_zero_never_coalesces_and_a_reload_to_zero_ends_it() -> None:
    off = ReadPacer(0.0)
    feed(off, rate=100_000, seconds=1)
    assert not timed(off)
    pacer = ReadPacer(MS)
    now = feed(pacer, rate=8000, seconds=1)
    pacer.retune(0.0)
    assert not pacer.drained(50, now + MS)
    assert not timed(pacer)


# --- the endpoint on a real socket -------------------------------------------------------------


def run_load(coalesce: float, rate: float, count: int) -> tuple[IpxCounters, int, bool]:
    """Two keyed clients on a real endpoint; one broadcasts ``count`` packets at ``rate``.

    Returns the endpoint's books, what the other client got, and whether the reader was
    back on the socket once the load had stopped.
    """

    async def main() -> tuple[IpxCounters, int, bool]:
        loop = asyncio.get_running_loop()
        sw = IpxSwitch(SwitchSettings())
        counters = IpxCounters()
        endpoint = IpxEndpoint(
            loop, open_udp_socket("127.0.0.1", 0), sw, counters, coalesce=coalesce
        )
        endpoint.start()
        server = endpoint.address
        a, b = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
        got = 0
        try:
            nodes = {}
            for s in (a, b):
                s.bind(("127.0.0.1", 0))
                s.setblocking(False)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                s.sendto(raw(bytes(6), bytes(6), sock=2), server)
                reply = await asyncio.wait_for(loop.sock_recv(s, 2048), 5)
                nodes[s] = reply[10:16]
                s.sendto(raw(BROADCAST, nodes[s], b"hello"), server)  # keyed node: verified
            await asyncio.sleep(0.05)
            while True:  # a's hello
                try:
                    b.recv(2048)
                except BlockingIOError:
                    break
            counters.__init__()  # type: ignore[misc]  # count from here: the game
            start = loop.time()
            for n in range(count):
                a.sendto(raw(BROADCAST, nodes[a], b"game %d" % n), server)
                await asyncio.sleep(max(0.0, start + (n + 1) / rate - loop.time()))
            await asyncio.sleep(0.1)
            while True:
                try:
                    b.recv(2048)
                except BlockingIOError:
                    break
                got += 1
            fd = endpoint.sock.fileno()
            reading = loop._selector.get_key(fd) is not None  # type: ignore[attr-defined]
            return counters, got, reading
        finally:
            endpoint.close()
            a.close()
            b.close()

    return asyncio.run(main())


def test_the_endpoint_drains_on_a_timer_under_load_and_every_packet_is_switched() -> None:
    # asyncio.sleep cannot pace single datagrams at 8,000/s: it sends bursts, as the kernel
    # would hand a busy bridge a backlog. 3,000 packets in about 0.4 s.
    counters, got, reading = run_load(MS, rate=8000, count=3000)
    assert got == 3000
    assert counters.received == counters.forwarded == 3000
    assert counters.reads[TIMED] > 0
    timed_batch = counters.read_datagrams[TIMED] / counters.reads[TIMED]
    assert timed_batch >= STAY_BATCH
    assert sum(counters.read_datagrams.values()) == counters.received
    assert reading  # the load stopped: the socket wakes the bridge again


def test_the_endpoint_never_coalesces_when_turned_off() -> None:
    counters, got, reading = run_load(0.0, rate=8000, count=1000)
    assert got == 1000
    assert counters.received == counters.forwarded == 1000
    assert counters.reads[TIMED] == 0
    assert counters.read_datagrams[WAKEUP] == counters.received
    assert reading
