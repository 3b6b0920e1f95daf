"""The IPX endpoint (``IpxEndpoint``): the tunnel's UDP socket around ``policy.switch.IpxSwitch``.

Only bytes and timers move here (aioquic ``asyncio/protocol.py`` style):

* ``add_reader`` plus a drain loop: each wake-up reads datagrams until the socket is empty
  (bounded per wake-up so timers still run). CPython's ``DatagramProtocol`` reads one datagram
  per wake-up, about half the throughput (docs/architecture.md B5).
* Under heavy load the reader is set aside and the socket drained on a 2 ms timer instead
  (``policy/pacing.py``): a wake-up per packet costs a third of the Python time per packet.
* Sends are non-blocking: all copies of a packet in one ``sendmmsg`` (``io/mmsg.py``; one
  ``sendto`` per copy where the probe finds no ``sendmmsg``). ``EAGAIN`` and every other errno
  are counted per copy by errno name and the copy is dropped: there is no send queue to grow
  without bound (docs/reliability.md item 5).
* ``WireError`` never escapes: the policy turns malformed datagrams into counted drops. Nor
  does anything else: the work on each datagram is guarded, and an unexpected exception is a
  counted drop (``internal_error``) with one traceback logged a minute (``fault``).
"""

import asyncio
import errno
import logging
import socket
from collections import Counter, deque
from collections.abc import Callable, Iterator
from time import perf_counter
from typing import Any, Final

from ipxbridge.errors import StartupError
from ipxbridge.io.mmsg import RECV_BATCH, errno_name, receiver_for, sender_for
from ipxbridge.io.segments import Rfc1234Port, SegmentPort, accepted
from ipxbridge.io.sockstats import socket_drop_count
from ipxbridge.obs.counters import TUNNEL, IpxCounters, LatencyHistogram
from ipxbridge.obs.logging import RateLimiter
from ipxbridge.policy.bridges import WATCH_WINDOW
from ipxbridge.policy.connections import is_connection
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.pacing import TIMED, WAKEUP, ReadPacer
from ipxbridge.policy.switch import Address, Decision, IpxSwitch, Outcome, Port, Segment
from ipxbridge.wire.directplay import DPlayKind, classify
from ipxbridge.wire.ipx import HEADER_LEN, SOCKET_DPLAY_DISCOVERY, IpxHeader, dosbox_node
from ipxbridge.wire.uplink import UPLINK_NODE
from ipxbridge.wire.websocket import binary_frame

logger = logging.getLogger(__name__)

MAX_PER_WAKEUP: Final = 512
SOCKET_BUFFER: Final = 8 << 20
# The bridge's own socket for DirectPlay probes (dynamic range 0x4000-0x7FFF).
PROBE_SOCKET: Final = 0x7A57


def open_udp_socket(host: str, port: int) -> socket.socket:
    """Bind the non-blocking IPX socket, with one clear message for the usual failures.

    Raises:
        StartupError: the port is taken or needs privileges.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        for opt, force in ((socket.SO_RCVBUF, 33), (socket.SO_SNDBUF, 32)):
            # SO_RCVBUFFORCE (33) / SO_SNDBUFFORCE (32) pass rmem_max when we hold
            # CAP_NET_ADMIN; otherwise fall back to what the sysctl allows.
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        # RFC 1234 segments are reached by subnet broadcast from this socket.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        where = f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"cannot listen on {where}/udp: address already in use "
                "(is another IPX server such as DOSBox or ipxbox running?)"
            ) from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise StartupError(
                f"cannot listen on {where}/udp: permission denied; ports below 1024 need "
                "root or CAP_NET_BIND_SERVICE (e.g. setcap cap_net_bind_service=+ep, or "
                "docker --cap-add NET_BIND_SERVICE), or choose --ipx-listen with a high port"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise StartupError(
                f"cannot listen on {where}/udp: {host} is not an address of this machine"
            ) from None
        raise StartupError(f"cannot listen on {where}/udp: {exc.strerror}") from None
    return sock


def make_server_node_lookup(sock: socket.socket) -> Callable[[Address], bytes]:
    """The bridge's own node as a given client sees it: the local address it reached + port.

    With a wildcard bind the local address depends on the route to the client, so it is
    looked up once per client with a connected throwaway socket (no packet is sent).
    """
    bound_ip, bound_port = sock.getsockname()

    def lookup(addr: Address) -> bytes:
        local_ip = bound_ip
        if local_ip == "0.0.0.0":
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                # a WebSocket connection's address carries its TCP port above the UDP range
                probe.connect((addr[0], addr[1] & 0xFFFF))
                local_ip = probe.getsockname()[0]
            except OSError:
                local_ip = "0.0.0.0"
            finally:
                probe.close()
        return dosbox_node(local_ip, bound_port)

    return lookup


class IpxEndpoint:
    """Runs an ``IpxSwitch`` on one UDP socket inside an asyncio loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket | None,
        switch: IpxSwitch,
        counters: IpxCounters,
        inspector: Inspector | None = None,
        *,
        latency: LatencyHistogram | None = None,
        coalesce: float = 0.0,
    ) -> None:
        """``coalesce``: the interval of timed drains under load in seconds; 0: never.

        Without ``sock`` it switches only what is handed to it: a room of browser players
        (app/websocket.py), whose clients are all WebSocket connections.
        """
        self._loop = loop
        self._sock = sock
        self.switch = switch
        self.counters = counters
        self.inspector = inspector
        self.latency = latency or LatencyHistogram()
        self._sample = 0
        # Interface ports (io/segments.py), by the segment the switch targets.
        self.segments: dict[Segment, SegmentPort] = {}
        # Client uplinks (io/uplink.py): the switch targets the server's address, and the
        # copy goes out of that uplink's own socket (docs/protocols.md 3.9).
        self.uplink_links: dict[Address, Callable[[bytes], bool]] = {}
        # Browser players (io/websocket.py): clients of the switch whose copies go out of
        # their WebSocket. The callable takes the copy as a frame (wire/websocket.py) and
        # says whether it was made (not dropped: its buffer full).
        self.connections: dict[Address, Callable[[bytes], bool]] = {}
        self.connection_label: tuple[str, str] = ("websocket", "bridge")
        # Switch events of those clients (registered, left...): the rooms' to tell.
        self.connection_events: Callable[[str, Address, bytes], None] | None = None
        self._event_log = RateLimiter(rate=2.0, burst=20)
        self._drop_log = RateLimiter(rate=5.0, burst=20)  # per-packet lines: debug only
        self._fault_log = RateLimiter(rate=1 / 60, burst=1)  # tracebacks: one a minute
        # Rule 8's delivery watch (policy/bridges.DeliveryWatch): a timer while anything is
        # watched, and a line a minute at most for the copies other bridges did not make.
        self._watch_timer: asyncio.TimerHandle | None = None
        self._missing_log = RateLimiter(rate=1 / 60, burst=1)
        self._missing: Counter[Segment] = Counter()
        # Client and uplink events as (source, kind, address) for the status page, kept
        # whether or not the log's rate limit lets them through; its owner drains it.
        self.event_tap: deque[tuple[str, str, Address]] | None = None
        # sendmmsg and recvmmsg when the probe found them, else sendto/recvfrom (io/mmsg.py)
        self._sender = sender_for(sock) if sock is not None else None
        self._receiver = receiver_for(sock) if sock is not None else None
        # Wake-up per datagram, or timed drains under load (policy/pacing.py)
        self.pacer = ReadPacer(coalesce)
        self._drain_timer: asyncio.TimerHandle | None = None
        # id(target list) -> [the list, copies of each target, bytes of each] (settle_books)
        self._owed: dict[int, list[Any]] = {}

    @property
    def address(self) -> Address:
        """The bound address."""
        host, port = self.sock.getsockname()
        return (host, port)

    def kernel_drops(self) -> int:
        """Datagrams the kernel dropped at this socket (receive buffer full).

        One getsockopt (SO_MEMINFO), cheap enough for every tick, where the log watches it.
        """
        return socket_drop_count(self._sock) if self._sock is not None else 0

    def start(self) -> None:
        """Begin reading (the owner calls ``tick`` once a second)."""
        if self._sock is not None:
            self._loop.add_reader(self.sock.fileno(), self._on_readable)

    def close(self) -> None:
        """Stop reading and close the socket."""
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        if self._watch_timer is not None:
            self._watch_timer.cancel()
            self._watch_timer = None
        if self._sock is not None:
            self._loop.remove_reader(self.sock.fileno())
            self._sock.close()

    @property
    def sock(self) -> socket.socket:
        """The tunnel's socket (RFC 1234 segments send through it)."""
        assert self._sock is not None  # noqa: S101 - only a room has none, and no segment
        return self._sock

    def now(self) -> float:
        """The loop's clock, as the switch takes it."""
        return self._loop.time()

    def _send(self, packet: bytes, addr: Port) -> None:
        self._send_many(packet, (addr,))

    def _send_many(
        self, packet: bytes, targets: tuple[Port, ...], client_packet: bytes | None = None
    ) -> None:
        """Every copy out of the tunnel socket in one batch (``io/mmsg.py``); counted once.

        A segment target goes to its port, which counts its own copies (frames per framing,
        datagrams per peer). ``client_packet``: what DOSBox-protocol clients get instead
        (policy/switch.py rule 10).
        """
        switch = self.switch
        peers = switch.peers
        uplinks = switch.uplinks
        links = self.uplink_links
        conns = self.connections
        counters = self.counters
        client_of = switch.clients.get
        if client_packet is None and not (peers or uplinks or links or conns or switch.segments):
            # Only DOSBox clients can be targets: one batch, every copy a dosbox copy.
            assert self._sender is not None  # noqa: S101 - a room always has connections
            refused = self._sender.send(packet, targets)  # type: ignore[arg-type]
            for _, code in refused:
                counters.send_errors[(*_DOSBOX, errno_name(code))] += 1
            sent = len(targets) - len(refused)
            if sent:
                size = len(packet)
                counters.copies_sent += sent
                counters.bytes_sent += sent * size
                counters.port_copies[_DOSBOX] += sent
                if not refused:
                    # Each client's books (status page), owed per target list and settled
                    # when read: a broadcast's 15 increments cost about 2 µs a packet.
                    # The entry holds the list, so its id names no other list meanwhile.
                    owed = self._owed.get(id(targets))
                    if owed is None:
                        if len(self._owed) >= _MAX_OWED:
                            self.settle_books()
                        owed = self._owed[id(targets)] = [targets, 0, 0]
                    owed[1] += 1
                    owed[2] += size
                    return
                failed = {index for index, _ in refused}
                for index, addr in enumerate(targets):
                    if index in failed:
                        continue
                    if (client := client_of(addr)) is not None:  # type: ignore[arg-type]
                        client.tx_packets += 1
                        client.tx_bytes += size
            return
        clients = switch.clients if client_packet is not None else None
        main: list[Address] = []
        alt: list[Address] = []
        to_uplinks = 0
        to_conns: list[Address] = []
        for addr in targets:
            if isinstance(addr, Segment):
                port = self.segments.get(addr)
                if port is not None:
                    port.send(packet, packet[10:16])  # destination node, docs/protocols.md 3.1
            elif conns and addr in conns:
                to_conns.append(addr)
            elif links and addr in links:
                to_uplinks += links[addr](packet)  # a client uplink's own socket
            elif clients is not None and addr in clients:
                alt.append(addr)
            else:
                main.append(addr)
        sent = to_peers = 0
        if to_conns:
            self._to_connections(to_conns, client_packet or packet)
        for batch, payload in ((main, packet), (alt, client_packet)):
            if not batch or payload is None or self._sender is None:
                continue
            refused = self._sender.send(payload, batch)
            failed = {index for index, _ in refused}
            for index, code in refused:
                port_kind = _PEER if batch[index] in peers else _DOSBOX
                counters.send_errors[(*port_kind, errno_name(code))] += 1
            for index, addr in enumerate(batch):
                if failed and index in failed:
                    continue
                if uplinks and addr in uplinks:
                    to_uplinks += 1  # an uplink client of ours, through the tunnel socket
                    continue
                sent += 1
                if peers and (peer := peers.get(addr)) is not None:
                    to_peers += 1
                    peer.tx_packets += 1  # its books (status page)
                    peer.tx_bytes += len(packet)
                elif (client := client_of(addr)) is not None:  # its books (status page)
                    client.tx_packets += 1
                    client.tx_bytes += len(payload)
        if to_uplinks:
            counters.copies_sent += to_uplinks
            counters.bytes_sent += to_uplinks * len(packet)
            counters.port_copies[UPLINK_LABEL] += to_uplinks
        if sent:
            # Copies per port (dosbox or peer), as the interface ports count theirs.
            counters.copies_sent += sent
            counters.bytes_sent += sent * len(packet)
            counters.port_copies[_DOSBOX] += sent - to_peers
            if to_peers:
                counters.port_copies[_PEER] += to_peers

    def _to_connections(self, addrs: list[Address], payload: bytes) -> None:
        """A copy to each of these browser players (io/websocket.py), framed once.

        A copy not made is counted as ``queue_full``: that player's buffer was full, it
        reads too slowly.
        """
        frame = binary_frame(payload)
        conns = self.connections
        client_of = self.switch.clients.get
        size = len(payload)
        made = 0
        for addr in addrs:
            if conns[addr](frame):
                made += 1
                if (client := client_of(addr)) is not None:  # its books (status page)
                    client.tx_packets += 1
                    client.tx_bytes += size
        counters = self.counters
        if made:
            counters.copies_sent += made
            counters.bytes_sent += made * size
            counters.port_copies[self.connection_label] += made
        if made < len(addrs):
            counters.copies_dropped[(*self.connection_label, "queue_full")] += len(addrs) - made

    def settle_books(self) -> None:
        """Add the copies owed to each client's books (``_send_many``); before reading them.

        Settled every tick too, so a client that leaves and registers again at the same
        address within the second may be booked copies its predecessor got.
        """
        client_of = self.switch.clients.get
        for targets, packets, size in self._owed.values():
            for addr in targets:
                if (client := client_of(addr)) is not None:
                    client.tx_packets += packets
                    client.tx_bytes += size
        self._owed.clear()

    def _read_batches(self) -> Iterator[tuple[bytes, Address]]:
        """Up to ``MAX_PER_WAKEUP`` datagrams, a ``recvmmsg`` batch at a time (io/mmsg.py).

        A short batch means the socket is empty: no further call to find that out. A read
        error (e.g. a queued ICMP error, no datagram of ours) is counted and ends the wake-up.
        """
        assert self._receiver is not None  # noqa: S101 - only a socket is read
        recv = self._receiver.recv
        left = MAX_PER_WAKEUP
        while left > 0:
            batch, error = recv()
            yield from batch
            if error:
                self.counters.recv_errors += 1
                return
            if len(batch) < RECV_BATCH:
                return
            left -= len(batch)

    def _on_readable(self) -> None:
        """The socket woke the loop: read it dry, then ask whether to wait on it again."""
        count = self._drain()
        counters = self.counters
        counters.reads[WAKEUP] += 1
        counters.read_datagrams[WAKEUP] += count
        if self.pacer.woken(count, self._loop.time()):
            # Heavy load: stop waiting on the socket, drain it on a timer (policy/pacing.py).
            self._loop.remove_reader(self.sock.fileno())
            self._drain_timer = self._loop.call_later(self.pacer.interval, self._on_timer)

    def _on_timer(self) -> None:
        """A timed drain: read what arrived since the last one, then carry on or wait."""
        self._drain_timer = None  # close() cancels a pending one
        loop = self._loop
        started = loop.time()
        count = self._drain()
        counters = self.counters
        counters.reads[TIMED] += 1
        counters.read_datagrams[TIMED] += count
        if self.pacer.drained(count, loop.time()):
            # One interval from this drain's start, not its end: a datagram waits at most
            # the interval (and the loop's timer resolution), however long a drain takes.
            # A drain that hit the cap left datagrams behind: the next one at once.
            when = started if count >= MAX_PER_WAKEUP else started + self.pacer.interval
            self._drain_timer = loop.call_at(when, self._on_timer)
        else:
            loop.add_reader(self.sock.fileno(), self._on_readable)

    def _drain(self) -> int:
        """Switch every datagram waiting (up to ``MAX_PER_WAKEUP``); returns how many."""
        count = 0
        switch = self.switch
        counters = self.counters
        apply = self._apply
        clients = switch.clients
        peers = switch.peers
        udp_segments = bool(switch.segments)
        now = self._loop.time()
        for data, addr in self._read_batches():
            count += 1
            label = _DOSBOX
            booked = False
            try:
                self._sample = (self._sample + 1) & 15
                started = perf_counter() if self._sample == 0 else 0.0
                decision = switch.handle(data, addr, now)
                # The port it came in on, for the books per port.
                if addr in peers:
                    label = _PEER
                elif (switch.uplinks and addr in switch.uplinks) or data[10:16] == UPLINK_NODE:
                    label = UPLINK_LABEL  # authenticated, or its handshake (3.9)
                elif udp_segments and addr not in clients:
                    segment = switch.udp_segment_for(addr[0])
                    port = self.segments.get(segment) if segment is not None else None
                    if isinstance(port, Rfc1234Port):
                        label = port.label
                        _learn_links(port, decision, data, addr, now)
                # Booked once its port is known; _apply books the outcome before sending.
                counters.received += 1
                counters.received_bytes += len(data)
                counters.port_received[label] += 1
                booked = True
                apply(decision, data, label, addr, now, started)
            except Exception as exc:  # noqa: BLE001 - a bug must cost one datagram, not the reader
                self.fault(label, len(data), exc, booked=booked)
        self._log_events()
        return count

    def ingest(
        self,
        segment: Segment,
        data: bytes,
        *,
        via: object = None,
        sender: object = None,
        label: tuple[str, str] | None = None,
    ) -> Decision:
        """One IPX packet from an interface port (``io/segments.py``): switched and counted.

        ``label`` is the port's (kind, interface) for the books, built once by the port:
        a key with a StrEnum in it costs a Python-level hash per packet. Never raises: an
        unexpected exception is a ``fault``, and the packet an ``internal_error`` drop.
        """
        if label is None:
            label = (str(segment.kind), segment.interface)
        decision = _INTERNAL_ERROR
        booked = False
        try:
            now = self._loop.time()
            self._sample = (self._sample + 1) & 15
            started = perf_counter() if self._sample == 0 else 0.0
            decision = self.switch.handle_segment(segment, data, now, via=via, sender=sender)
            counters = self.counters
            counters.received += 1
            counters.received_bytes += len(data)
            counters.port_received[label] += 1
            booked = True
            self._apply(decision, data, label, None, now, started)
        except Exception as exc:  # noqa: BLE001 - a bug must cost one packet, not the reader
            self.fault(label, len(data), exc, booked=booked)
        return decision

    def ingest_uplink(self, server: Address, data: bytes) -> None:
        """A data datagram from a client uplink's socket (io/uplink.py): switched, counted."""
        self._ingest_from(server, data, UPLINK_LABEL)

    def ingest_connection(self, addr: Address, data: bytes) -> None:
        """One message from a browser player's WebSocket (io/websocket.py), at ``addr``.

        Switched and counted like a datagram from a DOSBox client.
        """
        self._ingest_from(addr, data, self.connection_label)

    def _ingest_from(self, addr: Address, data: bytes, label: tuple[str, str]) -> None:
        """A datagram from ``addr`` that did not come off the tunnel socket.

        Switched and counted under ``label``'s port; a bug costs this packet only (``fault``).
        """
        booked = False
        try:
            now = self._loop.time()
            decision = self.switch.handle(data, addr, now)
            counters = self.counters
            counters.received += 1
            counters.received_bytes += len(data)
            counters.port_received[label] += 1
            booked = True
            self._apply(decision, data, label, addr, now, 0.0)
        except Exception as exc:  # noqa: BLE001 - a bug must cost one packet, not the reader
            self.fault(label, len(data), exc, booked=booked)

    def book_control(self, label: tuple[str, str], size: int) -> None:
        """A control datagram consumed outside the switch (a client uplink's handshake)."""
        counters = self.counters
        counters.received += 1
        counters.received_bytes += size
        counters.port_received[label] += 1
        counters.control += 1
        counters.port_outcomes[(*label, "control", "")] += 1

    def reject(self, kind: str, interface: str, size: int, reason: str) -> None:
        """A frame or datagram an interface port could not decode: received and dropped."""
        counters = self.counters
        counters.received += 1
        counters.received_bytes += size
        counters.port_received[(kind, interface)] += 1
        counters.dropped[reason] += 1
        counters.port_outcomes[(kind, interface, "dropped", reason)] += 1

    def fault(self, label: tuple[str, str], size: int, exc: Exception, *, booked: bool) -> None:
        """An unexpected exception ``exc`` while handling one datagram from ``label``'s port.

        A datagram not yet booked is booked as dropped (``internal_error``); one already
        booked keeps its outcome, and the copies it may have lost are counted
        (``copies_dropped``, under the port it came in on). Logged with the traceback at most
        once a minute: a stranger who found such a bug must not be able to fill the log.
        """
        if booked:
            self.counters.copies_dropped[(*label, "internal_error")] += 1
        else:
            self.reject(label[0], label[1], size, "internal_error")
        limiter = self._fault_log
        if limiter.allow(self._loop.time()):
            missed, limiter.suppressed = limiter.suppressed, 0
            logger.error(
                "internal error on a packet from %s %s (counted as internal_error; "
                "%d more since the last one logged)",
                label[0],
                label[1],
                missed,
                exc_info=exc,
            )

    def _apply(  # noqa: PLR0917 - the hot path: positional on purpose
        self,
        decision: Decision,
        data: bytes,
        label: tuple[str, str],
        addr: Address | None,
        now: float,
        started: float,
    ) -> None:
        """Send what the switch decided and count it, overall and for the ingress port."""
        counters = self.counters
        outcome = decision.outcome
        if outcome is Outcome.FORWARDED:
            counters.forwarded += 1
            counters.forward_kinds[decision.detail] += 1
            counters.port_outcomes[(*label, "forwarded", "")] += 1
            packet = decision.packet
            assert packet is not None  # noqa: S101 - invariant of Outcome.FORWARDED
            self._send_many(packet, decision.targets, decision.client_packet)
            if decision.held:
                counters.held_unverified += decision.held
            if decision.repeats:
                counters.held_repeat += decision.repeats
        elif outcome is Outcome.CONTROL:
            counters.control += 1
            if decision.detail == "batch":
                counters.port_outcomes[(*label, "control", "batch")] += 1
                self._apply_batch(decision, label, addr, now, started)
            else:
                counters.port_outcomes[(*label, "control", "")] += 1
        else:
            counters.dropped[decision.detail] += 1
            counters.port_outcomes[(*label, "dropped", decision.detail)] += 1
            counters.held_unverified += decision.held
            counters.held_repeat += decision.repeats
            debug = addr is not None and logger.isEnabledFor(logging.DEBUG)
            if debug and addr is not None and self._drop_log.allow(now):
                logger.debug("drop %s from %s:%d", decision.detail, addr[0], addr[1])
        for reply, target in decision.replies:
            self._send(reply, target)
        if self._watch_timer is None and self.switch.watch.pending:
            self._arm_watch()
        if started and outcome is Outcome.FORWARDED:
            self.latency.observe(perf_counter() - started)
        header = decision.header
        inspector = self.inspector
        if inspector is not None and header is not None and len(data) > HEADER_LEN:
            payload = memoryview(data)[HEADER_LEN:]
            kind = classify(payload)
            if kind is not DPlayKind.NONE:  # the host string only for DirectPlay (most are not)
                inspector.inspect(
                    payload,
                    transport="ipx",
                    host=ipx_host(header),
                    source=("ipx", header.src_node),
                    now=now,
                    kind=kind,
                )

    def _apply_batch(
        self,
        decision: Decision,
        label: tuple[str, str],
        addr: Address | None,
        now: float,
        started: float,
    ) -> None:
        """Apply the packets of a batch (policy/switch.py rule 1) as lone packets.

        Each one is received on the batch's port, then sent, counted and inspected as a lone
        packet would be; its bytes were counted with the datagram. At most 46, and a packet
        of a batch is never a batch.
        """
        counters = self.counters
        for packet, inner in decision.inner:
            counters.received += 1
            counters.port_received[label] += 1
            self._apply(inner, packet, label, addr, now, started)

    def probe(self, payload: bytes) -> int:
        """Broadcast a DirectPlay probe to every client on the discovery socket 0xA57F."""
        switch = self.switch
        packets = switch.probe_packets(
            SOCKET_DPLAY_DISCOVERY, PROBE_SOCKET, payload, self._loop.time()
        )
        self.counters.held_unverified += len(switch.clients) + len(switch.segments) - len(packets)
        for packet, addr in packets:
            self._send(packet, addr)
        return len(packets)

    def announce(self) -> None:
        """Send the bridge's beacons now (a port just opened: policy/bridges.py rule 8)."""
        for packet, port in self.switch.beacons(self._loop.time()):
            self._send(packet, port)

    def tick(self, now: float) -> None:
        """The switch's timers: keepalives, probes, expiry (``IpxSwitch.tick``)."""
        self.settle_books()
        for packet, port in self.switch.tick(now):
            self._send(packet, port)
        self._log_missing(now)
        self._log_events()
        if self._event_log.suppressed:
            logger.warning("%d client events not logged (rate limit)", self._event_log.suppressed)
            self._event_log.suppressed = 0

    def _arm_watch(self) -> None:
        """Send what other bridges did not, once its window has passed (rule 8)."""
        if self._watch_timer is None and self.switch.watch.pending:
            self._watch_timer = self._loop.call_later(WATCH_WINDOW, self._watch_fire)

    def _watch_fire(self) -> None:
        self._watch_timer = None
        now = self._loop.time()
        for packet, port in self.switch.watch_due(now):
            self._send(packet, port)
        self._log_missing(now)
        self._arm_watch()

    def _log_missing(self, now: float) -> None:
        """Say, at most once a minute, where another bridge failed to deliver (rule 8)."""
        self._missing.update(self.switch.watch.take_missing())
        if not self._missing or not self._missing_log.allow(now):
            return
        where = "; ".join(
            f"{segment}: {n} (bridges trusted there: "
            f"{', '.join(b.hex() for b in self.switch.bridges_on(segment)) or 'none now'})"
            for segment, n in sorted(self._missing.items(), key=lambda item: str(item[0]))
        )
        logger.warning(
            "broadcasts left to another bridge did not appear on its segment within %.1f s, "
            "so this bridge sent them itself: %s (ipxbridge_ipx_delegated_total"
            '{outcome="missing"})',
            WATCH_WINDOW,
            where,
        )
        self._missing.clear()

    def _log_events(self) -> None:
        now = self._loop.time()
        uplink_server = self.switch.uplink_server
        if uplink_server is not None and uplink_server.events:
            for up in uplink_server.pop_events():
                if self.event_tap is not None:
                    self.event_tap.append(("uplink", up.kind, up.addr))
                if self._event_log.allow(now):
                    what = _UPLINK_EVENTS.get(up.kind, up.kind)
                    logger.info("uplink client %s:%d %s", up.addr[0], up.addr[1], what)
        tap = self.event_tap
        for event in self.switch.pop_events():
            if is_connection(event.addr):
                # A browser player: the listener tells its joins and leaves (io/websocket.py)
                if self.connection_events is not None:
                    self.connection_events(event.kind, event.addr, event.node)
                continue
            if tap is not None:
                tap.append(("dosbox", event.kind, event.addr))
            if not self._event_log.allow(now):
                continue
            ip, port = event.addr
            node = event.node.hex(":")
            if event.kind == "registered":
                logger.info("client %s:%d registered as node %s", ip, port, node)
            elif event.kind == "reregistered":
                logger.debug("client %s:%d registered again (node %s)", ip, port, node)
            elif event.kind == "rejoined":
                keyed = self.switch.settings.node_assignment == "keyed"
                logger.info(
                    "client %s:%d rejoined as node %s (registered before a restart or an "
                    "expiry; %s)",
                    ip,
                    port,
                    node,
                    "its keyed node proves it" if keyed else "unverified until it answers a probe",
                )
            elif event.kind == "verified":
                logger.debug("client %s:%d proved it receives at its address: verified", ip, port)
            elif event.kind == "evicted":
                logger.info(
                    "client %s:%d never proved it receives at its address; removed to make "
                    "room for a newcomer",
                    ip,
                    port,
                )
            elif event.kind == "shutdown":
                logger.info("client %s:%d sent shutdown, disconnected", ip, port)
            elif event.kind == "not_allowed":
                logger.info("client %s:%d is outside ipx.clients_allow now, dropped", ip, port)
            else:
                logger.info("client %s:%d idle, expired", ip, port)


def _learn_links(
    port: Rfc1234Port, decision: Decision, data: bytes, addr: Address, now: float
) -> None:
    """Where the RFC 1234 host behind a datagram is, if the switch accepted its packets."""
    if decision.detail == "batch":  # as from lone packets
        for packet, one in decision.inner:
            if accepted(one):
                port.links.learn(packet[22:28], addr, now)  # source node, docs/protocols.md 3.1
    elif accepted(decision):
        port.links.learn(data[22:28], addr, now)


# A packet whose handling failed before the switch decided (``IpxEndpoint.fault``).
_INTERNAL_ERROR: Final = Decision(Outcome.DROPPED, "internal_error")
_DOSBOX: Final = ("dosbox", TUNNEL)  # the tunnel socket: DOSBox clients (and strangers)
_PEER: Final = ("peer", TUNNEL)  # the tunnel socket: static RFC 1234 peers
_MAX_OWED: Final = 1024  # target lists owed books before they are settled early
# Uplinks (docs/protocols.md 3.9), either end: the tunnel socket's uplink clients and the
# client uplinks' own sockets.
UPLINK_LABEL: Final = ("uplink", TUNNEL)
_UPLINK_EVENTS: Final = {
    "accepted": "authenticated: its network is connected",
    "rejected": "sent a wrong password: rejected",
    "short_challenge": "sent a challenge under 64 bytes: not answered",
    "closed": "closed the connection",
    "expired": "silent for the idle timeout: disconnected",
}


def ipx_host(header: IpxHeader) -> str:
    """An IPX source address as Wireshark prints it, ``network.node:socket``."""
    return f"{header.src_net.hex()}.{header.src_node.hex()}:{header.src_socket:04x}"
