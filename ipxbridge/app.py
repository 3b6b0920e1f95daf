"""Composition root: builds the parts from a ``Config`` and runs them until a signal."""

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar, TypeVarTuple, Unpack

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ipxbridge import __version__
from ipxbridge.config import Config, ConfigError, parse_host_port, resolve_ipv4
from ipxbridge.errors import StartupError
from ipxbridge.games import game_table
from ipxbridge.io.interfaces import select_ipv4
from ipxbridge.io.netlink import TopologyWatcher
from ipxbridge.io.nftables import FastPathCounts, KernelFanout, Removal, remove_table
from ipxbridge.io.probe import DirectPlayProber, dp4_probe
from ipxbridge.io.relay import (
    BroadcastRelay,
    RelayCounters,
    ip_forward_enabled,
    raw_sockets_allowed,
)
from ipxbridge.io.udp import IpxEndpoint, make_server_node_lookup, open_udp_socket
from ipxbridge.io.wireguard import read_wireguard_peers
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.obs.http import HttpServer, Response, text
from ipxbridge.obs.logging import setup_logging
from ipxbridge.obs.metrics import (
    IpxSnapshot,
    LatencyHistogram,
    RelaySnapshot,
    make_registry,
)
from ipxbridge.obs.status import render_status
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.flows import FlowLimits
from ipxbridge.policy.reassembly import Reassembler
from ipxbridge.policy.relay import (
    Egress,
    RelayPolicy,
    RelaySettings,
    Selection,
    SourceMode,
    build_plan,
    wireguard_reads,
)
from ipxbridge.policy.sessions import SessionTable, session_json
from ipxbridge.policy.switch import IpxSwitch, SwitchSettings
from ipxbridge.policy.topology import Topology, select

logger = logging.getLogger(__name__)

TICK_SECONDS = 1.0
PEER_REFRESH_SECONDS = 10.0


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
        unverified_packets_per_second=ipx.unverified_packets_per_second,
        unverified_packet_burst=ipx.unverified_packet_burst,
        unverified_bytes_per_second=ipx.unverified_bytes_per_second,
        unverified_byte_burst=ipx.unverified_byte_burst,
        unverified_credit_ratio=ipx.unverified_credit_ratio,
        max_unverified=ipx.max_unverified,
        max_unverified_per_ip=ipx.max_unverified_per_ip,
        rejoin=ipx.rejoin,
        clients_allow=ipx.clients_allow,
    )


_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")
Plan = tuple[Egress, ...]


def _nothing() -> None:
    """A no-op job: awaiting it on a FIFO worker waits for what was queued before it."""


def json_response(data: Any) -> Response:  # noqa: ANN401 - any JSON value
    """A JSON HTTP response."""
    return Response(200, "application/json", (json.dumps(data, indent=1) + "\n").encode())


class Bridge:
    """The running appliance: owns the endpoints, the inspector and their counters."""

    def __init__(self, config: Config) -> None:
        self.config = config
        dp = config.directplay
        self.ipx_counters = IpxCounters()
        self.sessions = SessionTable(game_table(dp.games), dp.session_expiry, dp.max_sessions)
        self.inspector = Inspector(self.sessions, Reassembler())
        self.ipx: IpxEndpoint | None = None
        self.http: HttpServer | None = None
        self.prober: DirectPlayProber | None = None
        self.relay: BroadcastRelay | None = None
        self.relay_counters = RelayCounters()
        self.watcher: TopologyWatcher | None = None
        self.fanout: KernelFanout | None = None
        self._plan: tuple[Egress, ...] | None = None
        self._selections: tuple[Selection, ...] = ()
        # WireGuard peers by interface, as last read off the loop (_read_peers); one worker,
        # so a stuck UAPI socket holds one thread, never the loop or a growing queue.
        self._wg_peers: dict[str, list[str]] = {}
        self._wg_executor: ThreadPoolExecutor | None = None
        self._peer_task: asyncio.Task[None] | None = None
        self._peers_stale = False
        self._planning = False  # set once the first plan (with peers) is in place
        self.started = False
        self.reload_ok = True
        self.reload_success_at = time.time()
        self._next_peer_check = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._next_probe = 0.0
        self.heartbeat = 0.0
        self.started_at = time.time()
        self.latency = LatencyHistogram()
        self._fastpath = FastPathCounts()  # the fast path's counters, as last read
        self._next_kernel_read = 0.0
        # nft runs for up to 10 s (its timeout): installs and counter reads go to one worker
        # thread of their own, in order, never on the loop (issue 10 item 6) and never queued
        # behind a stuck WireGuard read.
        self._nft_executor: ThreadPoolExecutor | None = None
        self._kernel_read: asyncio.Future[FastPathCounts] | None = None
        self._registry = make_registry(self)

    async def start(self) -> None:
        """Open sockets and start serving.

        Raises:
            StartupError: a socket cannot be opened or a peer cannot be resolved.
        """
        loop = asyncio.get_running_loop()
        self._loop = loop
        ipx = self.config.ipx
        dp = self.config.directplay
        if ipx.listen == "off" and dp.probe_interval == 0 and not self.config.relay.interfaces:
            raise StartupError(
                "nothing to run: the IPX tunnel is off (--ipx-listen off), "
                "no relay interface is given (--iface) and probing is off"
            )
        if not self.config.relay.interfaces:
            # R18: even with the relay off, and before anything says the bridge is up, so an
            # earlier run's table copies nothing once the first service is listening.
            await self._remove_stale_table()
        if ipx.listen != "off":
            self._start_ipx(loop)
        if self.config.relay.interfaces:
            await self._start_relay(loop)
        if self.config.http.listen != "off":
            await self._start_http()
        if dp.probe_interval > 0:
            self.prober = DirectPlayProber(
                loop, self.inspector, lambda: select_ipv4(dp.probe_interfaces)
            )
            await self.prober.start()
            logger.info(
                "DirectPlay probing every %gs (replies on tcp %d)",
                dp.probe_interval,
                self.prober.tcp_port,
            )
        self.heartbeat = loop.time()
        self._timer = loop.call_later(TICK_SECONDS, self._tick)
        self.started = True

    def _start_ipx(self, loop: asyncio.AbstractEventLoop) -> None:
        ipx = self.config.ipx
        peers = []
        for text_ in ipx.peers:
            try:
                peers.append(resolve_ipv4(parse_host_port(text_)))
            except ValueError as exc:
                raise StartupError(f"peer {text_}: {exc}") from None
        listen = parse_host_port(ipx.listen)
        sock = open_udp_socket(listen.host, listen.port)
        switch = IpxSwitch(
            switch_settings(self.config),
            tuple(peers),
            make_server_node_lookup(sock),
            os.urandom,  # probe nonces must be unguessable (policy/switch.py rule 2)
        )
        self.ipx = IpxEndpoint(
            loop, sock, switch, self.ipx_counters, self.inspector, latency=self.latency
        )
        self.ipx.start()
        peer_text = ", ".join(f"{h}:{p}" for h, p in peers) or "none"
        logger.info(
            "ipxbridge %s: IPX tunnel on udp %s (RFC 1234 + DOSBox), peers: %s",
            __version__,
            listen,
            peer_text,
        )

    async def _start_relay(self, loop: asyncio.AbstractEventLoop) -> None:
        cfg = self.config.relay
        mode = cfg.source_mode
        if mode == "auto":
            mode = "preserve" if raw_sockets_allowed() else "rewrite"
        elif mode == "preserve" and not raw_sockets_allowed():
            raise StartupError(
                "--source-mode preserve needs raw sockets: run as root or grant "
                "CAP_NET_RAW (docker --cap-add NET_RAW), or use rewrite"
            )
        why_not = KernelFanout.available() if cfg.fast_path != "off" else "off in the config"
        fast = mode == "preserve" and why_not is None
        if cfg.fast_path == "on" and not fast:
            raise StartupError(
                "relay.fast_path is on but cannot be used: "
                f"{why_not or 'it needs --source-mode preserve'}"
            )
        self.fanout = KernelFanout(tuple(cfg.ports)) if fast else None
        policy = RelayPolicy(RelaySettings(SourceMode(mode), cfg.dedup_window, kernel_fanout=fast))
        limits = FlowLimits(cfg.max_flows, cfg.max_unproven_flows, cfg.max_flows_per_source)
        self.relay = BroadcastRelay(
            loop, policy, tuple(cfg.ports), self.inspector, self.relay_counters, flow_limits=limits
        )
        try:
            self.relay.start()
        except OSError as exc:
            self.relay = None
            raise StartupError(
                f"cannot listen on the relay ports {list(cfg.ports)}/udp: "
                f"{exc.strerror} (is another relay or a game on this box using "
                "them?)"
            ) from None
        # The relay ports are ours now (a second bridge would have failed above, not taken
        # the first one's table away). Whatever the fast path setting, a table an earlier run
        # left must go before the first plan, or broadcasts get two copies (R18).
        await self._remove_stale_table()
        self._selections = tuple(Selection(i.name, i.role, i.peers) for i in cfg.interfaces)
        self.watcher = TopologyWatcher(self._on_topology)
        await self.watcher.start()
        # The first plan waits for the WireGuard peers (read off the loop, which meanwhile
        # serves the IPX tunnel), so the plan logged as "relaying between" is complete.
        await self._read_peers()
        if self._nft_executor is not None:
            await self._nft(_nothing)  # FIFO: the first fast-path install has finished
        self._planning = True
        logger.info(
            "broadcast relay on udp ports %s, source mode %s, copies made by %s",
            ", ".join(map(str, cfg.ports)),
            mode,
            "the kernel (nftables fast path)" if fast else "ipxbridge",
        )

    async def _remove_stale_table(self) -> None:
        """Remove the nftables table of an earlier run that died without removing it.

        After a SIGKILL the kernel keeps copying broadcasts with no bridge (reliability.md
        R18). Runs on the nft worker (off the loop, and before any install queued after it).
        """
        result = await self._nft(remove_table)
        if result.outcome is Removal.REMOVED:
            logger.warning(
                "removed the nftables table ip ipxbridge an earlier run left behind (%d rules):"
                " it was still copying broadcasts with no bridge running",
                result.rules,
            )
        elif result.outcome is Removal.FAILED:
            logger.warning("could not remove an earlier run's nftables table: %s", result.detail)
        elif result.outcome is not Removal.ABSENT:
            # No nft or no CAP_NET_ADMIN: this run cannot have a table either; after a crash
            # of a run that had one, `ipxbridge cleanup` as root removes it.
            logger.debug("no check for an earlier run's nftables table: %s", result.detail)

    def _on_topology(self, topology: Topology) -> None:
        """Rebuild the relay plan after a link, address or route change.

        Runs on the loop and never blocks: the plan is rebuilt at once with the WireGuard
        peers last read, and a re-read starts in a worker thread; its result re-plans.
        """
        if self.relay is None:
            return
        if not self._planning:  # start() is reading the peers and plans after that
            self._peers_stale = True
            return
        self._apply_plan(topology)
        self._refresh_peers()

    def _refresh_peers(self) -> None:
        """Re-read the WireGuard peers in the background (one read at a time)."""
        if self._peer_task is not None and not self._peer_task.done():
            self._peers_stale = True  # the running read goes round once more
            return
        self._peer_task = asyncio.create_task(self._read_peers(), name="wireguard-peers")

    async def _read_peers(self) -> None:
        """Read the peers of the plan's WireGuard interfaces off the loop, then re-plan.

        Never raises (but for cancellation): a failed re-plan is logged and the old plan
        stays, as a failing topology callback is (``TopologyWatcher``).
        """
        while self.relay is not None and self.watcher is not None:
            self._peers_stale = False
            try:
                names = wireguard_reads(self.watcher.topology, self._selections)
                if names:
                    if self._wg_executor is None:
                        self._wg_executor = ThreadPoolExecutor(1, thread_name_prefix="wg-peers")
                    self._wg_peers = await read_wireguard_peers(names, self._wg_executor)
                self._apply_plan(self.watcher.topology)  # the topology may have moved meanwhile
            except Exception:
                logger.exception("rebuilding the relay plan failed")
            if not self._peers_stale:
                return

    def _apply_plan(self, topology: Topology) -> None:
        if self.relay is None:
            return
        egresses, own, bcasts = build_plan(topology, self._selections, self._wg_peers)
        self.relay.apply_plan(egresses, own, bcasts)
        if egresses == self._plan:
            return
        self._plan = egresses
        if self.fanout is not None:
            # Say "relaying between" only once the kernel really copies (the log tells the
            # truth, and start-up readiness waits for it).
            self._nft(self.fanout.install, egresses).add_done_callback(
                lambda future: self._fast_path_installed(future, egresses)
            )
        else:
            self._log_plan(egresses)

    def _fast_path_installed(self, future: "asyncio.Future[bool]", egresses: Plan) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None or not future.result():
            logger.error(
                "kernel fast path failed%s; broadcasts are NOT being relayed",
                f" ({exc})" if exc is not None else "",
            )
            return
        self._log_plan(egresses)

    def _log_plan(self, egresses: Plan) -> None:
        assert self.relay is not None  # noqa: S101
        parts = []
        for e in egresses:
            if e.role == "lan":
                parts.append(f"{e.name} (lan, broadcast {e.broadcast})")
            elif e.peers:
                parts.append(f"{e.name} (p2p, {len(e.peers)} peers: {', '.join(e.peers)})")
            else:
                parts.append(f"{e.name} (p2p, NO peers known: nothing will be sent there)")
        logger.info("relaying between: %s", "; ".join(parts) or "nothing (no interface up)")
        if len(egresses) < 2:
            logger.warning("the relay needs at least two usable interfaces; have %d", len(egresses))
        if (
            self.relay.policy.settings.source_mode is SourceMode.PRESERVE
            and len(egresses) >= 2
            and not ip_forward_enabled()
        ):
            logger.warning(
                "preserve mode: copies keep the player's address, so hosts answer the player "
                "directly through this box, but net.ipv4.ip_forward is 0 and those replies "
                "cannot be routed. Fix: sysctl -w net.ipv4.ip_forward=1 and give hosts a route "
                "to the players' subnets via this box, or run with --source-mode rewrite"
            )

    async def _start_http(self) -> None:
        listen = parse_host_port(self.config.http.listen)
        self.http = HttpServer(
            {
                "/api/sessions": lambda _q: json_response(self.sessions_json()),
                "/api/clients": lambda _q: json_response(self.clients_json()),
                "/-/healthy": lambda _q: self._healthy(),
                "/-/ready": lambda _q: (
                    text(200, "ready\n") if self.started else text(503, "starting\n")
                ),
                "/api/interfaces": lambda _q: json_response(self.interfaces_json()),
                "/metrics": lambda _q: self._metrics(),
                "/": lambda _q: Response(
                    200, "text/html; charset=utf-8", render_status(self.status_data()).encode()
                ),
            }
        )
        try:
            await self.http.start(listen.host, listen.port)
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {listen}/tcp for HTTP: {exc.strerror} "
                "(choose another with --metrics-listen, or off)"
            ) from None
        logger.info("HTTP API on http://%s/api/sessions", listen)

    def _healthy(self) -> Response:
        assert self._loop is not None  # noqa: S101 - routes run on the started loop
        stale = self._loop.time() - self.heartbeat
        if stale > 3 * TICK_SECONDS:
            return text(503, f"event loop heartbeat is {stale:.1f}s old\n")
        return text(200, "ok\n")

    def sessions_json(self) -> list[dict[str, Any]]:
        """The live game list, as ``GET /api/sessions`` returns it."""
        assert self._loop is not None  # noqa: S101
        now = self._loop.time()
        wall = time.time()
        return [session_json(s, now, wall) for s in self.sessions.snapshot(now)]

    def reload(self, load: Callable[[], Config]) -> None:
        """SIGHUP: validate the new configuration first, then swap what can change live.

        IPX clients, peers that stay, sessions and the relay keep running. An invalid file
        changes nothing: every error is logged and the old configuration stays in force.
        """
        errors: list[str] = []
        try:
            new = load()
        except ConfigError as exc:
            errors = exc.errors
        except Exception:
            self.reload_ok = False
            logger.exception("reload failed; keeping the running configuration")
            return
        if errors:
            self.reload_ok = False
            for line in errors:
                logger.error("reload rejected: %s", line)
            logger.error("reload rejected: keeping the running configuration")
            return
        old = self.config
        pending = restart_only_changes(old, new)
        if pending:
            logger.warning(
                "reload: these settings need a restart and keep their running values: %s",
                ", ".join(pending),
            )
        new = keep_restart_only(old, new)
        self.config = new
        setup_logging(new.logging.level, new.logging.format)
        dp = new.directplay
        self.sessions.expiry = dp.session_expiry
        self.sessions.max_sessions = dp.max_sessions
        self.sessions.games = game_table(dp.games)
        if self.ipx is not None:
            peers = []
            for text_ in new.ipx.peers:
                try:
                    peers.append(resolve_ipv4(parse_host_port(text_)))
                except ValueError as exc:
                    logger.warning("reload: peer %s: %s (left out)", text_, exc)
            self.ipx.switch.reconfigure(switch_settings(new), tuple(peers))
        if self.relay is not None:
            self._selections = tuple(
                Selection(i.name, i.role, i.peers) for i in new.relay.interfaces
            )
            self.relay.policy.set_window(new.relay.dedup_window)
            if self.watcher is not None:
                self._plan = None  # log the plan again
                self._on_topology(self.watcher.topology)  # new selections may name new peers
        self.reload_ok = True
        self.reload_success_at = time.time()
        logger.info("configuration reloaded")

    def _metrics(self) -> Response:
        body = generate_latest(self._registry)
        return Response(200, CONTENT_TYPE_LATEST, body)

    def monotonic(self) -> float:
        """The event loop's clock (the policy layer's ``now``)."""
        return self._loop.time() if self._loop is not None else 0.0

    def ipx_snapshot(self) -> IpxSnapshot:
        """IPX membership for the metrics."""
        if self.ipx is None:
            return IpxSnapshot()
        sw = self.ipx.switch
        return IpxSnapshot(True, len(sw.clients), len(sw.peers), self.ipx.kernel_drops())

    def relay_snapshot(self) -> RelaySnapshot:
        """Relay numbers for the metrics (Python copies plus the kernel's)."""
        if self.relay is None:
            return RelaySnapshot()
        c = self.relay_counters
        copies = dict(c.copies)
        for name, n in self._fastpath.copies.items():
            copies[name] = copies.get(name, 0) + n
        plan = self._plan or ()
        topo = self.watcher.topology if self.watcher is not None else None
        kinds: dict[str, str] = {}
        down: list[str] = []
        if topo is not None:
            kinds = {i.name: i.kind for i in topo.interfaces}
            used = {e.name for e in plan}
            for sel in self._selections:
                try:
                    matched = select(topo, [sel.pattern])
                except ValueError:
                    matched = []
                down += [i.name for i in matched if i.name not in used and i.name not in down]
        events = dict(self.watcher.events) if self.watcher is not None else {}
        names = {i.index: i.name for i in topo.interfaces} if topo is not None else {}
        by_iface: dict[str, int] = {}
        for index, n in c.received_by_ifindex.items():
            # an interface that is gone keeps its count under "other" (bounded labels)
            name = names.get(index, "other")
            by_iface[name] = by_iface.get(name, 0) + n
        unproven, proven, returns = self.relay.flow_counts()
        return RelaySnapshot(
            enabled=True,
            received=c.received,
            received_bytes=c.received_bytes,
            relayed=c.relayed,
            dropped=dict(c.dropped),
            copies=copies,
            send_errors=dict(c.send_errors),
            plan=plan,
            selected_down=tuple(down),
            kinds=kinds,
            netlink_events=events,
            received_by_interface=by_iface,
            kernel_drops=self.relay.kernel_drops(),
            fastpath_dropped=dict(self._fastpath.dropped) if self.fanout is not None else None,
            flows={"unproven": unproven, "proven": proven},
            return_sockets=returns,
            flow_evictions=dict(c.flows_evicted),
            flows_refused=dict(c.flows_refused),
        )

    def interfaces_json(self) -> list[dict[str, Any]]:
        """Relay interfaces: selected, up or down, role, targets."""
        snap = self.relay_snapshot()
        out: list[dict[str, Any]] = [
            {
                "name": e.name,
                "up": True,
                "role": e.role,
                "address": e.address,
                "broadcast": e.broadcast or None,
                "peers": list(e.peers),
                "mtu": e.mtu,
                "kind": snap.kinds.get(e.name, "other"),
                "copies": snap.copies.get(e.name, 0),
            }
            for e in snap.plan
        ]
        out += [
            {
                "name": n,
                "up": False,
                "role": None,
                "address": None,
                "broadcast": None,
                "peers": [],
                "mtu": None,
                "kind": snap.kinds.get(n, "other"),
                "copies": 0,
            }
            for n in snap.selected_down
        ]
        return out

    def status_data(self) -> dict[str, Any]:
        """Everything the status page shows."""
        ipx = self.ipx_counters
        relay = self.relay_counters
        return {
            "version": __version__,
            "uptime": time.time() - self.started_at,
            "ipx_listen": self.config.ipx.listen,
            "clients": self.clients_json(),
            "sessions": self.sessions_json(),
            "interfaces": self.interfaces_json(),
            "relay_enabled": self.relay is not None,
            "counters": {
                "IPX received": ipx.received,
                "IPX forwarded": ipx.forwarded,
                "IPX control": ipx.control,
                "IPX dropped": ipx.dropped_total,
                "relay received": relay.received,
                "relay relayed": relay.relayed,
                "relay dropped": sum(relay.dropped.values()),
                "DirectPlay messages": sum(self.inspector.messages.values()),
                "DirectPlay malformed": sum(self.inspector.errors.values()),
            },
        }

    def clients_json(self) -> list[dict[str, Any]]:
        """Connected IPX clients and peers."""
        if self.ipx is None or self._loop is None:
            return []
        now = self._loop.time()
        sw = self.ipx.switch
        out: list[dict[str, Any]] = [
            {
                "kind": "dosbox",
                "address": f"{c.addr[0]}:{c.addr[1]}",
                "node": c.node.hex(":"),
                "idle_seconds": round(now - c.last_seen, 1),
                "verified": c.verified,
            }
            for c in sw.clients.values()
        ]
        out += [
            {"kind": "peer", "address": f"{p.addr[0]}:{p.addr[1]}", "node": p.node.hex(":")}
            for p in sw.peers.values()
        ]
        return out

    def _nft(self, call: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> asyncio.Future[_T]:
        """Run an nft call on the fast path's own worker thread (FIFO, off the loop)."""
        assert self._loop is not None  # noqa: S101
        if self._nft_executor is None:
            self._nft_executor = ThreadPoolExecutor(1, thread_name_prefix="nft")
        return self._loop.run_in_executor(self._nft_executor, call, *args)

    def _kernel_counters_read(self, future: "asyncio.Future[FastPathCounts]") -> None:
        if not future.cancelled() and future.exception() is None:
            self._fastpath = future.result()

    def _tick(self) -> None:
        assert self._loop is not None  # noqa: S101
        now = self._loop.time()
        self.heartbeat = now
        try:
            self.inspector.tick(now)
            if self.relay is not None:
                self.relay.tick(now)
                if (
                    self.fanout is not None
                    and now >= self._next_kernel_read
                    and (self._kernel_read is None or self._kernel_read.done())
                ):
                    self._next_kernel_read = now + 5.0
                    self._kernel_read = self._nft(self.fanout.read)
                    self._kernel_read.add_done_callback(self._kernel_counters_read)
                # WireGuard peer changes (wg set) raise no netlink event: re-read them, off
                # the loop (the read can block for seconds; issue item 6).
                if self.watcher is not None and now >= self._next_peer_check:
                    self._next_peer_check = now + PEER_REFRESH_SECONDS
                    if self._planning and any(e.role == "p2p" for e in self._plan or ()):
                        self._refresh_peers()
            interval = self.config.directplay.probe_interval
            if interval > 0 and now >= self._next_probe:
                self._next_probe = now + interval
                self.probe_once()
        finally:
            self._timer = self._loop.call_later(TICK_SECONDS, self._tick)

    def probe_once(self) -> None:
        """One probe round: UDP on the selected interfaces, and IPX clients."""
        if self.prober is not None:
            self.prober.probe()
            if self.ipx is not None and self.config.directplay.probe_ipx:
                self.ipx.probe(dp4_probe(0, bare=True))

    async def stop(self) -> None:
        """Close sockets and log the accounting summary."""
        if self._timer is not None:
            self._timer.cancel()
        if self.prober is not None:
            await self.prober.close()
        if self.watcher is not None:
            await self.watcher.close()
        if self._peer_task is not None:
            self._peer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._peer_task
        if self._wg_executor is not None:
            # A read stuck in the worker ends at its own timeout; stop() does not wait for it.
            self._wg_executor.shutdown(wait=False, cancel_futures=True)
        if self._nft_executor is not None:
            # Let a pending install finish first, so the table is not re-created after the
            # remove below.
            await asyncio.get_running_loop().run_in_executor(None, self._nft_executor.shutdown)
        if self.fanout is not None:
            kernel = self.fanout.read()
            self.fanout.remove()
            if kernel.copies:
                logger.info(
                    "kernel fast path copies: %s; dropped before the socket: %s",
                    ", ".join(f"{k}={v}" for k, v in sorted(kernel.copies.items())),
                    ", ".join(f"{k}={v}" for k, v in sorted(kernel.dropped.items())),
                )
        if self.relay is not None:
            kernel_drops = self.relay.kernel_drops()
            self.relay.close()
            logger.info(
                "stopped; relay: %s kernel_dropped=%s", self.relay_counters.summary(), kernel_drops
            )
        if self.http is not None:
            await self.http.close()
        if self.ipx is not None:
            kernel_drops = self.ipx.kernel_drops()  # None: /proc unreadable
            self.ipx.close()
            logger.info(
                "stopped; IPX: %s kernel_dropped=%s", self.ipx_counters.summary(), kernel_drops
            )
        if not self.started:
            return
        seen = ", ".join(
            f"dp{v}/{name}={n}" for (v, name), n in sorted(self.inspector.messages.items())
        )
        errors = ", ".join(f"{k}={n}" for k, n in sorted(self.inspector.errors.items()))
        logger.info(
            "DirectPlay: %s; malformed: %s; sessions listed now: %d",
            seen or "none",
            errors or "none",
            len(self.sessions),
        )


# Settings that need new sockets or tasks: a reload reports them and keeps the running values.
RESTART_ONLY: Final = (
    ("ipx", "listen"),
    ("http", "listen"),
    ("relay", "ports"),
    ("relay", "source_mode"),
    ("relay", "fast_path"),
    ("relay", "max_flows"),
    ("relay", "max_unproven_flows"),
    ("relay", "max_flows_per_source"),
)


def restart_only_changes(old: Config, new: Config) -> list[str]:
    """Dotted names of settings that differ and cannot change without a restart."""
    changed = [
        f"{section}.{key}"
        for section, key in RESTART_ONLY
        if getattr(getattr(old, section), key) != getattr(getattr(new, section), key)
    ]
    if bool(old.relay.interfaces) != bool(new.relay.interfaces):
        changed.append("relay.interfaces (turning the relay on or off)")
    if (old.directplay.probe_interval > 0) != (new.directplay.probe_interval > 0):
        changed.append("directplay.probe_interval (turning probing on or off)")
    return changed


def keep_restart_only(old: Config, new: Config) -> Config:
    """``new`` with the restart-only settings of ``old`` (what actually runs)."""
    update: dict[str, Any] = {}
    for section, key in RESTART_ONLY:
        update.setdefault(section, {})[key] = getattr(getattr(old, section), key)
    merged = new.model_copy(
        update={
            section: getattr(new, section).model_copy(update=values)
            for section, values in update.items()
        }
    )
    if bool(old.relay.interfaces) != bool(new.relay.interfaces):
        merged = merged.model_copy(
            update={"relay": merged.relay.model_copy(update={"interfaces": old.relay.interfaces})}
        )
    if (old.directplay.probe_interval > 0) != (new.directplay.probe_interval > 0):
        merged = merged.model_copy(
            update={
                "directplay": merged.directplay.model_copy(
                    update={"probe_interval": old.directplay.probe_interval}
                )
            }
        )
    return merged


async def serve(config: Config, reload: Callable[[], Config] | None = None) -> int:
    """Run the bridge until SIGTERM or SIGINT; SIGHUP reloads; returns the exit code."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    bridge = Bridge(config)
    if reload is not None:
        loop.add_signal_handler(signal.SIGHUP, bridge.reload, reload)
    try:
        await bridge.start()
        # Everything built so far (modules, config, tables) lives until exit: keep it out of
        # the garbage collector's full passes, which otherwise stall the loop for tens of ms
        # under a flood (R13's 50 ms p99 budget).
        gc.freeze()
        await stopping.wait()
    finally:
        await bridge.stop()
    return 0
