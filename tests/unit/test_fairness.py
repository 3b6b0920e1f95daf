"""Per-source fairness on the relay's receive path (policy/fairness.py, docs/reliability.md R13):
the pure queue, then the receive loop on real loopback sockets."""

import asyncio
import socket

import pytest

from ipxbridge.io import relay as relay_io
from ipxbridge.io.relay import BroadcastRelay
from ipxbridge.obs.counters import RelayCounters
from ipxbridge.policy.fairness import FairQueue
from ipxbridge.policy.relay import RelayPolicy, RelaySettings


def test_round_robin_one_from_each_source_then_again() -> None:
    q: FairQueue[str] = FairQueue()
    for n in range(5):
        assert q.push("flood", f"f{n}", 10) is None
    assert q.push("player", "p0", 10) is None
    assert q.push("other", "o0", 10) is None
    # one each, in the order the sources first arrived, then the flooder's rest
    assert q.take(4) == ["f0", "p0", "o0", "f1"]
    assert len(q) == 3
    assert q.sources == 1
    assert q.push("player", "p1", 10) is None
    # the player, served last round, was moved behind; the flooder, cut off mid-round, is next
    assert q.take(10) == ["f2", "p1", "f3", "f4"]
    assert len(q) == 0
    assert q.sources == 0


def test_one_source_may_use_the_room_and_gives_way_when_another_comes() -> None:
    q: FairQueue[int] = FairQueue(max_items=4)
    assert [q.push("flood", n, 1) for n in range(4)] == [None] * 4  # alone: all the room
    assert q.push("flood", 4, 1) == 4  # full, and at its share: the newcomer loses
    assert q.push("player", 99, 1) == 3  # full: the longest queue gives its newest
    assert q.push("flood", 5, 1) == 5  # still over its share (2 of 4)
    assert q.take(4) == [0, 99, 1, 2]


def test_the_longest_queue_gives_way_among_many() -> None:
    q: FairQueue[str] = FairQueue(max_items=6)
    for n in range(4):
        assert q.push("a", f"a{n}", 1) is None
    assert q.push("b", "b0", 1) is None
    assert q.push("b", "b1", 1) is None
    assert q.push("c", "c0", 1) == "a3"  # share 2: a holds 4, b 2
    assert q.push("c", "c1", 1) == "a2"
    assert q.push("c", "c2", 1) == "c2"  # now c is at its share
    assert sorted(q.take(6)) == ["a0", "a1", "b0", "b1", "c0", "c1"]


def test_totals_are_bounded_by_items_and_bytes() -> None:
    q: FairQueue[int] = FairQueue(max_items=4, max_bytes=100)
    assert all(q.push(f"s{n}", n, 10) is None for n in range(4))
    assert q.push("s9", 9, 10) == 9  # items: every source is at its share (1)
    q.take(4)
    assert q.push("a", 1, 60) is None
    assert q.push("b", 2, 41) == 2  # bytes
    assert q.push("b", 2, 40) is None
    assert sorted(q.clear()) == [1, 2]
    assert len(q) == 0
    assert q.push("c", 3, 100) is None  # the byte budget is back


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.patches_code
def test_a_backlog_is_served_round_robin_and_the_flooders_excess_dropped_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One wake-up finds 400 datagrams of a flooder and 4 of a player waiting, while several
    sources are about: the player's are all handled in the first turn; the flooder's beyond
    its share of the queue are dropped as fair_share without a decision; every datagram has
    one outcome (the books balance)."""
    monkeypatch.setattr(relay_io, "FAIR_TURN", 8)
    handled: list[tuple[str, int]] = []

    class Recording(RelayPolicy):
        def decide(self, payload: bytes, **kw: object):  # type: ignore[no-untyped-def]
            src = kw["src"]
            assert isinstance(src, tuple)
            handled.append((src[0], int(payload)))
            return super().decide(payload, **kw)  # type: ignore[arg-type]

    async def main() -> RelayCounters:
        loop = asyncio.get_running_loop()
        port = free_udp_port()
        relay = BroadcastRelay(loop, Recording(RelaySettings()), (port,))
        relay.start()  # no plan: whatever is decided is not_selected
        relay._fair.clear()  # a small queue for the test
        relay._fair[port] = FairQueue(max_items=50)
        relay._shared_until[port] = float("inf")  # as if several sources were seen lately
        loop.remove_reader(relay._recv[0].fileno())  # let the backlog build
        try:
            flood = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            player = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            flood.bind(("127.0.0.1", 0))
            player.bind(("127.0.0.2", 0))
            with flood, player:
                for n in range(400):
                    flood.sendto(b"%d" % n, ("127.0.0.1", port))
                    if n % 130 == 0:
                        player.sendto(b"%d" % n, ("127.0.0.1", port))
            relay._on_broadcast(relay._recv[0], port)  # the one wake-up
            first_turn = list(handled)
            for _ in range(100):  # the next turns run from the loop
                await asyncio.sleep(0.01)
                if relay.counters.received == 404:
                    break
            assert ("127.0.0.2", 0) in first_turn
            assert [h for h in first_turn if h[0] == "127.0.0.2"] == [
                ("127.0.0.2", 0),
                ("127.0.0.2", 130),
                ("127.0.0.2", 260),
                ("127.0.0.2", 390),
            ]
            assert len(first_turn) == 8
            return relay.counters
        finally:
            relay.close()

    counters = asyncio.run(main())
    assert counters.received == 404
    assert counters.dropped["fair_share"] == 400 - 46  # the player took four places
    assert len(handled) == 50
    assert counters.balanced()


def test_a_lone_sources_burst_waits_its_turn_and_is_not_dropped() -> None:
    """A burst from one source (a busy game, the relay benchmark's sender) beyond what one
    source used to be allowed to queue (256) is served, not dropped as fair_share: no one
    else waits. Before, every datagram past 256 in one wake-up was dropped, and one sender
    at 20k pps lost a quarter of its broadcasts with the CPU to spare."""

    async def main() -> RelayCounters:
        loop = asyncio.get_running_loop()
        port = free_udp_port()
        relay = BroadcastRelay(loop, RelayPolicy(RelaySettings()), (port,))
        relay.start()
        loop.remove_reader(relay._recv[0].fileno())  # let the backlog build
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as flood:
                for n in range(600):
                    flood.sendto(b"%d" % n, ("127.0.0.1", port))
            relay._on_broadcast(relay._recv[0], port)  # the one wake-up
            read_ahead.append(len(relay._fair[port]) + relay.counters.received)
            for _ in range(200):  # the next turns run from the loop
                await asyncio.sleep(0.01)
                if relay.counters.received == 600:
                    break
            return relay.counters
        finally:
            relay.close()

    read_ahead: list[int] = []
    counters = asyncio.run(main())
    # alone, it is read only a little ahead: the rest waits in the kernel's buffer, where
    # waiting costs no CPU (reading a lone sender's excess to drop it starved the serving)
    assert read_ahead == [relay_io.SOLO_READ_AHEAD]
    assert counters.received == 600
    assert counters.dropped == {"not_selected": 600}  # no fair_share
    assert counters.balanced()


def test_the_bridges_own_copies_looped_back_are_no_second_source() -> None:
    """In rewrite mode every copy the bridge sends comes back to its relay port from its own
    address (the kernel loops broadcasts back). Queued, that address counted as a second
    source: a lone sender switched the relay to reading everything, and one unpaced sender
    got 1,196 pps relayed instead of 17,631 (bench/relay_bench.py, ipx_rewrite)."""

    async def main() -> tuple[RelayCounters, dict[int, float]]:
        loop = asyncio.get_running_loop()
        port = free_udp_port()
        relay = BroadcastRelay(loop, RelayPolicy(RelaySettings()), (port,))
        relay.start()
        relay.policy.set_plan((), frozenset({"127.0.0.2"}), {})  # 127.0.0.2: this box
        loop.remove_reader(relay._recv[0].fileno())
        try:
            player = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            own = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            player.bind(("127.0.0.1", 0))
            own.bind(("127.0.0.2", 0))
            with player, own:
                for n in range(20):
                    player.sendto(b"%d" % n, ("127.0.0.1", port))
                    own.sendto(b"copy %d" % n, ("127.0.0.1", port))
            for _ in range(200):
                relay._on_broadcast(relay._recv[0], port)
                if relay.counters.received == 40:
                    break
                await asyncio.sleep(0.01)
            return relay.counters, dict(relay._shared_until)
        finally:
            relay.close()

    counters, shared = asyncio.run(main())
    assert counters.dropped == {"own_packet": 20, "not_selected": 20}
    assert shared == {}  # one source only: still reading a little ahead
    assert counters.balanced()
