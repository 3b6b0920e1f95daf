"""Interface ports of the IPX switch: native Ethernet, IPXWrapper's UDP, RFC 1234 segments.

Thin I/O (docs/architecture.md): each port turns what it reads into IPX packets for
``IpxEndpoint.ingest`` and turns the switch's targets back into frames or datagrams. Every
decision is the switch's (``policy/switch.py`` rules 1-8) or the plan's
(``policy/port_plan.py``).

* **Ethernet** (``EthernetPort``): one AF_PACKET socket per interface (CAP_NET_RAW). A
  classic BPF filter passes only the IPX EtherType and 802.3 length frames, so the other
  traffic of a promiscuous interface never reaches Python; 802.3 frames that are not IPX
  (STP, other SAPs) are read, dropped and counted. Promiscuous mode is taken with
  ``PACKET_ADD_MEMBERSHIP``: the kernel counts it per socket and gives it back when the
  socket closes, however ipxbridge exits. The bridge's own frames are not read back
  (``PACKET_IGNORE_OUTGOING``). A packet too large for a framing is not sent in it,
  counted (``frame_too_large``); never truncated.

  Every frame leaves with the port's own interface MAC as its source, whoever sent the
  packet. The IPX source node is chosen by the sender, and anyone who can send the bridge a
  packet (a remote DOSBox client, verified or not, a host on the IPXWrapper subnet, a peer)
  could choose a LAN station's MAC: a bridge that put its frames out from the node would
  speak as that station, and the LAN switch would move the station's MAC to the bridge's
  port. Stations reach remote nodes as through an IPX router (docs/protocols.md 3.1): the source
  of a frame is the immediate address, so a reply goes to the bridge's MAC; a station that
  sends to the node as a MAC instead is heard too, since no switch port learns that MAC and
  the LAN switch floods the frame to every port, the bridge's promiscuous one included. The
  port reads both alike, frames to its MAC and to other MACs (``PACKET_OTHERHOST``): the
  switch goes by the packet's destination node, never by the frame's.

  A unicast goes to the node as a MAC, in the station's framing if it was heard, else in
  every framing in use there, as a broadcast does; never to a group address (``group_node``).

  With framing ``auto`` the port learns each station's framing (``policy/framings.py``) only
  from frames whose packets the switch accepted, in a bounded table, and forgets a station
  after ``FRAMING_TTL`` (``tick``).
* **IPXWrapper** (``IpxWrapperSocket``): one UDP socket on 54792 for every IPXWrapper port.
  A datagram belongs to the port whose subnet or p2p peers hold its source; it is converted
  to IPX (``wire/ipxwrapper.py``). Copies leave from the bridge's address on the egress
  interface (IP_PKTINFO): IPXWrapper accepts only sources in its own subnet (docs/protocols.md 6).
  A unicast goes to where its node was heard from, else to the subnet broadcast (lan) or the
  p2p peers, as IPXWrapper itself does: never to an address that was not heard.
* **RFC 1234** (``Rfc1234Port``): the tunnel's own UDP socket. A broadcast goes to the
  subnet broadcast (lan) or to each peer (p2p); a unicast to where its node was heard from.
  A unicast to ``00 00`` + IPv4 (an RFC 1234 host number) that was never heard on the port
  goes only to a p2p peer of the plan with that address; otherwise the copy is not sent and
  is counted (``unproven_host``): anyone may register with the bridge and name any host
  number, and the port must not send to an IPv4 address a stranger chose (a reflector). Any
  other unknown node goes to the subnet broadcast or the peers, like a broadcast.

Where each node of a UDP port was heard from (``links``) is learned only from datagrams the
switch did not drop, kept in a bounded table of two tiers (``policy/tables.ProvenTable``,
tables ``rfc1234_links`` and ``ipxwrapper_links``) and cut to the port's subnet and peers when
its plan changes.

No exception from remote input escapes a reader: the work on each frame or datagram is
guarded, and an unexpected exception is booked as a drop (``internal_error``) and logged with
its traceback at most once a minute (``IpxEndpoint.fault``).

No IPXWrapper coalesced batch (docs/protocols.md 6) reaches a port: the switch unpacks every
batch where it enters and switches its packets one by one (``policy/switch.py`` rule 1), so
every port carries plain IPX packets, which every IPXWrapper version and native stack accepts.
"""

import contextlib
import errno
import logging
import socket
import struct
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from ipxbridge.io.bpf import attach_filter
from ipxbridge.io.relay import IP_PKTINFO
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.policy.framings import FramingLearner
from ipxbridge.policy.port_plan import PortPlan, SourceIndex
from ipxbridge.policy.switch import Decision, Outcome, PortKind, Segment
from ipxbridge.policy.tables import ProvenTable
from ipxbridge.wire.errors import WireError
from ipxbridge.wire.ethernet import (
    BROADCAST_MAC,
    Framing,
    build_frame,
    max_ipx_len,
    parse_frame,
)
from ipxbridge.wire.ipx import ALL_NETS, BROADCAST_NODE, with_dst_net
from ipxbridge.wire.ipxwrapper import (
    IPXWRAPPER_UDP_PORT,
    build_ipxwrapper,
    ipx_to_ipxwrapper,
    ipxwrapper_to_ipx,
    parse_ipxwrapper,
)

logger = logging.getLogger(__name__)

# linux/if_ether.h, linux/if_packet.h, linux/socket.h
ETH_P_ALL: Final = 0x0003
SOL_PACKET: Final = 263
PACKET_ADD_MEMBERSHIP: Final = 1
PACKET_MR_PROMISC: Final = 1
PACKET_OUTGOING: Final = 4
PACKET_IGNORE_OUTGOING: Final = 23

FRAME_BUFSIZE: Final = 0xFFFF  # the largest frame or datagram read
READS_PER_WAKEUP: Final = 128  # bounded, so the other ports and the timers get their turn
SOCKET_BUFFER: Final = 4 << 20
MAX_LINKS: Final = 4_096  # learned node -> UDP address, per port
ADDR_CACHE_TTL: Final = 30.0  # IPXWrapper's own address cache life (docs/protocols.md 6)
RFC1234_HOST: Final = b"\x00\x00"  # RFC 1234 host number: 00 00 + the host's IPv4


class Sink(Protocol):
    """What a port hands its packets to (``io/ipx_endpoint.IpxEndpoint``)."""

    counters: IpxCounters

    def now(self) -> float: ...  # noqa: D102
    def ingest(  # noqa: D102
        self,
        segment: Segment,
        data: bytes,
        *,
        via: object = None,
        sender: object = None,
        label: tuple[str, str] | None = None,
    ) -> Decision: ...
    def reject(self, kind: str, interface: str, size: int, reason: str) -> None: ...  # noqa: D102
    def fault(  # noqa: D102
        self, label: tuple[str, str], size: int, exc: Exception, *, booked: bool
    ) -> None: ...


class PacketSocket(Protocol):
    """What an Ethernet port reads and writes frames with (an AF_PACKET socket)."""

    def recv(self, bufsize: int, /) -> bytes: ...  # noqa: D102
    def recvfrom(self, bufsize: int, /) -> tuple[bytes, Any]: ...  # noqa: D102
    def send(self, data: bytes, /) -> int: ...  # noqa: D102
    def getsockname(self) -> Any: ...  # noqa: D102, ANN401 - the socket module's own type
    def fileno(self) -> int: ...  # noqa: D102
    def close(self) -> None: ...  # noqa: D102


class DatagramSocket(Protocol):
    """What a UDP port sends its copies with."""

    def sendmsg(  # noqa: D102
        self,
        buffers: list[bytes],
        ancdata: list[tuple[int, int, bytes]],
        flags: int,
        address: tuple[str, int],
        /,
    ) -> int: ...
    def getsockname(self) -> Any: ...  # noqa: D102, ANN401 - the socket module's own type


def accepted(decision: Decision) -> bool:
    """Whether the switch took a packet as its sender's own: something may be learned from it.

    Not dropped; or dropped only because its socket is never relayed (``filtered_socket``):
    the switch learns the sender's node from those too (a NetWare station's RIP and SAP when
    it loads are often all it says before a game); or a ``duplicate``: the station's own
    frame, which lost the race to a copy another bridge relayed (with two bridges on one
    LAN, a station heard only that way would never be learned here); or a packet the switch
    took and had nowhere to send (``_TAKEN``: no port wanted it, its only receiver is over
    its budget, or every port had it within the egress window): a station is no less itself
    when nobody else is listening. A batch counts if one of its packets does.
    Not a beacon: another bridge is no station, and a framing learned from the beacons two
    bridges send each other would keep itself in use for ever.
    """
    detail = decision.detail
    if decision.outcome is not Outcome.DROPPED:
        if detail == "batch":
            return any(accepted(one) for _, one in decision.inner)
        return detail != "beacon"
    return detail in _TAKEN


# Drops of a packet the switch judged its sender's own, only with nowhere to go (accepted)
_TAKEN: Final = frozenset(
    (
        "filtered_socket",
        "duplicate",
        "no_destination",
        "unknown_destination",
        "destination_on_ingress",
        "unverified_rate",
        "egress_repeat",
    )
)


def _count_error(counters: IpxCounters, label: tuple[str, str], exc: OSError) -> None:
    counters.send_errors[(*label, errno.errorcode.get(exc.errno or 0, "EUNKNOWN"))] += 1


def _pktinfo(ifindex: int, source: str) -> list[tuple[int, int, bytes]]:
    """Ancillary data that sends from ``source`` out of ``ifindex`` (ip(7) IP_PKTINFO)."""
    spec = socket.inet_aton(source) if source else bytes(4)
    return [(socket.IPPROTO_IP, IP_PKTINFO, struct.pack("=I4s4s", ifindex, spec, bytes(4)))]


# --- Ethernet ------------------------------------------------------------------------------


# Classic BPF (linux/filter.h): ldh [12]; jeq #0x8137 -> accept; jgt #1500 -> drop; accept.
_IPX_FILTER: Final = (
    (0x28, 0, 0, 12),  # BPF_LD|BPF_H|BPF_ABS: the length/type field
    (0x15, 1, 0, 0x8137),  # BPF_JMP|BPF_JEQ|BPF_K: the IPX EtherType
    (0x25, 1, 0, 1500),  # BPF_JMP|BPF_JGT|BPF_K: an EtherType, not an 802.3 length
    (0x06, 0, 0, 0x40000),  # BPF_RET|BPF_K: accept (whole frame)
    (0x06, 0, 0, 0),  # BPF_RET|BPF_K: drop
)


def open_packet_socket(plan: PortPlan) -> tuple[socket.socket, bool]:
    """The AF_PACKET socket of an Ethernet port: filtered, bound, promiscuous.

    Returns the socket and whether it reads the bridge's own frames back (before Linux 4.20
    there is no ``PACKET_IGNORE_OUTGOING``; the reader then skips them).

    Raises:
        OSError: no CAP_NET_RAW, or the interface is gone.
    """
    # Created bound to no protocol, so nothing is queued before the filter is attached.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        sock.setblocking(False)
        attach_filter(sock, _IPX_FILTER)
        own_frames_read = False
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            own_frames_read = True
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        sock.bind((plan.segment.interface, ETH_P_ALL))
        mreq = struct.pack("iHH8s", plan.index, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
    except OSError:
        sock.close()
        raise
    return sock, own_frames_read


class EthernetPort:
    """Native IPX on one interface through an AF_PACKET socket (module docstring)."""

    def __init__(
        self,
        plan: PortPlan,
        sink: Sink,
        sock: PacketSocket | None = None,
        evictions: Counter[tuple[str, str]] | None = None,
    ) -> None:
        """Open the socket (unless one is given), take promiscuous mode, start no reading yet.

        ``evictions`` counts what the framing learner pushes out (``IpxCounters``).

        Raises:
            OSError: no CAP_NET_RAW, or the interface is gone.
        """
        self.plan = plan
        self.segment = plan.segment
        self.label = (str(plan.segment.kind), plan.segment.interface)
        self._sink = sink
        # The largest IPX packet each framing carries at this MTU (wire/ethernet.py rule 3).
        self._limits = {f: max_ipx_len(f, plan.mtu) for f in Framing}
        self.framings = FramingLearner(evictions)
        self.fixed = None if plan.framing == "auto" else Framing(plan.framing)
        self._own_frames_read = False
        if sock is None:
            sock, self._own_frames_read = open_packet_socket(plan)
        self._sock: PacketSocket = sock
        # The port's own MAC: the source of every frame it sends (module docstring).
        self.mac: bytes = sock.getsockname()[4]

    def fileno(self) -> int:
        """The socket to watch for reading."""
        return self._sock.fileno()

    def close(self) -> None:
        """Close the socket; the kernel gives promiscuous mode back with it."""
        self._sock.close()

    def tick(self, now: float) -> None:
        """Forget the framings of stations silent for ``FRAMING_TTL`` (policy/framings.py)."""
        self.framings.expire(now)

    def on_readable(self) -> None:
        """Read frames until the socket is empty (bounded per wake-up).

        Frames to the port's MAC and to any other MAC are read alike (module docstring).
        """
        sock = self._sock
        sink = self._sink
        name = self.segment.interface
        label = self.label
        # Also with a fixed framing: the learner is where the port knows which stations it
        # has heard (a unicast goes only to those, ``send``).
        learner = self.framings
        now = sink.now()
        # recv, not recvfrom, where the kernel leaves our own frames out: CPython turns the
        # sender's address into an interface name with one ioctl per frame.
        own_frames = self._own_frames_read
        for _ in range(READS_PER_WAKEUP):
            try:
                if own_frames:
                    frame, addr = sock.recvfrom(FRAME_BUFSIZE)
                    if addr[2] == PACKET_OUTGOING:
                        continue  # our own frame, on a kernel without PACKET_IGNORE_OUTGOING
                else:
                    frame = sock.recv(FRAME_BUFSIZE)
            except BlockingIOError:
                return
            except OSError:
                sink.counters.recv_errors += 1  # ENETDOWN: the watcher reopens the port
                return
            decision: Decision | None = None
            try:
                try:
                    parsed = parse_frame(frame)
                except WireError as exc:
                    sink.reject(PortKind.ETHERNET, name, len(frame), exc.reason)
                    continue
                packet = bytes(parsed.packet)
                decision = sink.ingest(
                    self.segment, packet, via=parsed.framing, sender=parsed.src_mac, label=label
                )
                if accepted(decision) and parsed.src_mac == packet[22:28]:
                    # Only a station speaking for itself (frame source = IPX source node):
                    # another bridge's copies carry that bridge's MAC (``send``).
                    learner.observe_frame(parsed, now)
            except Exception as exc:  # noqa: BLE001 - a bug must cost one frame, not the reader
                sink.fault(label, len(frame), exc, booked=decision is not None)

    def send(self, packet: bytes, dst_node: bytes) -> None:
        """Put one IPX packet on the segment (in each framing it needs), from the port's MAC."""
        src_mac = self.mac  # never the IPX source node (module docstring)
        if dst_node == BROADCAST_NODE:
            dst_mac = BROADCAST_MAC
            framings = (self.fixed,) if self.fixed else self.framings.in_use()
        elif dst_node in self.framings:
            dst_mac = dst_node  # the node of a native station is its MAC (docs/protocols.md 3.1)
            framings = (self.fixed or self.framings.framing_for(dst_node),)
        elif dst_node[0] & 1:
            # A group address that is not the broadcast: no station's node. A stranger could
            # aim the bridge at a multicast group every host of some kind listens to.
            self._sink.counters.copies_dropped[(*self.label, "group_node")] += 1
            return
        else:
            # A node not heard here (it was quiet for FRAMING_TTL, or is heard through another
            # bridge): to that MAC in each framing in use, as a broadcast goes, since a
            # station takes only the frame types it is bound to. A stranger gains nothing a
            # broadcast does not give: the frame speaks from the port's own MAC, and the host
            # gets the broadcasts anyway.
            dst_mac = dst_node
            framings = (self.fixed,) if self.fixed else self.framings.in_use()
        counters = self._sink.counters
        mtu = self.plan.mtu
        for framing in framings:
            if len(packet) > self._limits[framing]:
                counters.copies_dropped[(*self.label, "frame_too_large")] += 1
                continue
            frame = build_frame(dst_mac, src_mac, framing, packet, mtu=mtu)
            try:
                self._sock.send(frame)
            except OSError as exc:
                _count_error(counters, self.label, exc)
            else:
                counters.port_copies[self.label] += 1
                counters.bytes_sent += len(frame)


# --- UDP ports -----------------------------------------------------------------------------


class _Links:
    """Where each node was heard from: bounded, two tiers (module docstring)."""

    __slots__ = ("_table",)

    def __init__(self, name: str, evictions: Counter[tuple[str, str]]) -> None:
        self._table: ProvenTable[bytes, tuple[str, int]] = ProvenTable(MAX_LINKS, name, evictions)

    def learn(self, node: bytes, addr: tuple[str, int], now: float) -> None:
        self._table.learn(node, addr, now)

    def get(self, node: bytes) -> tuple[str, int] | None:
        known = self._table.get(node)
        return None if known is None else known[0]

    def keep(self, inside: Callable[[str], bool]) -> None:
        """Forget every link whose address ``inside`` refuses."""
        for node, addr, _ in list(self._table.items()):
            if not inside(addr[0]):
                self._table.pop(node)

    def __len__(self) -> int:
        return len(self._table)


class _UdpPort:
    """A UDP-encapsulated segment: where its copies go and from which address."""

    kind: PortKind

    def __init__(
        self, plan: PortPlan, sock: DatagramSocket, port: int, counters: IpxCounters
    ) -> None:
        self.segment = plan.segment
        self.label = (str(plan.segment.kind), plan.segment.interface)
        self.links = _Links(f"{self.kind}_links", counters.table_evictions)
        self._sock = sock
        self._port = port
        self._counters = counters
        # A socket bound to one address cannot send from another (ip(7) IP_PKTINFO).
        self._pktinfo = sock.getsockname()[0] == "0.0.0.0"
        self.plan = plan

    @property
    def plan(self) -> PortPlan:
        """The port's plan; a new one (new addresses or peers) cuts the links to it."""
        return self._plan

    @plan.setter
    def plan(self, plan: PortPlan) -> None:
        self._plan = plan
        # A link outside the subnet and peers is from an old plan: the source index of the
        # new one would not take a datagram from there either.
        sources = SourceIndex((plan,), self.kind)
        self._forget(lambda ip: sources(ip) is not None)
        self._peers = frozenset(plan.peers)
        self._flood: tuple[tuple[str, int], ...] = ()
        if plan.role == "lan":
            if plan.broadcast:
                self._flood = ((plan.broadcast, self._port),)
        else:
            self._flood = tuple((peer, self._port) for peer in plan.peers)
        self._ancillary = _pktinfo(plan.index, plan.address) if self._pktinfo else []

    def _forget(self, inside: Callable[[str], bool]) -> None:
        """Forget every link whose address ``inside`` refuses."""
        self.links.keep(inside)

    def _destinations(self, dst_node: bytes) -> Sequence[tuple[str, int]]:
        """Where a copy to ``dst_node`` goes: where the node was heard, else the flood."""
        if dst_node != BROADCAST_NODE:
            known = self.links.get(dst_node)
            if known is not None:
                return (known,)
        return self._flood

    def _send_datagram(self, payload: bytes, dst_node: bytes) -> None:
        counters = self._counters
        ancillary = self._ancillary
        for dst in self._destinations(dst_node):
            try:
                self._sock.sendmsg([payload], ancillary, 0, dst)
            except OSError as exc:
                _count_error(counters, self.label, exc)
            else:
                counters.port_copies[self.label] += 1
                counters.bytes_sent += len(payload)


class Rfc1234Port(_UdpPort):
    """RFC 1234 hosts on a subnet, through the tunnel's own socket."""

    kind = PortKind.RFC1234

    def _destinations(self, dst_node: bytes) -> Sequence[tuple[str, int]]:
        """A host number goes only to a host heard here or to a peer (module docstring)."""
        if dst_node[:2] != RFC1234_HOST:
            return super()._destinations(dst_node)
        known = self.links.get(dst_node)
        if known is not None:
            return (known,)
        ip = socket.inet_ntoa(dst_node[2:])
        if ip in self._peers:
            return ((ip, self._port),)
        self._counters.copies_dropped[(*self.label, "unproven_host")] += 1
        return ()

    def send(self, packet: bytes, dst_node: bytes) -> None:
        """Send one IPX packet to the segment's hosts."""
        self._send_datagram(packet, dst_node)


class IpxWrapperPort(_UdpPort):
    """IPXWrapper hosts on one interface (their own UDP encapsulation).

    Every IPXWrapper program on a PC has the PC's node, but each program sends from its own
    UDP port (docs/protocols.md 6, "Native mode, addresses"), and programs come and go. So a
    unicast goes where its destination *socket* was last heard from, as IPXWrapper's own
    address cache does it: keyed by node and socket, for ``ADDR_CACHE_TTL``; otherwise to the
    subnet broadcast on 54792 (or the p2p peers), where the PC's listener hands it to the
    program that has the socket. A program that exits stops being heard, and within
    ``ADDR_CACHE_TTL`` its socket goes back to the broadcast: never a black hole for the node.
    The key leaves the network out: the bridge is one network (switch rule 10).

    Destination networks (switch rule 10): a host delivers a broadcast to its own network or
    FFFFFFFF, and a unicast only to its own (network, node) exactly (docs/protocols.md 6,
    "Native mode, addresses": FFFFFFFF is refused). So a broadcast goes to FFFFFFFF and a
    unicast to the network its socket was heard with, else the network its node was heard
    with, else the port's configured number (``ipx.interfaces[].network``, 00000001 as
    IPXWrapper's default).
    """

    kind = PortKind.IPXWRAPPER

    def __init__(
        self,
        plan: PortPlan,
        sock: DatagramSocket,
        port: int,
        counters: IpxCounters,
        clock: Callable[[], float],
    ) -> None:
        self._clock = clock
        # (node, socket) -> (ip:port, its network), for the unicasts (class docstring)
        self.sockets: ProvenTable[bytes, tuple[tuple[str, int], bytes]] = ProvenTable(
            MAX_LINKS, "ipxwrapper_sockets", counters.table_evictions
        )
        # node -> the network it was last heard with (a unicast's fallback, class docstring)
        self.node_nets: ProvenTable[bytes, bytes] = ProvenTable(
            MAX_LINKS, "ipxwrapper_nodes", counters.table_evictions
        )
        super().__init__(plan, sock, port, counters)

    def heard(self, packet: bytes | memoryview, addr: tuple[str, int], now: float) -> None:
        """A packet the switch took from ``addr``: where its node and socket live."""
        self.links.learn(bytes(packet[22:28]), addr, now)  # source node, docs/protocols.md 3.1
        self.sockets.learn(bytes(packet[22:30]), (addr, bytes(packet[18:22])), now)
        self.node_nets.learn(bytes(packet[22:28]), bytes(packet[18:22]), now)

    def send(self, packet: bytes, dst_node: bytes) -> None:
        """Send one IPX packet as IPXWrapper's 27-byte-header datagram."""
        if dst_node == BROADCAST_NODE:
            self._send_to(with_dst_net(packet, ALL_NETS), self._flood)
            return
        known = self.sockets.get(packet[10:18])  # destination node and socket
        if known is not None and self._clock() - known[1] <= ADDR_CACHE_TTL:
            addr, net = known[0]
            self._send_to(with_dst_net(packet, net), (addr,))
            return
        # To the PC's listener, which hands it to the program with the socket; with the
        # receiver's network, never FFFFFFFF (class docstring).
        node_net = self.node_nets.get(packet[10:16])
        net = node_net[0] if node_net is not None else self._plan.ipx_network
        self._send_to(with_dst_net(packet, net), self._flood)

    def _send_to(self, packet: bytes, destinations: Sequence[tuple[str, int]]) -> None:
        payload = build_ipxwrapper(ipx_to_ipxwrapper(packet))
        counters = self._counters
        for dst in destinations:
            try:
                self._sock.sendmsg([payload], self._ancillary, 0, dst)
            except OSError as exc:
                _count_error(counters, self.label, exc)
            else:
                counters.port_copies[self.label] += 1
                counters.bytes_sent += len(payload)

    def _forget(self, inside: Callable[[str], bool]) -> None:
        super()._forget(inside)
        for key, (addr, _), _ in list(self.sockets.items()):
            if not inside(addr[0]):
                self.sockets.pop(key)


class IpxWrapperSocket:
    """The one UDP socket of every IPXWrapper port (54792)."""

    def __init__(self, sink: Sink, host: str = "0.0.0.0", port: int = IPXWRAPPER_UDP_PORT) -> None:
        """Bind the socket.

        Raises:
            OSError: the port is taken.
        """
        self._sink = sink
        self.ports: dict[Segment, IpxWrapperPort] = {}
        self.own_ips: frozenset[str] = frozenset()
        # Which port a source address belongs to (set with the plan, policy/port_plan.py).
        self.sources: Callable[[str], Segment | None] = lambda _ip: None
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.port = port

    def fileno(self) -> int:
        """The socket to watch for reading."""
        return self.sock.fileno()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def port_for(self, plan: PortPlan, counters: IpxCounters) -> IpxWrapperPort:
        """The send side of one IPXWrapper port on this socket."""
        port = IpxWrapperPort(plan, self.sock, self.port, counters, self._sink.now)
        self.ports[plan.segment] = port
        return port

    def on_readable(self) -> None:
        """Read datagrams until the socket is empty (bounded per wake-up)."""
        sink = self._sink
        sources = self.sources
        now = sink.now()
        for _ in range(READS_PER_WAKEUP):
            try:
                data, addr = self.sock.recvfrom(FRAME_BUFSIZE)
            except BlockingIOError:
                return
            except OSError:
                sink.counters.recv_errors += 1
                return
            label = _IPXWRAPPER
            decision: Decision | None = None
            try:
                ip = addr[0]
                segment = sources(ip)
                if ip in self.own_ips:
                    # Our own broadcast to a subnet, looped back to our socket.
                    where = segment.interface if segment else ""
                    sink.reject(PortKind.IPXWRAPPER, where, len(data), "own_packet")
                    continue
                if segment is None or segment not in self.ports:
                    sink.reject(PortKind.IPXWRAPPER, "", len(data), "off_segment")
                    continue
                port = self.ports[segment]
                label = port.label
                try:
                    packet = ipxwrapper_to_ipx(parse_ipxwrapper(data))
                except WireError as exc:
                    sink.reject(PortKind.IPXWRAPPER, segment.interface, len(data), exc.reason)
                    continue
                decision = sink.ingest(segment, packet, sender=ip, label=label)
                if decision.detail == "batch":
                    # From its packets as from lone ones; its own header is checked by nobody.
                    for inner, one in decision.inner:
                        if accepted(one):
                            port.heard(inner, addr, now)
                elif accepted(decision):
                    port.heard(packet, addr, now)
            except Exception as exc:  # noqa: BLE001 - a bug must cost one datagram, not the reader
                sink.fault(label, len(data), exc, booked=decision is not None)


_IPXWRAPPER: Final = (str(PortKind.IPXWRAPPER), "")  # before the datagram's port is known


SegmentPort = EthernetPort | IpxWrapperPort | Rfc1234Port
Opener = Callable[[PortPlan], SegmentPort]
