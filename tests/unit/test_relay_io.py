"""The relay's I/O side: every datagram counted once (real loopback sockets), and the
WireGuard peer reads kept off the event loop."""

import asyncio
import contextlib
import re
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP, defragment

from ipxbridge.app import Bridge
from ipxbridge.config import Config, load_config
from ipxbridge.io import netlink
from ipxbridge.io import relay as relay_io
from ipxbridge.io.relay import BroadcastRelay, build_ip_udp
from ipxbridge.obs import metrics
from ipxbridge.obs.counters import RelayCounters
from ipxbridge.policy.relay import RelayPolicy, RelaySettings
from ipxbridge.policy.topology import Interface, InterfaceAddress, Topology


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

    async def main() -> RelayCounters:
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


def interface(index: int, name: str, address: str, *, wireguard: bool) -> Interface:
    return Interface(
        index=index,
        name=name,
        kind="wireguard" if wireguard else "veth",
        up=True,
        broadcast_capable=not wireguard,
        pointopoint=wireguard,
        noarp=wireguard,
        mtu=1420 if wireguard else 1500,
        addresses=(InterfaceAddress.compute(address, 24),),
        default_route_metric=None,
    )


class Heartbeat:
    """A 20 ms timer that records how late the loop ran it: the loop's responsiveness."""

    def __init__(self) -> None:
        self.worst = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + 0.02
            await asyncio.sleep(0.02)
            self.worst = max(self.worst, loop.time() - due)


@pytest.fixture
def wg_site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Config:
    """A relay over ``lan0`` and the WireGuard interface ``wgs0`` (a fixed topology snapshot),
    whose wireguard-go UAPI socket is looked for in ``tmp_path``."""
    monkeypatch.setattr(netlink, "WIREGUARD_UAPI_DIR", tmp_path)
    topology = Topology(
        (
            interface(9001, "lan0", "10.77.1.1", wireguard=False),
            interface(9002, "wgs0", "10.77.2.1", wireguard=True),
        )
    )

    async def fixed() -> Topology:
        return topology

    monkeypatch.setattr(netlink, "read_topology", fixed)
    return load_config(
        None,
        {},
        {
            "ipx": {"listen": "off"},
            "http": {"listen": "off"},
            "relay": {
                "interfaces": [{"name": "lan0"}, {"name": "wgs0"}],
                "ports": [free_udp_port()],
                "source_mode": "rewrite",
                "fast_path": "off",
            },
        },
    )


def plan(bridge: Bridge) -> list[tuple[str, tuple[str, ...]]]:
    assert bridge.relay is not None
    assert bridge.relay.relay is not None  # the BroadcastRelay: the plan it really applied
    return [(e.name, e.peers) for e in bridge.relay.relay.policy.egresses]


def test_a_stuck_wireguard_uapi_socket_never_stalls_the_loop(
    wg_site: Config, tmp_path: Path
) -> None:
    """The plan used to read WireGuard peers on the loop (at start and on every
    10 s refresh); a wireguard-go that accepts and never answers froze forwarding and
    /-/healthy for the UAPI timeout (1 s per interface). A hung daemon cannot be produced on
    demand, so a fake UAPI socket stands in for it."""
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.bind(str(tmp_path / "wgs0.sock"))
    stuck.listen(8)  # connections queue up and are never answered

    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        beat = Heartbeat()
        ticker = asyncio.create_task(beat.run())
        bridge = Bridge(wg_site)
        try:
            began = loop.time()
            await bridge.start()  # waits for the first peer read, without blocking the loop
            start_took = loop.time() - began
            assert plan(bridge) == [("lan0", ()), ("wgs0", ())]  # the stuck read gave nothing
            await asyncio.sleep(0.1)  # let the heartbeat see any stall so far
            at_start = beat.worst
            beat.worst = 0.0
            await asyncio.sleep(2.5)  # the first tick re-reads the peers: stuck for 1 s again
            return at_start, start_took, beat.worst
        finally:
            await bridge.stop()
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker

    try:
        at_start, start_took, on_refresh = asyncio.run(main())
        stuck.setblocking(False)
        reads = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                stuck.accept()[0].close()
                reads += 1
    finally:
        stuck.close()
    assert reads == 2  # at start, and the first periodic refresh: both really got stuck
    assert start_took >= 0.9  # the first plan waited for the read...
    # A read on the loop would stall it the whole UAPI timeout (1 s); half of that tells the
    # two apart and leaves room for a loaded machine (0.38 s seen with two test workers).
    assert at_start < 0.5, f"the loop stalled {at_start:.2f} s at start"  # ...off the loop
    assert on_refresh < 0.5, f"the loop stalled {on_refresh:.2f} s on the peer refresh"


def test_peers_read_off_the_loop_reach_the_plan_and_follow_changes(
    wg_site: Config, tmp_path: Path
) -> None:
    """The read in the worker thread hands its result to the planner: at start, and again
    when the periodic refresh finds the peers changed (``wg set`` raises no netlink event)."""
    answers = [["10.77.2.2/32", "10.77.0.0/16"], ["10.77.2.2/32", "10.77.2.3/32"]]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "wgs0.sock"))
    server.listen(8)
    server.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:  # a well-behaved wireguard-go: get=1, key=value lines, errno=0
        served = 0
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(64)
                allowed = answers[min(served, len(answers) - 1)]
                lines = ["private_key=00", "public_key=11", *(f"allowed_ip={a}" for a in allowed)]
                conn.sendall(("\n".join([*lines, "errno=0"]) + "\n\n").encode())
            served += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def main() -> tuple[list[tuple[str, tuple[str, ...]]], ...]:
        bridge = Bridge(wg_site)
        try:
            await bridge.start()
            first = plan(bridge)
            await asyncio.sleep(1.5)  # the first tick re-reads
            return first, plan(bridge)
        finally:
            await bridge.stop()

    try:
        first, refreshed = asyncio.run(main())
    finally:
        done.set()
        thread.join(2)
        server.close()
    assert first == [("lan0", ()), ("wgs0", ("10.77.2.2",))]  # /32s only (a subnet is no peer)
    assert refreshed == [("lan0", ()), ("wgs0", ("10.77.2.2", "10.77.2.3"))]


def test_every_reason_the_relay_io_records_is_exported_from_the_start() -> None:
    # A drop reason that appears only once it happens breaks rate() and alerts until then
    # (B1): every literal reason io/relay.py records must be in the pre-initialised set.
    source = Path(relay_io.__file__).read_text()
    recorded = set(re.findall(r'dropped\["(\w+)"\]', source))
    assert recorded  # the pattern still finds them
    assert recorded <= metrics.RELAY_DROP_REASONS, recorded - metrics.RELAY_DROP_REASONS


@given(
    payload=st.binary(max_size=3000),
    ttl=st.integers(1, 255),
    ident=st.integers(0, 0xFFFF),
    tos=st.integers(0, 255),
    mtu=st.sampled_from([576, 1280, 1420, 1500]),
)
def test_built_packets_are_what_scapy_reads_with_a_valid_header_checksum(
    payload: bytes, ttl: int, ident: int, tos: int, mtu: int
) -> None:
    """A packet socket sends the header as built: its checksum must be right (RFC 791 3.1).
    scapy, an independent codec, recomputes it and reassembles the fragments."""
    packets = build_ip_udp(
        ("10.61.1.10", 2300),
        ("10.61.2.255", 47624),
        payload,
        ttl=ttl,
        ident=ident,
        mtu=mtu,
        tos=tos,
    )
    fragments = []
    for raw in packets:
        assert len(raw) <= mtu
        ip = IP(raw)
        built = ip.chksum
        del ip.chksum
        assert IP(bytes(ip)).chksum == built
        assert (ip.src, ip.dst, ip.ttl, ip.id, ip.tos) == (
            "10.61.1.10",
            "10.61.2.255",
            ttl,
            ident,
            tos,
        )
        fragments.append(ip)
    whole = defragment(fragments)[0] if len(fragments) > 1 else fragments[0]  # type: ignore[no-untyped-call]
    assert bytes(whole[UDP].payload) == payload
    assert (whole[UDP].sport, whole[UDP].dport) == (2300, 47624)
