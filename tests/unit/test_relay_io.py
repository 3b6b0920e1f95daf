"""The relay's receive loop on real loopback sockets: every datagram counted once."""

import asyncio
import socket

import pytest

from ipxbridge.io import relay as relay_io
from ipxbridge.io.relay import BroadcastRelay
from ipxbridge.policy.relay import RelayPolicy, RelaySettings


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_truncated_datagram_has_one_outcome_and_an_interface(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MSG_TRUNC cannot happen with a 64 KiB buffer over IPv4, so the buffer is shrunk here
    to reach that branch. The truncated datagram used to be counted in a second counter of
    its own and under no interface, so the per-interface received figures did not add up."""
    monkeypatch.setattr(relay_io, "RECV_SIZE", 16)

    async def main() -> relay_io.RelayCounters:
        loop = asyncio.get_running_loop()
        port = free_udp_port()
        relay = BroadcastRelay(loop, RelayPolicy(RelaySettings()), (port,))
        relay.start()  # no plan: whatever arrives is not_selected
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                tx.sendto(b"x" * 100, ("127.0.0.1", port))  # longer than the buffer
                tx.sendto(b"short", ("127.0.0.1", port))
            for _ in range(200):
                if relay.counters.received == 2:
                    break
                await asyncio.sleep(0.01)
            return relay.counters
        finally:
            relay.close()

    counters = asyncio.run(main())
    assert counters.received == 2
    assert dict(counters.dropped) == {"truncated": 1, "not_selected": 1}
    assert counters.received_bytes == 16 + 5  # what was read
    assert sum(counters.received_by_ifindex.values()) == counters.received
    assert not hasattr(counters, "truncated")  # one outcome, one counter
    assert counters.balanced()
