"""Each feature service built alone, with fakes only where the real part needs the kernel.

The relay service runs its real ``BroadcastRelay`` on a free loopback port; the topology it
plans from comes from a fake watcher the test moves by hand (netlink events cannot be
produced without a namespace; tests/integration covers the real watcher). The IPX service
runs on a real socket with a real DOSBox-protocol registration. The Bridge is tested with
recording services standing in for the four real ones.
"""

import asyncio
import dataclasses
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ipxbridge.app import Bridge
from ipxbridge.app.interface_warnings import WARN_GAP, UnmatchedNames
from ipxbridge.app.ipx import IpxService
from ipxbridge.app.relay import RelayService
from ipxbridge.config import Config, ConfigError, load_config
from ipxbridge.errors import StartupError
from ipxbridge.games import game_table
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.reassembly import Reassembler
from ipxbridge.policy.relay import RelayMode, SourceMode, choose_relay_mode
from ipxbridge.policy.sessions import SessionTable
from ipxbridge.policy.topology import Interface, InterfaceAddress, Topology
from ipxbridge.wire import ipx


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def inspector() -> Inspector:
    return Inspector(SessionTable(game_table(), 60, 10), Reassembler())


def lan(index: int, name: str, address: str, *, up: bool = True) -> Interface:
    return Interface(
        index=index,
        name=name,
        kind="veth",
        up=up,
        broadcast_capable=True,
        pointopoint=False,
        noarp=False,
        mtu=1500,
        addresses=(InterfaceAddress.compute(address, 24),),
        default_route_metric=None,
    )


# --- the relay's mode: a pure choice -------------------------------------------------------


def test_relay_mode_follows_what_the_host_allows_and_refuses_what_it_cannot_do() -> None:
    preserve_fast = RelayMode(SourceMode.PRESERVE, fast_path=True)
    assert choose_relay_mode("auto", "auto", True, None) == preserve_fast
    assert choose_relay_mode("auto", "auto", True, "no nft") == RelayMode(
        SourceMode.PRESERVE, fast_path=False
    )
    assert choose_relay_mode("auto", "auto", False, None) == RelayMode(SourceMode.REWRITE, False)
    assert choose_relay_mode("rewrite", "auto", True, None) == RelayMode(
        SourceMode.REWRITE, False
    )  # the kernel cannot rewrite the source: no fast path in rewrite mode
    assert choose_relay_mode("preserve", "off", True, None).fast_path is False
    with pytest.raises(StartupError, match="needs raw sockets"):
        choose_relay_mode("preserve", "auto", False, None)
    with pytest.raises(StartupError, match="fast_path is on but cannot be used: no nft"):
        choose_relay_mode("preserve", "on", True, "no nft")
    with pytest.raises(StartupError, match="it needs --source-mode preserve"):
        choose_relay_mode("rewrite", "on", True, None)


# --- the relay service with a fake topology ------------------------------------------------


class FakeWatcher:
    """Stands in for io/netlink.TopologyWatcher: reports whatever topology the test sets."""

    def __init__(self, on_change: Callable[[Topology], None]) -> None:
        self.on_change = on_change
        self.topology = Topology(())
        self.events: Counter[str] = Counter()
        self.closed = False
        FakeWatcher.last = self

    last: "FakeWatcher"
    initial = Topology(())

    async def start(self) -> None:
        self.topology = FakeWatcher.initial
        self.on_change(self.topology)

    async def close(self) -> None:
        self.closed = True

    def move(self, topology: Topology) -> None:
        self.topology = topology
        self.events["link"] += 1
        self.on_change(topology)


def relay_config(port: int, *names: str) -> Config:
    return load_config(
        None,
        {},
        {
            "ipx": {"listen": "off"},
            "http": {"listen": "off"},
            "relay": {
                "interfaces": [{"name": n} for n in names],
                "ports": [port],
                "source_mode": "rewrite",  # no raw sockets needed
                "fast_path": "off",
            },
        },
    )


@pytest.fixture
def two_lans() -> Iterator[Topology]:
    FakeWatcher.initial = Topology((lan(1, "lanA", "10.9.1.1"), lan(2, "lanB", "10.9.2.1")))
    yield FakeWatcher.initial
    FakeWatcher.initial = Topology(())


def test_relay_service_plans_from_its_topology_and_follows_changes_and_reloads(
    two_lans: Topology, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_udp_port()

    async def main() -> None:
        service = RelayService(relay_config(port, "lan*"), inspector(), watcher=FakeWatcher)
        await service.start()
        try:
            assert service.relay is not None
            assert service.mode == RelayMode(SourceMode.REWRITE, fast_path=False)
            assert [e.name for e in service.plan or ()] == ["lanA", "lanB"]
            assert service.relay.policy.egresses == service.plan  # the plan it executes
            assert "relaying between: lanA (lan, broadcast 10.9.1.255)" in caplog.text

            # a third LAN comes up, lanB goes down: re-planned at once, on the loop
            FakeWatcher.last.move(
                Topology(
                    (
                        lan(1, "lanA", "10.9.1.1"),
                        lan(2, "lanB", "10.9.2.1", up=False),
                        lan(3, "lanC", "10.9.3.1"),
                    )
                )
            )
            snap = service.snapshot()
            assert [e.name for e in snap.plan] == ["lanA", "lanC"]
            assert snap.selected_down == ("lanB",)
            assert snap.netlink_events == {"link": 1}
            views = {i["name"]: (i["up"], i["broadcast"]) for i in service.interfaces_json()}
            assert views == {
                "lanA": (True, "10.9.1.255"),
                "lanC": (True, "10.9.3.255"),
                "lanB": (False, None),
            }

            # a reload that selects lanA only: re-planned without a restart
            service.reconfigure(relay_config(port, "lanA"))
            assert [e.name for e in service.plan or ()] == ["lanA"]
            assert "the relay needs at least two usable interfaces; have 1" in caplog.text
        finally:
            await service.stop()
        assert FakeWatcher.last.closed
        # the relay port is free again: the service closed its sockets
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as again:
            again.bind(("0.0.0.0", port))

    caplog.set_level("INFO")
    asyncio.run(main())
    assert "stopped; relay: received=0" in caplog.text


def test_relay_service_says_which_port_it_cannot_have(two_lans: Topology) -> None:
    port = free_udp_port()
    squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    squatter.bind(("0.0.0.0", port))

    async def main() -> None:
        service = RelayService(relay_config(port, "lan*"), inspector(), watcher=FakeWatcher)
        try:
            with pytest.raises(StartupError, match=rf"cannot listen on the relay ports \[{port}\]"):
                await service.start()
            assert service.relay is None
            assert service.snapshot().enabled is False
        finally:
            await service.stop()

    with squatter:
        asyncio.run(main())


def test_relay_service_off_starts_nothing() -> None:
    async def main() -> None:
        service = RelayService(relay_config(free_udp_port()), inspector(), watcher=FakeWatcher)
        await service.start()  # only looks for an earlier run's table (R18)
        assert (service.relay, service.watcher, service.plan) == (None, None, None)
        assert service.snapshot().enabled is False
        assert service.interfaces_json() == []
        await service.stop()

    asyncio.run(main())


# --- names that match no interface --------------------------------------------------------


def loopback() -> Interface:
    return dataclasses.replace(lan(9, "lo", "127.0.0.1"), kind="loopback")


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ipxbridge.app.interface_warnings"]


def test_relay_service_warns_about_names_that_match_no_interface_once_per_change(
    two_lans: Topology, caplog: pytest.LogCaptureFixture
) -> None:
    """`run --iface nosuch0` only said "relaying between: nothing"; now it names the names."""
    port = free_udp_port()
    FakeWatcher.initial = Topology((*two_lans.interfaces, loopback()))
    config = relay_config(port, "lan*", "nosuch0", "lo")

    async def main() -> None:
        service = RelayService(config, inspector(), watcher=FakeWatcher)
        await service.start()
        try:
            first = (
                "relay interfaces (--iface, relay.interfaces): 'nosuch0' matches no interface; "
                "'lo' matches only loopback (lo), which is excluded"
            )
            assert warnings(caplog) == [first]  # at start
            now = asyncio.get_running_loop().time()
            # re-plans and ticks that change nothing about the names say nothing again
            down = dataclasses.replace(two_lans.interfaces[1], up=False)
            FakeWatcher.last.move(Topology((two_lans.interfaces[0], down, loopback())))
            for second in range(5):
                service.tick(now + second)
            service.reconfigure(config)
            assert warnings(caplog) == [first]
            # nosuch0 appears: said on the re-plan, or when the minute since the last is over
            nosuch0 = lan(7, "nosuch0", "10.9.7.1")
            FakeWatcher.last.move(Topology((*two_lans.interfaces, loopback(), nosuch0)))
            service.tick(now + WARN_GAP)
            assert warnings(caplog) == [
                first,
                "relay interfaces (--iface, relay.interfaces): 'lo' matches only loopback (lo), "
                "which is excluded",
            ]
        finally:
            await service.stop()

    caplog.set_level("INFO")
    asyncio.run(main())


def test_ipx_service_warns_about_names_that_match_no_interface(
    two_lans: Topology, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeWatcher.initial = Topology((*two_lans.interfaces, loopback()))
    monkeypatch.setattr("ipxbridge.app.ipx.TopologyWatcher", FakeWatcher)
    port = free_udp_port()
    # no port opens (nothing is sent to the fake LANs' addresses, which are not this box's)
    entries = [{"name": n, "kinds": ["rfc1234"]} for n in ("nosuch1", "lo")]
    config = load_config(
        None,
        {},
        {"ipx": {"listen": f"0.0.0.0:{port}", "interfaces": entries}, "http": {"listen": "off"}},
    )

    async def main() -> None:
        service = IpxService(config, inspector())
        await service.start()
        try:
            assert warnings(caplog) == [
                "IPX interface ports (--ipx-iface, ipx.interfaces): 'nosuch1' matches no "
                "interface; 'lo' matches only loopback (lo), which is excluded"
            ]
            lone = Topology((two_lans.interfaces[0], loopback()))
            FakeWatcher.last.move(lone)  # a re-plan, the same names unmatched
            assert len(warnings(caplog)) == 1
        finally:
            await service.stop()

    caplog.set_level("INFO")
    asyncio.run(main())


def test_unmatched_names_are_said_once_per_change_and_at_most_once_a_gap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO")
    names = UnmatchedNames("relay interfaces", gap=60)
    lan_a = Topology((lan(1, "lanA", "10.9.1.1"),))
    lan_ab = Topology((*lan_a.interfaces, lan(2, "lanB", "10.9.2.1")))
    names.check(lan_a, ["lanA", "lanB"], 0)
    assert warnings(caplog) == ["relay interfaces: 'lanB' matches no interface"]
    names.check(lan_a, ["lanA", "lanB"], 1)  # the same: nothing
    names.check(lan_ab, ["lanA", "lanB"], 2)  # changed, within the gap: held back
    names.check(lan_a, ["lanA", "lanB"], 3)  # and changed back: nothing left to say
    names.tick(61)
    assert len(warnings(caplog)) == 1
    names.check(lan_ab, ["lanA", "lanB"], 70)  # a change after the gap: said at once
    names.check(lan_a, ["lanA", "lanB"], 71)  # a flap: held back until 130
    names.tick(129)
    assert warnings(caplog)[1:] == ["relay interfaces: every name matches an interface now"]
    names.tick(130)
    assert warnings(caplog)[2:] == ["relay interfaces: 'lanB' matches no interface"]
    names.check(lan_a, ["lanA", "10.1.2.0/33"], 500)  # a bad CIDR: the plan reports it
    assert len(warnings(caplog)) == 3


# --- the IPX service on a real socket ------------------------------------------------------


def test_ipx_service_registers_a_client_and_reloads_its_peers(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    port = free_udp_port()
    key_file = str(tmp_path / "node.key")
    ipx_flags = {"listen": f"127.0.0.1:{port}", "node_key_file": key_file}
    config = load_config(None, {}, {"ipx": ipx_flags, "http": {"listen": "off"}})
    got: list[tuple[bytes, tuple[str, int]]] = []  # the node in the reply, the client

    async def main() -> None:
        service = IpxService(config, inspector())
        await service.start()
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.bind(("127.0.0.1", 0))
        client.setblocking(False)
        try:
            loop = asyncio.get_running_loop()
            await loop.sock_sendto(client, ipx.build_registration(), ("127.0.0.1", port))
            reply = await asyncio.wait_for(loop.sock_recv(client, 2048), 5)
            got.append((ipx.parse_header(reply).dst_node, client.getsockname()))
            clients = service.clients_json()
            assert [c["kind"] for c in clients] == ["dosbox"]
            assert clients[0]["address"] == "{}:{}".format(*client.getsockname())
            snap = service.snapshot()
            assert (snap.enabled, snap.clients, snap.peers) == (True, 1, 0)
            assert (snap.counters.received, snap.counters.control) == (1, 1)

            peer = f"127.0.0.1:{free_udp_port()}"
            reloaded = load_config(
                None,
                {},
                {"ipx": {**ipx_flags, "peers": [peer, "no.such.host.invalid"]}},
            )
            service.reconfigure(reloaded)
            assert [c["address"] for c in service.clients_json() if c["kind"] == "peer"] == [peer]
            assert "reload: peer no.such.host.invalid" in caplog.text  # left out, said why
        finally:
            client.close()
            await service.stop()

    caplog.set_level("INFO")
    asyncio.run(main())
    assert "stopped; IPX: received=1 forwarded=0 control=1" in caplog.text
    # A keyed node, from the key the service created (policy/switch.py rule 2).
    key = Path(key_file).read_bytes()
    assert len(key) == 32
    assert Path(key_file).stat().st_mode & 0o777 == 0o600
    assert f"IPX node key created in {key_file}" in caplog.text
    ((node, (ip, client_port)),) = got
    assert node == ipx.keyed_node(key, ip, client_port)


# --- the Bridge with recording services ---------------------------------------------------


class Recorder:
    """A service that records what the Bridge asks of it."""

    def __init__(self, name: str, log: list[str], *, fail_tick: bool = False) -> None:
        self.name, self.log, self.fail_tick = name, log, fail_tick
        self.configs: list[Config] = []

    async def start(self) -> None:
        self.log.append(f"start {self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")

    def reconfigure(self, config: Config) -> None:
        self.configs.append(config)

    def tick(self, now: float) -> None:
        self.log.append(f"tick {self.name}")
        if self.fail_tick:
            raise RuntimeError("a bug in one service")

    def snapshot(self) -> None:
        return None


def test_bridge_orders_services_ticks_them_all_and_fans_a_checked_reload_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    first = Recorder("first", log, fail_tick=True)
    second = Recorder("second", log)
    config = load_config(
        None, {}, {"ipx": {"listen": "127.0.0.1:21990"}, "http": {"listen": "off"}}
    )
    bridge = Bridge(config)
    bridge.services = (first, second)

    async def main() -> None:
        await bridge.start()
        await asyncio.sleep(1.2)  # one tick
        await bridge.stop()

    asyncio.run(main())
    assert log[:2] == ["start first", "start second"]
    assert log[2:4] == ["tick first", "tick second"]  # the first's exception spared the second
    assert log[-2:] == ["stop second", "stop first"]
    assert "Recorder tick failed" in caplog.text
    assert bridge.health.started

    def bad() -> Config:
        raise ConfigError(["ipxbridge.yaml:3: ipx.max_clients: not a number"])

    bridge.reload(bad)
    assert (bridge.reload_ok, first.configs) == (False, [])  # nothing reached a service
    assert "reload rejected: ipxbridge.yaml:3" in caplog.text

    changed = load_config(
        None,
        {},
        {"ipx": {"listen": "127.0.0.1:9", "max_clients": 7}, "http": {"listen": "off"}},
    )
    bridge.reload(lambda: changed)
    assert bridge.reload_ok
    for service in (first, second):
        (got,) = service.configs
        assert got.ipx.max_clients == 7  # live
        assert got.ipx.listen == "127.0.0.1:21990"  # restart-only: kept as running
    assert "need a restart and keep their running values: ipx.listen" in caplog.text
