"""A client uplink's own UDP socket: a thin asyncio shell around ``policy.uplink.UplinkClient``.

One socket per configured uplink (``ipx.uplinks``), bound to an ephemeral port and connected
to the server, so NAT keeps one mapping and the kernel reports ICMP errors on it
(docs/protocols.md 3.9). Control packets go to the state machine; once it is connected, data
packets go to the switch (``IpxEndpoint.ingest_uplink``) with the server's address as the
port, and the switch's copies for that port come back here (``IpxEndpoint.uplink_links``).
Follows ``io/ipx_endpoint.py``: a bounded drain per wake-up, non-blocking sends counted by errno,
nothing raised for remote input. One log line per state change, never one per packet.
"""

import asyncio
import errno
import logging
import socket
from typing import Final

from ipxbridge.io.ipx_endpoint import MAX_PER_WAKEUP, UPLINK_LABEL, IpxEndpoint
from ipxbridge.io.mmsg import RECV_BUFSIZE
from ipxbridge.policy.switch import Address
from ipxbridge.policy.uplink import UplinkClient
from ipxbridge.wire.uplink import is_uplink_control

logger = logging.getLogger(__name__)

# ICMP errors a connected UDP socket reports: the server is not there (for now).
_UNREACHABLE: Final = frozenset(
    {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN}
)


class UplinkLink:
    """One client uplink: its socket, its state machine, its books."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        endpoint: IpxEndpoint,
        server: Address,
        name: str,
        policy: UplinkClient,
    ) -> None:
        self._loop = loop
        self.endpoint = endpoint
        self.server = server
        self.name = name  # as configured, for the log and the API
        self.policy = policy
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.bind(("0.0.0.0", 0))
            sock.connect(server)
        except OSError:
            sock.close()
            raise
        self._sock = sock

    @property
    def local_port(self) -> int:
        """The ephemeral port the uplink speaks from."""
        port: int = self._sock.getsockname()[1]
        return port

    def start(self) -> None:
        """Begin reading; the first handshake packet goes at once."""
        self._loop.add_reader(self._sock.fileno(), self._on_readable)
        self.endpoint.uplink_links[self.server] = self.send
        self.tick(self._loop.time())

    def close(self) -> None:
        """Say goodbye if connected (close-connection), stop reading, close the socket."""
        for packet in self.policy.close():
            self.send(packet)
        self.endpoint.uplink_links.pop(self.server, None)
        self.endpoint.switch.remove_uplink(self.server)
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()

    def send(self, packet: bytes) -> bool:
        """One datagram to the server; an error is counted by errno, never raised."""
        try:
            self._sock.send(packet)
        except BlockingIOError:
            self.endpoint.counters.send_errors[(*UPLINK_LABEL, "EAGAIN")] += 1
            return False
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, "EUNKNOWN")
            self.endpoint.counters.send_errors[(*UPLINK_LABEL, name)] += 1
            if exc.errno in _UNREACHABLE:
                self.policy.unreachable(self._loop.time())
                self._after()
            return False
        return True

    def _on_readable(self) -> None:
        now = self._loop.time()
        policy = self.policy
        endpoint = self.endpoint
        for _ in range(MAX_PER_WAKEUP):
            try:
                data = self._sock.recv(RECV_BUFSIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                # A queued ICMP error on the connected socket: the server is not there.
                endpoint.counters.recv_errors += 1
                if exc.errno in _UNREACHABLE:
                    policy.unreachable(now)
                break
            if is_uplink_control(data):
                endpoint.book_control(UPLINK_LABEL, len(data))
                for packet in policy.on_control(data, now):
                    self.send(packet)
            elif policy.connected:
                policy.heard_data(now)
                endpoint.ingest_uplink(self.server, data)
            else:
                # Nothing passes before the handshake (docs/protocols.md 3.9).
                endpoint.reject(*UPLINK_LABEL, len(data), "uplink_not_connected")
        self._after()

    def tick(self, now: float) -> None:
        """Resends, reconnects, liveness (``UplinkClient.tick``)."""
        for packet in self.policy.tick(now):
            self.send(packet)
        self._after()

    def _after(self) -> None:
        """Apply and log what the state machine did: one line per change."""
        switch = self.endpoint.switch
        name = self.name
        for kind, wait in self.policy.pop_events():
            if kind == "connected":
                switch.add_uplink(self.server, "client")
                logger.info(
                    "uplink %s: connected from udp port %d (password accepted both ways)",
                    name,
                    self.local_port,
                )
                continue
            switch.remove_uplink(self.server)
            if kind == "rejected":
                logger.warning("uplink %s: password rejected (trying again in %.0f s)", name, wait)
            elif kind == "no_answer":
                logger.warning(
                    "uplink %s: no answer from server (%s), retrying in %.0f s",
                    name,
                    self.policy.reason,
                    wait,
                )
            elif kind == "bad_server_solution":
                logger.error(
                    "uplink %s: the server does not know the password (its answer to our "
                    "challenge is wrong); retrying in %.0f s",
                    name,
                    wait,
                )
            else:
                logger.warning(
                    "uplink %s: connection lost (%s), reconnecting", name, self.policy.reason
                )
