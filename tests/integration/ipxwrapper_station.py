"""A test station speaking IPXWrapper's own UDP encapsulation (docs/protocols.md section 6).

It stands in for a Windows game under IPXWrapper in its default mode (``ENCAP_TYPE_IPXWRAPPER``)
and is written from the protocol digest, not from ipxbridge's codec
(``ipxbridge/wire/ipxwrapper.py``), so that the two check each other. The 27-byte header is
packed and unpacked here with ``struct``:

    ptype(1) dst_net(4) dst_node(6) dst_sock(2) src_net(4) src_node(6) src_sock(2) size(2) data

with ``size`` (big-endian, like every field) counting the data only.

What it reproduces of IPXWrapper (docs/protocols.md 6, ``src/router.c`` and ``src/winsock.c``):

* **Two UDP sockets**, as IPXWrapper's router opens them: a *shared* one bound to port 54792
  (``SO_REUSEADDR``) on which broadcasts arrive, and a *private* one on an ephemeral port from
  which every packet is sent and on which unicasts come back (the peers cache its address).
* **Sending** (``ipx_send_packet``): a destination whose (network, node, socket) is in the
  address cache is unicast to the UDP address cached for it; any other destination, broadcast
  included, goes to the IP subnet broadcast of the station's interface, port 54792. A
  destination network of 0 means the station's own network.
* **Receiving** (``_handle_udp_recv``): the ``size`` field must match the datagram exactly.
  Packets from source socket 0 are IPXWrapper's internal "magic" packets: they never reach an
  application; this station keeps them aside in ``magic`` for the test to look at. Any other
  packet is accepted only if its source IP lies inside the subnet of the station's interface
  (for a unicast: the interface that owns the destination address; the station has one),
  otherwise it is dropped with IPXWrapper's own words, "Packet did not come from an expected
  subnet". An accepted packet's source UDP address is cached for its source (network, node,
  socket), and the packet is delivered when its destination network, node and socket are the
  station's own or broadcast, and an application has bound that socket.
* **No pings, no keepalives**: a packet for socket 2 is never answered (it is only counted in
  ``pings_ignored``), and the station sends nothing of its own accord.

Not reproduced: more than one interface, SPX, and the kernel looping the station's own
broadcast back to its shared socket, which is set aside here (``own_echoes``) instead of being
delivered to the station's own applications, so that a test only sees what the network sent.
"""

import ipaddress
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Final

from scripts.harness import inside

IPXWRAPPER_PORT: Final = 54792  # src/ipxwrapper.h, the default UDP port
HEADER: Final = struct.Struct("!B4s6sH4s6sHH")  # struct ipx_packet, packed (27 bytes)
BROADCAST_NODE: Final = b"\xff" * 6
BROADCAST_NET: Final = b"\xff" * 4
ZERO_NET: Final = b"\x00" * 4
ECHO_SOCKET: Final = 0x0002
SUBNET_DROP: Final = "Packet did not come from an expected subnet"  # router.c's log line


@dataclass(frozen=True)
class WrapperPacket:
    """One IPXWrapper datagram as the station decoded it, and where it came from."""

    ptype: int
    dst_net: bytes
    dst_node: bytes
    dst_socket: int
    src_net: bytes
    src_node: bytes
    src_socket: int
    data: bytes
    source: tuple[str, int]  # the UDP source address
    on: str  # "shared" (port 54792) or "private" (the ephemeral port)


def encode(
    ptype: int,
    dst_net: bytes,
    dst_node: bytes,
    dst_socket: int,
    src_net: bytes,
    src_node: bytes,
    src_socket: int,
    data: bytes,
) -> bytes:
    """The UDP payload IPXWrapper sends: the 27-byte header, then the data."""
    head = HEADER.pack(
        ptype, dst_net, dst_node, dst_socket, src_net, src_node, src_socket, len(data)
    )
    return head + data


def decode(datagram: bytes, source: tuple[str, int], on: str) -> WrapperPacket | None:
    """The packet in ``datagram``, or None when its size field is wrong (IPXWrapper drops it)."""
    if len(datagram) < HEADER.size:
        return None
    ptype, dnet, dnode, dsock, snet, snode, ssock, size = HEADER.unpack_from(datagram)
    if size != len(datagram) - HEADER.size:
        return None
    data = datagram[HEADER.size :]
    return WrapperPacket(ptype, dnet, dnode, dsock, snet, snode, ssock, data, source, on)


class IpxWrapperStation:
    """An IPXWrapper host with one interface, living in a namespace (module docstring)."""

    def __init__(
        self,
        ns: str,
        interface: str,
        node: bytes,
        *,
        network: bytes = ZERO_NET,
        port: int = IPXWRAPPER_PORT,
    ) -> None:
        """Open the shared and private sockets inside ``ns``.

        Args:
            ns: the station's network namespace.
            interface: its interface address with prefix, e.g. ``10.98.0.2/24``.
            node: its 6-byte IPX node (IPXWrapper takes the adapter's MAC by default, and
                the node is configurable per interface in ipxconfig).
            network: its 4-byte IPX network (configurable per interface in ipxconfig).
            port: the shared UDP port.
        """
        self.interface = ipaddress.IPv4Interface(interface)
        self.node = node
        self.network = network
        self.port = port
        with inside(ns):
            shared = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            private = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for sock in (shared, private):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            sock.setblocking(False)
        shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        shared.bind(("0.0.0.0", port))
        private.bind(("0.0.0.0", 0))
        self._shared = shared
        self._private = private
        self.bound: set[int] = set()  # IPX sockets the station's applications have bound
        self.cache: dict[tuple[bytes, bytes, int], tuple[str, int]] = {}  # addrcache.c
        self.inbox: list[WrapperPacket] = []  # delivered, not yet taken by ``receive``
        self.delivered: list[WrapperPacket] = []  # everything ever delivered
        self.magic: list[WrapperPacket] = []  # source socket 0: never delivered
        self.dropped: list[tuple[str, tuple[str, int]]] = []  # (why, UDP source)
        self.pings_ignored = 0
        self.own_echoes = 0

    @property
    def ip(self) -> str:
        """The station's IPv4 address."""
        return str(self.interface.ip)

    @property
    def private_port(self) -> int:
        """The ephemeral UDP port it sends from (and receives unicasts on)."""
        port: int = self._private.getsockname()[1]
        return port

    @property
    def subnet_broadcast(self) -> tuple[str, int]:
        """Where a packet with no cached destination goes."""
        return (str(self.interface.network.broadcast_address), self.port)

    def close(self) -> None:
        """Close both sockets."""
        self._shared.close()
        self._private.close()

    def bind(self, ipx_socket: int) -> None:
        """An application binds ``ipx_socket``: packets for it are delivered from now on."""
        self.bound.add(ipx_socket)

    def send(
        self,
        dst_node: bytes,
        dst_socket: int,
        src_socket: int,
        data: bytes,
        *,
        dst_net: bytes = ZERO_NET,
        ptype: int = 0,
    ) -> tuple[str, int]:
        """Send one packet as ``ipx_send_packet`` does; returns the UDP destination used."""
        net = self.network if dst_net == ZERO_NET else dst_net  # winsock.c sendto()
        datagram = encode(
            ptype, net, dst_node, dst_socket, self.network, self.node, src_socket, data
        )
        target = self.cache.get((net, dst_node, dst_socket), self.subnet_broadcast)
        self._private.sendto(datagram, target)
        return target

    def poll(self, timeout: float) -> None:
        """Read and handle whatever arrives within ``timeout`` seconds (at least one wait)."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._shared, self._private], [], [], left)
            for sock in ready:
                on = "shared" if sock is self._shared else "private"
                while True:
                    try:
                        datagram, source = sock.recvfrom(70_000)
                    except BlockingIOError:
                        break
                    self._handle(datagram, source, on)
            if not ready or time.monotonic() >= deadline:
                return

    def receive(self, ipx_socket: int, timeout: float = 3.0) -> WrapperPacket:
        """The next packet delivered to ``ipx_socket`` (waiting up to ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, packet in enumerate(self.inbox):
                if packet.dst_socket == ipx_socket:
                    return self.inbox.pop(i)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"nothing for socket 0x{ipx_socket:04x}; dropped: {self.dropped}"
                )
            self.poll(min(left, 0.2))

    def receive_magic(self, timeout: float = 3.0) -> WrapperPacket:
        """The next internal packet (source socket 0) that arrived."""
        deadline = time.monotonic() + timeout
        while not self.magic:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no magic packet; dropped: {self.dropped}")
            self.poll(min(left, 0.2))
        return self.magic.pop(0)

    def _handle(self, datagram: bytes, source: tuple[str, int], on: str) -> None:
        if source == (self.ip, self.private_port):
            self.own_echoes += 1  # our own subnet broadcast, looped back by the kernel
            return
        packet = decode(datagram, source, on)
        if packet is None:
            self.dropped.append(("size field does not match the datagram", source))
            return
        if packet.src_socket == 0:
            # IPXWrapper's internal packets are handled (or ignored) before the subnet
            # check and never reach an application.
            self.magic.append(packet)
            return
        if ipaddress.IPv4Address(source[0]) not in self.interface.network or not (
            packet.dst_node == BROADCAST_NODE
            or (packet.dst_node == self.node and packet.dst_net == self.network)
        ):
            # A unicast is checked against the interface owning its destination: one that is
            # not the station's has no such interface and fails the same way.
            self.dropped.append((SUBNET_DROP, source))
            return
        self.cache[(packet.src_net, packet.src_node, packet.src_socket)] = source
        if packet.dst_socket == ECHO_SOCKET:
            self.pings_ignored += 1  # IPXWrapper never answers socket-2 pings
            return
        if packet.dst_net not in (self.network, BROADCAST_NET):
            return
        if packet.dst_socket in self.bound:
            self.inbox.append(packet)
            self.delivered.append(packet)
