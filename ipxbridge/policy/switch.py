"""The IPX switch: who is connected, and where each datagram goes.

This module owns the switching rules (h11 ``_state.py`` style); it is pure: no sockets, no
clock (``now`` is a parameter), no logging. ``IpxSwitch.handle`` turns one received datagram
into a ``Decision``; ``IpxSwitch.tick`` produces keepalives and expiries.

Ports are UDP addresses of two kinds:

* **DOSBox-protocol clients** (DOSBox, DOSBox-X, dosemu2, IPXWrapper, real DOS via
  vanilla-utilities) register first (docs/protocols.md 4.2). The node each one gets is
  ``node_for(address)``: by default a keyed node (``wire.ipx.keyed_node``, rule 2), or the
  DOSBox convention, IPv4 address + UDP port (``node_assignment: address``).
* **RFC 1234 peers** are configured statically (other ipxbridges, other RFC 1234 routers).
  They need no registration. Nodes seen behind a peer are learned with an expiry.

Rules, in the order they are applied:

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
2. An unknown address may only register; anything else from it is ``unregistered``. Nothing is
   sent to a new address before its registration reply (DOSBox takes the first datagram it
   receives as the reply, docs/protocols.md 4.2). A registered client stays until ``idle_timeout``
   whether or not it answers keepalives: IPXWrapper never answers socket-2 pings, and a
   DirectPlay host behind it is silent until someone enumerates (docs/protocols.md 6).
   Registration is one spoofable datagram, and so is any data packet, so a client is
   ``verified`` only by proving it receives what is sent to its address. Its node is the
   proof: by default it is keyed (``02`` + HMAC-SHA256 of "ip:port" with a secret key kept
   across restarts), so nobody can predict it, and a packet carrying it can only come from
   whoever read our registration reply: the client is verified at once, whatever program it
   runs (IPXWrapper included). ``ipxnet ping`` then prints that node as an address, as with
   ipxbox's random nodes (docs/protocols.md 4.5). Probes prove receipt too: a client that echoes
   the nonce the bridge puts in the source node of its probe is verified (DOSBox answers a
   ping to the pinger's node, docs/protocols.md 4.5; docs/reliability.md R7). With
   ``node_assignment: address`` (IPv4 + port, predictable) only the probe counts.
   A client that only listens must still hear the game from the moment it registers: DOSBox
   sends nothing after registration until its program does, a program waiting for another's
   broadcast may send nothing at all, and a DirectPlay host behind IPXWrapper says nothing
   until it is enumerated (docs/protocols.md 4.4, 6). So until it is verified a client is
   sent what any client is, but every byte toward its address (the registration reply,
   probes, ping answers, copies) is held to a rate per destination IPv4 address and one for
   the whole bridge (``policy/budget.ReflectionLimit``): whatever a stranger spoofs, that is
   all the bridge sends toward one victim, and toward all unproven addresses together. A
   newcomer is admitted only when its reply can go (DOSBox takes the first datagram it
   receives as the reply). The limits end for a client when it is verified; a probe goes a
   second after registration (``FIRST_PROBE_DELAY``), so a real DOSBox client, which
   answers probes even when its program only listens, is verified within a round trip of
   that. Copies held back are counted
   (``Decision.held``). Unverified clients live in their own bounded table
   (``max_unverified``), so spoofed registrations never take a verified player's place;
   when it is full, the oldest one that had a second to prove itself (its probe unanswered,
   or none let through) makes room. Per IPv4 address at most ``max_unverified_per_ip`` are kept:
   a newcomer from an address at the limit replaces that address's oldest unverified client
   (``evicted``), so many players behind one NAT are never locked out. A registration from
   UDP port 0 is refused. Rejoin: a packet from an unknown address whose source node is
   exactly ``node_for`` that address comes from a client registered before (the bridge
   restarted, or the client was expired or evicted while quiet): the bridge recomputes the
   node, so the client rejoins without registering again, verified when nodes are keyed
   (only a receiver of our reply knows it), unverified with ``address`` nodes.
   With ``clients_allow`` set, an address outside those networks may neither register nor
   rejoin (``not_allowed``): the DOSBox protocol has no authentication, so on a bridge
   reachable from the internet this is what keeps strangers and spoofed registrations out.
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

8. Two bridges on one segment must not both put a packet on it. Every bridge sends a beacon
   (``wire.ipx.build_beacon``: its random bridge id, the random *tag* of that segment, whose
   first byte names the port kind, its peers, and the tags of the bridges it hears on that
   segment) on each segment, and one to each peer that declares the tags of all its
   segments, every ``BEACON_INTERVAL``. A bridge heard on a segment within ``BEACON_TTL`` is
   *trusted* there only if its beacon echoes this bridge's tag for that segment (it hears
   this bridge there: a beacon recorded on, or forwarded from, another segment echoes that
   segment's tags, ``beacon_unbound``) and a bystander could not have sent it: it is signed
   with the shared key (``ipx.bridge_key_file``: HMAC-SHA256 over the bridge id and the
   beacon, with a sequence that must increase and is remembered for a day, so a replay is
   refused), or, with no key, the peer link confirms it (the bridge is a configured peer and
   the tag is one that peer declared; its peer list is then read from the peer link too).
   Untrusted beacons are remembered (at most ``MAX_BRIDGES_PER_SEGMENT`` per segment, the
   untrusted evicted first) but change nothing: a forgery can at worst leave a duplicate,
   never silence. And what is left to another bridge is watched (``DeliveryWatch``): its
   copy must appear, or this bridge sends it 0.2 s later. The state and the beacons are
   policy/bridges.py's. Then, for the trusted bridges:

   * a packet that arrived from a peer P is sent to a segment S only if P is not on S (else
     P put it there itself) and, of the bridges on S that have P as a peer, this one has the
     lowest id (each of them got the packet from P; one puts it on S);
   * a packet that arrived from segment S is not sent to a peer that is on S: it heard it.
   * a packet that arrived from segment S1 is sent to segment S2 only if no bridge with a
     lower id is on both: one bridge carries packets between two segments two bridges share.
     An Ethernet port and an IPXWrapper port on one LAN are one broadcast domain, so this is
     what keeps two bridges from both translating between the kinds, and the copies of one
     from coming back through the other as new packets.

   * a packet that arrived from segment S in a frame or datagram from a trusted bridge B's
     port (the link-layer source of B's beacons there) is B's copy: B put it on every segment
     it is on and sent it over its peer link, so it goes to none of those, whatever the ids.
     Its copy over the peer link may arrive after the one on the segment.

   * a packet that arrived from a peer P is not sent to another peer that lists P among its
     own peers: it gets the packet from P directly, and a relayed copy that overtook P's
     would look to it like this bridge's (the first two clauses would then leave it off a
     segment that nobody serves).

   Packets from a bridge's own clients go to every segment. Beacons are consumed (``beacon``),
   never forwarded, and nothing addressed to the beacon socket is relayed. A newcomer is
   answered at once (``ANSWER_BURST`` at once, then one every ``BEACON_ANSWER_GAP``), so two
   bridges hear and echo each other within two round trips. Identical copies of one packet
   that arrive on different ports, or on one Ethernet segment in different framings, are
   duplicates (rule 6). Two bridges on one segment that neither share a key nor are peers
   cannot confirm each other: both forward, and stations get two copies; rule 9 keeps that
   from becoming a loop.
9. The loop bound that holds when every other rule is fooled: a packet (bytes 10.. of it, as
   rule 6 names it) that arrives by another *way* than the copy that last left (another
   port, or the same port from another link-layer source) within ``EGRESS_WINDOW`` of it
   does not leave by a port that copy left by (``tables.EgressGuard``). IPXWrapper's header
   has no hop count, so a copy that crosses it starts again at hop 0 and returns on the port
   its first copy came in on, which rule 6 passes; but it returns from the bridge that
   translated it, not from the station that sent it, so it cannot go out again. A sender
   repeating itself (a retry, a status without a counter, redundancy against loss) arrives
   by the same way each time and goes out each time, however fast. Copies left out are
   counted (``Decision.repeats``); with none left the packet is ``egress_repeat``.
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

Learned nodes (rule 6) and the bridges heard per segment live in bounded tables that a flood
of new source nodes cannot use against real stations (``tables.ProvenTable``): a node heard
again a second or more after it was first heard is *proven* and is evicted only by other
proven nodes; a flood of one-packet nodes churns among the unproven. Evictions are counted
by table and tier (``evictions``).
"""

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network
from typing import Final, Literal, NamedTuple

from ipxbridge.policy.bridges import DeliveryWatch, SegmentBridges
from ipxbridge.policy.budget import ReflectionLimit
from ipxbridge.policy.connections import is_connection
from ipxbridge.policy.dedup import DuplicateFilter
from ipxbridge.policy.ports import Address, Port, PortKind, Segment
from ipxbridge.policy.tables import EgressGuard, ProvenTable
from ipxbridge.policy.uplink import UplinkServer
from ipxbridge.wire.errors import WireError
from ipxbridge.wire.ipx import (
    ALL_NETS,
    BROADCAST_NODE,
    DEFAULT_FILTERED_SOCKETS,
    HEADER_LEN,
    MAX_HOPS,
    SOCKET_BEACON,
    ZERO_NET,
    ZERO_NODE,
    IpxHeader,
    address_node,
    build_broadcast,
    build_ping,
    build_ping_reply,
    build_registration_reply,
    forgiven,
    is_beacon,
    keyed_nodes,
    parse_header,
    rfc1234_node,
    with_dst_net,
    with_hops,
)
from ipxbridge.wire.ipxwrapper import CoalescedError, unpack_coalesced
from ipxbridge.wire.uplink import is_uplink_control, normalise_data

_NO_CHECKSUM: Final = b"\xff\xff"
_CLIENT_NETS: Final = frozenset((ZERO_NET, ALL_NETS))  # networks clients deliver (rule 10)
# Rule 9: a packet leaves by a given port at most once in this window, however it came.
EGRESS_WINDOW: Final = 0.25


class Outcome(StrEnum):
    """What became of a received datagram. Every datagram gets exactly one."""

    FORWARDED = "forwarded"  # relayed to one or more ports
    CONTROL = "control"  # handled by the bridge itself (registration, ping, keepalive reply)
    DROPPED = "dropped"  # discarded; ``Decision.detail`` is the drop reason


# Closed set of drop reasons the policy can give, besides the codec's WIRE_REASONS.
POLICY_DROP_REASONS: Final[tuple[str, ...]] = (
    "unregistered",
    "not_allowed",
    "spoofed_source",
    "clients_full",
    "unexpected_registration",
    "loop",
    "duplicate",
    "filtered_socket",
    "destination_on_ingress",
    "no_destination",
    "unknown_destination",
    "hop_limit",
    "unverified_rate",
    "unverified_full",
    "source_port_zero",
    "own_packet",
    "egress_repeat",
    "beacon_replay",
    "beacon_unbound",  # a beacon that does not echo this bridge's tag there (rule 8)
)


# What the reflection limit is asked about (rule 2; ``ReflectionLimit.refused`` keys).
UNVERIFIED_KINDS: Final[tuple[str, ...]] = (
    "copy",
    "registration_reply",
    "probe",
    "ping_reply",
    "dplay_probe",
)


class Decision(NamedTuple):
    """The result of handling one datagram.

    A named tuple, not a frozen dataclass: one is built per packet, and the dataclass's
    ``__init__`` cost about 1 µs more (``docs/benchmarks.md``, "Read coalescing").

    Attributes:
        outcome: forwarded, control or dropped.
        detail: what kind of that outcome, from a closed set per outcome: the drop reason
            (``POLICY_DROP_REASONS`` or the codec's), the kind of control packet (``batch``
            for a coalesced batch, rule 1), or the kind of forward (``broadcast``,
            ``unicast``, ``flooded``: unknown unicast, to peers).
        packet: the bytes to send to every port in ``targets`` (None when not forwarding).
        targets: where ``packet`` goes: UDP addresses and segments.
        replies: packets the bridge itself sends back, each with its address.
        header: the IPX header, for packets that were forwarded or delivered to the bridge
            itself (the DirectPlay inspector looks at their data).
        inner: for a batch, each packet in it with its own decision, in order (rule 1).
        client_packet: when set, the copy of ``packet`` for the DOSBox-protocol clients among
            ``targets``, addressed to their network (rule 10).
    """

    outcome: Outcome
    detail: str
    packet: bytes | None = None
    targets: tuple[Port, ...] = ()
    replies: tuple[tuple[bytes, Port], ...] = ()
    header: IpxHeader | None = None  # set when the payload is worth inspecting
    held: int = 0  # copies not sent: unverified clients over the reflection limit (rule 2)
    repeats: int = 0  # copies not sent: the port had this packet within EGRESS_WINDOW (rule 9)
    inner: tuple[tuple[bytes, "Decision"], ...] = ()  # a batch: (packet, its decision)
    client_packet: bytes | None = None  # what DOSBox-protocol clients get instead (rule 10)


@dataclass
class Client:
    """A registered DOSBox-protocol client."""

    addr: Address
    node: bytes
    server_node: bytes  # the bridge's node as this client sees it (pings come from here)
    registered_at: float
    last_seen: float
    verified: bool = False  # proved it receives at its address (rule 2)
    probes: int = 0  # keepalives sent since it was last heard from
    last_keepalive: float = 0.0
    nonce: bytes = ZERO_NODE  # source node of its probes; echoing it verifies (rule 2)
    # Its own books for the status page: plain ints, bumped where the datagram is handled
    # anyway (received here in _from_client, sent copies by io/ipx_endpoint.py), nothing allocated.
    rx_packets: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0


@dataclass
class Peer:
    """A statically configured RFC 1234 peer."""

    addr: Address
    node: bytes  # RFC 1234 host number: 00 00 + IPv4
    # Its books for the status page, as a client's: plain integers on the hot path.
    rx_packets: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0


@dataclass(frozen=True)
class SwitchEvent:
    """Something an operator wants in the log (registration, expiry...)."""

    # registered | reregistered | rejoined | verified | expired | evicted | shutdown | not_allowed
    kind: str
    addr: Address
    node: bytes


@dataclass(frozen=True)
class SwitchSettings:
    """Tunables of the switch (all times in seconds)."""

    max_clients: int = 256
    idle_timeout: float = 600.0  # a client silent this long is forgotten (ipxbox: 10 min)
    keepalive_interval: float = 5.0  # ping clients that were silent this long
    unverified_probes: int = 3  # keepalives an unverified client gets (then it is left quiet)
    # Keyed nodes prove receipt (rule 2); ``address`` nodes (IPv4 + port) prove nothing.
    node_assignment: Literal["keyed", "address"] = "keyed"
    # What the bridge may send toward addresses that registered but have not proven receipt
    # (rule 2, policy/budget.py): bytes per second per destination IPv4 address and for the
    # whole bridge. Sized from what games send before a match (docs/ipx.md, "Verification"):
    # a DirectPlay enumeration is 82 bytes over IPX, a DOS game's lobby broadcast 50-600
    # bytes a few times a second, the busiest (35 a second) about 10 KiB/s; 16 KiB/s and a
    # 32 KiB burst carry that to one address (a few listeners behind one NAT), and 256 KiB/s
    # in all carries it to 16 listeners at once. A real DOSBox client answers the probe a
    # second after it registers and is limited no longer.
    unverified_address_bytes_per_second: float = 16_384.0
    unverified_address_byte_burst: int = 32_768
    unverified_total_bytes_per_second: float = 262_144.0
    unverified_total_byte_burst: int = 524_288
    # The unverified table, apart from max_clients (verified players): spoofed registrations
    # cannot crowd out real ones, and one address cannot fill it.
    max_unverified: int = 256
    max_unverified_per_ip: int = 16
    dedup_window: float = 2.0
    dedup_max_entries: int = 65_536
    learned_node_ttl: float = 300.0
    max_learned_nodes: int = 4_096
    filtered_sockets: frozenset[int] = field(default=DEFAULT_FILTERED_SOCKETS)
    answer_pings: bool = True
    rejoin: bool = True  # re-admit a known-shaped client without a new registration
    clients_allow: tuple[IPv4Network, ...] = ()  # who may register; empty = anyone

    def allows(self, ip: str) -> bool:
        """May a DOSBox-protocol client at ``ip`` register (``clients_allow``)?"""
        if not self.clients_allow:
            return True
        try:
            address = IPv4Address(ip)
        except ValueError:  # an IPv6 browser player (io/websocket.py): no IPv4 list names it
            return False
        return any(address in net for net in self.clients_allow)


# An unverified client is probed with its first packet (that shows it has its registration
# reply), so a real DOSBox client, which answers pings (docs/protocols.md 4.5), is verified one
# round trip after it first speaks. One that says nothing is probed this long after
# registering, within the reflection limit. Not at once: DOSBox takes the first datagram it
# receives as its registration reply and never asks again (4.2), so a probe that overtook a
# reply, or came in place of a lost one, would give it the broadcast node as its address.
FIRST_PROBE_DELAY: Final = 1.0
# A real client answers a probe within a round trip; one silent this long after it did not.
PROOF_WAIT: Final = 1.0
# Copies to an unproven address leave this much of its reflection limit for a probe and a
# registration reply, so a client kept busy by broadcasts can still prove itself.
COPY_RESERVE: Final = 2 * HEADER_LEN


def _drop(reason: str) -> Decision:
    return Decision(Outcome.DROPPED, reason)


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
        self._server_node_for = server_node_for or (lambda _addr: ZERO_NODE)
        counter = itertools.count(1)
        self._random_bytes = random_bytes or (lambda n: next(counter).to_bytes(n, "big"))
        if node_for is None:
            node_for = (
                keyed_nodes(self._random_bytes(32))
                if settings.node_assignment == "keyed"
                else address_node
            )
        self.node_for = node_for
        self.clients: dict[Address, Client] = {}
        self.peers: dict[Address, Peer] = {}
        self._client_by_node: dict[bytes, Client] = {}
        self._static_nodes: dict[bytes, Address] = {}
        self.evictions: Counter[tuple[str, str]] = Counter() if evictions is None else evictions
        self.forgiven: Counter[tuple[str, str, str]] = Counter() if forgiven is None else forgiven
        # node -> the port it is behind (peer or segment), two tiers (policy/tables.py)
        self._learned: ProvenTable[bytes, Port] = ProvenTable(
            settings.max_learned_nodes, "learned_nodes", self.evictions
        )
        self.segments: dict[Segment, None] = {}
        self._ports: tuple[Port, ...] = ()
        # Keyed by the ingress, and by the bridge whose copy it was when one put it there
        self._flood_targets: dict[object, tuple[Port, ...]] = {}
        self._delegated: dict[object, tuple[Segment, ...]] = {}  # same keys (rule 8)
        self._peer_targets: dict[object, tuple[Port, ...]] = {}
        # Registered, not yet proven (rule 2); insertion order = age, for eviction.
        self._unverified: dict[Address, None] = {}
        # Per IPv4 address, its unverified clients, oldest first (``max_unverified_per_ip``).
        self._unverified_by_ip: dict[str, dict[Address, None]] = {}
        self._dedup: DuplicateFilter[object] = DuplicateFilter(
            settings.dedup_window, settings.dedup_max_entries
        )
        self._egress: EgressGuard[Port] = EgressGuard(EGRESS_WINDOW, settings.dedup_max_entries)
        # Everything aimed at unproven addresses, in bytes per second (rule 2).
        self.reflection = ReflectionLimit(
            settings.unverified_address_bytes_per_second,
            settings.unverified_address_byte_burst,
            settings.unverified_total_bytes_per_second,
            settings.unverified_total_byte_burst,
        )
        self._events: list[SwitchEvent] = []
        # The bridge's node on segments and in its beacons (rule 8): random, unicast and
        # locally administered (IEEE 802 U/L bit), so it never equals a station's MAC.
        raw = bridge_id or b"\x02ipxbr"
        self.bridge_id = bytes(((raw[0] & 0xFC) | 0x02,)) + raw[1:6]
        # Set by the I/O layer: the box's own IPv4 addresses (its broadcasts to an RFC 1234
        # segment come back to its socket) and the RFC 1234 segment a UDP source is on.
        self.own_ips: frozenset[str] = frozenset()
        # WebSocket connections (``connect``): addresses proven by their transport.
        self.connected: set[Address] = set()
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
        # Uplinks (docs/protocols.md 3.9): authenticated ones, by address, with this bridge's
        # role on them ("server": a remote client connected to us; "client": we connected).
        self.uplinks: dict[Address, str] = {}
        self.uplink_server: UplinkServer | None = None  # set when uplink_password is
        self.uplink_normalised: Counter[str] = Counter()  # data packets changed on entry
        for addr in peers:
            self.add_peer(addr)
        for segment in segments:
            self.add_segment(segment)

    # --- membership ------------------------------------------------------------------------

    def add_peer(self, addr: Address) -> None:
        """Add a static RFC 1234 peer (idempotent)."""
        peer = Peer(addr, rfc1234_node(addr[0]))
        self.peers[addr] = peer
        self._static_nodes[peer.node] = addr
        self._rebuild_ports()

    def remove_peer(self, addr: Address) -> None:
        """Forget a static peer (configuration reload); nodes learned behind it go too."""
        peer = self.peers.pop(addr, None)
        if peer is None:
            return
        self._static_nodes.pop(peer.node, None)
        self.bridges.remove_peer(addr)
        self._forget_learned(addr)
        self._rebuild_ports()

    def add_uplink(self, addr: Address, role: str) -> None:
        """An authenticated uplink becomes a port (``role``: ours on it, server or client)."""
        if self.uplinks.get(addr) == role:
            return
        self.uplinks[addr] = role
        if addr in self.clients:  # the address was a DOSBox client; it is an uplink now
            self.remove_client(addr, "uplink")
        self._rebuild_ports()

    def remove_uplink(self, addr: Address) -> None:
        """An uplink ended (closed, expired, lost); the nodes learned behind it go too."""
        if self.uplinks.pop(addr, None) is None:
            return
        self._forget_learned(addr)
        self._rebuild_ports()

    def add_segment(self, segment: Segment) -> None:
        """Attach an interface port (idempotent); the next tick announces the bridge there."""
        if segment in self.segments:
            return
        self.segments[segment] = None
        self.bridges.add_segment(segment)
        self._rebuild_ports()

    def remove_segment(self, segment: Segment) -> None:
        """Detach an interface port (it vanished, or the configuration dropped it).

        The bridges heard there are remembered until their beacons expire (rule 8): an
        interface deleted and re-created under its name is back on the same segment, and a
        bridge that forgot its neighbour there would put the neighbour's packets on the
        segment too until the next beacon; they can then go round bridge, segment, peer up
        to the hop limit, back to their sender too (a copy that comes back through the port
        its first copy came in on is no duplicate, rule 6).
        """
        if self.segments.pop(segment, 0) is not None:
            return
        self.bridges.remove_segment(segment)
        self.watch.forget(segment)
        self._forget_learned(segment)
        self._rebuild_ports()

    def _forget_learned(self, port: Port) -> None:
        learned = self._learned
        for node in [n for n, via, _ in learned.items() if via == port]:
            learned.pop(node)

    def reconfigure(self, settings: SwitchSettings, peers: tuple[Address, ...]) -> None:
        """Apply new tunables and peers; clients stay, unless ``clients_allow`` now bars them."""
        self.settings = settings
        self._dedup.window = settings.dedup_window
        self.reflection.reconfigure(
            settings.unverified_address_bytes_per_second,
            settings.unverified_address_byte_burst,
            settings.unverified_total_bytes_per_second,
            settings.unverified_total_byte_burst,
        )
        for addr in [a for a in self.clients if not settings.allows(a[0])]:
            self.remove_client(addr, "not_allowed")
        for addr in [a for a in self.peers if a not in peers]:
            self.remove_peer(addr)
        for addr in peers:
            if addr not in self.peers:
                self.add_peer(addr)

    def set_beacon_key(self, key: bytes | None) -> None:
        """Sign and check beacons with a new key (reload): what the old one vouched goes."""
        self.bridges.set_key(key)

    def _rebuild_ports(self) -> None:
        self._ports = (*self.clients, *self.peers, *self.uplinks, *self.segments)
        self._flood_targets.clear()
        self._delegated.clear()
        self._peer_targets.clear()
        self.bridges.clear_cache()

    def _topology_changed(self) -> None:
        """Rule 8's view changed: the cached target lists are stale."""
        self._flood_targets.clear()
        self._delegated.clear()
        self._peer_targets.clear()

    def _all_but(self, ingress: Port, bridge: bytes | None = None) -> tuple[Port, ...]:
        """Every port except the ingress, cached until membership changes.

        For a copy another bridge put on a segment, not the ports that bridge serves either.
        """
        key = ingress if bridge is None else (ingress, bridge)
        targets = self._flood_targets.get(key)
        if targets is None:
            shared = self.bridges.skip_for(ingress)
            if bridge is not None:
                shared |= self.bridges.served_by(bridge)
            targets = tuple(p for p in self._ports if p != ingress and p not in shared)
            self._flood_targets[key] = targets
            # the segments left to another bridge: watched (rule 8, ``DeliveryWatch``)
            self._delegated[key] = tuple(s for s in self.segments if s != ingress and s in shared)
        return targets

    def _left_to_others(self, ingress: Port, bridge: bytes | None) -> tuple[Segment, ...]:
        """The segments ``_all_but`` left to another bridge (after it ran for the key)."""
        return self._delegated.get(ingress if bridge is None else (ingress, bridge), ())

    def _peers_but(self, ingress: Port, bridge: bytes | None = None) -> tuple[Port, ...]:
        """Peers and segments except the ingress: where an unknown unicast may go (rule 7)."""
        key = ingress if bridge is None else (ingress, bridge)
        targets = self._peer_targets.get(key)
        if targets is None:
            shared = self.bridges.skip_for(ingress)
            if bridge is not None:
                shared |= self.bridges.served_by(bridge)
            owners: tuple[Port, ...] = (*self.peers, *self.uplinks, *self.segments)
            targets = tuple(p for p in owners if p != ingress and p not in shared)
            self._peer_targets[key] = targets
        return targets

    def connect(self, addr: Address) -> None:
        """A WebSocket connection opened from ``addr`` (``connections.connection_address``).

        Its address is proven by the TCP handshake, so it registers verified, outside the
        reflection limit, and stays while the connection is open: the listener's pings tell
        whether it is alive (rule 2's keepalives and idle expiry are for UDP clients).
        """
        self.connected.add(addr)

    def disconnect(self, addr: Address) -> None:
        """The connection from ``addr`` closed: its client leaves."""
        self.connected.discard(addr)
        self.remove_client(addr, "left")

    def _register(self, addr: Address, now: float) -> Decision:
        client = self.clients.get(addr)
        reflection = self.reflection
        if client is None and addr in self.connected:
            proven = self._admit(addr, self.node_for(addr), now, "registered", verified=True)
            if isinstance(proven, str):
                return _drop(proven)
            reply = build_registration_reply(proven.node, proven.server_node)
            return Decision(Outcome.CONTROL, "registration", replies=((reply, addr),))
        if client is not None:
            # Idempotent: same node, the reply is simply sent again (the first may be lost),
            # within the reflection limit while the address is unproven (rule 2).
            client.last_seen = now
            self._events.append(SwitchEvent("reregistered", addr, client.node))
            reply = build_registration_reply(client.node, client.server_node)
            if not client.verified and not reflection.allow(
                addr[0], len(reply), now, "registration_reply"
            ):
                return _drop("unverified_rate")
            return Decision(Outcome.CONTROL, "registration", replies=((reply, addr),))
        # A newcomer is admitted only if its reply can go now: DOSBox takes the first
        # datagram it receives as the reply (docs/protocols.md 4.2), so a client must get
        # nothing before it. The reply is as long as the registration.
        bound = reflection.check(addr[0], HEADER_LEN, now)
        if bound is not None:
            reflection.refuse("registration_reply", bound)
            return _drop("unverified_rate")
        admitted = self._admit(addr, self.node_for(addr), now, "registered")
        if isinstance(admitted, str):
            return _drop(admitted)
        reply = build_registration_reply(admitted.node, admitted.server_node)
        reflection.spend(addr[0], len(reply), now)
        return Decision(Outcome.CONTROL, "registration", replies=((reply, addr),))

    def _admit(
        self, addr: Address, node: bytes, now: float, kind: str, *, verified: bool = False
    ) -> Client | str:
        """A new client (unverified unless ``verified``), or the drop reason why not (rule 2)."""
        cfg = self.settings
        if len(self.clients) - len(self._unverified) >= cfg.max_clients:
            return "clients_full"
        if not verified:
            room = self._room_for_unverified(addr[0], now)
            if room:
                return room
        client = Client(
            addr,
            node,
            self._server_node_for(addr),
            now,
            now,
            verified=verified,
            last_keepalive=now,
            nonce=ZERO_NODE if verified else self._random_bytes(6),
        )
        self.clients[addr] = client
        if not verified:
            self._unverified[addr] = None
            self._unverified_by_ip.setdefault(addr[0], {})[addr] = None
        self._client_by_node[node] = client
        self._rebuild_ports()
        self._events.append(SwitchEvent(kind, addr, node))
        return client

    def _room_for_unverified(self, ip: str, now: float) -> str:
        """Make room for one more unverified client from ``ip``; the drop reason if none."""
        cfg = self.settings
        same_ip = self._unverified_by_ip.get(ip)
        if same_ip is not None and len(same_ip) >= cfg.max_unverified_per_ip:
            # Players behind one NAT share its address: the newest gets in, its oldest
            # unverified neighbour (a spoofed registration, or a silent client that can
            # rejoin) goes.
            self.remove_client(next(iter(same_ip)), "evicted")
            return ""
        if len(self._unverified) < cfg.max_unverified:
            return ""
        # Make room with the oldest client that had time to prove itself and did not: a
        # second to answer its probe, or, if the limit held it, a second past when it was
        # due. Newer ones may still be waiting for it, or about to send their first packet.
        # The table is in order of admission, and none admitted within PROOF_WAIT can have
        # had its chance: the walk stops there, so a flood of registrations that keeps the
        # table young costs one look per registration, not one per entry (bench/reflect.py:
        # 44-48 us a spoofed registration at 50,000/s from 10,000 addresses).
        clients = self.clients
        for addr in self._unverified:
            if now - clients[addr].registered_at < PROOF_WAIT:
                break
            if self._had_its_chance(addr, now):
                self.remove_client(addr, "evicted")
                return ""
        return "unverified_full"

    def _had_its_chance(self, addr: Address, now: float) -> bool:
        client = self.clients[addr]
        wait = PROOF_WAIT if client.probes else FIRST_PROBE_DELAY + PROOF_WAIT
        return now - client.last_keepalive >= wait

    def _verify(self, client: Client) -> None:
        """The client proved it receives at its address (its node, or its probe's nonce)."""
        client.verified = True
        client.probes = 0
        self._forget_unverified(client.addr)
        self._events.append(SwitchEvent("verified", client.addr, client.node))

    def _forget_unverified(self, addr: Address) -> None:
        if self._unverified.pop(addr, 0) is None:  # it was there (values are None)
            ip = addr[0]
            same_ip = self._unverified_by_ip[ip]
            del same_ip[addr]
            if not same_ip:
                del self._unverified_by_ip[ip]

    def remove_client(self, addr: Address, kind: str) -> None:
        """Forget a client (expiry, shutdown) and log why."""
        client = self.clients.pop(addr, None)
        if client is None:
            return
        self._client_by_node.pop(client.node, None)
        self._forget_unverified(addr)
        self._rebuild_ports()
        self._events.append(SwitchEvent(kind, addr, client.node))

    def pop_events(self) -> list[SwitchEvent]:
        """Return and clear the events recorded since the last call."""
        events, self._events = self._events, []
        return events

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
            return _drop(exc.reason)
        if not header.is_coalesced:
            return self._from_address(src, header, data, now)
        if src not in self.clients and src not in self.peers:
            # Refused whatever it holds: the datagram is refused once, not packet by packet.
            refused = self._refused(src)
            if refused is not None:
                return _drop(refused)
        return self._batch(data, lambda h, p: self._from_address(src, h, p, now))

    def _uplink_control(self, data: bytes, src: Address, now: float) -> Decision:
        """An uplink control packet: the handshake of the server side, or a keepalive."""
        if self.uplinks.get(src) == "client":
            return Decision(Outcome.CONTROL, "uplink")  # its own socket acts on these
        server = self.uplink_server
        if server is None:
            return _drop("uplink_disabled")
        if src in self.peers or src[1] == 0:
            return _drop("uplink_unexpected")
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
            return _drop(exc.reason)
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
            return _drop("unexpected_registration")
        node = header.src_node
        if node in self._client_by_node or node == self.bridge_id:
            return _drop("loop")
        return self._forward(header, data, src, now, (), hops_in=header.hops, learn=True)

    def _refused(self, src: Address) -> str | None:
        """Why nothing from ``src``, neither a client nor a peer, is taken (rule 2), if so."""
        if not self.settings.allows(src[0]):
            return "not_allowed"
        if src[1] == 0:
            # No real client sends from port 0; a reply to it would go nowhere useful.
            return "source_port_zero"
        return None

    def _from_address(self, src: Address, header: IpxHeader, data: bytes, now: float) -> Decision:
        """One IPX packet from a UDP address on the tunnel socket (rules 2-8)."""
        client = self.clients.get(src)
        if client is not None:
            return self._from_client(client, header, data, now)
        if src in self.peers:
            return self._from_peer(src, header, data, now)
        refused = self._refused(src)
        if refused is not None:
            return _drop(refused)
        if header.is_registration:
            return self._register(src, now)
        if is_connection(src):
            return _drop("unregistered")  # a connection registers first; no segment is behind it
        if self.settings.rejoin and header.src_node == self.node_for(src):
            return self._rejoin(src, header, data, now)
        if src[0] in self.own_ips:
            # Our own broadcast to an RFC 1234 segment, looped back to our socket.
            return _drop("own_packet")
        segment = self.udp_segment_for(src[0])
        if segment is not None:
            return self._from_segment(segment, header, data, now, segment, sender=src[0])
        return _drop("unregistered")

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
            return _drop(exc.reason)
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
            return _drop(exc.reason)
        inner: list[tuple[bytes, Decision]] = []
        for packet in packets:
            try:
                header = parse_header(packet)  # the codec checked checksum and length
            except WireError as exc:
                inner.append((packet, _drop(exc.reason)))
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
            return _drop("unexpected_registration")
        if is_beacon(header, data):
            return self._segment_beacon(segment, header, data, now, sender)
        node = header.src_node
        if node in self._client_by_node or node == self.bridge_id:
            return _drop("loop")
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

    def _learn(self, node: bytes, port: Port, now: float) -> None:
        if node in (BROADCAST_NODE, ZERO_NODE) or node in self._static_nodes:
            return
        self._learned.learn(node, port, now)

    def _rejoin(self, src: Address, header: IpxHeader, data: bytes, now: float) -> Decision:
        """Re-admit a client that was registered before (bridge restart, expiry, eviction).

        Its source node is exactly the node this bridge assigns to that UDP address, so it
        already holds a registration reply from us or an earlier run of us: no reply is
        needed, and the game carries on without reconnecting (docs/reliability.md R18). A keyed
        node is known only to whoever received that reply, so the client is verified at
        once; an ``address`` node is predictable, so the packet may be spoofed and the
        client rejoins unverified (rule 2).
        """
        keyed = self.settings.node_assignment == "keyed"
        admitted = self._admit(src, header.src_node, now, "rejoined", verified=keyed)
        if isinstance(admitted, str):
            return _drop(admitted)
        if keyed:
            self._events.append(SwitchEvent("verified", src, admitted.node))
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
        elif header.is_echo and header.dst_node == client.nonce:
            # The answer to a probe only a real receiver at this address has seen (rule 2).
            self._verify(client)
            return Decision(Outcome.CONTROL, "ping_reply")
        elif header.src_node == client.node and self.settings.node_assignment == "keyed":
            # Its keyed node, which only our registration reply told it (rule 2).
            self._verify(client)
        elif client.probes == 0:
            # Its first packet: it has its registration reply (DOSBox sends nothing before),
            # so a probe now cannot be taken for the reply (docs/protocols.md 4.2), and one
            # round trip later it is verified; within the reflection limit (rule 2).
            probe = build_ping(client.nonce)
            if self.reflection.allow(client.addr[0], len(probe), now, "probe"):
                client.probes = 1
                client.last_keepalive = now
                replies = ((probe, client.addr),)
        if header.is_shutdown:
            self.remove_client(client.addr, "shutdown")
            return Decision(Outcome.CONTROL, "shutdown")
        if header.src_node != client.node:
            return _drop("spoofed_source")
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
            return _drop("unexpected_registration")
        if is_beacon(header, data):
            return self._peer_beacon(src, header, data, now)
        node = header.src_node
        if node in self._client_by_node or node == self.bridge_id:
            return _drop("loop")
        if self.segments and header.dst_node == self.bridge_id:
            return Decision(Outcome.CONTROL, "to_bridge", header=header)
        return self._forward(header, data, src, now, (), hops_in=header.hops, learn=True)

    def _lookup(self, node: bytes, now: float) -> Port | None:
        client = self._client_by_node.get(node)
        if client is not None:
            return client.addr
        static = self._static_nodes.get(node)
        if static is not None:
            return static
        learned = self._learned.get(node)
        if learned is not None and now - learned[1] < self.settings.learned_node_ttl:
            return learned[0]
        return None

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
                self._learn(header.src_node, ingress, now)
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
            self._learn(header.src_node, ingress, now)
        hops = hops_in + 1
        if hops >= MAX_HOPS:
            return Decision(Outcome.DROPPED, "hop_limit", replies=replies)
        if header.is_broadcast:
            kind = "broadcast"
            targets = self._all_but(ingress, bridge)
            # Watched: what came over a peer link or uplink and was left to another bridge
            # for a segment (that bridge got it the same way). Not what came from a segment:
            # the bridges there heard it themselves, and a copy sent late into a segment
            # would come back to them as a new packet (measured: a storm across kinds).
            if self.bridges.any_heard and not isinstance(ingress, Segment):
                left = self._left_to_others(ingress, bridge)
                if left:
                    targets = self._watch_left(identity, data, hops, left, targets, now)
        else:
            owner = self._lookup(header.dst_node, now)
            if owner is None:
                # Only peers and segments may own an unknown node; a DOSBox client would take
                # it (rule 7).
                targets = self._peers_but(ingress, bridge)
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
            targets, held = self._within_limit(targets, len(data), now)
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

    def _within_limit(
        self, targets: tuple[Port, ...], size: int, now: float
    ) -> tuple[tuple[Port, ...], int]:
        """Leave out unverified clients the reflection limit refuses (rule 2); count them."""
        unverified = self._unverified
        if unverified.keys().isdisjoint(targets):
            return targets, 0
        kept: list[Port] = []
        held = 0
        allow = self.reflection.allow
        for addr in targets:
            if (
                isinstance(addr, tuple)
                and addr in unverified
                and not allow(addr[0], size, now, "copy", COPY_RESERVE)
            ):
                held += 1
                continue
            kept.append(addr)
        return tuple(kept), held

    def probe_packets(
        self, dst_socket: int, src_socket: int, payload: bytes, now: float
    ) -> list[tuple[bytes, Port]]:
        """An IPX broadcast from the bridge itself to every client and segment (probing).

        Each copy carries the bridge's node as that client sees it (on segments, the bridge
        id), so replies come back addressed to the bridge (``to_bridge``) and are inspected
        there. Unverified clients get a probe only within the reflection limit (rule 2).
        """
        out: list[tuple[bytes, Port]] = []
        for client in self.clients.values():
            packet = build_broadcast(client.server_node, dst_socket, src_socket, payload)
            if not client.verified and not self.reflection.allow(
                client.addr[0], len(packet), now, "dplay_probe"
            ):
                continue
            out.append((packet, client.addr))
        if self.segments:
            packet = build_broadcast(self.bridge_id, dst_socket, src_socket, payload)
            out += [(packet, segment) for segment in self.segments]
        return out

    # --- timers ----------------------------------------------------------------------------

    def tick(self, now: float) -> list[tuple[bytes, Port]]:
        """Expire silent clients and old records; return keepalives to send.

        Every client is kept until ``idle_timeout`` (rule 2). One that never answered is not
        pinged for ever: after ``unverified_probes`` keepalives it gets no more, so a spoofed
        registration draws a bounded number of keepalives toward its victim (docs/reliability.md
        I4), while an IPXWrapper host that never answers pings stays registered.
        """
        cfg = self.settings
        out: list[tuple[bytes, Port]] = self.beacons(now) + self.watch_due(now)
        if self.uplink_server is not None:
            keepalives, expired = self.uplink_server.tick(now)
            out += keepalives
            for addr in expired:
                self.remove_uplink(addr)
        first_probe = min(FIRST_PROBE_DELAY, cfg.keepalive_interval)
        connected = self.connected
        for client in list(self.clients.values()):
            if connected and client.addr in connected:
                continue  # a WebSocket connection: alive while it is open (``connect``)
            silent = now - client.last_seen
            if silent >= cfg.idle_timeout:
                self.remove_client(client.addr, "expired")
                continue
            if client.verified:
                if silent < cfg.keepalive_interval:
                    continue
                if now - client.last_keepalive < cfg.keepalive_interval:
                    continue
            else:
                if client.probes >= cfg.unverified_probes:
                    continue
                wait = first_probe if client.probes == 0 else cfg.keepalive_interval
                if now - client.last_keepalive < wait:
                    continue
                # A probe is traffic toward an unproven address too: within the reflection
                # limit (rule 2). A real DOSBox client answers it, even when it only listens
                # (docs/protocols.md 4.5), and is then limited no longer.
                if not self.reflection.allow(client.addr[0], HEADER_LEN, now, "probe"):
                    continue
            client.probes += 1
            client.last_keepalive = now
            # An unverified client's probe comes from its nonce; its answer proves receipt.
            source = client.server_node if client.verified else client.nonce
            out.append((build_ping(source), client.addr))
        self._dedup.purge(now)
        self._egress.purge(now)
        self.reflection.purge(now)
        self._learned.expire(now, cfg.learned_node_ttl)
        return out

    def beacons(self, now: float) -> list[tuple[bytes, Port]]:
        """Rule 8: announce the bridge on every segment and to every peer; forget the silent."""
        return self.bridges.beacons(now)

    def bridges_on(self, segment: Segment) -> tuple[bytes, ...]:
        """The other bridges trusted on ``segment`` within ``BEACON_TTL`` (rule 8)."""
        return self.bridges.bridges_on(segment)

    def learned_segment_nodes(self) -> list[tuple[bytes, Segment, float]]:
        """(node, segment, last heard) of every station learned on an interface port."""
        return [
            (n, via, seen) for n, via, seen in self._learned.items() if isinstance(via, Segment)
        ]

    def learned_on(self, port: Port) -> int:
        """How many nodes are currently learned behind ``port``."""
        return sum(1 for _, via, _ in self._learned.items() if via == port)

    @property
    def learned_nodes(self) -> int:
        """How many nodes are currently known behind peers."""
        return len(self._learned)


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
