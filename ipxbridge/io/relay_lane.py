"""The relay's hot path: each relay port read by a thread of its own, copies sent at once.

Why it looks the way it does (issue 15; ``bench/relay_bench.py``, one interleaved run, the
relay pinned to one CPU): a deliberately naive raw-socket loop relayed 2.5 to 3 times as many
broadcasts as this bridge did in Python, at half its latency. Measured, one change at a time:

* **A thread blocks in ``recvmsg``**, as the naive loop does. Waking asyncio for a datagram
  (epoll, the selector, a Handle) added 11 to 14 us of latency at 1000 pps; a blocked thread
  wakes straight into the read. The GIL is released while it waits, so the event loop runs
  as before; everything the thread touches is guarded by the relay's lock (``BroadcastRelay.
  lock``), and what must happen on the loop (inspection, flow sockets' readers, closing an
  evicted flow) is handed to it.
* **Preserve-mode copies to an Ethernet egress are whole frames on an AF_PACKET socket.** Sent
  through IP, every broadcast copy is looped back by the kernel to the box's own sockets, so
  the relay read each copy it made a second time only to drop it (a socket filter would hide
  them, but counts them as receive errors); and the IP path costs a route lookup and the
  netfilter hooks per copy. Copies to p2p peers (unicast) still go through a raw IP socket.
* **Rules 1 to 4 are cached per (source, IP_PKTINFO bytes)** (``RelayPolicy.route``): one dict
  lookup a datagram; the rules that read the payload, TTL or clock run every time
  (``RelayPolicy.judge``). No dataclass is made per datagram; the copies are sent before
  anything is counted.
* **Inspection is sampled above ``INSPECT_PPS`` per ingress**, like the kernel fast path's: past
  that the datagram is still relayed, and counted as ``uninspected``.

Fairness between sources (``policy/fairness.py``, reliability.md R13) is kept: a datagram
that ends a wait is served at once; while more than one source has been seen lately
(``FAIR_HOLD``), what waits is read into per-source queues (at most ``READ_BATCH``), the
longest queue's excess dropped as ``fair_share`` before it costs a decision, and served
``FAIR_TURN`` at a time round robin. A lone source is served in arrival order.
"""

import contextlib
import errno
import logging
import socket
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final, Protocol

from ipxbridge.obs.counters import RelayCounters
from ipxbridge.policy.dplay_inspect import INSPECT_PPS
from ipxbridge.policy.fairness import FairQueue
from ipxbridge.policy.relay import Egress, RelayPolicy, Route, SourceMode
from ipxbridge.policy.topology import ARPHRD_ETHER
from ipxbridge.wire.directplay import DPlayKind
from ipxbridge.wire.dplay8 import is_dp8_port

logger = logging.getLogger(__name__)

Address = tuple[str, int]
Datagram = tuple[bytes, list[tuple[int, int, bytes]], int, Any]  # what recvmsg returns

IP_PKTINFO: Final = 8
IP_TTL_CMSG: Final = 2
IP_TOS_CMSG: Final = 1
IPPROTO_IP: Final = socket.IPPROTO_IP
RECV_SIZE: Final = 65_535
ANC_SIZE: Final = 256
# a plain int: `flags & socket.MSG_TRUNC` goes through enum.Flag.__and__, ~5 us a datagram
MSG_TRUNC: Final = int(socket.MSG_TRUNC)
MSG_DONTWAIT: Final = int(socket.MSG_DONTWAIT)
READ_BATCH: Final = 1024  # datagrams read into the fair queues at a time at most (cheap)
# Served per turn, round robin (R13). Small, so the lane goes back to reading often: under a
# single-source flood the kernel's socket queue, which cannot tell sources apart, is what
# delays and drops a quiet player's broadcasts. bench/fairness.py, 80k pps for 60 s: 64 gave
# a 10 pps player 96.8 % and p99 165 ms (median of 5), 16 gave 99.8-100 %, 8 gave 100 %.
FAIR_TURN: Final = 8
# After a turn saw more than one source waiting, read everything for this long.
FAIR_HOLD: Final = 2.0
SOLO_READ_AHEAD: Final = 64  # with one source, read this far ahead of serving at most
ROUTE_CACHE: Final = 4096  # (source, packet info) -> route; cleared with every plan
_IP_UDP: Final = struct.Struct("!BBHHHBBH4s4sHHHH")  # IPv4 (20 bytes) and UDP (8 bytes)
_PKTINFO: Final = struct.Struct("=i4s4s")  # struct in_pktinfo: ifindex, spec_dst, addr
ETH_P_IP: Final = 0x0800
# Own copies and loop copies were inspected the first time; spoofed or invalid sources, a
# reflecting SOCKADDR and enumerations over their rate are not a player's (R7, R9).
UNINSPECTED: Final = frozenset(
    {"own_packet", "duplicate", "marked_copy", "source_invalid", "source_off_link"}
    | {"source_port_zero", "dp4_sockaddr_mismatch", "enum_rate"}
)
inet_ntoa: Final = socket.inet_ntoa
inet_aton: Final = socket.inet_aton


def ancillary_ifindex(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The ingress ifindex alone: what a datagram dropped unread needs for the books."""
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
                ifindex = _PKTINFO.unpack_from(data)[0]
                dst = inet_ntoa(data[8:12])
            elif kind == IP_TTL_CMSG and len(data) >= 4:
                ttl = data[0]  # an int in host order; TTL <= 255 (little-endian here)
            elif kind == IP_TOS_CMSG and data:
                tos = data[0]
    return ifindex, dst, ttl, tos


def ip_checksum(header: bytes) -> int:
    """The RFC 791 header checksum of ``header`` (its checksum field zero)."""
    total: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    total = (total & 0xFFFF) + (total >> 16)
    total += total >> 16
    return ~total & 0xFFFF


def build_ip_udp(
    src: Address,
    dst: Address,
    payload: bytes,
    *,
    ttl: int,
    ident: int,
    mtu: int,
    tos: int = 0,
    checksum: bool = False,
) -> list[bytes]:
    """IPv4 + UDP packets, fragmented to ``mtu``.

    The UDP checksum is 0 ("not computed", RFC 768), which every IPv4 stack accepts. The IP
    header checksum is left 0 for a raw ``IP_HDRINCL`` socket, where the kernel fills it in,
    and computed with ``checksum`` (an AF_PACKET frame). ``tos`` is the whole TOS byte.
    """
    udp = struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0) + payload
    saddr, daddr = inet_aton(src[0]), inet_aton(dst[0])
    step = len(udp) if 20 + len(udp) <= mtu else max(8, (mtu - 20) & ~7)
    packets = []
    for offset in range(0, len(udp), step):
        chunk = udp[offset : offset + step]
        more = 0x2000 if offset + step < len(udp) else 0
        header = struct.pack(
            "!BBHHHBBH4s4s",
            *(0x45, tos, 20 + len(chunk), ident, more | (offset >> 3), ttl, 17, 0, saddr, daddr),
        )
        if checksum:
            header = header[:10] + ip_checksum(header).to_bytes(2, "big") + header[12:]
        packets.append(header + chunk)
    return packets


class Sender:
    """How preserve-mode copies leave one egress: its socket and, for AF_PACKET, its frame.

    ``link`` is the Ethernet header (broadcast destination, the egress's MAC, IPv4) on an
    AF_PACKET socket, or None on a raw ``IP_HDRINCL`` socket (p2p egresses, and any link that
    is not Ethernet).
    """

    __slots__ = ("egress", "link", "sock")

    def __init__(self, egress: Egress, sock: socket.socket, link: bytes | None) -> None:
        self.egress = egress
        self.sock = sock
        self.link = link

    @classmethod
    def open(cls, egress: Egress) -> "Sender":
        """An AF_PACKET socket on a lan Ethernet egress, else a raw IP socket, bound to it.

        Raises:
            OSError: the socket cannot be opened (no CAP_NET_RAW, or the device is gone).
        """
        if egress.role == "lan":
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # send only: protocol 0
            try:
                sock.setblocking(False)
                sock.bind((egress.name, 0))
                hatype, mac = sock.getsockname()[3:5]
            except OSError:
                sock.close()
                raise
            if hatype == ARPHRD_ETHER and len(mac) == 6:
                return cls(egress, sock, b"\xff" * 6 + mac + ETH_P_IP.to_bytes(2, "big"))
            sock.close()
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, egress.name.encode())
        except OSError:
            sock.close()
            raise
        return cls(egress, sock, None)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()


class Target:
    """One copy of a cached route: where it goes and what its headers do not vary in."""

    __slots__ = ("dst", "egress", "name", "pair", "partial", "sender")

    def __init__(self, egress: Egress, dst: str, saddr: bytes, sender: Sender | None) -> None:
        self.egress = egress
        self.name = egress.name
        self.dst = dst
        self.sender = sender
        self.pair = saddr + inet_aton(dst)
        # RFC 1071: the header's sum without the words that vary per copy (length, id, TTL)
        words = struct.unpack("!4H", self.pair)
        self.partial = 0x4500 + 17 + sum(words)


class Entry:
    """A cached route (rules 1 to 4 for one source and packet info) and its copies."""

    __slots__ = ("route", "saddr", "sport", "targets")

    def __init__(self, route: Route, src: Address, targets: tuple[Target, ...]) -> None:
        self.route = route
        self.saddr = src[0]
        self.sport = src[1]
        self.targets = targets


class FlowSocket(Protocol):
    """A rewrite-mode flow as the lane uses it (``io/relay.py``): its socket, its TTL."""

    sock: socket.socket
    ttl: int


class Handoff(Protocol):
    """What the lane asks of the event loop's side of the relay (``BroadcastRelay``)."""

    def inspect_later(  # noqa: D102
        self, data: bytes, src: Address, port: int, kind: DPlayKind | None, now: float
    ) -> None: ...
    def copy_on_loop(  # noqa: D102
        self, item: Datagram, port: int, route: Route, judged: tuple[bytes, int, bool], now: float
    ) -> None: ...
    def flow_socket(self, player: Address, egress: Egress, now: float) -> FlowSocket | None: ...  # noqa: D102
    def general(self, item: Datagram, port: int, now: float) -> None: ...  # noqa: D102


class Lane:
    """The thread that reads one relay port and relays what it reads (module docstring)."""

    def __init__(  # noqa: PLR0917 - the lane's collaborators, each needed
        self,
        sock: socket.socket,
        port: int,
        policy: RelayPolicy,
        counters: RelayCounters,
        lock: threading.Lock,
        handoff: Handoff,
        *,
        clock: Callable[[], float],
    ) -> None:
        self.sock = sock
        self.port = port
        self.policy = policy
        self.counters = counters
        self.lock = lock
        self.handoff = handoff
        self.clock = clock
        self.senders: dict[int, Sender] = {}  # egress index -> sender (preserve mode)
        self.routes: OrderedDict[tuple[Any, bytes], Entry] = OrderedDict()
        self.fair: FairQueue[Datagram] = FairQueue()
        self.shared_until = 0.0
        self.last_source = ""
        self.dp8 = is_dp8_port(port)
        self._ident = 0
        self._inspect_window = 0.0
        self._inspect_left: dict[int, int] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"relay-{port}", daemon=True)

    # --- the thread ------------------------------------------------------------------------

    def start(self) -> None:
        """Start reading (the socket must be blocking)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread: a shutdown wakes its blocked read. The caller closes the socket."""
        self._stopping.set()
        # ENOTCONN on an unconnected UDP socket, yet the sleeper is woken (inet_shutdown)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def _serve(self) -> None:
        recvmsg = self.sock.recvmsg
        errors = 0
        while not self._stopping.is_set():
            try:
                item = recvmsg(RECV_SIZE, ANC_SIZE)  # waits with the GIL released
            except OSError as exc:
                if self._stopping.is_set():
                    return
                errors += 1
                if errors == 1:
                    logger.warning("relay port %d: read failed: %s", self.port, exc)
                continue
            if self._stopping.is_set():
                return
            try:
                self.arrived(item)
            except Exception:  # a bug, not a packet: say so, keep relaying
                logger.exception("relay port %d: datagram not handled", self.port)
                with self.lock:
                    self.counters.dropped["internal_error"] += 1

    def arrived(self, item: Datagram) -> None:
        """A datagram that ended a wait: serve it, then whatever waited behind it (R13)."""
        with self.lock:
            now = self.clock()
            source = item[3][0]
            # Our own copies looped back (rewrite mode) are no second source (rule 2).
            if source != self.last_source and not self.policy.is_own(source):
                if self.last_source:
                    self.shared_until = now + FAIR_HOLD  # another source: be fair a while
                self.last_source = source
            self.handle(item, now)
            shared = now < self.shared_until
        if shared:
            while self.turn(self.clock()):
                pass

    def turn(self, now: float) -> bool:
        """Read what waits into the per-source queues, serve one turn; False when all done."""
        with self.lock:
            fair, counters, is_own = self.fair, self.counters, self.policy.is_own
            recvmsg = self.sock.recvmsg
            reading = READ_BATCH if now < self.shared_until else SOLO_READ_AHEAD - len(fair)
            for _ in range(reading):
                try:
                    item = recvmsg(RECV_SIZE, ANC_SIZE, MSG_DONTWAIT)
                except OSError:  # BlockingIOError: empty
                    break
                source = item[3][0]
                if is_own(source):
                    # Our own copy looped back (rule 2): not a source to be fair to.
                    counters.count_received(item[0], ancillary_ifindex(item[1]))
                    counters.dropped["own_packet"] += 1
                    continue
                lost = fair.push(source, item, len(item[0]))
                if lost is not None:
                    # Over its share: one outcome, counted here, before any costly work.
                    counters.count_received(lost[0], ancillary_ifindex(lost[1]))
                    counters.dropped["fair_share"] += 1
            if fair.sources > 1:
                self.shared_until = now + FAIR_HOLD
            for queued in fair.take(FAIR_TURN):
                self.handle(queued, now)
            return bool(fair) and not self._stopping.is_set()

    # --- one datagram (under the lock) -------------------------------------------------------

    def forget_routes(self) -> None:
        """A new plan or new sockets: every cached route is stale (under the lock)."""
        self.routes.clear()

    def _entry(self, src: Address, pktinfo: bytes) -> Entry:
        ifindex, _spec, addr = _PKTINFO.unpack_from(pktinfo)
        route = self.policy.route(src, inet_ntoa(addr), ifindex)
        saddr = inet_aton(src[0])
        targets = tuple(
            Target(egress, dst, saddr, self.senders.get(egress.index))
            for egress, dst in route.targets
        )
        entry = Entry(route, src, targets)
        routes = self.routes
        routes[(src, pktinfo)] = entry
        if len(routes) > ROUTE_CACHE:
            routes.popitem(last=False)  # O(1), unlike a dict's front (policy/dedup.py)
        return entry

    def handle(self, item: Datagram, now: float) -> None:
        """Decide and copy one datagram; count it once (module rules; under the lock)."""
        data, anc, flags, src = item
        counters = self.counters
        policy = self.policy
        if policy.settings.kernel_fanout or len(anc) != 3:
            self.handoff.general(item, self.port, now)  # the fast path's leftovers, odd cmsgs
            return
        (_, k0, pktinfo), (_, k1, ttl_data), (_, k2, tos_data) = anc
        if k0 != IP_PKTINFO or k1 != IP_TTL_CMSG or k2 != IP_TOS_CMSG or len(pktinfo) != 12:
            self.handoff.general(item, self.port, now)
            return
        entry = self.routes.get((src, pktinfo))
        if entry is None:
            entry = self._entry((src[0], src[1]), pktinfo)
        route = entry.route
        counters.received += 1
        counters.received_bytes += len(data)
        counters.received_by_ifindex[route.ingress] += 1
        if flags & MSG_TRUNC:
            counters.dropped["truncated"] += 1
            return
        reason = route.drop_reason
        kind: DPlayKind | None = None
        if reason is None:
            ttl = ttl_data[0]
            reason, payload, kind, rewritten = policy.judge(
                route, data, entry.saddr, self.port, ttl, tos_data[0], now
            )
            if reason is None:
                if policy.settings.source_mode is SourceMode.PRESERVE:
                    self._send_preserve(entry, payload, ttl - 1)
                elif not self._send_rewrite(item, entry, payload, ttl - 1, now):
                    self.handoff.copy_on_loop(
                        item, self.port, route, (payload, ttl - 1, rewritten), now
                    )
                    return  # the loop opens the flow sockets, sends and counts
                counters.relayed += 1
                counters.sockaddr_rewrites += rewritten
        if reason is not None:
            counters.dropped[reason] += 1
            if reason in UNINSPECTED:
                return
        if kind is DPlayKind.NONE:
            return  # nothing for the inspector
        left = self._inspect_left
        if now >= self._inspect_window:
            self._inspect_window = now + 1.0
            left.clear()
        budget = left.get(route.ingress, INSPECT_PPS)
        if budget <= 0:
            counters.uninspected += 1
            return
        left[route.ingress] = budget - 1
        self.handoff.inspect_later(data, (src[0], src[1]), self.port, kind, now)

    def _send_preserve(self, entry: Entry, payload: bytes, ttl: int) -> None:
        """Copies with the player's source address and port (rule 10; raw or AF_PACKET)."""
        counters = self.counters
        port = self.port
        size = len(payload)
        tos = self.policy.settings.dscp_mark << 2  # as the fast path's (issue 11 item 7)
        for target in entry.targets:
            sender = target.sender
            if sender is None:
                counters.send_errors[(target.name, "NO_SOCKET")] += 1
                continue
            self._ident = ident = (self._ident + 1) & 0xFFFF
            try:
                if 28 + size > target.egress.mtu:
                    self._send_fragments(sender, entry, target, payload, ttl, ident)
                elif sender.link is None:  # raw IP: the kernel fills in the checksum
                    sender.sock.sendto(
                        _IP_UDP.pack(
                            *(0x45, tos, 28 + size, ident, 0, ttl, 17, 0),
                            *(target.pair[:4], target.pair[4:], entry.sport, port, 8 + size, 0),
                        )
                        + payload,
                        (target.dst, 0),
                    )
                else:
                    total = target.partial + (tos) + 28 + size + ident + (ttl << 8)
                    total = (total & 0xFFFF) + (total >> 16)
                    total += total >> 16
                    sender.sock.send(
                        sender.link
                        + _IP_UDP.pack(
                            *(0x45, tos, 28 + size, ident, 0, ttl, 17, ~total & 0xFFFF),
                            *(target.pair[:4], target.pair[4:], entry.sport, port, 8 + size, 0),
                        )
                        + payload
                    )
            except OSError as exc:
                counters.send_errors[(target.name, _errno_name(exc))] += 1
            else:
                counters.copies[target.name] += 1

    def _send_fragments(  # noqa: PLR0917 - the hot path's own pieces, per copy
        self, sender: Sender, entry: Entry, target: Target, payload: bytes, ttl: int, ident: int
    ) -> None:
        """A copy larger than the egress MTU, in fragments.

        The kernel refuses oversized ``IP_HDRINCL`` sends with EMSGSIZE; AF_PACKET never
        fragments.
        """
        packets = build_ip_udp(
            (entry.saddr, entry.sport),
            (target.dst, self.port),
            payload,
            ttl=ttl,
            ident=ident,
            mtu=target.egress.mtu,
            tos=self.policy.settings.dscp_mark << 2,
            checksum=sender.link is not None,
        )
        for packet in packets:
            if sender.link is None:
                sender.sock.sendto(packet, (target.dst, 0))
            else:
                sender.sock.send(sender.link + packet)

    def _send_rewrite(
        self, item: Datagram, entry: Entry, payload: bytes, ttl: int, now: float
    ) -> bool:
        """Copies from the player's flow sockets; False when one has none yet.

        The loop makes it: opening a socket and watching it is the loop's work.
        """
        player = (entry.saddr, entry.sport)
        flows = []
        for target in entry.targets:
            flow = self.handoff.flow_socket(player, target.egress, now)
            if flow is None:
                return False
            flows.append(flow)
        counters = self.counters
        for target, flow in zip(entry.targets, flows, strict=True):
            try:
                if flow.ttl != ttl:
                    flow.sock.setsockopt(IPPROTO_IP, socket.IP_TTL, ttl)
                    flow.ttl = ttl
                flow.sock.sendto(payload, (target.dst, self.port))
            except OSError as exc:
                counters.send_errors[(target.name, _errno_name(exc))] += 1
            else:
                counters.copies[target.name] += 1
        return True


def _errno_name(exc: OSError) -> str:
    if isinstance(exc, BlockingIOError):
        return "EAGAIN"
    return errno.errorcode.get(exc.errno or 0, "EUNKNOWN")
