"""The IPX service: the switch on its UDP socket, with its RFC 1234 peers and DOSBox clients."""

import asyncio
import logging
import os
from typing import Any

from ipxbridge import __version__
from ipxbridge.config import Config, parse_host_port, resolve_ipv4
from ipxbridge.errors import StartupError
from ipxbridge.io.udp import IpxEndpoint, make_server_node_lookup, open_udp_socket
from ipxbridge.obs.counters import IpxCounters, LatencyHistogram
from ipxbridge.obs.metrics import IpxSnapshot
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.switch import Address, IpxSwitch, SwitchSettings

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


class IpxService:
    """The IPX tunnel (off when ``ipx.listen`` is ``off``)."""

    def __init__(self, config: Config, inspector: Inspector) -> None:
        self.config = config
        self.inspector = inspector
        self.counters = IpxCounters()
        self.latency = LatencyHistogram()
        self.endpoint: IpxEndpoint | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def enabled(self) -> bool:
        """Whether the tunnel is configured to run."""
        return self.config.ipx.listen != "off"

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
        sock = open_udp_socket(listen.host, listen.port)
        switch = IpxSwitch(
            switch_settings(self.config),
            tuple(peers),
            make_server_node_lookup(sock),
            os.urandom,  # probe nonces must be unguessable (policy/switch.py rule 2)
        )
        self.endpoint = IpxEndpoint(
            self._loop, sock, switch, self.counters, self.inspector, latency=self.latency
        )
        self.endpoint.start()
        logger.info(
            "ipxbridge %s: IPX tunnel on udp %s (RFC 1234 + DOSBox), peers: %s",
            __version__,
            listen,
            ", ".join(f"{h}:{p}" for h, p in peers) or "none",
        )

    async def stop(self) -> None:
        """Close the socket and log the books."""
        if self.endpoint is None:
            return
        kernel_drops = self.endpoint.kernel_drops()  # None: /proc unreadable
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

    def tick(self, now: float) -> None:
        """Keepalives, probes of unverified clients, expiry."""
        if self.endpoint is not None:
            self.endpoint.tick(now)

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
        )

    def clients_json(self) -> list[dict[str, Any]]:
        """Connected IPX clients and peers, as ``GET /api/clients`` returns them."""
        if self.endpoint is None or self._loop is None:
            return []
        now = self._loop.time()
        sw = self.endpoint.switch
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
