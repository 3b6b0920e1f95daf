"""pyroute2 adapter: rtnetlink dumps and events in, typed Topology snapshots out.

Contract:

- This is the only ipxbridge module that imports pyroute2 (untyped; docs/architecture.md rule 6), so
  every value leaving it is converted to ``int``/``str`` and handed to the pure builders in
  ``policy/topology.py``.
- Everything runs in the **current** network namespace of the calling thread; callers that
  need another namespace run in a process started there (``ip netns exec``).
- :func:`read_topology` may raise ``OSError`` or pyroute2's ``NetlinkError`` (an
  ``OSError`` subclass) when netlink is unusable; :func:`read_topology_fallback` then
  gives a coarser netifaces view. :class:`TopologyWatcher` never lets an exception out of
  its task: it logs, waits 1 s and re-opens its socket.

pyroute2 0.9 facts this relies on (docs/architecture.md B3): dumps are async generators
(``async for m in await ipr.link("dump")``), and a monitor socket's ``get()`` returns after
one receive batch, so it must be re-entered in a loop (the first attempt without the loop
saw 1 of 7 events).
"""

import asyncio
import contextlib
import logging
import socket
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.generic.wireguard import AsyncWireGuard
from pyroute2.netlink.rtnl import (
    RTM_DELADDR,
    RTM_DELLINK,
    RTM_DELROUTE,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWROUTE,
    RTMGRP_IPV4_IFADDR,
    RTMGRP_IPV4_ROUTE,
    RTMGRP_LINK,
)

from ipxbridge.io.interfaces import read_topology_netifaces
from ipxbridge.policy.topology import (
    Interface,
    InterfaceAddress,
    Topology,
    build_interface,
    is_up,
)

logger = logging.getLogger(__name__)

WIREGUARD_UAPI_DIR: Final = Path("/var/run/wireguard")  # wireguard-go's <ifname>.sock
RT_TABLE_MAIN: Final = 254
RTN_UNICAST: Final = 1  # a blackhole/unreachable default route carries no traffic
DEBOUNCE: Final = 0.1  # seconds: one re-read per burst of events (an ip addr flush is many)
BIND_WAIT: Final = 5.0  # seconds start() waits for the event subscription
REOPEN_DELAY: Final = 1.0  # seconds before re-opening a failed monitor socket
EVENT_KEYS: Final = (
    "link_up",
    "link_down",
    "link_new",
    "link_del",
    "addr_add",
    "addr_del",
    "route_add",
    "route_del",
)


def uapi_socket(ifname: str) -> Path | None:
    """wireguard-go's UAPI socket path for ``ifname`` (``None`` for an unsafe name)."""
    if not ifname or "/" in ifname or ifname in {".", ".."} or len(ifname) > 15:  # IFNAMSIZ-1
        return None
    return WIREGUARD_UAPI_DIR / f"{ifname}.sock"


def _has_uapi(ifname: str) -> bool:
    path = uapi_socket(ifname)
    return path is not None and path.exists()


class _Message(Protocol):
    """The part of a pyroute2 ``nlmsg`` used here (pyroute2 ships no types)."""

    def __getitem__(self, key: str) -> Any: ...  # noqa: ANN401 - untyped pyroute2 values
    def get_attr(self, name: str) -> Any: ...  # noqa: ANN401 - untyped pyroute2 values


def _int(value: int | str | None, default: int = 0) -> int:
    return int(value) if value is not None else default


async def read_topology() -> Topology:
    """Links, IPv4 addresses and main-table IPv4 default routes of the current namespace.

    A default route's metric is RTA_PRIORITY (0 when absent, as ``ip route`` shows it);
    multipath defaults count for every next hop's interface.

    Raises:
        OSError: netlink failed (pyroute2's NetlinkError is an OSError; other pyroute2
            errors are possible, so callers that fall back catch Exception).
    """
    async with AsyncIPRoute() as ipr:
        links = [msg async for msg in await ipr.link("dump")]
        addrs = [msg async for msg in await ipr.addr("dump", family=socket.AF_INET)]
        routes = [msg async for msg in await ipr.route("dump", family=socket.AF_INET)]
    by_index: dict[int, list[InterfaceAddress]] = {}
    for msg in addrs:
        local = msg.get_attr("IFA_LOCAL")
        address = msg.get_attr("IFA_ADDRESS")
        if local is None:
            local, address = address, None
        if local is None:
            continue
        try:
            item = InterfaceAddress.compute(str(local), _int(msg["prefixlen"]), address)
        except ValueError:
            logger.debug("skipping odd address %s/%s", local, msg["prefixlen"])
            continue
        by_index.setdefault(_int(msg["index"]), []).append(item)
    metrics: dict[int, int] = {}
    for msg in routes:
        table = msg.get_attr("RTA_TABLE")
        table = _int(table) if table is not None else _int(msg["table"])
        if msg["dst_len"] != 0 or table != RT_TABLE_MAIN or msg["type"] != RTN_UNICAST:
            continue
        metric = _int(msg.get_attr("RTA_PRIORITY"))
        oifs = [msg.get_attr("RTA_OIF")]
        oifs += [hop.get("oif") for hop in msg.get_attr("RTA_MULTIPATH") or ()]
        for oif in oifs:
            if oif is not None:
                index = _int(oif)
                metrics[index] = min(metric, metrics.get(index, metric))
    interfaces: list[Interface] = []
    for msg in links:
        index = _int(msg["index"])
        name = str(msg.get_attr("IFLA_IFNAME") or f"if{index}")
        info = msg.get_attr("IFLA_LINKINFO")
        kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
        interfaces.append(
            build_interface(
                index=index,
                name=name,
                link_kind=str(kind) if kind is not None else None,
                link_type=_int(msg["ifi_type"]),
                flags=_int(msg["flags"]),
                operstate=str(msg.get_attr("IFLA_OPERSTATE") or ""),
                mtu=_int(msg.get_attr("IFLA_MTU")),
                addresses=by_index.get(index, ()),
                default_route_metric=metrics.get(index),
                wireguard_uapi=kind == "tun" and _has_uapi(name),
            )
        )
    return Topology(tuple(sorted(interfaces, key=lambda i: i.index)))


def read_topology_fallback() -> Topology:
    """The netifaces-plus view (coarse: see ``io/interfaces.py``); used if netlink fails."""
    return read_topology_netifaces()


async def _wireguard_info(ifname: str) -> list[str]:
    """AllowedIPs of a kernel WireGuard device, over the WireGuard generic-netlink family."""
    wg = AsyncWireGuard()
    try:
        await wg.setup_endpoint()  # resolves the "wireguard" family; ENOENT without the module
        allowed: list[str] = []
        async for msg in await wg.info(ifname):
            for peer in msg.get_attr("WGDEVICE_A_PEERS") or ():
                for entry in peer.get_attr("WGPEER_A_ALLOWEDIPS") or ():
                    addr = entry.get("addr")
                    if addr:
                        allowed.append(str(addr))
        return allowed
    finally:
        wg.close()


def wireguard_allowed_ips(ifname: str, timeout: float = 2.0) -> list[str] | None:
    """AllowedIPs (``"a.b.c.d/len"``) of kernel WireGuard ``ifname``; ``None`` if unavailable.

    Runs its own event loop in a helper thread (created from, so in the namespace of, this
    thread), so it is safe to call from inside a running loop. Never raises.
    """
    result: list[list[str] | None] = [None]

    def work() -> None:
        try:
            result[0] = asyncio.run(asyncio.wait_for(_wireguard_info(ifname), timeout))
        except Exception as exc:  # noqa: BLE001 - any failure means "not kernel WireGuard"
            logger.debug("WireGuard genetlink query for %s failed: %r", ifname, exc)

    thread = threading.Thread(target=work, name=f"wg-info-{ifname}", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    return result[0]


class TopologyWatcher:
    """Keeps :attr:`topology` current from rtnetlink events.

    Subscribes to RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE. After events it waits
    ~100 ms (so a burst such as ``ip addr flush`` costs one re-read), re-reads the topology
    and calls ``on_change(new_topology)`` when it differs from the previous snapshot (an
    interface deleted and re-created gets a new ifindex, so it always differs:
    docs/reliability.md item 6). ``events`` counts messages by type (keys: :data:`EVENT_KEYS`).
    The task never raises: netlink errors are logged and the socket re-opened after 1 s
    (followed by a re-read, since events may have been lost); an exception from
    ``on_change`` is logged and the watcher carries on.
    """

    def __init__(self, on_change: Callable[[Topology], None]) -> None:
        self.on_change = on_change
        self.topology = Topology(())
        self.events: Counter[str] = Counter(dict.fromkeys(EVENT_KEYS, 0))
        self.errors = 0
        self._link_up: dict[int, bool] = {}
        self._dirty = asyncio.Event()
        self._bound = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._monitor: Any = None

    async def start(self) -> None:
        """Subscribe to events, then read the topology once and report it.

        Subscribing first means every change after the first report is seen as an event, so
        the counters are exact (a failed subscription is retried in the background; the
        re-read after binding covers any gap).

        Raises:
            OSError: neither netlink nor the netifaces fallback could be read.
        """
        self._tasks = [asyncio.create_task(self._monitor_loop(), name="topology-monitor")]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._bound.wait(), BIND_WAIT)
        try:
            topology = await read_topology()
        except Exception as exc:  # noqa: BLE001 - pyroute2 raises more than OSError
            logger.warning("netlink topology read failed (%r); using netifaces", exc)
            topology = read_topology_fallback()
        self._publish(topology, force=True)
        self._tasks.append(asyncio.create_task(self._refresh_loop(), name="topology-refresh"))

    async def close(self) -> None:
        """Stop following events and close the netlink socket."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._close_monitor()

    def _close_monitor(self) -> None:
        if self._monitor is not None:
            with contextlib.suppress(Exception):
                self._monitor.close()
            self._monitor = None

    def _publish(self, topology: Topology, *, force: bool = False) -> None:
        changed = topology != self.topology
        self.topology = topology
        self._link_up = {i.index: i.up for i in topology.interfaces}
        if not (changed or force):
            return
        try:
            self.on_change(topology)
        except Exception:
            logger.exception("topology on_change callback failed")

    def _count(self, msg: _Message) -> None:
        kind = msg["header"]["type"]
        if kind == RTM_NEWLINK:
            index = _int(msg["index"])
            up = is_up(_int(msg["flags"]), str(msg.get_attr("IFLA_OPERSTATE") or ""))
            before = self._link_up.get(index)
            if before is None:
                self.events["link_new"] += 1
            elif up != before:
                self.events["link_up" if up else "link_down"] += 1
            self._link_up[index] = up
        elif kind == RTM_DELLINK:
            self._link_up.pop(_int(msg["index"]), None)
            self.events["link_del"] += 1
        elif kind == RTM_NEWADDR:
            self.events["addr_add"] += 1
        elif kind == RTM_DELADDR:
            self.events["addr_del"] += 1
        elif kind == RTM_NEWROUTE:
            self.events["route_add"] += 1
        elif kind == RTM_DELROUTE:
            self.events["route_del"] += 1
        else:
            return
        self._dirty.set()

    async def _monitor_loop(self) -> None:
        failing = False  # log the first failure of a run at WARNING, repeats at DEBUG
        while True:
            try:
                self._monitor = AsyncIPRoute()
                await self._monitor.bind(
                    groups=RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE
                )
                # Re-read once bound: changes between the last dump (start(), or before a
                # failure) and the subscription produced no event we could see.
                self._dirty.set()
                self._bound.set()
                if failing:
                    logger.info("netlink monitor re-opened")
                failing = False
                while True:  # get() returns after one batch: re-enter it (docs/architecture.md B3)
                    async for msg in self._monitor.get():
                        self._count(msg)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the task must never die
                self._failed("netlink monitor failed", "re-opening", exc, failing=failing)
                failing = True
            finally:
                self._close_monitor()
            await asyncio.sleep(REOPEN_DELAY)

    def _failed(self, what: str, then: str, exc: Exception, *, failing: bool) -> None:
        """Count a failure and say it: a warning, or a debug line while it keeps failing."""
        self.errors += 1
        level = logging.DEBUG if failing else logging.WARNING
        logger.log(level, "%s (%r); %s in %.0f s", what, exc, then, REOPEN_DELAY)

    async def _refresh_loop(self) -> None:
        failing = False
        while True:
            await self._dirty.wait()
            await asyncio.sleep(DEBOUNCE)
            self._dirty.clear()
            try:
                topology = await read_topology()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the last snapshot, retry later
                self._failed("topology re-read failed", "retrying", exc, failing=failing)
                failing = True
                await asyncio.sleep(REOPEN_DELAY)
                self._dirty.set()
                continue
            failing = False
            self._publish(topology)
