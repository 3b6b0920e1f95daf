"""The IPX switch: where each datagram goes.

This module owns the forwarding rules (h11 ``_state.py`` style); it is pure: no sockets, no
clock (``now`` is a parameter), no logging. ``IpxSwitch.handle`` turns one received datagram
into a ``Decision``; ``IpxSwitch.tick`` produces beacons, keepalives and expiries.

Ports are UDP addresses of two kinds:

* **DOSBox-protocol clients** (DOSBox, DOSBox-X, dosemu2, IPXWrapper, real DOS via
  vanilla-utilities) register first (docs/protocols.md 4.2). The node each one gets is
  ``node_for(address)``: by default a keyed node (``wire.ipx.keyed_node``, rule 2), or the
  DOSBox convention, IPv4 address + UDP port (``node_assignment: address``).
* **RFC 1234 peers** are configured statically (other ipxbridges, other RFC 1234 routers).
  They need no registration. Nodes seen behind a peer are learned with an expiry.

Rules, in the order they are applied. Each rule's text stands beside the code that runs it:
here, or in the module its entry names.

1. Malformed datagrams are dropped with the codec's reason (``ipx.parse_header``).
   Batches are unpacked where they enter: an IPXWrapper coalesced batch (source socket 0,
   type 2; docs/protocols.md 6), from a client, a peer or a segment, is split
   (``wire.ipxwrapper.unpack_coalesced``) and each packet in it goes through rules 2-8 as a
   lone packet from the same port; the datagram is ``control``/``batch`` and
   ``Decision.inner`` holds what became of each packet. Why: an inner packet must not skip
   the filter, the source check, hop and duplicate control or the budgets; and ports then
   carry plain packets, which every IPXWrapper version accepts. A malformed batch is
   dropped whole with the codec's ``batch_*`` reason. A batch holds at most 1384 bytes, so
   at most 46 packets: one datagram never costs more than 46 lone packets.
2. Registration and proof of receipt: who is a client, what an unknown address may send,
   and what the bridge may send toward a client that has not proven it receives at its
   address. ``policy/clients.py`` holds the rule and runs it (``ClientTable``).
3. A client's packets must carry the source node assigned to it (``spoofed_source``), as
   ipxbox does (docs/reliability.md I3). A packet from a peer whose source node belongs to a local
   client has gone round a loop (``loop``).
4. Pings to socket 2 and packets addressed to the bridge's own node are answered or consumed
   locally; broadcast pings are also forwarded so every other client answers.
5. Sockets of the configured filter (file sharing and management) are never relayed.
6. Loop copies are suppressed (``dedup.DuplicateFilter``); a node behind a peer or segment
   is learned from the first copy only, never from a loop copy (see the tables below). The
   hop count is incremented on every forward. A packet from an RFC 1234 peer reaching 16 is
   discarded (``hop_limit``, the IPX routing rule that ends loops between bridges). A
   DOSBox-protocol client's hop byte is taken as 0: DOSBox never writes it, so it holds
   whatever the DOS program left there, and a program answering from its receive buffer
   sends back the count it received (docs/protocols.md 4.1). Judging it would drop real games
   after a few round trips.
7. Broadcast goes to every port except the ingress; unicast to the port that owns the node.
   A unicast to an unknown node goes only to RFC 1234 peers (which may own it), marked
   ``flooded``, and never to DOSBox-protocol clients: a DOSBox client does not check the
   destination node and would hand the packet to its game as if addressed to it (docs/protocols.md
   4.4; DOSBox's own server drops it). With no peer to try it is ``unknown_destination``.

**Segments** are interface ports: one IPX segment reached through one interface
in one encapsulation (``PortKind``): native Ethernet frames, IPXWrapper's UDP, or RFC 1234
hosts on a subnet. To the rules a segment is a port like a peer: nodes are learned behind it,
an unknown unicast may go there (its stations ignore a node that is not theirs), and its hop
byte counts (native stacks send 0, docs/protocols.md 3.1), except on IPXWrapper's UDP, whose header
has no hop field. The I/O layer turns a segment target into frames or datagrams.

**Uplinks** (ipxbox's uplink protocol, docs/protocols.md 3.9; ``policy/uplink.py``) connect a
whole IPX network through NAT after a password handshake. An authenticated uplink, either
end (a remote uplink client connected to this bridge, or the server this bridge is a client
of), is a UDP-address port like an RFC 1234 peer: nodes are learned behind it, broadcasts and
unknown unicasts go there, its hop byte counts, rules 6 and 9 apply. Its control packets
(destination node ``UpLiNK``, checksum and Length 0) are consumed before the IPX parser, and
its data packets are normalised first (``wire.uplink.normalise_data``: ipxbox's Ethernet
padding, checksum 0, transport control 127). Nothing from or to an address passes before
its handshake completes.

8. Two bridges on one segment must not both put a packet on it: their beacons, which of
   them is trusted, and which ports another bridge serves. ``policy/bridges.py`` holds the
   rule, clause by clause, and runs it; the switch asks it for each packet (``skip_for``,
   ``served_by``, ``bridge_sent``) and hands it the beacons, which are consumed (``beacon``).
9. The loop bound that holds when every other rule is fooled: a copy that came back by
   another way does not leave by a port the packet left by, within ``EGRESS_WINDOW``.
   ``policy/tables.EgressGuard`` holds the rule and runs it; the switch names the way (the
   ingress port, and the link-layer source on it) and counts the copies left out
   (``Decision.repeats``); with none left the packet is ``egress_repeat``.
10. One IPX network, whatever numbers the stations use. Every port is one network to the
   switch: a broadcast reaches every station whatever network it was addressed to, and a
   unicast goes by node alone. The destination network is rewritten only where a receiver
   would otherwise refuse the packet (docs/protocols.md 6, "Native mode, addresses"):

   * DOSBox-protocol clients are on network 00000000, the one our registration reply gives
     them. DOSBox itself ignores the destination network, but IPXWrapper in DOSBox mode
     delivers only its own network or FFFFFFFF, so a packet addressed to another network
     reaches clients as 00000000 (``Decision.client_packet``).
   * IPXWrapper's native UDP: each host has its own configured network (00000001 by
     default) and delivers only that or FFFFFFFF. Its port (``io/segments.IpxWrapperPort``)
     sends broadcasts to FFFFFFFF and unicasts to the network the receiving socket was
     heard with, or FFFFFFFF when it was not heard.
   * Native Ethernet stations, RFC 1234 hosts and peers get the packet as it came: native
     stacks use the numbers of their LAN, and a peer bridge rewrites toward its own stations.

   The duplicate identity (rules 6 and 9) leaves the destination network out, so a rewritten
   copy that comes back is still known.
11. Packets from a LAN are taken as the programs on it write them. ipxbox writes checksum
   0x0000 and transport control 127 on every frame it bridges (docs/protocols.md 3.8): such a
   packet is taken with checksum 0xFFFF and hop 0, and counted (``forgiven``, by reason).
   Other checksums are refused as the strict spec says (``bad_checksum``).

Which ports the switch has, the nodes learned behind them (rule 6) and the targets from
each ingress (rules 7 and 8) are ``policy/port_table.py``'s.
"""

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Final

from ipxbridge.policy.bridges import DeliveryWatch, SegmentBridges
from ipxbridge.policy.budget import ReflectionLimit
from ipxbridge.policy.clients import Client, ClientTable, SwitchEvent
from ipxbridge.policy.connections import is_connection
from ipxbridge.policy.decision import POLICY_DROP_REASONS, Decision, Outcome, drop
from ipxbridge.policy.dedup import DuplicateFilter
from ipxbridge.policy.port_table import Peer, PortTable
from ipxbridge.policy.ports import Address, Port, PortKind, Segment
from ipxbridge.policy.switch_settings import SwitchSettings
from ipxbridge.policy.tables import EgressGuard
from ipxbridge.policy.uplink import UplinkServer
from ipxbridge.wire.errors import WireError
from ipxbridge.wire.ipx import (
    ALL_NETS,
    HEADER_LEN,
    MAX_HOPS,
    SOCKET_BEACON,
    ZERO_NET,
    ZERO_NODE,
    IpxHeader,
    address_node,
    build_broadcast,
    build_ping_reply,
    forgiven,
    is_beacon,
    keyed_nodes,
    parse_header,
    with_dst_net,
    with_hops,
)
from ipxbridge.wire.ipxwrapper import CoalescedError, unpack_coalesced
from ipxbridge.wire.uplink import is_uplink_control, normalise_data

_NO_CHECKSUM: Final = b"\xff\xff"
_CLIENT_NETS: Final = frozenset((ZERO_NET, ALL_NETS))  # networks clients deliver (rule 10)
# Rule 9: a packet leaves by a given port at most once in this window, however it came.
EGRESS_WINDOW: Final = 0.25


class IpxSwitch:
    """The switching state machine. See the module docstring for the rules."""

    def __init__(
        self,
        settings: SwitchSettings,
        peers: tuple[Address, ...] = (),
        server_node_for: Callable[[Address], bytes] | None = None,
        random_bytes: Callable[[int], bytes] | None = None,
        *,
        segments: tuple[Segment, ...] = (),
        bridge_id: bytes | None = None,
        beacon_key: bytes | None = None,
        beacon_clock: Callable[[], int] | None = None,
        evictions: Counter[tuple[str, str]] | None = None,
        forgiven: Counter[tuple[str, str, str]] | None = None,
        node_for: Callable[[Address], bytes] | None = None,
    ) -> None:
        """Create a switch.

        Args:
            settings: tunables.
            peers: static RFC 1234 peer addresses (resolved IPv4, port).
            server_node_for: gives the bridge's node as seen by a new client (the I/O layer
                looks up the local address the client reached). Defaults to all zero.
            random_bytes: source of the probe nonces; the I/O layer passes ``os.urandom``
                (a nonce must be unguessable). Defaults to a counter, for tests only.
            segments: interface ports to start with (``add_segment``).
            bridge_id: 6 random bytes naming this bridge on segments (rule 8); the I/O
                layer passes ``os.urandom(6)``.
            beacon_key: the shared secret that signs and checks beacons (rule 8); None:
                beacons are trusted only when confirmed through the peer link.
            beacon_clock: the sequence number of the next beacon: the I/O layer passes the
                wall clock in ms, which keeps increasing across restarts (rule 8).
            evictions: where bounded tables count what they push out, by (table, reason).
            forgiven: where packets taken against the strict spec are counted, by (kind,
                interface, reason): ipxbox's frames (``wire.ipx.forgiven``).
            node_for: the node assigned to a client's address (rule 2): with
                ``node_assignment: keyed``, ``wire.ipx.keyed_node`` with the key kept across
                restarts (the I/O layer reads it); with ``address``, ``wire.ipx.dosbox_node``.
                Defaults to that of ``settings``, keyed with a key from ``random_bytes``.
        """
        self.settings = settings
        counter = itertools.count(1)
        self._random_bytes = random_bytes or (lambda n: next(counter).to_bytes(n, "big"))
        if node_for is None:
            node_for = (
                keyed_nodes(self._random_bytes(32))
                if settings.node_assignment == "keyed"
                else address_node
            )
        # Rule 2: who is a client, and who proved it receives (policy/clients.py).
        self._clients = ClientTable(
            settings,
            node_for=node_for,
            server_node_for=server_node_for or (lambda _addr: ZERO_NODE),
            random_bytes=self._random_bytes,
            on_change=self._ports_changed,
        )
        # The client table's own containers, read on every packet: named here once.
        self.clients: dict[Address, Client] = self._clients.clients
        self._client_by_node: dict[bytes, Client] = self._clients.by_node
        self._unverified: dict[Address, None] = self._clients.unverified
        self.reflection: ReflectionLimit = self._clients.reflection
        self.connected: set[Address] = self._clients.connected
        self.peers: dict[Address, Peer] = {}
        self.segments: dict[Segment, None] = {}
        # Uplinks (docs/protocols.md 3.9): authenticated ones, by address, with this bridge's
        # role on them ("server": a remote client connected to us; "client": we connected).
        self.uplinks: dict[Address, str] = {}
        self.evictions: Counter[tuple[str, str]] = Counter() if evictions is None else evictions
        self.forgiven: Counter[tuple[str, str, str]] = Counter() if forgiven is None else forgiven
        self._dedup: DuplicateFilter[object] = DuplicateFilter(
            settings.dedup_window, settings.dedup_max_entries
        )
        self._egress: EgressGuard[Port] = EgressGuard(EGRESS_WINDOW, settings.dedup_max_entries)
        # The bridge's node on segments and in its beacons (rule 8): random, unicast and
        # locally administered (IEEE 802 U/L bit), so it never equals a station's MAC.
        raw = bridge_id or b"\x02ipxbr"
        self.bridge_id = bytes(((raw[0] & 0xFC) | 0x02,)) + raw[1:6]
        # Set by the I/O layer: the box's own IPv4 addresses (its broadcasts to an RFC 1234
        # segment come back to its socket) and the RFC 1234 segment a UDP source is on.
        self.own_ips: frozenset[str] = frozenset()
        self.udp_segment_for: Callable[[str], Segment | None] = lambda _ip: None
        ticks = itertools.count(1)
        # Rule 8: what is left to another bridge is watched for (policy/bridges.py).
        self.watch = DeliveryWatch()
        # Rule 8: the other bridges on this bridge's segments (policy/bridges.py).
        self.bridges = SegmentBridges(
            self.bridge_id,
            segments=self.segments,
            peers=self.peers,
            key=beacon_key,
            clock=beacon_clock or (lambda: next(ticks)),
            random_bytes=self._random_bytes,
            evictions=self.evictions,
            on_change=self._topology_changed,
        )
        # Its ports, what is learned behind them, the targets from each (policy/port_table.py).
        self._table = PortTable(
            clients=self.clients,
            client_nodes=self._client_by_node,
            peers=self.peers,
            uplinks=self.uplinks,
            segments=self.segments,
            bridges=self.bridges,
            max_learned=settings.max_learned_nodes,
            evictions=self.evictions,
        )
        self.uplink_server: UplinkServer | None = None  # set when uplink_password is
        self.uplink_normalised: Counter[str] = Counter()  # data packets changed on entry
        for addr in peers:
            self.add_peer(addr)
        for segment in segments:
            self.add_segment(segment)

    # --- membership ------------------------------------------------------------------------

    def add_peer(self, addr: Address) -> None:
        """Add a static RFC 1234 peer (idempotent)."""
        self._table.add_peer(addr)

    def remove_peer(self, addr: Address) -> None:
        """Forget a static peer (configuration reload); nodes learned behind it go too."""
        self._table.remove_peer(addr)

    def add_uplink(self, addr: Address, role: str) -> None:
        """An authenticated uplink becomes a port (``role``: ours on it, server or client)."""
        if self._table.add_uplink(addr, role) and addr in self.clients:
            self._clients.remove(addr, "uplink")  # it was a DOSBox client; an uplink now

    def remove_uplink(self, addr: Address) -> None:
        """An uplink ended (closed, expired, lost); the nodes learned behind it go too."""
        self._table.remove_uplink(addr)

    def add_segment(self, segment: Segment) -> None:
        """Attach an interface port (idempotent); the next tick announces the bridge there."""
        self._table.add_segment(segment)

    def remove_segment(self, segment: Segment) -> None:
        """Detach an interface port (it vanished, or the configuration dropped it)."""
        if self._table.remove_segment(segment):
            self.watch.forget(segment)

    def reconfigure(self, settings: SwitchSettings, peers: tuple[Address, ...]) -> None:
        """Apply new tunables and peers; clients stay, unless ``clients_allow`` now bars them."""
        self.settings = settings
        self._dedup.window = settings.dedup_window
        self._clients.reconfigure(settings)
        for addr in [a for a in self.peers if a not in peers]:
            self.remove_peer(addr)
        for addr in peers:
            if addr not in self.peers:
                self.add_peer(addr)

    def set_beacon_key(self, key: bytes | None) -> None:
        """Sign and check beacons with a new key (reload): what the old one vouched goes."""
        self.bridges.set_key(key)

    def _ports_changed(self) -> None:
        self._table.changed()

    def _topology_changed(self) -> None:
        """Rule 8's view changed: the cached target lists are stale."""
        self._table.topology_changed()

    # --- clients (rule 2: policy/clients.py) ---------------------------------------------

    def connect(self, addr: Address) -> None:
        """A WebSocket connection opened from ``addr``: it may register, verified."""
        self._clients.connect(addr)

    def disconnect(self, addr: Address) -> None:
        """The connection from ``addr`` closed: its client leaves."""
        self._clients.disconnect(addr)

    def remove_client(self, addr: Address, kind: str) -> None:
        """Forget a client (expiry, shutdown) and log why."""
        self._clients.remove(addr, kind)

    def pop_events(self) -> list[SwitchEvent]:
        """Return and clear the events recorded since the last call."""
        return self._clients.pop_events()

    def _register(self, addr: Address, now: float) -> Decision:
        reply = self._clients.register(addr, now)
        if isinstance(reply, str):
            return drop(reply)
        return Decision(Outcome.CONTROL, "registration", replies=((reply, addr),))

    # --- the datagram path -----------------------------------------------------------------

    def handle(self, data: bytes, src: Address, now: float) -> Decision:
        """Decide what to do with one datagram received from ``src``.

        Never raises for remote input: malformed datagrams become drops with a reason.
        """
        if is_uplink_control(data):
            # Checksum and Length 0: recognised before the parser (docs/protocols.md 3.9).
            return self._uplink_control(data, src, now)
        if self.uplinks and src in self.uplinks:
            return self._uplink_datagram(data, src, now)
        try:
            header = parse_header(data)
        except WireError as exc:
            return drop(exc.reason)
        if not header.is_coalesced:
            return self._from_address(src, header, data, now)
        if src not in self.clients and src not in self.peers:
            # Refused whatever it holds: the datagram is refused once, not packet by packet.
            refused = self._clients.refused(src)
            if refused is not None:
                return drop(refused)
        return self._batch(data, lambda h, p: self._from_address(src, h, p, now))

    def _uplink_control(self, data: bytes, src: Address, now: float) -> Decision:
        """An uplink control packet: the handshake of the server side, or a keepalive."""
        if self.uplinks.get(src) == "client":
            return Decision(Outcome.CONTROL, "uplink")  # its own socket acts on these
        server = self.uplink_server
        if server is None:
            return drop("uplink_disabled")
        if src in self.peers or src[1] == 0:
            return drop("uplink_unexpected")
        result = server.handle(data, src, now)
        if result.authenticated:
            self.add_uplink(src, "server")
        if result.closed:
            self.remove_uplink(src)
        replies = tuple((reply, src) for reply in result.replies)
        if result.dropped:
            return Decision(Outcome.DROPPED, result.detail, replies=replies)
        return Decision(Outcome.CONTROL, "uplink", replies=replies)

    def _uplink_datagram(self, data: bytes, src: Address, now: float) -> Decision:
        """A data datagram from an authenticated uplink, normalised first (3.9)."""
        try:
            packet, changed = normalise_data(data)
            header = parse_header(packet)
        except WireError as exc:
            return drop(exc.reason)
        if changed:
            self.uplink_normalised[changed] += 1
        if self.uplink_server is not None:
            self.uplink_server.heard(src, now)
        if header.is_coalesced:
            return self._batch(packet, lambda h, p: self._from_uplink(src, h, p, now))
        return self._from_uplink(src, header, packet, now)

    def _from_uplink(self, src: Address, header: IpxHeader, data: bytes, now: float) -> Decision:
        """One IPX packet from an uplink: a peer-like port with many nodes behind it."""
        if header.is_registration:
            return drop("unexpected_registration")
        node = header.src_node
        if node in self._client_by_node or node == self.bridge_id:
            return drop("loop")
        return self._forward(header, data, src, now, (), hops_in=header.hops, learn=True)

    def _from_address(self, src: Address, header: IpxHeader, data: bytes, now: float) -> Decision:
        """One IPX packet from a UDP address on the tunnel socket (rules 2-8)."""
        client = self.clients.get(src)
        if client is not None:
            return self._from_client(client, header, data, now)
        if src in self.peers:
            return self._from_peer(src, header, data, now)
        refused = self._clients.refused(src)
        if refused is not None:
            return drop(refused)
        if header.is_registration:
            return self._register(src, now)
        if is_connection(src):
            return drop("unregistered")  # a connection registers first; no segment is behind it
        if self.settings.rejoin and header.src_node == self._clients.node_for(src):
            return self._rejoin(src, header, data, now)
        if src[0] in self.own_ips:
            # Our own broadcast to an RFC 1234 segment, looped back to our socket.
            return drop("own_packet")
        segment = self.udp_segment_for(src[0])
        if segment is not None:
            return self._from_segment(segment, header, data, now, segment, sender=src[0])
        return drop("unregistered")

    def handle_segment(
        self,
        segment: Segment,
        data: bytes,
        now: float,
        *,
        via: object = None,
        sender: object = None,
    ) -> Decision:
        """Decide what to do with one IPX packet received on an interface port.

        ``via`` tells copies apart that arrive on the same segment as different ports for
        the duplicate filter: an Ethernet segment passes the framing (rule 8). ``sender`` is
        the link-layer source (a frame's source MAC, a datagram's source IP): a copy from a
        trusted bridge's port is that bridge's, and it serves its other ports itself. Never
        raises for remote input.
        """
        if data[:2] != _NO_CHECKSUM:  # rare: a checksum, or ipxbox's 0x0000 (rule 11)
            data, reason = forgiven(data)
            if reason is not None:
                self.forgiven[(str(segment.kind), segment.interface, reason)] += 1
        try:
            header = parse_header(data)
        except WireError as exc:
            return drop(exc.reason)
        key = (segment, via)
        if header.is_coalesced:
            return self._batch(
                data, lambda h, p: self._from_segment(segment, h, p, now, key, sender=sender)
            )
        return self._from_segment(segment, header, data, now, key, sender=sender)

    def _batch(self, data: bytes, switch_one: Callable[[IpxHeader, bytes], Decision]) -> Decision:
        """A coalesced batch: each packet switched by ``switch_one`` as a lone one (rule 1).

        At most ``COALESCED_MAX_PACKETS`` (46) packets, none of them a batch: the codec
        refuses magic packets inside, so this never recurses.
        """
        try:
            packets = unpack_coalesced(memoryview(data)[HEADER_LEN:])
        except CoalescedError as exc:
            return drop(exc.reason)
        inner: list[tuple[bytes, Decision]] = []
        for packet in packets:
            try:
                header = parse_header(packet)  # the codec checked checksum and length
            except WireError as exc:
                inner.append((packet, drop(exc.reason)))
                continue
            inner.append((packet, switch_one(header, packet)))
        return Decision(Outcome.CONTROL, "batch", inner=tuple(inner))

    def _from_segment(
        self,
        segment: Segment,
        header: IpxHeader,
        data: bytes,
        now: float,
        via: object,
        *,
        sender: object = None,
    ) -> Decision:
        if header.is_registration:
            return drop("unexpected_registration")
        if is_beacon(header, data):
            return self._segment_beacon(segment, header, data, now, sender)
        node = header.src_node
        if node in self._client_by_node or node == self.bridge_id:
            return drop("loop")
        if header.dst_node == self.bridge_id:
            return Decision(Outcome.CONTROL, "to_bridge", header=header)
        hops_in = 0 if segment.kind is PortKind.IPXWRAPPER else header.hops  # no hop field
        # A copy another bridge put here (its own client's packet, or one from its peer) may
        # reach this bridge before the copy over the peer link does; it is that bridge's
        # to carry to the ports it serves, whatever the bridge ids (rule 8).
        bridge = self.bridges.bridge_sent(segment, sender) if self.bridges.any_heard else None
        return self._forward(
            header,
            data,
            segment,
            now,
            (),
            hops_in=hops_in,
            via=via,
            learn=True,
            bridge=bridge,
            sender=sender,
        )

    def _peer_beacon(self, src: Address, header: IpxHeader, data: bytes, now: float) -> Decision:
        """A peer's beacon over the peer link (rule 8: policy/bridges.py)."""
        reason, answer = self.bridges.peer_beacon(src, header, data, now)
        return self._beacon_decision(reason, answer)

    def _segment_beacon(
        self, segment: Segment, header: IpxHeader, data: bytes, now: float, sender: object
    ) -> Decision:
        """Another bridge's beacon on a segment (rule 8: policy/bridges.py)."""
        reason, answer = self.bridges.segment_beacon(segment, header, data, now, sender)
        return self._beacon_decision(reason, answer)

    def _beacon_decision(self, reason: str, answer: bool) -> Decision:
        # An answer goes with a beacon not (yet) believed too: a newcomer that has not heard
        # this bridge cannot echo its tag until it does (rule 8).
        replies = tuple(self.bridges.announcements()) if answer else ()
        if reason != "beacon":
            return Decision(Outcome.DROPPED, reason, replies=replies)
        return Decision(Outcome.CONTROL, "beacon", replies=replies)

    def _rejoin(self, src: Address, header: IpxHeader, data: bytes, now: float) -> Decision:
        """Re-admit a client that was registered before (bridge restart, expiry, eviction).

        Its source node is exactly the node this bridge assigns to that UDP address, so it
        already holds a registration reply from us or an earlier run of us: no reply is
        needed, and the game carries on without reconnecting (docs/reliability.md R18). A keyed
        node is known only to whoever received that reply, so the client is verified at
        once; an ``address`` node is predictable, so the packet may be spoofed and the
        client rejoins unverified (rule 2).
        """
        admitted = self._clients.rejoin(src, header.src_node, now)
        if isinstance(admitted, str):
            return drop(admitted)
        return self._from_client(admitted, header, data, now)

    def _from_client(self, client: Client, header: IpxHeader, data: bytes, now: float) -> Decision:
        client.last_seen = now
        client.rx_packets += 1
        client.rx_bytes += len(data)
        if header.is_registration:
            return self._register(client.addr, now)
        replies: tuple[tuple[bytes, Address], ...] = ()
        if client.verified:
            client.probes = 0
        else:
            proof = self._clients.prove(client, header, now)  # rule 2
            if proof is None:  # the answer to its probe, which verified it
                return Decision(Outcome.CONTROL, "ping_reply")
            replies = proof
        if header.is_shutdown:
            self.remove_client(client.addr, "shutdown")
            return Decision(Outcome.CONTROL, "shutdown")
        if header.src_node != client.node:
            return drop("spoofed_source")
        if header.dst_node == client.server_node:
            # Addressed to the bridge: the answer to our keepalive, or a reply to one of the
            # bridge's own DirectPlay probes (consumed here, and inspected by the caller).
            if header.is_echo:
                return Decision(Outcome.CONTROL, "ping_reply")
            return Decision(Outcome.CONTROL, "to_bridge", header=header)
        if header.is_echo and header.is_broadcast and self.settings.answer_pings:
            # Answer as a DOSBox client would, so a lone client can see the server is alive;
            # the ping is still forwarded so every other client answers too.
            reply = build_ping_reply(client.node, client.server_node)
            if client.verified or self.reflection.allow(
                client.addr[0], len(reply), now, "ping_reply"
            ):
                replies = (*replies, (reply, client.addr))
        # The client's hop byte is whatever its DOS program left there: count from 0 (rule 6).
        return self._forward(header, data, client.addr, now, replies, hops_in=0)

    def _from_peer(self, src: Address, header: IpxHeader, data: bytes, now: float) -> Decision:
        peer = self.peers[src]
        peer.rx_packets += 1
        peer.rx_bytes += len(data)
        if header.is_registration:
            return drop("unexpected_registration")
        if is_beacon(header, data):
            return self._peer_beacon(src, header, data, now)
        node = header.src_node
        if node in self._client_by_node or node == self.bridge_id:
            return drop("loop")
        if self.segments and header.dst_node == self.bridge_id:
            return Decision(Outcome.CONTROL, "to_bridge", header=header)
        return self._forward(header, data, src, now, (), hops_in=header.hops, learn=True)

    def _forward(
        self,
        header: IpxHeader,
        data: bytes,
        ingress: Port,
        now: float,
        replies: tuple[tuple[bytes, Address], ...],
        *,
        hops_in: int,
        via: object = None,
        learn: bool = False,
        bridge: bytes | None = None,
        sender: object = None,
    ) -> Decision:
        filtered = self.settings.filtered_sockets
        dst_socket = header.dst_socket
        if dst_socket in filtered or header.src_socket in filtered or dst_socket == SOCKET_BEACON:
            # The beacon socket is the bridges' own (rule 8): nothing sent there is relayed.
            if learn:  # never relayed, so no other copy of it comes round
                self._table.learn(header.src_node, ingress, now)
            return Decision(Outcome.DROPPED, "filtered_socket", replies=replies)
        # Identity: bytes 10.. of the packet, without checksum, length, hop count and the
        # destination network, which bridges rewrite toward the stations that need it (rule
        # 10). Python's bytes hash is keyed SipHash: collisions cannot be crafted remotely.
        port = ingress if via is None else via
        identity = hash(data[10:])
        watch = self.watch
        if watch.pending and isinstance(ingress, Segment):
            watch.seen(identity, ingress)  # another bridge's copy appeared here (rule 8)
        if self._dedup.is_duplicate(identity, port, now, hops_in):
            # A node stays where its packet's first copy came from: two bridges on one
            # segment each get the other's copy last and would learn the node behind each
            # other, dropping every unicast to it as destination_on_ingress.
            return Decision(Outcome.DROPPED, "duplicate", replies=replies)
        if learn:
            self._table.learn(header.src_node, ingress, now)
        hops = hops_in + 1
        if hops >= MAX_HOPS:
            return Decision(Outcome.DROPPED, "hop_limit", replies=replies)
        if header.is_broadcast:
            kind = "broadcast"
            targets = self._table.all_but(ingress, bridge)
            # Watched: what came over a peer link or uplink and was left to another bridge
            # for a segment (that bridge got it the same way). Not what came from a segment:
            # the bridges there heard it themselves, and a copy sent late into a segment
            # would come back to them as a new packet (measured: a storm across kinds).
            if self.bridges.any_heard and not isinstance(ingress, Segment):
                left = self._table.left_to_others(ingress, bridge)
                if left:
                    targets = self._watch_left(identity, data, hops, left, targets, now)
        else:
            owner = self._table.lookup(header.dst_node, now, self.settings.learned_node_ttl)
            if owner is None:
                # Only peers and segments may own an unknown node; a DOSBox client would take
                # it (rule 7).
                targets = self._table.peers_but(ingress, bridge)
                if not targets:
                    return Decision(Outcome.DROPPED, "unknown_destination", replies=replies)
                kind = "flooded"
            elif owner == ingress:
                return Decision(Outcome.DROPPED, "destination_on_ingress", replies=replies)
            else:
                kind = "unicast"
                targets = (owner,)
        if not targets:
            return Decision(Outcome.DROPPED, "no_destination", replies=replies)
        held = 0
        if self._unverified:
            targets, held = self._clients.within_limit(targets, len(data), now)
            if not targets:
                return Decision(Outcome.DROPPED, "unverified_rate", replies=replies, held=held)
        # Rule 9, the bound that holds when every other rule was fooled: a copy that came by
        # another way (port, or link-layer source on it) within EGRESS_WINDOW never leaves by
        # a port the packet left by; the sender's own repeats do (after the limit: only
        # copies really sent are recorded).
        wanted = len(targets)
        targets = self._egress.admit(
            identity, port if sender is None else (port, sender), targets, now
        )
        repeats = wanted - len(targets)
        if not targets:
            return Decision(
                Outcome.DROPPED, "egress_repeat", replies=replies, held=held, repeats=repeats
            )
        packet = with_hops(data, hops)  # never a batch: those are unpacked (rule 1)
        if self.uplink_server is not None and self.uplinks:
            for target in targets:  # data sent: no keepalive needed (3.9)
                if target in self.uplinks:
                    self.uplink_server.sent(target, now)
        net = header.dst_net
        if net not in _CLIENT_NETS and self.clients:
            # Rule 10: DOSBox-protocol clients are on network 00000000 (our registration
            # reply), and DOSBox-mode IPXWrapper delivers only that or FFFFFFFF.
            return Decision(
                Outcome.FORWARDED,
                kind,
                packet,
                targets,
                replies,
                header,
                held,
                repeats,
                client_packet=with_dst_net(packet, ZERO_NET),
            )
        return Decision(Outcome.FORWARDED, kind, packet, targets, replies, header, held, repeats)

    def _watch_left(  # noqa: PLR0917 - the hot path: positional on purpose
        self,
        identity: int,
        data: bytes,
        hops: int,
        left: tuple[Segment, ...],
        targets: tuple[Port, ...],
        now: float,
    ) -> tuple[Port, ...]:
        """Watch the segments a broadcast was left to other bridges on (rule 8).

        Where the watch is full the broadcast goes there now, from this bridge.
        """
        packet = with_hops(data, hops)
        now_too = tuple(s for s in left if not self.watch.expect(identity, s, packet, now))
        return (*targets, *now_too) if now_too else targets

    def watch_due(self, now: float) -> list[tuple[bytes, Port]]:
        """Broadcasts left to another bridge whose copy did not appear: send them now."""
        return self.watch.due(now) if self.watch.pending else []

    def probe_packets(
        self, dst_socket: int, src_socket: int, payload: bytes, now: float
    ) -> list[tuple[bytes, Port]]:
        """An IPX broadcast from the bridge itself to every client and segment (probing).

        Each copy carries the bridge's node as that client sees it (on segments, the bridge
        id), so replies come back addressed to the bridge (``to_bridge``) and are inspected
        there. Unverified clients get a probe only within the reflection limit (rule 2).
        """
        out = self._clients.probes(dst_socket, src_socket, payload, now)
        if self.segments:
            packet = build_broadcast(self.bridge_id, dst_socket, src_socket, payload)
            out += [(packet, segment) for segment in self.segments]
        return out

    # --- timers ----------------------------------------------------------------------------

    def tick(self, now: float) -> list[tuple[bytes, Port]]:
        """Beacons, late copies, uplink and client keepalives to send; expire old records."""
        out: list[tuple[bytes, Port]] = self.beacons(now) + self.watch_due(now)
        if self.uplink_server is not None:
            keepalives, expired = self.uplink_server.tick(now)
            out += keepalives
            for addr in expired:
                self.remove_uplink(addr)
        out += self._clients.tick(now)  # rule 2: keepalives, probes, expiry
        self._dedup.purge(now)
        self._egress.purge(now)
        self._table.expire(now, self.settings.learned_node_ttl)
        return out

    def beacons(self, now: float) -> list[tuple[bytes, Port]]:
        """Rule 8: announce the bridge on every segment and to every peer; forget the silent."""
        return self.bridges.beacons(now)

    def bridges_on(self, segment: Segment) -> tuple[bytes, ...]:
        """The other bridges trusted on ``segment`` within ``BEACON_TTL`` (rule 8)."""
        return self.bridges.bridges_on(segment)

    def learned_segment_nodes(self) -> list[tuple[bytes, Segment, float]]:
        """(node, segment, last heard) of every station learned on an interface port."""
        return self._table.learned_segment_nodes()

    def learned_on(self, port: Port) -> int:
        """How many nodes are currently learned behind ``port``."""
        return self._table.learned_on(port)

    @property
    def learned_nodes(self) -> int:
        """How many nodes are currently known behind peers."""
        return self._table.learned_nodes


# Re-exported for callers that want one import.
__all__ = [
    "POLICY_DROP_REASONS",
    "Address",
    "Client",
    "Decision",
    "IpxSwitch",
    "Outcome",
    "Peer",
    "Port",
    "PortKind",
    "Segment",
    "SwitchEvent",
    "SwitchSettings",
]
