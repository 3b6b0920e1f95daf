"""Broadcast fan-out sockets: receive on the relay ports, send copies per ``RelayPolicy``.

* One receive socket per relay port, bound to 0.0.0.0 with ``IP_PKTINFO`` (ingress interface
  and header destination) and ``IP_RECVTTL``; drained until empty on each wake-up.
* ``preserve`` mode: one raw ``IP_HDRINCL`` socket per egress interface, bound to the device;
  the copy keeps the player's source address and port, so the host answers the player directly
  when routing allows. Datagrams larger than the egress MTU are fragmented here (the kernel
  refuses oversized ``IP_HDRINCL`` sends with EMSGSIZE); 3000-byte broadcasts are relayed.
* ``rewrite`` mode (no raw sockets needed): copies leave from a *flow* socket, one per
  (player, egress), bound to the bridge's address on that interface. Whatever a host sends
  back to that socket — from any source port, since DirectPlay 8 answers from its game port —
  goes to the player from a *return* socket, one per (player, host), and whatever the player
  sends to that return socket goes back to the host: a small, bounded, expiring UDP proxy, so
  the reply (and a join that follows it) finds its way in both directions. Which flows keep
  their socket is decided by ``policy/flows.py`` (evict, never refuse; one-packet spoofed
  sources cannot lock players out, docs/reliability.md R16); an evicted flow's socket is read once
  more before it is closed, so an answer already waiting there still reaches its player.
* Sockets bound to an interface are re-opened when the interface is re-created (a new index):
  an old one would return ENODEV for ever (docs/reliability.md item 6).
* Every send error is counted per interface and errno; nothing is queued.
* Per-source fairness on the relay ports (``policy/fairness.py``, docs/reliability.md R13):
  datagrams are read into a queue per source address and handled ``FAIR_TURN`` per turn,
  round robin over the sources, turn after turn until the queues are empty. While more than
  one source has been seen lately (``FAIR_HOLD``), each wake-up reads the socket until it is
  empty (at most ``READ_BATCH``), so a quiet player is not left behind a flood in the kernel's
  queue, and the longest queue's excess is dropped as ``fair_share`` before it costs a
  decision, an inspection or a copy (only its ingress interface is read, for the books).
  With one source alone there is no one to be fair to: ``SOLO_READ_AHEAD`` are read ahead,
  and what the bridge cannot serve waits in (or is dropped by) the kernel's buffer, which
  costs no CPU that serving needs.
* The books balance (``RelayCounters.balanced``, in ``obs/counters.py``): every datagram
  read from any relay socket — a broadcast on a relay port, a host's answer on a flow socket,
  a player's datagram on a return socket — is counted once as received, on the interface it
  arrived on, and then once as relayed or once as dropped with one reason (the same rule as
  the IPX path's). A relayed datagram whose copies the kernel refuses is still relayed;
  the refusals are send errors.
"""

import asyncio
import errno
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ipxbridge.io.bpf import DROP_ALL, attach_filter
from ipxbridge.io.sockstats import socket_drop_count, socket_drops
from ipxbridge.obs.counters import RelayCounters
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.fairness import FairQueue
from ipxbridge.policy.flows import FlowKey, FlowLimits, FlowTable
from ipxbridge.policy.relay import Copy, Egress, RelayPolicy, SourceMode
from ipxbridge.policy.topology import ARPHRD_ETHER
from ipxbridge.wire.dplay8 import is_dp8_port
from ipxbridge.wire.pcap import ETHERTYPE_IPV4

logger = logging.getLogger(__name__)

Address = tuple[str, int]

IP_PKTINFO: Final = 8
IP_RECVTTL: Final = 12
IP_TTL_CMSG: Final = 2
IP_RECVTOS: Final = 13
IP_TOS_CMSG: Final = 1
RECV_SIZE: Final = 65_535
ANC_SIZE: Final = 256
MAX_PER_WAKEUP: Final = 256
READ_BATCH: Final = 1024  # relay-port datagrams read per wake-up at most (cheap: no decision)
# Of those, decided, inspected and relayed per turn, round robin (R13). Small, so the loop
# goes back to reading often: under a single-source flood the kernel's socket queue, which
# cannot tell sources apart, is what delays and drops a quiet player's broadcasts, and
# reading it empty (discarding the flooder's excess as fair_share) is what keeps it short.
# bench/fairness.py, 80k pps for 60 s: 64 gave a 10 pps player 96.8 % and p99 165 ms
# (median of 5), 16 gave 99.8-100 % and 27-40 ms, 8 gave 100 % and 23-26 ms.
FAIR_TURN: Final = 8
# After a turn saw more than one source waiting, read everything for this long; else read at
# most SOLO_READ_AHEAD ahead. Reading a lone sender's excess only to drop it took the CPU its
# serving needed (bench/relay_bench.py --fast-path off, one sender unpaced: 505 pps relayed,
# against 12-17k before per-source fairness and with this rule).
FAIR_HOLD: Final = 2.0
SOLO_READ_AHEAD: Final = 64
_IPV4: Final = struct.Struct("!BBHHHBBH4s4s")
_UDP: Final = struct.Struct("!HHHH")
_IPV4_WORDS: Final = struct.Struct("!10H")
# Own copies and loop copies were inspected the first time; spoofed or invalid sources, a
# reflecting SOCKADDR and enumerations over their rate are not a player's (R7, R9).
UNINSPECTED: Final = frozenset(
    {"own_packet", "duplicate", "marked_copy", "source_invalid", "source_off_link"}
    | {"source_port_zero", "dp4_sockaddr_mismatch", "enum_rate"}
)
_PKTINFO: Final = struct.Struct("=i")
IPPROTO_IP: Final = socket.IPPROTO_IP
# a plain int: `flags & socket.MSG_TRUNC` goes through enum.Flag.__and__, ~5 us a datagram
MSG_TRUNC: Final = int(socket.MSG_TRUNC)
inet_ntoa: Final = socket.inet_ntoa
_Datagram = tuple[bytes, list[tuple[int, int, bytes]], int, Any]  # what recvmsg returns


def ancillary_ifindex(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The ingress ifindex alone: what a datagram dropped unread needs for the books.

    ``parse_ancillary``'s first value without the rest (no address string, TTL or TOS).
    """
    for level, kind, data in ancdata:
        if kind == IP_PKTINFO and level == IPPROTO_IP and len(data) >= 12:
            index: int = _PKTINFO.unpack_from(data)[0]
            return index
    return 0


def parse_ancillary(ancdata: list[tuple[int, int, bytes]]) -> tuple[int, str, int, int]:
    """(ingress ifindex, header destination, TTL, TOS) from recvmsg control data."""
    ifindex, dst, ttl, tos = 0, "", 64, 0
    for level, kind, data in ancdata:
        if level == IPPROTO_IP:
            if kind == IP_PKTINFO and len(data) >= 12:
                # struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
                ifindex = _PKTINFO.unpack_from(data)[0]
                dst = inet_ntoa(data[8:12])
            elif kind == IP_TTL_CMSG and len(data) >= 4:
                ttl = data[0]  # an int in host order; TTL <= 255 (little-endian here)
            elif kind == IP_TOS_CMSG and data:
                tos = data[0]
    return ifindex, dst, ttl, tos


def build_ip_udp(
    src: Address, dst: Address, payload: bytes, *, ttl: int, ident: int, mtu: int, tos: int = 0
) -> list[bytes]:
    """IPv4 + UDP packets for a raw ``IP_HDRINCL`` socket, fragmented to ``mtu``.

    The IP header checksum is computed here (RFC 791 3.1): a packet socket sends the bytes as
    they are (the kernel recomputes it for ``IP_HDRINCL``). The UDP checksum is 0 ("not
    computed", RFC 768), which every IPv4 stack accepts. ``tos`` is the whole TOS byte (DSCP
    << 2).
    """
    udp = _UDP.pack(src[1], dst[1], 8 + len(payload), 0) + payload
    saddr, daddr = socket.inet_aton(src[0]), socket.inet_aton(dst[0])
    if 20 + len(udp) <= mtu:
        return [_ip_header(tos, 20 + len(udp), ident, 0, ttl, saddr, daddr) + udp]
    step = max(8, (mtu - 20) & ~7)
    packets = []
    for offset in range(0, len(udp), step):
        chunk = udp[offset : offset + step]
        more = 0x2000 if offset + step < len(udp) else 0
        packets.append(
            _ip_header(tos, 20 + len(chunk), ident, more | (offset >> 3), ttl, saddr, daddr) + chunk
        )
    return packets


def _ip_header(  # noqa: PLR0917 - the header's fields in order
    tos: int, length: int, ident: int, frag: int, ttl: int, saddr: bytes, daddr: bytes
) -> bytes:
    """An IPv4 header (no options) with its checksum: the ones' complement sum (RFC 1071)."""
    header = _IPV4.pack(0x45, tos, length, ident, frag, ttl, 17, 0, saddr, daddr)
    total: int = sum(_IPV4_WORDS.unpack(header))
    total = (total & 0xFFFF) + (total >> 16)
    total += total >> 16
    return header[:10] + (~total & 0xFFFF).to_bytes(2, "big") + header[12:]


def open_link(name: str) -> tuple[socket.socket, bytes] | None:
    """A packet socket that puts broadcast frames on Ethernet device ``name``, and their header.

    Why: a copy sent through the IP stack to a broadcast address is looped back to every local
    socket bound to its port (the kernel's ``ip_mc_output``), so the relay read each of its own
    broadcast copies again, half of all it read at saturation, and dropped it
    (``source_off_link``, or ``own_packet`` for a rewritten copy). A frame given to the device
    is not looped back, as the kernel fast path's ``dup`` is not; like it, it skips the box's
    own IP output hooks and connection tracking, which a broadcast never matches anyway.
    Unicast copies (point-to-point peers) are not looped back and keep their sockets: they
    would need ARP here, and a rewritten one's answers may need the conntrack entry. Bound
    with ``ETHERTYPE_IPV4`` so the device knows what it carries, behind a filter that accepts
    nothing, so it never receives. None where that cannot be had (no CAP_NET_RAW, not
    Ethernet): the sockets send as before.
    """
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except OSError:
        return None
    try:
        sock.setblocking(False)
        attach_filter(sock, DROP_ALL)
        sock.bind((name, ETHERTYPE_IPV4))
        hatype, mac = sock.getsockname()[3:5]
    except OSError:
        sock.close()
        return None
    if hatype != ARPHRD_ETHER or len(mac) != 6:
        sock.close()
        return None
    return sock, b"\xff" * 6 + mac + ETHERTYPE_IPV4.to_bytes(2, "big")


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "EUNKNOWN")


@dataclass(slots=True)
class _Flow:
    player: Address
    ingress: int
    egress: Egress
    port: int  # relay port the player broadcast to
    sock: socket.socket
    ttl: int = 0
    source: Address = ("", 0)  # the flow socket's address: what its copies come from
    # its return sockets' keys: closing a flow (an eviction per datagram in a flood) must not
    # scan the whole return table
    returns: set[tuple[Address, int, Address]] = field(default_factory=set)

    @property
    def key(self) -> FlowKey:
        return (self.player, self.egress.index)


@dataclass(slots=True)
class _Return:
    flow: _Flow
    host: Address
    sock: socket.socket
    last_used: float


class BroadcastRelay:
    """The asyncio side of the relay."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        policy: RelayPolicy,
        ports: tuple[int, ...],
        inspector: Inspector | None = None,
        counters: RelayCounters | None = None,
        *,
        flow_limits: FlowLimits | None = None,
    ) -> None:
        self._loop = loop
        self.policy = policy
        self.ports = ports
        self.inspector = inspector
        self.counters = counters or RelayCounters()
        self._recv: list[socket.socket] = []
        self._raw: dict[int, socket.socket] = {}  # egress index -> raw socket (preserve)
        # egress index -> packet socket and frame header for broadcast copies (open_link)
        self._link: dict[int, tuple[socket.socket, bytes]] = {}
        self._flows: dict[FlowKey, _Flow] = {}  # (player, egress index)
        self._table = FlowTable(flow_limits)  # which flows keep their socket
        self._returns: dict[tuple[Address, int, Address], _Return] = {}
        self._ident = 0
        self._addresses: dict[int, str] = {}  # egress index -> bridge address (for returns)
        self._fair: dict[int, FairQueue[_Datagram]] = {}  # relay port -> queues by source
        self._turns: set[int] = set()  # relay ports with a turn scheduled
        self._closed_drops = 0  # kernel drops of flow and return sockets since closed
        self._shared_until: dict[int, float] = {}  # relay port -> read all until (FAIR_HOLD)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Open the receive sockets.

        Raises:
            OSError: a relay port cannot be bound (the caller turns this into a clear error).
        """
        for port in self.ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
                sock.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
                sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE
                except OSError:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                sock.bind(("0.0.0.0", port))
            except OSError:
                sock.close()
                self.close()
                raise
            self._recv.append(sock)
            self._loop.add_reader(sock.fileno(), self._on_broadcast, sock, port)

    def kernel_drops(self) -> int | None:
        """Datagrams the kernel dropped at the relay's sockets (receive buffers full).

        Every socket it reads: the relay ports, the flow and return sockets open now, and
        those closed since (folded in at close, so the total never goes back).
        """
        socks = [*self._recv, *(f.sock for f in self._flows.values())]
        socks += [r.sock for r in self._returns.values()]
        drops = socket_drops(socks)
        return None if drops is None else drops + self._closed_drops

    def port_drops(self) -> int:
        """Datagrams the kernel dropped at the relay ports' own sockets: the relay fell behind.

        SO_MEMINFO, one getsockopt per port, cheap enough for every tick. Flow and return
        sockets are left out: what they drop is a host's answers, not the relay's backlog.
        """
        return sum(socket_drop_count(s) for s in self._recv)

    def close(self) -> None:
        """Close every socket."""
        for sock in self._recv:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._recv.clear()
        for fair in self._fair.values():
            fair.clear()  # a backlog still queued at the stop is not relayed
        for raw in self._raw.values():
            raw.close()
        self._raw.clear()
        for link, _ in self._link.values():
            link.close()
        self._link.clear()
        for key in list(self._flows):
            self._close_flow(key)

    def apply_plan(
        self, egresses: tuple[Egress, ...], own: frozenset[str], bcasts: dict[int, frozenset[str]]
    ) -> None:
        """Install a new plan; re-open sockets of re-created interfaces, drop vanished ones."""
        self.policy.set_plan(egresses, own, bcasts)
        current = {e.index: e for e in egresses}
        self._addresses = {e.index: e.address for e in egresses}
        for index in list(self._raw):
            if index not in current:
                self._raw.pop(index).close()
        for index in list(self._link):
            if index not in current:
                self._link.pop(index)[0].close()
        for key, flow in list(self._flows.items()):
            new = current.get(flow.egress.index)
            if new is None or new.address != flow.egress.address or flow.ingress not in current:
                self._close_flow(key)
        for index, egress in current.items():
            if index not in self._link:
                link = open_link(egress.name)  # None without CAP_NET_RAW: the sockets send
                if link is not None:
                    self._link[index] = link
        if self.policy.settings.source_mode is SourceMode.PRESERVE:
            for index, egress in current.items():
                if index not in self._raw:
                    raw = self._open_raw(egress)
                    if raw is not None:
                        self._raw[index] = raw

    def tick(self, now: float) -> None:
        """Expire idle flows and old loop records."""
        self.policy.purge(now)
        for rkey, ret in list(self._returns.items()):
            if now - ret.last_used > self._table.limits.idle:
                self._close_return(rkey)
        for fkey in self._table.expire(now):
            if fkey in self._flows:
                self._close_flow(fkey)

    @property
    def flows(self) -> int:
        """Open rewrite-mode flows (player, egress)."""
        return len(self._flows)

    def flow_counts(self) -> tuple[int, int, int]:
        """(unproven flows, proven flows, return sockets): the sockets the table holds."""
        return self._table.unproven, self._table.proven, len(self._returns)

    # --- receive -----------------------------------------------------------------------------

    def _on_broadcast(self, sock: socket.socket, port: int) -> None:
        counters = self.counters
        now = self._loop.time()
        dp8 = is_dp8_port(port)
        for data, anc, flags, src in self._fair_turn(sock, port, now):
            ifindex, dst_ip, ttl, tos = parse_ancillary(anc)
            counters.count_received(data, ifindex)
            if flags & MSG_TRUNC:
                # One outcome, one counter: dropped["truncated"] is the only record of it.
                counters.dropped["truncated"] += 1
                continue
            src_addr: Address = (src[0], src[1])
            decision = self.policy.decide(
                data,
                src=src_addr,
                dst_ip=dst_ip,
                dst_port=port,
                ingress=ifindex,
                ttl=ttl,
                now=now,
                tos=tos,
            )
            reason = decision.drop_reason
            if reason is not None:
                counters.dropped[reason] += 1
                if reason in UNINSPECTED:
                    continue  # our own copies and loop copies were inspected the first time
            if self.inspector is not None:
                self.inspector.inspect(
                    data,
                    transport="udp",
                    host=f"{src[0]}:{src[1]}",
                    source=src_addr,
                    now=now,
                    dp8_context=dp8,
                    kind=decision.kind,
                )
            if reason is not None:
                continue
            sent = [self._send_copy(c, src_addr, port, ifindex, now) for c in decision.copies]
            if decision.copies and not any(sent):
                # Not one copy left (no flow socket): not relayed, whatever the policy said.
                counters.dropped["flow_refused"] += 1
                continue
            counters.relayed += 1
            counters.sockaddr_rewrites += decision.sockaddr_rewritten

    def _fair_turn(self, sock: socket.socket, port: int, now: float) -> list[_Datagram]:
        """Read what waits on a relay port into the per-source queues; this turn's share.

        Schedules the next turn while anything is left (module rules; R13).
        """
        fair = self._fair.get(port)
        if fair is None:
            fair = self._fair[port] = FairQueue()
        shared = now < self._shared_until.get(port, 0.0)
        recvmsg = sock.recvmsg
        counters = self.counters
        is_own = self.policy.is_own
        for _ in range(READ_BATCH if shared else SOLO_READ_AHEAD - len(fair)):
            try:
                item = recvmsg(RECV_SIZE, ANC_SIZE)
            except OSError:  # BlockingIOError: empty; any other: try at the next wake-up
                break
            source = item[3][0]
            if is_own(source):
                # Our own copy looped back (rule 2): not a source to be fair to; one outcome.
                counters.count_received(item[0], ancillary_ifindex(item[1]))
                counters.dropped["own_packet"] += 1
                continue
            lost = fair.push(source, item, len(item[0]))
            if lost is not None:
                # Over its share: one outcome, counted here, before any costly work.
                counters.count_received(lost[0], ancillary_ifindex(lost[1]))
                counters.dropped["fair_share"] += 1
        if fair.sources > 1:
            self._shared_until[port] = now + FAIR_HOLD
        turn = fair.take(FAIR_TURN)
        if fair and port not in self._turns:
            self._turns.add(port)
            self._loop.call_soon(self._next_turn, sock, port)
        return turn

    def _next_turn(self, sock: socket.socket, port: int) -> None:
        self._turns.discard(port)
        if sock.fileno() >= 0:  # not closed meanwhile
            self._on_broadcast(sock, port)

    # --- send --------------------------------------------------------------------------------

    def _send_copy(self, copy: Copy, player: Address, port: int, ingress: int, now: float) -> bool:
        """Send one copy; False only when no flow socket could be had for it (rewrite mode).

        A copy the kernel refuses was still attempted (True): counted as a send error.
        """
        egress = copy.egress
        try:
            preserve = self.policy.settings.source_mode is SourceMode.PRESERVE
            flow = None
            if preserve:
                source = player
            else:
                flow = self._flow(player, ingress, egress, port, now)
                if flow is None:
                    return False
                source = flow.source  # the flow socket takes the answers
            link = self._link.get(egress.index)
            if link is not None and copy.dst == egress.broadcast:
                # Straight to the device: not looped back to our own sockets (open_link).
                sock, head = link
                for packet in self._packets(copy, source, port):
                    sock.send(head + packet)
            elif flow is not None:
                if flow.ttl != copy.ttl:  # also a new flow's first copy (ttl 0)
                    flow.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, copy.ttl)
                    flow.ttl = copy.ttl
                flow.sock.sendto(copy.payload, (copy.dst, port))
            else:
                raw = self._raw.get(egress.index)
                if raw is None:
                    self.counters.send_errors[(egress.name, "NO_SOCKET")] += 1
                    return True
                for packet in self._packets(copy, player, port):
                    raw.sendto(packet, (copy.dst, 0))
        except BlockingIOError:
            self.counters.send_errors[(egress.name, "EAGAIN")] += 1
        except OSError as exc:
            self.counters.send_errors[(egress.name, _errno_name(exc))] += 1
        else:
            self.counters.copies[egress.name] += 1
        return True

    def _packets(self, copy: Copy, source: Address, port: int) -> list[bytes]:
        """``copy`` as IPv4 packets from ``source``, fragmented to its egress's MTU."""
        self._ident = (self._ident + 1) & 0xFFFF
        return build_ip_udp(
            source,
            (copy.dst, port),
            copy.payload,
            ttl=copy.ttl,
            ident=self._ident,
            mtu=copy.egress.mtu,
            tos=self.policy.settings.dscp_mark << 2,  # as the fast path's (mixed bridges)
        )

    def _open_raw(self, egress: Egress) -> socket.socket | None:
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        try:
            raw.setblocking(False)
            raw.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, egress.name.encode())
        except OSError as exc:
            raw.close()
            logger.warning("cannot send on %s: %s", egress.name, exc)
            return None
        return raw

    @staticmethod
    def _bound_udp(name: str, address: str, tos: int) -> socket.socket:
        """A UDP socket bound to ``address`` on device ``name``, sending with TOS ``tos``.

        Raises:
            OSError: no descriptor left, or the kernel refused the device or address.
        """
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, name.encode())
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            sock.bind((address, 0))
        except OSError:
            sock.close()
            raise
        return sock

    # --- rewrite-mode flow table -------------------------------------------------------------

    def _flow(
        self, player: Address, ingress: int, egress: Egress, port: int, now: float
    ) -> _Flow | None:
        key = (player, egress.index)
        admission = self._table.admit(key, now)
        self._evict(admission.evicted)  # before opening: the descriptors come back first
        if not admission.created:
            return self._flows[key]
        try:
            # Marked like the fast path's copies, so no fast-path bridge on the same
            # segments fans them out again (mixed bridges).
            sock = self._bound_udp(egress.name, egress.address, self.policy.settings.dscp_mark << 2)
        except OSError as exc:
            self._table.remove(key)
            no_fd = exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
            reason = "no_fd" if no_fd else "socket_error"
            self.counters.flows_refused[reason] += 1
            if self.counters.flows_refused[reason] == 1:  # once per reason: this can be a flood
                logger.warning("cannot open a flow socket on %s: %s", egress.name, exc)
            return None
        flow = _Flow(player, ingress, egress, port, sock, source=sock.getsockname())
        self._flows[key] = flow
        self._loop.add_reader(sock.fileno(), self._on_flow, flow)
        return flow

    def _evict(self, evicted: tuple[tuple[FlowKey, str], ...]) -> None:
        for key, reason in evicted:
            self.counters.flows_evicted[reason] += 1
            flow = self._flows.get(key)
            if flow is None:
                continue
            # An answer may already be waiting in the socket (a flood evicts a flow within
            # milliseconds): pass it on before closing, or the player never sees it.
            self._on_flow(flow)
            self._close_flow(key)

    def _on_flow(self, flow: _Flow) -> None:
        """A host answered a relayed copy: pass it to the player through a return socket."""
        now = self._loop.time()
        for _ in range(MAX_PER_WAKEUP):
            try:
                data, host = flow.sock.recvfrom(RECV_SIZE)
            except BlockingIOError:
                return
            except OSError:
                return
            host_addr: Address = (host[0], host[1])
            self._table.touch(flow.key, now)
            # Arrived on the egress the copy left by; counted like a broadcast (module rule).
            self.counters.count_received(data, flow.egress.index)
            if self.inspector is not None:
                self.inspector.inspect(
                    data,
                    transport="udp",
                    host=f"{host[0]}:{host[1]}",
                    source=host_addr,
                    now=now,
                    dp8_context=is_dp8_port(flow.port),
                )
            ret = self._return(flow, host_addr, now)
            if ret is None:
                self.counters.dropped["flow_limit"] += 1
                continue
            self.counters.relayed += 1
            try:
                ret.sock.sendto(data, flow.player)
                self.counters.replies += 1
            except OSError as exc:
                self.counters.send_errors[("return", _errno_name(exc))] += 1
            else:
                self._table.answered(flow.key, now)

    def _return(self, flow: _Flow, host: Address, now: float) -> _Return | None:
        key = (flow.player, flow.egress.index, host)
        ret = self._returns.get(key)
        if ret is not None:
            ret.last_used = now
            return ret
        address = self._addresses.get(flow.ingress)
        if address is None or len(self._returns) >= self._table.limits.max_returns:
            return None
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        except OSError:  # EMFILE/ENFILE: as full as max_returns, and must not escape the loop
            return None
        try:
            sock.setblocking(False)
            sock.bind((address, 0))
        except OSError:
            sock.close()
            return None
        ret = _Return(flow, host, sock, now)
        self._returns[key] = ret
        flow.returns.add(key)
        self._loop.add_reader(sock.fileno(), self._on_return, ret)
        return ret

    def _on_return(self, ret: _Return) -> None:
        """The player talks back (e.g. joins): forward to the host from the flow socket."""
        now = self._loop.time()
        for _ in range(MAX_PER_WAKEUP):
            try:
                data, src = ret.sock.recvfrom(RECV_SIZE)
            except BlockingIOError:
                return
            except OSError:
                return
            self.counters.count_received(data, ret.flow.ingress)
            if (src[0], src[1]) != ret.flow.player:
                self.counters.dropped["return_not_player"] += 1
                continue
            ret.last_used = now
            # Two-way: the player got the answer and talks back, so the flow is proven.
            self._evict(self._table.confirmed(ret.flow.key, now))
            self.counters.relayed += 1
            try:
                ret.flow.sock.sendto(data, ret.host)
            except OSError as exc:
                self.counters.send_errors[(ret.flow.egress.name, _errno_name(exc))] += 1

    def _close_flow(self, key: FlowKey) -> None:
        flow = self._flows.pop(key)
        self._table.remove(key)
        for rkey in list(flow.returns):
            self._close_return(rkey)
        self._loop.remove_reader(flow.sock.fileno())
        self._closed_drops += socket_drop_count(flow.sock)
        flow.sock.close()

    def _close_return(self, key: tuple[Address, int, Address]) -> None:
        ret = self._returns.pop(key)
        ret.flow.returns.discard(key)
        self._loop.remove_reader(ret.sock.fileno())
        self._closed_drops += socket_drop_count(ret.sock)
        ret.sock.close()


def raw_sockets_allowed() -> bool:
    """True when this process may open raw sockets (CAP_NET_RAW): preserve mode works."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW).close()
    except OSError:
        return False
    return True


def ip_forward_enabled(read: Callable[[], str] | None = None) -> bool:
    """Whether this box routes IPv4 (needed for hosts' replies to players in preserve mode)."""
    try:
        text = read() if read else open("/proc/sys/net/ipv4/ip_forward").read()  # noqa: PTH123, SIM115
    except OSError:
        return False
    return text.strip() == "1"
