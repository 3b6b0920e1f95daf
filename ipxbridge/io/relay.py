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
  sources cannot lock players out, issue 11 item 4); an evicted flow's socket is read once
  more before it is closed, so an answer already waiting there still reaches its player.
* Sockets bound to an interface are re-opened when the interface is re-created (a new index):
  an old one would return ENODEV for ever (reliability.md item 6).
* Every send error is counted per interface and errno; nothing is queued.
* The relay ports are read off the event loop, one thread each (``io/relay_lane.py``: the
  hot path, per-source fairness, and why). What must happen on the loop is handed to it
  through ``_later``: inspection, a datagram whose flow sockets must be opened first, one the
  kernel fast path left over, an evicted flow to drain and close. One lock (``lock``) guards
  the relay's state against the two threads.
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
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ipxbridge.io.relay_lane import (
    IP_PKTINFO,
    MSG_TRUNC,
    RECV_SIZE,
    UNINSPECTED,
    Datagram,
    Lane,
    Sender,
    build_ip_udp,
    parse_ancillary,
)
from ipxbridge.io.sockstats import drops_before_close, socket_drops
from ipxbridge.obs.counters import RelayCounters
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.flows import FlowKey, FlowLimits, FlowTable
from ipxbridge.policy.relay import Copy, Egress, RelayPolicy, Route, SourceMode
from ipxbridge.wire.directplay import DPlayKind
from ipxbridge.wire.dplay8 import is_dp8_port

logger = logging.getLogger(__name__)

Address = tuple[str, int]

IP_RECVTTL: Final = 12
IP_RECVTOS: Final = 13
MAX_PER_WAKEUP: Final = 256
# Work handed to the loop and not yet done, at most; past it a datagram is dropped as
# loop_backlog and an inspection skipped as uninspected (a flood of new players in rewrite
# mode must not grow a queue without bound).
MAX_LATER: Final = 4096


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
    """The relay's sockets: the lanes that read the relay ports, and the loop's side."""

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
        # Guards everything below against the lanes' threads (module docstring).
        self.lock = threading.Lock()
        self._recv: list[socket.socket] = []
        self.lanes: list[Lane] = []
        self._senders: dict[int, Sender] = {}  # egress index -> preserve-mode sender
        self._flows: dict[FlowKey, _Flow] = {}  # (player, egress index)
        self._table = FlowTable(flow_limits)  # which flows keep their socket
        self._returns: dict[tuple[Address, int, Address], _Return] = {}
        self._ident = 0
        self._addresses: dict[int, str] = {}  # egress index -> bridge address (for returns)
        self._closed_drops = 0  # kernel drops of flow and return sockets since closed
        self._later: deque[tuple[Callable[..., None], tuple[object, ...]]] = deque()
        self._later_scheduled = False

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, *, serve: bool = True) -> None:
        """Open the receive sockets and start a lane on each.

        ``serve=False`` leaves the lanes unstarted, for a test that drives one by hand.

        Raises:
            OSError: a relay port cannot be bound (the caller turns this into a clear error).
        """
        for port in self.ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
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
            lane = Lane(
                sock, port, self.policy, self.counters, self.lock, self, clock=self._loop.time
            )
            lane.senders = self._senders
            self.lanes.append(lane)
        if serve:
            for lane in self.lanes:
                lane.start()

    def kernel_drops(self) -> int | None:
        """Datagrams the kernel dropped at the relay's sockets (receive buffers full).

        Every socket it reads: the relay ports, the flow and return sockets open now, and
        those closed since (folded in at close, so the total never goes back).
        """
        with self.lock:
            socks = [*self._recv, *(f.sock for f in self._flows.values())]
            socks += [r.sock for r in self._returns.values()]
            drops = socket_drops(socks)
            return None if drops is None else drops + self._closed_drops

    def close(self) -> None:
        """Stop the lanes, then close every socket."""
        for lane in self.lanes:
            lane.stop()
        self.lanes.clear()
        with self.lock:
            for sock in self._recv:
                sock.close()
            self._recv.clear()
            for sender in self._senders.values():
                sender.close()
            self._senders.clear()
            for key in list(self._flows):
                self._close_flow(key)
            self._later.clear()  # a backlog still queued at the stop is not relayed

    def apply_plan(
        self, egresses: tuple[Egress, ...], own: frozenset[str], bcasts: dict[int, frozenset[str]]
    ) -> None:
        """Install a new plan; re-open sockets of re-created interfaces, drop vanished ones."""
        with self.lock:
            self.policy.set_plan(egresses, own, bcasts)
            current = {e.index: e for e in egresses}
            self._addresses = {e.index: e.address for e in egresses}
            for index in list(self._senders):
                if index not in current or current[index] != self._senders[index].egress:
                    self._senders.pop(index).close()
            for key, flow in list(self._flows.items()):
                new = current.get(flow.egress.index)
                if new is None or new.address != flow.egress.address or flow.ingress not in current:
                    self._close_flow(key)
            if self.policy.settings.source_mode is SourceMode.PRESERVE:
                for index, egress in current.items():
                    if index not in self._senders:
                        try:
                            self._senders[index] = Sender.open(egress)
                        except OSError as exc:
                            logger.warning("cannot send on %s: %s", egress.name, exc)
            for lane in self.lanes:
                lane.forget_routes()

    def set_window(self, seconds: float) -> None:
        """Change the loop-detection window (configuration reload)."""
        with self.lock:
            self.policy.set_window(seconds)

    def tick(self, now: float) -> None:
        """Expire idle flows and old loop records."""
        with self.lock:
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
        with self.lock:
            return self._table.unproven, self._table.proven, len(self._returns)

    # --- what the lanes hand to the loop (called by a lane, under the lock) --------------------

    def _hand_over(self, fn: Callable[..., None], *args: object) -> bool:
        """Queue ``fn(*args)`` for the loop; False when too much already waits."""
        if len(self._later) >= MAX_LATER:
            return False
        self._later.append((fn, args))
        if not self._later_scheduled:
            self._later_scheduled = True
            self._loop.call_soon_threadsafe(self._run_later)
        return True

    def _run_later(self) -> None:
        with self.lock:
            self._later_scheduled = False
            work = list(self._later)
            self._later.clear()
        for fn, args in work:
            with self.lock:
                fn(*args)

    def inspect_later(
        self, data: bytes, src: Address, port: int, kind: DPlayKind | None, now: float
    ) -> None:
        """Inspect a relayed or dropped datagram on the loop (the inspector is the loop's)."""
        if self.inspector is not None and not self._hand_over(
            self._inspect, data, src, port, kind, now
        ):
            self.counters.uninspected += 1

    def _inspect(
        self, data: bytes, src: Address, port: int, kind: DPlayKind | None, now: float
    ) -> None:
        if self.inspector is not None:
            self.inspector.inspect(
                data,
                transport="udp",
                host=f"{src[0]}:{src[1]}",
                source=src,
                now=now,
                dp8_context=is_dp8_port(port),
                kind=kind,
            )

    def general(self, item: Datagram, port: int, now: float) -> None:
        """A datagram the lane does not decide itself: the fast path's, or odd control data."""
        if not self._hand_over(self._decide, item, port, now):
            data, anc = item[0], item[1]
            self.counters.count_received(data, parse_ancillary(anc)[0])
            self.counters.dropped["loop_backlog"] += 1

    def copy_on_loop(
        self, item: Datagram, port: int, route: Route, judged: tuple[bytes, int, bool], now: float
    ) -> None:
        """Rewrite mode: a datagram (counted as received) that needs a flow socket opened.

        ``judged``: (payload to copy, TTL of the copies, SOCKADDR rewritten). Sent and
        counted on the loop, which opens sockets and watches them.
        """
        if not self._hand_over(self._copy, item, port, route, judged, now):
            self.counters.dropped["loop_backlog"] += 1

    def flow_socket(self, player: Address, egress: Egress, now: float) -> "_Flow | None":
        """The player's open flow on ``egress``, used again (None: the loop must open it)."""
        key = (player, egress.index)
        flow = self._flows.get(key)
        if flow is None:
            return None
        admission = self._table.admit(key, now)
        if admission.evicted:  # a promotion made room: drain and close those on the loop
            self._hand_over(self._evict, admission.evicted)
        return flow

    # --- on the loop (under the lock) ----------------------------------------------------------

    def _decide(self, item: Datagram, port: int, now: float) -> None:
        """Every rule through ``RelayPolicy.decide``; copies sent from here (module rules)."""
        data, anc, flags, src = item
        counters = self.counters
        ifindex, dst_ip, ttl, tos = parse_ancillary(anc)
        counters.count_received(data, ifindex)
        if flags & MSG_TRUNC:
            counters.dropped["truncated"] += 1
            return
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
                return  # our own copies and loop copies were inspected the first time
        self._inspect(data, src_addr, port, decision.kind, now)
        if reason is not None:
            return
        self._send_copies(decision.copies, src_addr, port, ifindex, now)
        counters.sockaddr_rewrites += decision.sockaddr_rewritten

    def _copy(
        self, item: Datagram, port: int, route: Route, judged: tuple[bytes, int, bool], now: float
    ) -> None:
        payload, ttl, rewritten = judged
        src = item[3]
        src_addr: Address = (src[0], src[1])
        copies = tuple(Copy(egress, dst, payload, ttl) for egress, dst in route.targets)
        if self._send_copies(copies, src_addr, port, route.ingress, now):
            self.counters.sockaddr_rewrites += rewritten
        self._inspect(item[0], src_addr, port, None, now)

    def _send_copies(
        self, copies: tuple[Copy, ...], player: Address, port: int, ingress: int, now: float
    ) -> bool:
        """Send and count one relayed datagram's copies; False when none could be sent."""
        sent = [self._send_copy(c, player, port, ingress, now) for c in copies]
        if copies and not any(sent):
            # Not one copy left (no flow socket): not relayed, whatever the policy said.
            self.counters.dropped["flow_refused"] += 1
            return False
        self.counters.relayed += 1
        return True

    def _send_copy(self, copy: Copy, player: Address, port: int, ingress: int, now: float) -> bool:
        """Send one copy; False only when no flow socket could be had for it (rewrite mode).

        A copy the kernel refuses was still attempted (True): counted as a send error.
        """
        egress = copy.egress
        try:
            if self.policy.settings.source_mode is SourceMode.PRESERVE:
                sender = self._senders.get(egress.index)
                if sender is None:
                    self.counters.send_errors[(egress.name, "NO_SOCKET")] += 1
                    return True
                self._ident = (self._ident + 1) & 0xFFFF
                for packet in build_ip_udp(
                    player,
                    (copy.dst, port),
                    copy.payload,
                    ttl=copy.ttl,
                    ident=self._ident,
                    mtu=egress.mtu,
                    tos=self.policy.settings.dscp_mark << 2,  # as the fast path's (item 7)
                    checksum=sender.link is not None,
                ):
                    if sender.link is None:
                        sender.sock.sendto(packet, (copy.dst, 0))
                    else:
                        sender.sock.send(sender.link + packet)
            else:
                flow = self._flow(player, ingress, egress, port, now)
                if flow is None:
                    return False
                if flow.ttl != copy.ttl:  # also a new flow's first copy (ttl 0)
                    flow.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, copy.ttl)
                    flow.ttl = copy.ttl
                flow.sock.sendto(copy.payload, (copy.dst, port))
        except BlockingIOError:
            self.counters.send_errors[(egress.name, "EAGAIN")] += 1
        except OSError as exc:
            self.counters.send_errors[(egress.name, _errno_name(exc))] += 1
        else:
            self.counters.copies[egress.name] += 1
        return True

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
            # segments fans them out again (issue 11 item 7).
            sock = self._bound_udp(egress.name, egress.address, self.policy.settings.dscp_mark << 2)
        except OSError as exc:
            self._table.remove(key)
            no_fd = exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
            reason = "no_fd" if no_fd else "socket_error"
            self.counters.flows_refused[reason] += 1
            if self.counters.flows_refused[reason] == 1:  # once per reason: this can be a flood
                logger.warning("cannot open a flow socket on %s: %s", egress.name, exc)
            return None
        flow = _Flow(player, ingress, egress, port, sock)
        self._flows[key] = flow
        self._loop.add_reader(sock.fileno(), self._flow_ready, flow)
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

    def _flow_ready(self, flow: _Flow) -> None:
        with self.lock:
            self._on_flow(flow)

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
        self._loop.add_reader(sock.fileno(), self._return_ready, ret)
        return ret

    def _return_ready(self, ret: _Return) -> None:
        with self.lock:
            self._on_return(ret)

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
        self._closed_drops += drops_before_close(flow.sock)
        flow.sock.close()

    def _close_return(self, key: tuple[Address, int, Address]) -> None:
        ret = self._returns.pop(key)
        ret.flow.returns.discard(key)
        self._loop.remove_reader(ret.sock.fileno())
        self._closed_drops += drops_before_close(ret.sock)
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
