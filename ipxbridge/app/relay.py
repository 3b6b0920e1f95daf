"""The broadcast relay service: the plan, the relay sockets and the kernel fast path.

The plan is rebuilt on every netlink change (``io/netlink.TopologyWatcher``) and after each
read of the WireGuard peers, which happens off the loop (a stuck UAPI socket holds one worker
thread, never the loop). nft runs on a worker thread of its own, in order: the fast path's
installs and counter reads, and the removal of a table an earlier run left (R18).
"""

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, Protocol, TypeVar, TypeVarTuple, Unpack

from ipxbridge.app.interface_warnings import UnmatchedNames
from ipxbridge.app.vpn_peers import VpnPeers
from ipxbridge.config import Config
from ipxbridge.errors import StartupError
from ipxbridge.io.netlink import TopologyWatcher
from ipxbridge.io.nftables import FastPathCounts, KernelFanout, Removal, remove_table
from ipxbridge.io.relay import BroadcastRelay, ip_forward_enabled, raw_sockets_allowed
from ipxbridge.io.vpn_files import by_interface
from ipxbridge.io.wireguard import PEER_REFRESH_SECONDS
from ipxbridge.obs.counters import RelayCounters
from ipxbridge.obs.logging import DROP_LOG_SECONDS, DropWatch
from ipxbridge.obs.metrics import RelaySnapshot
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.flows import FlowLimits
from ipxbridge.policy.relay import (
    Egress,
    RelayMode,
    RelayPolicy,
    RelaySettings,
    Selection,
    SourceMode,
    build_plan,
    choose_relay_mode,
    finding_peers,
    plan_peer_sources,
    wireguard_reads,
)
from ipxbridge.policy.topology import Topology, select

logger = logging.getLogger(__name__)

HEARD_LOG_SECONDS: Final = 60.0  # a plan changed by heard peers is said at most this often
KERNEL_READ_SECONDS: Final = 5.0  # how often the fast path's counters are read

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")
Plan = tuple[Egress, ...]


class Watcher(Protocol):
    """What the service needs of a topology source (``io/netlink.TopologyWatcher``)."""

    @property
    def topology(self) -> Topology: ...  # noqa: D102
    @property
    def events(self) -> Mapping[str, int]: ...  # noqa: D102
    async def start(self) -> None: ...  # noqa: D102
    async def close(self) -> None: ...  # noqa: D102


def _nothing() -> None:
    """A no-op job: awaiting it on a FIFO worker waits for what was queued before it."""


def selections(config: Config) -> tuple[Selection, ...]:
    """The configured relay interfaces as the plan takes them."""
    return tuple(Selection(i.name, i.role, i.peers) for i in config.relay.interfaces)


class RelayService:
    """The broadcast relay (off when no ``relay.interfaces`` are given)."""

    def __init__(
        self,
        config: Config,
        inspector: Inspector,
        *,
        watcher: Callable[[Callable[[Topology], None]], Watcher] = TopologyWatcher,
    ) -> None:
        self.config = config
        self.inspector = inspector
        self.counters = RelayCounters()
        self.relay: BroadcastRelay | None = None
        self.fanout: KernelFanout | None = None
        self.mode: RelayMode | None = None
        self.plan: Plan | None = None  # the egresses last applied (None: none yet)
        self._make_watcher = watcher
        self.watcher: Watcher | None = None
        self._selections = selections(config)
        self._unmatched = UnmatchedNames("relay interfaces (--iface, relay.interfaces)")
        # WireGuard peers by interface, as last read off the loop; one worker.
        self._wg = VpnPeers(
            self._wireguard_names,
            self._replan,
            what="relay plan",
            openvpn=self._openvpn_files,
            configs=self._config_files,
        )
        self._planning = False  # set once the first plan (with peers) is in place
        self._quiet_plan = False  # this re-plan is for heard peers only (said at debug level)
        self._next_heard_log = 0.0
        # p2p interface -> peer -> where it came from (policy/relay.peer_sources)
        self.peer_sources: dict[str, dict[str, str]] = {}
        self._next_peer_check = 0.0
        self._fastpath = FastPathCounts()  # the fast path's counters, as last read
        self._next_kernel_read = 0.0
        self._kernel_read: asyncio.Future[FastPathCounts] | None = None
        # nft runs for up to 10 s (its timeout): on a worker thread of its own, in order,
        # never on the loop nor queued behind a stuck WireGuard read.
        self._nft_executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._port_drops = DropWatch()  # the relay ports' kernel drops, said in the log

    @property
    def enabled(self) -> bool:
        """Whether the relay is configured to run."""
        return bool(self.config.relay.interfaces)

    async def start(self) -> None:
        """Bind the relay ports, clear an earlier run's table, and apply the first plan.

        With the relay off this only removes an earlier run's table (R18): before anything
        says the bridge is up, so it copies nothing once the first service listens.
        """
        self._loop = asyncio.get_running_loop()
        if not self.enabled:
            await self._remove_stale_table()
            return
        cfg = self.config.relay
        why_not = await self._nft(KernelFanout.available) if cfg.fast_path != "off" else None
        mode = choose_relay_mode(cfg.source_mode, cfg.fast_path, raw_sockets_allowed(), why_not)
        self.mode = mode
        self.fanout = KernelFanout(tuple(cfg.ports)) if mode.fast_path else None
        policy = RelayPolicy(
            RelaySettings(
                mode.source_mode,
                cfg.dedup_window,
                kernel_fanout=mode.fast_path,
                heard_peers=cfg.heard_peers,
                heard_expiry=cfg.heard_peer_seconds,
            )
        )
        limits = FlowLimits(cfg.max_flows, cfg.max_unproven_flows, cfg.max_flows_per_source)
        relay = BroadcastRelay(
            self._loop, policy, tuple(cfg.ports), self.inspector, self.counters, flow_limits=limits
        )
        try:
            relay.start()
        except OSError as exc:
            raise StartupError(
                f"cannot listen on the relay ports {list(cfg.ports)}/udp: "
                f"{exc.strerror} (is another relay or a game on this box using them?)"
            ) from None
        self.relay = relay
        # The relay ports are ours now (a second bridge would have failed above, not taken
        # the first one's table away). Whatever the fast path setting, a table an earlier run
        # left must go before the first plan, or broadcasts get two copies (R18).
        await self._remove_stale_table()
        self.watcher = self._make_watcher(self._on_topology)
        await self.watcher.start()
        # The first plan waits for the WireGuard peers (read off the loop), so the plan
        # logged as "relaying between" is complete.
        await self._wg.read()
        if self._nft_executor is not None:
            await self._nft(_nothing)  # FIFO: the first fast-path install has finished
        self._planning = True
        logger.info(
            "broadcast relay on udp ports %s, source mode %s, copies made by %s",
            ", ".join(map(str, cfg.ports)),
            mode.source_mode,
            "the kernel (nftables fast path), except for DirectPlay 4 messages and DirectPlay 8 "
            "enumerations, which ipxbridge checks and copies itself"
            if mode.fast_path
            else "ipxbridge",
        )

    async def stop(self) -> None:
        """Stop watching, remove the fast path's table, close the sockets, log the books."""
        if self.watcher is not None:
            await self.watcher.close()
        await self._wg.close()
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
                "stopped; relay: %s kernel_dropped=%s", self.counters.summary(), kernel_drops
            )

    def reconfigure(self, config: Config) -> None:
        """New selections, roles, peers, heard-peer bounds, dedup window: re-planned at once."""
        self.config = config
        if self.relay is None:
            return
        self._selections = selections(config)
        self.relay.policy.set_window(config.relay.dedup_window)
        heard = self.relay.policy.heard
        heard.max_per_interface = config.relay.heard_peers
        heard.expire_seconds = config.relay.heard_peer_seconds
        if self.watcher is not None:
            self.plan = None  # log the plan again
            self._on_topology(self.watcher.topology)  # new selections may name new peers

    def tick(self, now: float) -> None:
        """Flow expiry, the fast path's counters, and the periodic WireGuard peer read."""
        if self.relay is None:
            return
        self.relay.tick(now)
        if self.relay.policy.heard.take_changed():
            # A peer heard or forgotten: at most one re-plan a tick, and the plan said in the
            # log at most once a minute for it (a stranger on the VPN can churn them: the
            # metrics count every one), else at debug level.
            self._quiet_plan = now < self._next_heard_log
            if not self._quiet_plan:
                self._next_heard_log = now + HEARD_LOG_SECONDS
            try:
                self._replan()
            finally:
                self._quiet_plan = False
        self._watch_overload(now)
        self._unmatched.tick(now)
        if (
            self.fanout is not None
            and now >= self._next_kernel_read
            and (self._kernel_read is None or self._kernel_read.done())
        ):
            self._next_kernel_read = now + KERNEL_READ_SECONDS
            self._kernel_read = self._nft(self.fanout.read)
            self._kernel_read.add_done_callback(self._kernel_counters_read)
        if self.watcher is not None and now >= self._next_peer_check:
            self._next_peer_check = now + PEER_REFRESH_SECONDS
            if self._planning and any(e.role == "p2p" for e in self.plan or ()):
                self._wg.refresh()

    def _watch_overload(self, now: float) -> None:
        """Say in the log when the relay ports overflow (the kernel drops what is not read).

        Before, the only sign was ``ipxbridge_kernel_dropped_packets_total{path="relay"}``.
        """
        if self.relay is None or self.mode is None:
            return
        said = self._port_drops.update(self.relay.port_drops(), now)
        if not said:
            return
        if self.mode.fast_path:
            why = (
                "the bridge reads what the kernel fast path hands it (DirectPlay, relayed and "
                "inspected here) slower than it comes; the kernel's own copies are not affected"
            )
        else:
            why = (
                "the Python relay cannot keep up with this rate; with NET_ADMIN and NET_RAW "
                "the kernel fast path makes the copies instead (docs/benchmarks.md)"
            )
        logger.warning(
            "the kernel dropped %d datagrams at the relay ports (receive buffers full): "
            "%s. Said at most every %.0f minutes; the count is in "
            'ipxbridge_kernel_dropped_packets_total{path="relay"}',
            said,
            why,
            DROP_LOG_SECONDS / 60,
        )

    # --- the plan --------------------------------------------------------------------------

    def _on_topology(self, topology: Topology) -> None:
        """Rebuild the plan after a link, address or route change.

        Runs on the loop and never blocks: the plan is rebuilt at once with the WireGuard
        peers last read, and a re-read starts in a worker thread; its result re-plans.
        """
        if self.relay is None:
            return
        if not self._planning:  # start() is reading the peers and plans after that
            self._wg.mark_stale()
            return
        self._apply_plan(topology)
        self._wg.refresh()

    def _wireguard_names(self) -> tuple[str, ...]:
        if self.relay is None or self.watcher is None:
            return ()
        return wireguard_reads(self.watcher.topology, self._selections)

    def _finding(self) -> bool:
        """Whether a p2p interface in the plan needs its peers found."""
        if self.relay is None or self.watcher is None:
            return False
        return finding_peers(self.watcher.topology, self._selections)

    def _openvpn_files(self) -> tuple[str, ...]:
        """The OpenVPN status files to read, when a p2p interface needs peers found."""
        return tuple(self.config.relay.openvpn_status) if self._finding() else ()

    def _config_files(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The tinc and Nebula configs to read, when a p2p interface needs peers found."""
        if not self._finding():
            return (), ()
        return tuple(self.config.relay.tinc_config), tuple(self.config.relay.nebula_config)

    def _replan(self) -> None:
        """After a peer read: the topology may have moved meanwhile."""
        if self.relay is not None and self.watcher is not None:
            self._apply_plan(self.watcher.topology)

    def _apply_plan(self, topology: Topology) -> None:
        if self.relay is None:
            return
        heard = self.relay.policy.heard.peers()
        found = (self._wg.peers, self._wg.openvpn, heard)
        named = by_interface(self._wg.nets)
        egresses, own, bcasts = build_plan(topology, self._selections, *found, named=named)
        self.peer_sources = plan_peer_sources(topology, self._selections, *found, named=named)
        self.relay.apply_plan(egresses, own, bcasts)
        assert self._loop is not None  # noqa: S101 - plans start with start()
        self._unmatched.check(topology, [s.pattern for s in self._selections], self._loop.time())
        if egresses == self.plan:
            return
        self.plan = egresses
        if self.fanout is not None:
            # Say "relaying between" only once the kernel really copies (the log tells the
            # truth, and start-up readiness waits for it).
            quiet = self._quiet_plan
            self._nft(self.fanout.install, egresses).add_done_callback(
                lambda future: self._fast_path_installed(future, egresses, quiet)
            )
        else:
            self._log_plan(egresses, quiet=self._quiet_plan)

    def _fast_path_installed(
        self, future: "asyncio.Future[bool]", egresses: Plan, quiet: bool
    ) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None or not future.result():
            logger.error(
                "kernel fast path failed%s; broadcasts are NOT being relayed",
                f" ({exc})" if exc is not None else "",
            )
            return
        self._log_plan(egresses, quiet=quiet)

    def _log_plan(self, egresses: Plan, *, quiet: bool = False) -> None:
        parts = []
        for e in egresses:
            if e.role == "lan":
                parts.append(f"{e.name} (lan, broadcast {e.broadcast})")
            elif e.peers:
                sources = self.peer_sources.get(e.name, {})
                named = ", ".join(f"{p} ({sources.get(p, 'listed')})" for p in e.peers)
                parts.append(f"{e.name} (p2p, {len(e.peers)} peers: {named})")
            else:
                parts.append(f"{e.name} (p2p, NO peers known: nothing will be sent there)")
        logger.log(
            logging.DEBUG if quiet else logging.INFO,
            "relaying between: %s",
            "; ".join(parts) or "nothing (no selected interface is up with an IPv4 address)",
        )
        if quiet:
            return
        if len(egresses) < 2:
            logger.warning("the relay needs at least two usable interfaces; have %d", len(egresses))
        if (
            self.mode is not None
            and self.mode.source_mode is SourceMode.PRESERVE
            and len(egresses) >= 2
            and not ip_forward_enabled()
        ):
            logger.warning(
                "preserve mode: copies keep the player's address, so hosts answer the player "
                "directly through this box, but net.ipv4.ip_forward is 0 and those replies "
                "cannot be routed. Fix: sysctl -w net.ipv4.ip_forward=1 and give hosts a route "
                "to the players' subnets via this box, or run with --source-mode rewrite"
            )

    # --- nft, off the loop -----------------------------------------------------------------

    def _nft(self, call: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> asyncio.Future[_T]:
        """Run an nft call on the fast path's own worker thread (FIFO, off the loop)."""
        assert self._loop is not None  # noqa: S101 - only called once started
        if self._nft_executor is None:
            self._nft_executor = ThreadPoolExecutor(1, thread_name_prefix="nft")
        return self._loop.run_in_executor(self._nft_executor, call, *args)

    async def _remove_stale_table(self) -> None:
        """Remove the nftables table of an earlier run that died without removing it.

        After a SIGKILL the kernel keeps copying broadcasts with no bridge (docs/reliability.md
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

    def _kernel_counters_read(self, future: "asyncio.Future[FastPathCounts]") -> None:
        if not future.cancelled() and future.exception() is None:
            self._fastpath = future.result()

    # --- views -----------------------------------------------------------------------------

    def snapshot(self) -> RelaySnapshot:
        """Relay numbers for the metrics (Python copies plus the kernel's)."""
        if self.relay is None:
            return RelaySnapshot()
        c = self.counters
        copies = dict(c.copies)
        for name, n in self._fastpath.copies.items():
            copies[name] = copies.get(name, 0) + n
        plan = self.plan or ()
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
            peers=Counter(
                (e.name, source.split(" ", 1)[0].replace("-", "_"))
                for e in plan
                for source in self.peer_sources.get(e.name, {}).values()
            ),
            heard_peers=dict(self.relay.policy.heard.events),
        )

    def interfaces_json(self) -> list[dict[str, Any]]:
        """Relay interfaces: selected, up or down, role, targets (``GET /api/interfaces``)."""
        snap = self.snapshot()
        out: list[dict[str, Any]] = [
            {
                "name": e.name,
                "up": True,
                "role": e.role,
                "address": e.address,
                "broadcast": e.broadcast or None,
                "peers": list(e.peers),
                "peer_sources": {p: self.peer_sources.get(e.name, {}).get(p) for p in e.peers},
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
                "peer_sources": {},
                "mtu": None,
                "kind": snap.kinds.get(n, "other"),
                "copies": 0,
            }
            for n in snap.selected_down
        ]
        return out
