"""VPN peers, followed off the loop: one owner for the relay's and the IPX ports' reads.

A p2p interface without static peers takes its unicast targets from WireGuard (or, for the
relay, from OpenVPN's status files, ``io/openvpn.py``, and tinc's and Nebula's configs,
``io/vpn_files.py``), and reading them is I/O (a UAPI socket or generic netlink,
``io/wireguard.py``; files) that can take seconds: it runs on a worker
thread of its own, one read at a time, and a stuck UAPI socket holds that thread, never the
loop. ``wg set`` raises no netlink event, so the owner also calls ``refresh`` every
``io.wireguard.PEER_REFRESH_SECONDS``.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ipxbridge.io.openvpn import openvpn_clients
from ipxbridge.io.vpn_files import NetPeers, VpnFiles
from ipxbridge.io.wireguard import read_wireguard_peers

logger = logging.getLogger(__name__)


class VpnPeers:
    """The peers last read per interface, and the background reads that renew them."""

    def __init__(
        self,
        names: Callable[[], tuple[str, ...]],
        on_read: Callable[[], None],
        *,
        what: str,
        openvpn: Callable[[], tuple[str, ...]] | None = None,
        configs: Callable[[], tuple[tuple[str, ...], tuple[str, ...]]] | None = None,
    ) -> None:
        """Follow the peers of the interfaces ``names()`` lists.

        Args:
            names: the WireGuard interfaces whose peers the owner's plan needs now.
            on_read: re-plans with ``peers`` after every read (also when none were needed).
            what: the owner's plan, for the log ("relay plan", "IPX interface ports").
            openvpn: the OpenVPN status files (globs) to read with each round, when the
                plan has a p2p interface that needs peers found (``io/openvpn.py``).
            configs: tinc's and Nebula's configs (globs), read with each round when the
                plan has such an interface (``io/vpn_files.py``).
        """
        self.peers: dict[str, list[str]] = {}
        self.openvpn: dict[str, tuple[str, ...]] = {}  # status file -> client addresses
        self._openvpn = openvpn
        self.nets: list[NetPeers] = []  # tinc and Nebula nets, each with its interface
        self._configs = configs
        self._files = VpnFiles()
        self._names = names
        self._on_read = on_read
        self._what = what
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._stale = False

    def refresh(self) -> None:
        """Start a read in the background; one already running goes round once more."""
        if self._task is not None and not self._task.done():
            self._stale = True
            return
        self._task = asyncio.get_running_loop().create_task(self.read(), name="wireguard-peers")

    def mark_stale(self) -> None:
        """The topology changed during a read the caller awaits: read once more after it."""
        self._stale = True

    async def read(self) -> None:
        """Read, then re-plan; again while something changed meanwhile.

        Never raises (but for cancellation): a failed re-plan is logged and the old plan
        stays, as a failing topology callback is (``TopologyWatcher``).
        """
        while True:
            self._stale = False
            try:
                names = self._names()
                files = self._openvpn() if self._openvpn is not None else ()
                configs = self._configs() if self._configs is not None else ((), ())
                if (names or files or any(configs)) and self._executor is None:
                    self._executor = ThreadPoolExecutor(1, thread_name_prefix="wg-peers")
                if names:
                    self.peers = await read_wireguard_peers(names, self._executor)
                if files:
                    loop = asyncio.get_running_loop()
                    self.openvpn = await loop.run_in_executor(
                        self._executor, openvpn_clients, files
                    )
                if any(configs):
                    self.nets = await asyncio.get_running_loop().run_in_executor(
                        self._executor, self._files.read, *configs
                    )
                self._on_read()
            except Exception:
                logger.exception("rebuilding the %s failed", self._what)
            if not self._stale:
                return

    async def close(self) -> None:
        """Cancel a running read; a read stuck in the worker ends at its own timeout."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
