"""Active DirectPlay probing, so a LAN's games are listed even when no player is searching.

Per probe round, on every selected interface:

* DirectPlay 4: an EnumSessions broadcast to UDP 47624 ([MC-DPL4CS] 3.1.4.1) whose SOCKADDR
  names our own TCP listener's port with address 0.0.0.0, so each host connects back to the
  probe's source address over TCP and sends one EnumSessionsReply per session (docs/protocols.md 7);
* DirectPlay 8: an EnumQuery of type 2 (all applications) to UDP 6073; responses come back to
  the probing socket from each host's *game* port, not 6073 ([MC-DPLHP] 2.2.2), so the socket
  accepts them from any port.

IPX clients are probed by the IPX endpoint (an IPX broadcast to socket 0xA57F).
The caller bounds the rate (at most one round per second).
"""

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import Callable
from typing import Final

from ipxbridge.io.interfaces import Ipv4Interface
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.wire.directplay import (
    AF_INET_WIRE,
    DP4_ENUM_PORT,
    DP8_ENUM_PORT,
    DPlayError,
    EnumSessions,
    SockAddr,
    build_dp8_enum_query,
    build_enum_sessions,
    parse_sockaddr,
    split_dp4_stream,
)

logger = logging.getLogger(__name__)

# EnumSessions flags (docs/protocols.md 1.4): 0x02 all sessions, 0x40 include password-protected.
PROBE_FLAGS: Final = 0x02 | 0x40
TCP_READ_LIMIT: Final = 256 * 1024
TCP_TIMEOUT: Final = 10.0


def dp4_probe(tcp_port: int, *, bare: bool = False) -> bytes:
    """EnumSessions for every application (GUID_NULL).

    Over UDP the SOCKADDR names ``tcp_port`` for the replies; over IPX (``bare``) there is no
    SOCKADDR and hosts answer the request's IPX source address (docs/protocols.md 1.9).
    """
    msg = EnumSessions(application_guid=uuid.UUID(int=0), flags=PROBE_FLAGS, password=None)
    if bare:
        return build_enum_sessions(msg, bare=True)
    return build_enum_sessions(msg, sockaddr=SockAddr(AF_INET_WIRE, tcp_port, "0.0.0.0"))


def dp8_probe(cookie: int) -> bytes:
    """EnumQuery type 2 (no application GUID: every host answers)."""
    return build_dp8_enum_query(cookie=cookie, application_guid=None, app_data=b"")


class DirectPlayProber:
    """Owns the TCP reply listener and one UDP probe socket per interface."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        inspector: Inspector,
        interfaces: Callable[[], list[Ipv4Interface]],
    ) -> None:
        self._loop = loop
        self._inspector = inspector
        self._interfaces = interfaces
        self._server: asyncio.Server | None = None
        self._udp: dict[tuple[str, str], socket.socket] = {}
        self._cookie = 0
        self.tcp_port = 0
        self.sent = 0
        self.send_errors = 0

    async def start(self) -> None:
        """Open the TCP listener that receives DirectPlay 4 replies."""
        self._server = await asyncio.start_server(self._on_tcp, "0.0.0.0", 0)
        self.tcp_port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Close every socket."""
        for sock in self._udp.values():
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._udp.clear()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def probe(self) -> int:
        """Send one probe round on every current interface; returns datagrams sent."""
        self._cookie = (self._cookie + 1) & 0xFFFF
        dp4 = dp4_probe(self.tcp_port)
        dp8 = dp8_probe(self._cookie)
        sent = 0
        current = {(i.name, i.address): i for i in self._interfaces()}
        for key in list(self._udp):
            if key not in current:  # interface or address went away
                gone = self._udp.pop(key)
                self._loop.remove_reader(gone.fileno())
                gone.close()
        for key, iface in current.items():
            probe_sock = self._udp.get(key) or self._open(iface)
            if probe_sock is None:
                continue
            for payload, port in ((dp4, DP4_ENUM_PORT), (dp8, DP8_ENUM_PORT)):
                try:
                    probe_sock.sendto(payload, (iface.broadcast, port))
                    sent += 1
                except OSError as exc:
                    self.send_errors += 1
                    logger.debug("probe on %s failed: %s", iface.name, exc)
        self.sent += sent
        return sent

    def _open(self, iface: Ipv4Interface) -> socket.socket | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            # Bound to the device so a broadcast leaves through this interface only.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.name.encode())
            sock.bind((iface.address, 0))
        except OSError as exc:
            sock.close()
            logger.warning("cannot probe on %s (%s): %s", iface.name, iface.address, exc)
            return None
        self._udp[(iface.name, iface.address)] = sock
        self._loop.add_reader(sock.fileno(), self._on_udp, sock)
        return sock

    def _on_udp(self, sock: socket.socket) -> None:
        now = self._loop.time()
        for _ in range(256):
            try:
                data, (ip, port) = sock.recvfrom(65535)
            except BlockingIOError:
                return
            except OSError:
                return
            # DirectPlay 8 responses come from the host's game port (the join address).
            self._inspector.inspect(
                data,
                transport="udp",
                host=f"{ip}:{port}",
                source=(ip, port),
                now=now,
                dp8_context=True,
            )

    async def _on_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = str(peer[0]) if peer else "?"
        buf = b""
        received = 0
        try:
            while received < TCP_READ_LIMIT:
                chunk = await asyncio.wait_for(reader.read(65536), TCP_TIMEOUT)
                if not chunk:
                    break
                received += len(chunk)
                buf += chunk
                try:
                    messages, buf = split_dp4_stream(buf)
                except DPlayError as exc:
                    self._inspector.errors[exc.reason] += 1
                    break
                now = self._loop.time()
                for message in messages:
                    host = _reply_host(message, ip)
                    self._inspector.inspect(
                        message, transport="tcp", host=host, source=(ip, "tcp"), now=now
                    )
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _reply_host(message: bytes, peer_ip: str) -> str:
    """The ``ip:port`` a player would join.

    The reply header's SOCKADDR port is the host's TCP listener (docs/protocols.md 1.5); its
    address is usually 0.0.0.0, meaning the peer's own.
    """
    try:
        sockaddr = parse_sockaddr(message[4:20])  # the SP header's SOCKADDR (docs/protocols.md 1.2)
    except DPlayError:
        return peer_ip  # the inspector counts the malformed message
    addr = peer_ip if sockaddr.address == "0.0.0.0" else sockaddr.address
    return f"{addr}:{sockaddr.port}"
