"""Composition root: builds the parts from a ``Config`` and runs them until a signal."""

import asyncio
import logging
import signal

from ipxbridge import __version__
from ipxbridge.config import Config, parse_host_port, resolve_ipv4
from ipxbridge.errors import StartupError
from ipxbridge.io.udp import IpxEndpoint, make_server_node_lookup, open_udp_socket
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.policy.switch import IpxSwitch, SwitchSettings

logger = logging.getLogger(__name__)


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
        rejoin=ipx.rejoin,
    )


class Bridge:
    """The running appliance: owns the endpoints and their counters."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.ipx_counters = IpxCounters()
        self.ipx: IpxEndpoint | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open sockets and start serving.

        Raises:
            StartupError: a socket cannot be opened or a peer cannot be resolved.
        """
        ipx = self.config.ipx
        if ipx.listen == "off":
            raise StartupError("nothing to run: the IPX tunnel is off (--ipx-listen off)")
        peers = []
        for text in ipx.peers:
            try:
                peers.append(resolve_ipv4(parse_host_port(text)))
            except ValueError as exc:
                raise StartupError(f"peer {text}: {exc}") from None
        listen = parse_host_port(ipx.listen)
        sock = open_udp_socket(listen.host, listen.port)
        switch = IpxSwitch(
            switch_settings(self.config), tuple(peers), make_server_node_lookup(sock)
        )
        self.ipx = IpxEndpoint(loop, sock, switch, self.ipx_counters)
        self.ipx.start()
        peer_text = ", ".join(f"{h}:{p}" for h, p in peers) or "none"
        logger.info(
            "ipxbridge %s: IPX tunnel on udp %s (RFC 1234 + DOSBox), peers: %s",
            __version__,
            listen,
            peer_text,
        )

    def stop(self) -> None:
        """Close sockets and log the accounting summary."""
        if self.ipx is not None:
            self.ipx.close()
            logger.info("stopped; IPX: %s", self.ipx_counters.summary())


async def serve(config: Config) -> int:
    """Run the bridge until SIGTERM or SIGINT; returns the exit code."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    bridge = Bridge(config)
    bridge.start(loop)
    try:
        await stopping.wait()
    finally:
        bridge.stop()
    return 0
