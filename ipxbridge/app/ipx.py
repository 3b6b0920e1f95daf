"""The IPX service: the switch with its UDP socket, its peers, clients and interface ports.

Interface ports are native Ethernet, IPXWrapper and RFC 1234 segments.

The interface ports follow the topology like the relay's egresses: the plan
(``policy/port_plan.plan_ports``) is rebuilt on every netlink change and after each read of
the WireGuard peers (off the loop), and the difference applied: a port whose interface
vanished is closed, one on a re-created interface (new ifindex) is reopened, a new one is
opened, and a UDP port whose addresses or peers changed takes the new plan in place.
"""

import asyncio
import errno
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from ipxbridge import __version__, build
from ipxbridge.app.interface_warnings import UnmatchedNames
from ipxbridge.app.vpn_peers import VpnPeers
from ipxbridge.config import UPLINK_PASSWORD_ENV, Config, parse_host_port, resolve_ipv4
from ipxbridge.errors import StartupError
from ipxbridge.io.ipx_endpoint import IpxEndpoint, make_server_node_lookup, open_udp_socket
from ipxbridge.io.netlink import TopologyWatcher
from ipxbridge.io.nodekey import load_node_key
from ipxbridge.io.segments import EthernetPort, IpxWrapperSocket, Rfc1234Port, SegmentPort
from ipxbridge.io.uplink import UplinkLink
from ipxbridge.io.wireguard import PEER_REFRESH_SECONDS
from ipxbridge.obs.counters import IpxCounters, LatencyHistogram
from ipxbridge.obs.logging import DROP_LOG_SECONDS, DropWatch
from ipxbridge.obs.metrics import IpxSnapshot
from ipxbridge.policy.connections import is_connection
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.port_plan import (
    IpxInterface,
    PortPlan,
    Skipped,
    SourceIndex,
    plan_ports,
)
from ipxbridge.policy.relay import wireguard_reads
from ipxbridge.policy.switch import (
    Address,
    IpxSwitch,
    PortKind,
    Segment,
    SwitchSettings,
)
from ipxbridge.policy.topology import Topology
from ipxbridge.policy.uplink import UplinkClient, UplinkServer
from ipxbridge.wire.ipx import address_node, keyed_nodes
from ipxbridge.wire.ipxwrapper import IPXWRAPPER_UDP_PORT

logger = logging.getLogger(__name__)

MIN_KEY_BYTES: Final = 16  # a shorter shared secret is guessable
# The uplink server's password when ipx.uplink_password_file is not set (3.9).


def _read_password(path: str, key: str) -> bytes:
    """An uplink password: the file's first line (config.py checked it once already).

    Raises:
        StartupError: unreadable or empty now.
    """
    try:
        secret = Path(path).read_bytes().split(b"\n", 1)[0].rstrip(b"\r")
    except OSError as exc:
        raise StartupError(f"{key} {path}: {exc.strerror}") from None
    if not secret:
        raise StartupError(f"{key} {path}: the first line (the password) is empty")
    return secret


def uplink_server_password(config: Config) -> bytes | None:
    """The server side's password (docs/protocols.md 3.9), or None: the server side is off.

    Raises:
        StartupError: the file cannot be read.
    """
    path = config.ipx.uplink_password_file
    if path:
        return _read_password(path, "ipx.uplink_password_file")
    value = os.environ.get(UPLINK_PASSWORD_ENV, "")
    return value.encode() if value else None


def uplink_client_passwords(config: Config) -> list[tuple[str, bytes]]:
    """(server as configured, password) of each client uplink, in order.

    Raises:
        StartupError: a file unreadable, or a variable not set, naming the key.
    """
    out: list[tuple[str, bytes]] = []
    for i, entry in enumerate(config.ipx.uplinks):
        key = f"ipx.uplinks[{i}]"
        if entry.password_file:
            out.append((entry.server, _read_password(entry.password_file, key + ".password_file")))
            continue
        value = os.environ.get(entry.password_env, "")
        if not value:
            raise StartupError(
                f"{key}.password_env: the environment variable {entry.password_env} is not set"
            )
        out.append((entry.server, value.encode()))
    return out


def read_bridge_key(path: str) -> bytes | None:
    """The beacons' shared secret from ``ipx.bridge_key_file`` ("" = none).

    Raises:
        StartupError: the file cannot be read or is too short to be a secret.
    """
    if not path:
        return None
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise StartupError(f"ipx.bridge_key_file {path}: {exc.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise StartupError(
            f"ipx.bridge_key_file {path}: {len(key)} bytes; at least {MIN_KEY_BYTES} are needed"
            " (e.g. head -c 32 /dev/urandom > FILE, the same file on every bridge)"
        )
    return key


def _wall_ms() -> int:
    """Beacon sequence numbers: wall-clock ms keep increasing across restarts (rule 8)."""
    return time.time_ns() // 1_000_000


def ipx_interfaces(config: Config) -> tuple[IpxInterface, ...]:
    """The configured interface ports as the plan takes them."""
    return tuple(
        IpxInterface(
            i.name,
            tuple(PortKind(k) for k in i.kinds),
            i.role,
            i.peers,
            i.framing,
            bytes.fromhex(i.network),
        )
        for i in config.ipx.interfaces
    )


def switch_settings(config: Config) -> SwitchSettings:
    """Translate the ``ipx`` section into switch tunables."""
    ipx = config.ipx
    return SwitchSettings(
        max_clients=ipx.max_clients,
        idle_timeout=ipx.idle_timeout,
        keepalive_interval=ipx.keepalive_interval,
        dedup_window=ipx.dedup_window,
        filtered_sockets=frozenset(ipx.filtered_sockets) if ipx.filter_sockets else frozenset(),
        answer_pings=ipx.answer_pings,
        node_assignment=ipx.node_assignment,
        unverified_address_bytes_per_second=ipx.unverified_address_bytes_per_second,
        unverified_address_byte_burst=ipx.unverified_address_byte_burst,
        unverified_total_bytes_per_second=ipx.unverified_total_bytes_per_second,
        unverified_total_byte_burst=ipx.unverified_total_byte_burst,
        max_unverified=ipx.max_unverified,
        max_unverified_per_ip=ipx.max_unverified_per_ip,
        rejoin=ipx.rejoin,
        clients_allow=ipx.clients_allow,
    )


def client_nodes(config: Config) -> Callable[[Address], bytes]:
    """The nodes DOSBox-protocol clients get (``ipx.node_assignment``, switch rule 2).

    Keyed nodes need the key in ``ipx.node_key_file``, read or created here. If it cannot
    be created the bridge still runs, on a key in memory, and says once what that costs.

    Raises:
        StartupError: the key file is there but unreadable or too short.
    """
    ipx = config.ipx
    if ipx.node_assignment == "address":
        return address_node
    path = Path(ipx.node_key_file)
    loaded = load_node_key(path)
    if loaded.source == "memory":
        logger.warning(
            "IPX node key: %s; using a key in memory, so after a restart clients cannot "
            "rejoin and must reconnect (ipxnet connect). Make %s writable to keep it",
            loaded.why,
            path.parent,
        )
    elif loaded.why:
        logger.warning("%s", loaded.why)
    elif loaded.source == "created":
        logger.info("IPX node key created in %s (keep it: clients rejoin with it)", path)
    return keyed_nodes(loaded.key)


class IpxService:
    """The IPX tunnel (off when ``ipx.listen`` is ``off``)."""

    def __init__(self, config: Config, inspector: Inspector) -> None:
        self.config = config
        self.inspector = inspector
        self.counters = IpxCounters()
        self.latency = LatencyHistogram()
        self.endpoint: IpxEndpoint | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Interface ports.
        self._interfaces = ipx_interfaces(config)
        self.watcher: TopologyWatcher | None = None
        self.skipped: tuple[Skipped, ...] = ()
        self._ipxwrapper: IpxWrapperSocket | None = None
        self._wg = VpnPeers(self._wireguard_names, self._replan, what="IPX interface ports")
        self._next_peer_check = 0.0
        self._logged_plan: tuple[str, ...] | None = None
        self._unmatched = UnmatchedNames("IPX interface ports (--ipx-iface, ipx.interfaces)")
        self._drops = DropWatch()  # the tunnel socket's kernel drops, said in the log
        self._open_errors: dict[Segment, str] = {}
        self._reload_task: asyncio.Task[None] | None = None
        self.uplinks: list[UplinkLink] = []  # client uplinks (docs/protocols.md 3.9)

    @property
    def enabled(self) -> bool:
        """Whether the tunnel is configured to run."""
        return self.config.ipx.listen != "off"

    @property
    def plans(self) -> dict[Segment, PortPlan]:
        """The plan of every open interface port (each port holds its own)."""
        if self.endpoint is None:
            return {}
        return {segment: port.plan for segment, port in self.endpoint.segments.items()}

    async def start(self) -> None:
        """Resolve the peers, bind the socket and start switching."""
        if not self.enabled:
            return
        self._loop = asyncio.get_running_loop()
        ipx = self.config.ipx
        peers = []
        for text in ipx.peers:
            try:
                peers.append(resolve_ipv4(parse_host_port(text)))
            except ValueError as exc:
                raise StartupError(f"peer {text}: {exc}") from None
        listen = parse_host_port(ipx.listen)
        key = read_bridge_key(ipx.bridge_key_file)
        server_password = uplink_server_password(self.config)
        client_uplinks = uplink_client_passwords(self.config)
        sock = open_udp_socket(listen.host, listen.port)
        try:
            node_for = client_nodes(self.config)
        except StartupError:
            sock.close()
            raise
        switch = IpxSwitch(
            switch_settings(self.config),
            tuple(peers),
            make_server_node_lookup(sock),
            os.urandom,  # probe nonces must be unguessable (rule 2, policy/clients.py)
            bridge_id=os.urandom(6),
            beacon_key=key,
            beacon_clock=_wall_ms,
            evictions=self.counters.table_evictions,
            forgiven=self.counters.forgiven,
            node_for=node_for,
        )
        if server_password is not None:
            switch.uplink_server = UplinkServer(
                server_password, os.urandom, evictions=self.counters.table_evictions
            )
        self.endpoint = IpxEndpoint(
            self._loop,
            sock,
            switch,
            self.counters,
            self.inspector,
            latency=self.latency,
            coalesce=ipx.coalesce_ms / 1000,
        )
        self.endpoint.start()
        try:
            self._open_uplinks(client_uplinks)
            await self._start_interfaces()
        except BaseException:
            self._close_uplinks()
            self.endpoint.close()
            raise
        logger.info(
            "ipxbridge %s (%s): IPX tunnel on udp %s (RFC 1234 + DOSBox), peers: %s",
            __version__,
            build.describe(),
            listen,
            ", ".join(f"{h}:{p}" for h, p in peers) or "none",
        )
        if server_password is not None:
            logger.info("uplink server on udp %s: ipxbox uplink clients with the password", listen)

    def _open_uplinks(self, entries: list[tuple[str, bytes]]) -> None:
        """One socket and state machine per client uplink (docs/protocols.md 3.9).

        Raises:
            StartupError: a server name does not resolve, or no socket could be opened.
        """
        assert self.endpoint is not None  # noqa: S101 - started
        assert self._loop is not None  # noqa: S101 - started
        for text, password in entries:
            try:
                server = resolve_ipv4(parse_host_port(text))
            except ValueError as exc:
                raise StartupError(f"uplink {text}: {exc}") from None
            try:
                link = UplinkLink(
                    self._loop, self.endpoint, server, text, UplinkClient(password, os.urandom)
                )
            except OSError as exc:
                raise StartupError(f"uplink {text}: cannot open a socket: {exc.strerror}") from None
            self.uplinks.append(link)
            link.start()
            logger.info("uplink %s: connecting from udp port %d", text, link.local_port)

    def _close_uplinks(self) -> None:
        for link in self.uplinks:
            link.close()
        self.uplinks = []

    async def stop(self) -> None:
        """Close the sockets and log the books."""
        if self.watcher is not None:
            await self.watcher.close()
        await self._wg.close()
        for segment in list(self.plans):
            self._close_port(segment)
        self._close_uplinks()
        if self._ipxwrapper is not None:
            assert self._loop is not None  # noqa: S101 - set by start()
            self._loop.remove_reader(self._ipxwrapper.fileno())
            self._ipxwrapper.close()
        if self.endpoint is None:
            return
        kernel_drops = self.endpoint.kernel_drops()
        self.endpoint.close()
        logger.info("stopped; IPX: %s kernel_dropped=%s", self.counters.summary(), kernel_drops)

    def reconfigure(self, config: Config) -> None:
        """Switch tunables and the peer list; clients and peers that stay keep their state."""
        self.config = config
        if self.endpoint is None:
            return
        peers: list[Address] = []
        for text in config.ipx.peers:
            try:
                peers.append(resolve_ipv4(parse_host_port(text)))
            except ValueError as exc:
                logger.warning("reload: peer %s: %s (left out)", text, exc)
        self.endpoint.switch.reconfigure(switch_settings(config), tuple(peers))
        self.endpoint.pacer.retune(config.ipx.coalesce_ms / 1000)
        try:
            self.endpoint.switch.set_beacon_key(read_bridge_key(config.ipx.bridge_key_file))
        except StartupError as exc:
            logger.warning("reload: %s (the beacons keep the key they had)", exc)
        self._reload_uplinks()
        interfaces = ipx_interfaces(config)
        if interfaces != self._interfaces:
            self._interfaces = interfaces
            if self.watcher is None and interfaces:
                # Turned on by the reload: watch from now on.
                self._reload_task = asyncio.get_running_loop().create_task(
                    self._start_interfaces_logged()
                )
            elif self.watcher is not None:
                self._apply_plan(self.watcher.topology)
                self._wg.refresh()

    def _reload_uplinks(self) -> None:
        """New uplink passwords and servers; unchanged client uplinks keep their connection."""
        endpoint = self.endpoint
        assert endpoint is not None  # noqa: S101 - checked by the caller
        switch = endpoint.switch
        try:
            password = uplink_server_password(self.config)
            clients = uplink_client_passwords(self.config)
        except StartupError as exc:
            logger.warning("reload: %s (uplinks unchanged)", exc)
            return
        if password is None:
            if switch.uplink_server is not None:
                for addr, role in list(switch.uplinks.items()):
                    if role == "server":
                        switch.remove_uplink(addr)
            switch.uplink_server = None
        elif switch.uplink_server is None:
            switch.uplink_server = UplinkServer(
                password, os.urandom, evictions=self.counters.table_evictions
            )
        else:
            switch.uplink_server.password = password  # connected uplinks stay
        old = {(link.name, link.policy.password): link for link in self.uplinks}
        keep = [old.pop(entry) for entry in clients if entry in old]
        for link in old.values():
            link.close()
        self.uplinks = keep
        try:
            self._open_uplinks(
                [e for e in clients if e not in {(k.name, k.policy.password) for k in keep}]
            )
        except StartupError as exc:
            logger.warning("reload: %s (left out)", exc)

    def tick(self, now: float) -> None:
        """Keepalives, probes of unverified clients, expiry, beacons; WireGuard peer reads."""
        for link in self.uplinks:
            link.tick(now)
        if self.endpoint is not None:
            self.endpoint.tick(now)
            if said := self._drops.update(self.endpoint.kernel_drops(), now):
                logger.warning(
                    "the kernel dropped %d datagrams at the IPX tunnel socket (receive buffer "
                    "full): packets came faster than the bridge reads them (a flood, or a box "
                    "short of CPU). Said at most every %.0f minutes; the count is in "
                    'ipxbridge_kernel_dropped_packets_total{path="ipx"}',
                    said,
                    DROP_LOG_SECONDS / 60,
                )
            for port in self.endpoint.segments.values():
                if isinstance(port, EthernetPort):
                    port.tick(now)  # framings of silent stations expire
        self._unmatched.tick(now)
        if self.watcher is not None and now >= self._next_peer_check:
            self._next_peer_check = now + PEER_REFRESH_SECONDS
            if any(p.role == "p2p" for p in self.plans.values()):
                self._wg.refresh()

    # --- interface ports ------------------------------------------------------------------

    async def _start_interfaces(self) -> None:
        """Watch the topology and open the first plan's ports (nothing without interfaces).

        Raises:
            StartupError: IPXWrapper's port is taken.
        """
        if not self._interfaces or self.endpoint is None or self.watcher is not None:
            return
        if any(PortKind.IPXWRAPPER in i.kinds for i in self._interfaces):
            try:
                self._ipxwrapper = IpxWrapperSocket(self.endpoint)
            except OSError as exc:
                raise StartupError(
                    f"cannot listen on udp 0.0.0.0:{IPXWRAPPER_UDP_PORT} for IPXWrapper ports: "
                    f"{exc.strerror} (is IPXWrapper or another bridge running on this box?)"
                ) from None
            assert self._loop is not None  # noqa: S101 - set by start()
            self._loop.add_reader(self._ipxwrapper.fileno(), self._ipxwrapper.on_readable)
        self.watcher = TopologyWatcher(self._on_topology)
        await self.watcher.start()
        await self._wg.read()

    async def _start_interfaces_logged(self) -> None:
        try:
            await self._start_interfaces()
        except StartupError as exc:
            logger.error("reload: IPX interface ports not started: %s", exc)  # noqa: TRY400

    def _on_topology(self, topology: Topology) -> None:
        self._apply_plan(topology)
        self._wg.refresh()

    def _wireguard_names(self) -> tuple[str, ...]:
        if self.watcher is None:
            return ()
        return wireguard_reads(self.watcher.topology, tuple(i.selection for i in self._interfaces))

    def _replan(self) -> None:
        if self.watcher is not None:
            self._apply_plan(self.watcher.topology)

    def _apply_plan(self, topology: Topology) -> None:
        """Open, reopen, update and close interface ports to match the topology."""
        endpoint = self.endpoint
        if endpoint is None:
            return
        plans, skipped = plan_ports(topology, self._interfaces, self._wg.peers)
        assert self._loop is not None  # noqa: S101 - set by start()
        self._unmatched.check(topology, [i.pattern for i in self._interfaces], self._loop.time())
        wanted = {p.segment: p for p in plans}
        for segment, old in list(self.plans.items()):
            new = wanted.get(segment)
            if new is None or _must_reopen(old, new):
                self._close_port(segment)
        failed: list[Skipped] = []
        opened = False
        for segment, plan in wanted.items():
            port = endpoint.segments.get(segment)
            if port is None:
                why = self._open_port(plan)
                if why:
                    failed.append(Skipped(segment.interface, segment.kind, why))
                    continue
                opened = True
            elif plan != port.plan:
                port.plan = plan  # a UDP port: new addresses or peers, same socket
        self.skipped = skipped + tuple(failed)
        own = frozenset(a.address for i in topology.interfaces for a in i.addresses)
        udp_plans = tuple(p for p in self.plans.values() if p.segment.kind is PortKind.RFC1234)
        switch = endpoint.switch
        switch.own_ips = own if udp_plans else frozenset()
        switch.udp_segment_for = SourceIndex(udp_plans, PortKind.RFC1234)
        if self._ipxwrapper is not None:
            self._ipxwrapper.own_ips = own
            self._ipxwrapper.sources = SourceIndex(tuple(self.plans.values()), PortKind.IPXWRAPPER)
        if opened:
            endpoint.announce()  # rule 8: other bridges there learn of this one at once
        self._log_plan()

    def _open_port(self, plan: PortPlan) -> str:
        """Open one port; returns why not ("" when it is open)."""
        endpoint = self.endpoint
        assert endpoint is not None  # noqa: S101 - started
        assert self._loop is not None  # noqa: S101 - started
        segment = plan.segment
        port: SegmentPort
        if segment.kind is PortKind.ETHERNET:
            try:
                port = EthernetPort(plan, endpoint, evictions=self.counters.table_evictions)
            except OSError as exc:
                why = (
                    "no CAP_NET_RAW (needed for native IPX frames)"
                    if exc.errno in (errno.EPERM, errno.EACCES)
                    else f"cannot open: {exc.strerror}"
                )
                if self._open_errors.get(segment) != why:
                    logger.error("IPX port %s: %s", segment, why)  # noqa: TRY400 - no trace
                self._open_errors[segment] = why
                return why
            self._loop.add_reader(port.fileno(), port.on_readable)
        elif segment.kind is PortKind.IPXWRAPPER:
            assert self._ipxwrapper is not None  # noqa: S101 - opened when a kind asks
            port = self._ipxwrapper.port_for(plan, self.counters)
        else:
            port = Rfc1234Port(plan, endpoint.sock, endpoint.address[1], self.counters)
        self._open_errors.pop(segment, None)
        endpoint.segments[segment] = port
        endpoint.switch.add_segment(segment)
        return ""

    def _close_port(self, segment: Segment) -> None:
        endpoint = self.endpoint
        if endpoint is None:
            return
        port = endpoint.segments.pop(segment, None)
        endpoint.switch.remove_segment(segment)
        if isinstance(port, EthernetPort):
            assert self._loop is not None  # noqa: S101 - started
            self._loop.remove_reader(port.fileno())
            port.close()
        elif port is not None and self._ipxwrapper is not None:
            self._ipxwrapper.ports.pop(segment, None)

    def _log_plan(self) -> None:
        parts = tuple(sorted(_describe(p) for p in self.plans.values()))
        parts += tuple(f"{s.interface}/{s.kind} NOT open: {s.why}" for s in self.skipped)
        if parts == self._logged_plan:
            return
        self._logged_plan = parts
        logger.info("IPX interface ports: %s", "; ".join(parts) or "none (no interface matches)")

    def probe(self, payload: bytes) -> None:
        """A DirectPlay probe to every client (``DirectPlayService.probe_ipx``)."""
        if self.endpoint is not None:
            self.endpoint.probe(payload)

    def snapshot(self) -> IpxSnapshot:
        """Membership, the counters and the latency histogram, for the metrics."""
        if self.endpoint is None:
            return IpxSnapshot(counters=self.counters, latency=self.latency)
        sw = self.endpoint.switch
        return IpxSnapshot(
            True,
            len(sw.clients),
            len(sw.peers),
            self.endpoint.kernel_drops(),
            self.counters,
            self.latency,
            tuple(
                (str(s.kind), s.interface, sw.learned_on(s), len(sw.bridges_on(s)))
                for s in self.endpoint.segments
            ),
            tuple((str(s.kind), s.interface) for s in self.skipped),
            *self._uplink_books(),
            (sw.reflection.sent_bytes, sw.reflection.sent_packets),
            dict(sw.reflection.refused),
            dict(sw.watch.outcomes),
        )

    def _uplink_books(
        self,
    ) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int], dict[str, int]]:
        """Uplinks by (role, state), handshakes by (role, outcome), normalised packets."""
        assert self.endpoint is not None  # noqa: S101 - checked by the caller
        sw = self.endpoint.switch
        states: Counter[tuple[str, str]] = Counter()
        handshakes: Counter[tuple[str, str]] = Counter()
        server = sw.uplink_server
        if server is not None:
            states[("server", "pending")] = server.pending
            states[("server", "authenticated")] = len(server.authenticated)
            for outcome, n in server.handshakes.items():
                handshakes[("server", outcome)] += n
        for link in self.uplinks:
            states[("client", str(link.policy.state))] += 1
            for outcome, n in link.policy.handshakes.items():
                handshakes[("client", outcome)] += n
        return dict(states), dict(handshakes), dict(sw.uplink_normalised)

    def clients_json(self) -> list[dict[str, Any]]:
        """Connected IPX clients and peers, as ``GET /api/clients`` returns them."""
        if self.endpoint is None or self._loop is None:
            return []
        now = self._loop.time()
        sw = self.endpoint.switch
        out: list[dict[str, Any]] = self._stations_json(now)
        out += [
            {
                "kind": "dosbox",
                "address": f"{c.addr[0]}:{c.addr[1]}",
                "node": c.node.hex(":"),
                "idle_seconds": round(now - c.last_seen, 1),
                "verified": c.verified,
            }
            for c in sw.clients.values()
            if not is_connection(c.addr)  # browser players: app/websocket.py lists them
        ]
        out += [
            {"kind": "peer", "address": f"{p.addr[0]}:{p.addr[1]}", "node": p.node.hex(":")}
            for p in sw.peers.values()
        ]
        out += self._uplinks_json(now)
        return out

    def _uplinks_json(self, now: float) -> list[dict[str, Any]]:
        """Uplinks of both roles: who, whether authenticated, how many nodes behind them."""
        assert self.endpoint is not None  # noqa: S101 - checked by the caller
        sw = self.endpoint.switch
        out: list[dict[str, Any]] = []
        server = sw.uplink_server
        if server is not None:
            for addr, session in server.sessions.items():
                out.append(
                    {
                        "kind": "uplink",
                        "role": "server",
                        "address": f"{addr[0]}:{addr[1]}",
                        "authenticated": session.authenticated,
                        "nodes": sw.learned_on(addr),
                        "idle_seconds": round(now - session.last_heard, 1),
                    }
                )
        for link in self.uplinks:
            policy = link.policy
            item: dict[str, Any] = {
                "kind": "uplink",
                "role": "client",
                "address": f"{link.server[0]}:{link.server[1]}",
                "server": link.name,
                "authenticated": policy.connected,
                "state": str(policy.state),
                "nodes": sw.learned_on(link.server),
            }
            if policy.reason:
                item["last_error"] = policy.reason
            out.append(item)
        return out

    def _stations_json(self, now: float) -> list[dict[str, Any]]:
        """Stations learned on interface ports: native, IPXWrapper and RFC 1234 hosts."""
        endpoint = self.endpoint
        assert endpoint is not None  # noqa: S101 - checked by the caller
        out: list[dict[str, Any]] = []
        for node, segment, seen in endpoint.switch.learned_segment_nodes():
            port = endpoint.segments.get(segment)
            item: dict[str, Any] = {
                "kind": str(segment.kind),
                "interface": segment.interface,
                "node": node.hex(":"),
                "idle_seconds": round(now - seen, 1),
            }
            if isinstance(port, EthernetPort):
                item["framing"] = str(port.fixed or port.framings.framing_for(node))
            elif port is not None:
                link = port.links.get(node)
                if link is not None:
                    item["address"] = f"{link[0]}:{link[1]}"
            out.append(item)
        return out


def _must_reopen(old: PortPlan, new: PortPlan) -> bool:
    """An Ethernet socket is bound to one ifindex (a re-created interface has a new one)."""
    if old.segment.kind is not PortKind.ETHERNET:
        return False
    return (old.index, old.mtu, old.framing) != (new.index, new.mtu, new.framing)


def _describe(plan: PortPlan) -> str:
    segment = plan.segment
    if segment.kind is PortKind.ETHERNET:
        framing = "framing learned per station" if plan.framing == "auto" else plan.framing
        return f"{segment} ({framing}, promiscuous)"
    if plan.role == "lan":
        return f"{segment} (lan, broadcast {plan.broadcast or 'none'} from {plan.address})"
    peers = ", ".join(plan.peers) or "NO peers known: nothing will be sent there"
    return f"{segment} (p2p, peers {peers})"
