"""Per-source fairness on the relay's receive path (policy/fairness.py, reliability.md R13):
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
        assert q.push("flood", f"f{n}", 10)
    assert q.push("player", "p0", 10)
    assert q.push("other", "o0", 10)
    # one each, in the order the sources first arrived, then the flooder's rest
    assert q.take(4) == ["f0", "p0", "o0", "f1"]
    assert len(q) == 3
    assert q.sources == 1
    assert q.push("player", "p1", 10)
    # the player, served last round, was moved behind; the flooder, cut off mid-round, is next
    assert q.take(10) == ["f2", "p1", "f3", "f4"]
    assert len(q) == 0
    assert q.sources == 0


def test_a_flooder_fills_only_its_own_queue() -> None:
    q: FairQueue[int] = FairQueue(per_source=3, max_items=100)
    assert [q.push("flood", n, 1) for n in range(5)] == [True, True, True, False, False]
    assert q.push("player", 99, 1)
    assert q.take(2) == [0, 99]


def test_totals_are_bounded_by_items_and_bytes() -> None:
    q: FairQueue[int] = FairQueue(per_source=10, max_items=4, max_bytes=100)
    assert all(q.push(f"s{n}", n, 10) for n in range(4))
    assert not q.push("s9", 9, 10)  # items
    q.take(4)
    assert q.push("a", 1, 60)
    assert not q.push("b", 2, 41)  # bytes
    assert q.push("b", 2, 40)
    assert sorted(q.clear()) == [1, 2]
    assert len(q) == 0
    assert q.push("c", 3, 100)  # the byte budget is back


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_backlog_is_served_round_robin_and_the_flooders_excess_dropped_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One wake-up finds 400 datagrams of a flooder and 4 of a player waiting: the player's
    are all handled in the first turn; the flooder's beyond its queue are dropped as
    fair_share without a decision; every datagram has one outcome (the books balance)."""
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
        relay._fair.clear()  # small per-source queues for the test
        relay._fair[port] = FairQueue(per_source=50)
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
    assert counters.dropped["fair_share"] == 400 - 50
    assert len(handled) == 50 + 4
    assert counters.balanced()
