"""Rule 8 of the IPX switch: the other bridges on this bridge's segments, and their ports.

The switch (``policy/switch.py``) keeps its rules in one numbered list; this is rule 8 of
it, and this module runs it:

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
   copy must appear, or this bridge sends it 0.2 s later. Then, for the trusted bridges:

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

This module keeps what the bridge knows of the others (their beacons on each segment and
over the peer link, which of them is trusted) and answers the switch's questions about a
packet: which ports another bridge serves for it (``skip_for``), which ports a copy another
bridge put on a segment has already reached (``served_by``), and whose copy a frame is
(``bridge_sent``).

Beacons (``wire.ipx.build_beacon``) go out every ``BEACON_INTERVAL`` on each segment (with
that segment's tag) and to each peer (with every tag); one heard within ``BEACON_TTL``
counts. With the shared key a beacon is signed and carries a sequence (the sender's wall
clock in ms) that must increase. The highest sequence of each bridge is remembered for
``SEQ_MEMORY`` seconds per way it came by (a segment or a peer link; at most
``MAX_REMEMBERED_SEQS``, the least recently heard forgotten first), far beyond its record's
expiry, so a recording replayed once the bridge has fallen silent is refused
(``beacon_replay``) instead of bringing it back.

Pure: ``now`` is passed in; the switch owns the ports and is told when the view changes.
"""

import builtins
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from ipxbridge.policy.bucket import TokenBucket
from ipxbridge.policy.ports import Address, Port, Segment
from ipxbridge.wire.errors import WireError
from ipxbridge.wire.ipx import (
    MAX_BEACON_PEERS,
    MAX_BEACON_TAGS,
    TAG_LEN,
    Beacon,
    IpxHeader,
    build_beacon,
    parse_beacon,
)

# How often a bridge announces itself, and how long an announcement counts.
BEACON_INTERVAL: Final = 5.0
BEACON_TTL: Final = 3 * BEACON_INTERVAL
MAX_BRIDGES_PER_SEGMENT: Final = 16  # other bridges remembered per segment
# Immediate beacon answers: one every BEACON_ANSWER_GAP on average, ANSWER_BURST at once (two
# bridges meeting need an answer each way twice: to hear each other, then to echo each
# other's tag), so a stranger's beacons can never draw more than that.
BEACON_ANSWER_GAP: Final = 0.2
ANSWER_BURST: Final = 4
# Signed sequences remembered beyond a record's expiry (replays of a silent bridge).
SEQ_MEMORY: Final = 24 * 3600.0
MAX_REMEMBERED_SEQS: Final = 4096  # (bridge, way) pairs
# The first byte of a segment's tag names its kind, so a tag copied from one kind's beacons
# to another kind of port is refused.
KIND_CODE: Final = {"ethernet": 1, "ipxwrapper": 2, "rfc1234": 3}


# What the switch is told of a beacon: ``"beacon"`` or the drop reason, and whether to
# answer at once with ``announcements``.
Verdict = tuple[str, bool]


class HasNode(Protocol):
    """A peer as the switch keeps it: its RFC 1234 node (00 00 + IPv4)."""

    @property
    def node(self) -> bytes: ...  # noqa: D102


@dataclass
class HeardBridge:
    """Another bridge's last beacon on one segment."""

    at: float
    seq: int
    tag: bytes
    peers: frozenset[bytes]  # as the beacon lists them (trusted only when signed)
    signed: bool
    # the link-layer source of its beacons: its port's MAC or IP (builtins.: mypyc looks a
    # dataclass field's type up in the module's globals, not builtins)
    sender: builtins.object = None
    # the tags of the bridges it hears on this segment, as its beacon echoes them
    echoed: frozenset[bytes] = frozenset()


@dataclass(frozen=True)
class PeerBridge:
    """What a peer said of itself in its last beacon over the peer link."""

    at: float
    seq: int
    bridge_id: bytes
    tags: frozenset[bytes]  # the tags of the segments it is on
    peers: frozenset[bytes]


class SegmentBridges:
    """What this bridge knows of the others, and the ports they serve (module docstring)."""

    def __init__(
        self,
        bridge_id: bytes,
        *,
        segments: Mapping[Segment, None],
        peers: Mapping[Address, HasNode],
        key: bytes | None,
        clock: Callable[[], int],
        random_bytes: Callable[[int], bytes],
        evictions: Counter[tuple[str, str]],
        on_change: Callable[[], None],
    ) -> None:
        """Rule 8's state for the bridge ``bridge_id``.

        Args:
            bridge_id: this bridge's id (its node on segments and in beacons).
            segments: the switch's segment table, read live.
            peers: the switch's peer table, read live.
            key: the shared secret that signs and checks beacons; None: beacons are trusted
                only when confirmed through the peer link.
            clock: the sequence number of the next beacon.
            random_bytes: where segment tags come from.
            evictions: the switch's eviction counter (``("bridges", reason)``).
            on_change: called whenever the ports other bridges serve may have changed.
        """
        self.bridge_id = bridge_id
        self._segments = segments
        self._peers = peers
        self._key = key or None
        self._clock = clock
        self._random_bytes = random_bytes
        self._evictions = evictions
        self._on_change = on_change
        self._tags: dict[Segment, bytes] = {}  # this bridge's tag on each segment
        self._peer_info: dict[Address, PeerBridge] = {}  # what each peer said
        # segment -> bridge id -> its last beacon there; least recently heard first
        self._heard: dict[Segment, OrderedDict[bytes, HeardBridge]] = {}
        # (bridge id, segment or peer address) -> (highest signed sequence, when heard);
        # least recently heard first
        self._seqs: OrderedDict[tuple[bytes, Port], tuple[int, float]] = OrderedDict()
        # segment -> link-layer source -> the trusted bridge whose port it is, built when
        # first asked: a segment packet asks once, not once per bridge heard
        self._senders: dict[Segment, dict[object, bytes]] = {}
        self._next_beacon = 0.0
        self._answers = TokenBucket(1 / BEACON_ANSWER_GAP, ANSWER_BURST)

    # --- membership ------------------------------------------------------------------------

    @property
    def any_heard(self) -> bool:
        """Whether any other bridge was heard on a segment (the switch's fast test)."""
        return bool(self._heard)

    def add_segment(self, segment: Segment) -> None:
        """A new port: a tag for it, and announce the bridge there at the next tick."""
        self._tags[segment] = bytes((KIND_CODE[segment.kind],)) + self._random_bytes(TAG_LEN - 1)
        self._next_beacon = 0.0

    def remove_segment(self, segment: Segment) -> None:
        """A port closed.

        The bridges heard there are remembered until their beacons expire
        (policy/switch.py ``remove_segment`` says why).
        """
        self._tags.pop(segment, None)

    def remove_peer(self, addr: Address) -> None:
        """A peer removed from the configuration: what it said goes."""
        self._peer_info.pop(addr, None)

    def set_key(self, key: bytes | None) -> None:
        """Sign and check beacons with a new key (reload): what the old one vouched goes."""
        key = key or None
        if key == self._key:
            return
        self._key = key
        self._heard.clear()
        self._peer_info.clear()
        self._seqs.clear()
        self._changed()
        self._next_beacon = 0.0  # announce under the new key at the next tick

    def clear_cache(self) -> None:
        """The switch's ports changed."""
        self._senders.clear()

    def _changed(self) -> None:
        self._senders.clear()
        self._on_change()

    # --- trust -----------------------------------------------------------------------------

    def peer_identity(self, addr: Address) -> bytes:
        """How bridges name a peer in beacons: its bridge id, else ``00 00`` + IPv4."""
        info = self._peer_info.get(addr)
        return info.bridge_id if info is not None else self._peers[addr].node

    def _echoes_own(self, heard: HeardBridge, segment: Segment) -> bool:
        """Its beacon echoes this bridge's tag for ``segment``: it hears this bridge there."""
        own = self._tags.get(segment)
        return own is not None and own in heard.echoed

    def _trusted(self, bridge: bytes, heard: HeardBridge, segment: Segment) -> bool:
        """Is a bridge heard on a segment really there, and there now?

        Its beacon echoes this bridge's tag for that segment: it hears this bridge there (a
        beacon recorded on another segment, or forwarded from one, echoes the tags heard
        *there*). And it is signed with the shared key, or, without a key, confirmed through
        the peer link: it is a configured peer's bridge id and the tag it sent is one that
        peer declared.
        """
        if not self._echoes_own(heard, segment):
            return False
        if heard.signed:
            return True
        if self._key is not None:
            return False
        return any(
            info.bridge_id == bridge and heard.tag in info.tags for info in self._peer_info.values()
        )

    def _peers_of(self, bridge: bytes, heard: HeardBridge) -> frozenset[bytes]:
        """The peers of a trusted bridge: from its signed beacon, else from its peer link.

        An unsigned segment beacon's peer list is never believed: its tag can be copied by
        anyone who heard the real one.
        """
        if heard.signed:
            return heard.peers
        for info in self._peer_info.values():
            if info.bridge_id == bridge:
                return info.peers
        return frozenset()

    def trusted_bridges(self, segment: Segment) -> dict[bytes, HeardBridge]:
        """The bridges trusted on ``segment`` now."""
        heard = self._heard.get(segment)
        if not heard:
            return {}
        return {b: h for b, h in heard.items() if self._trusted(b, h, segment)}

    def bridges_on(self, segment: Segment) -> tuple[bytes, ...]:
        """The other bridges trusted on ``segment`` within ``BEACON_TTL``."""
        if segment not in self._segments:
            return ()  # remembered while it is detached (``remove_segment``), not on it now
        return tuple(self.trusted_bridges(segment))

    # --- the switch's questions ------------------------------------------------------------

    def skip_for(self, ingress: Port) -> frozenset[Port]:
        """The ports another bridge serves for a packet from ``ingress``."""
        if isinstance(ingress, tuple) and ingress in self._peers:
            # A peer that has the ingress peer as a peer too gets the packet from it directly:
            # a copy from here would reach it first at times, and it would take this bridge
            # for the sender and leave the packet off the segments this bridge is on.
            identity = self.peer_identity(ingress)
            direct = frozenset(
                a for a, info in self._peer_info.items() if a != ingress and identity in info.peers
            )
            return direct | self._segments_skipped(ingress)
        return self._segments_skipped(ingress)

    def _segments_skipped(self, ingress: Port) -> frozenset[Port]:
        """The segments where another bridge puts a packet from ``ingress``."""
        if not self._heard:
            return frozenset()
        own = self.bridge_id
        trusted = {seg: self.trusted_bridges(seg) for seg in self._segments}
        out: set[Port] = set()
        if isinstance(ingress, Segment):
            here = trusted.get(ingress, {})
            lower = {b for b in here if b < own}
            if lower:
                out.update(
                    seg for seg, there in trusted.items() if seg != ingress and lower & there.keys()
                )
            # A peer on the ingress segment heard the packet there itself.
            out.update(a for a in self._peers if self.peer_identity(a) in here)
            return frozenset(out)
        if ingress not in self._peers:
            return frozenset()
        identity = self.peer_identity(ingress)
        for segment, there in trusted.items():
            if identity in there:
                out.add(segment)  # the peer is on this segment itself
            elif any(b < own and identity in self._peers_of(b, h) for b, h in there.items()):
                out.add(segment)
        return frozenset(out)

    def served_by(self, bridge: bytes) -> frozenset[Port]:
        """The ports where ``bridge`` puts a packet itself.

        The segments it is trusted on, and its peer link.
        """
        segments = {seg for seg in self._segments if bridge in self.trusted_bridges(seg)}
        links = {a for a, info in self._peer_info.items() if info.bridge_id == bridge}
        return frozenset(segments | links)

    def bridge_sent(self, segment: Segment, sender: object) -> bytes | None:
        """The trusted bridge that put a packet on ``segment``, if any.

        ``sender`` is the frame's source MAC or the datagram's source IP.
        """
        if sender is None:
            return None
        senders = self._senders.get(segment)
        if senders is None:
            trusted = self.trusted_bridges(segment).items()
            senders = {h.sender: b for b, h in trusted if h.sender is not None}
            self._senders[segment] = senders
        return senders.get(sender)

    # --- beacons ---------------------------------------------------------------------------

    def _replayed(self, bridge: bytes, where: Port, seq: int, now: float) -> bool:
        """Whether a signed beacon is no newer than one already heard by the same way.

        The same way: from ``bridge``, on the same segment or peer address.

        Remembered for ``SEQ_MEMORY``, beyond the record's expiry; a newer one is
        remembered. (One announcement round sends one sequence by every way.)
        """
        if self._key is None:
            return False
        seqs = self._seqs
        key = (bridge, where)
        last = seqs.get(key)
        if last is not None and now - last[1] < SEQ_MEMORY and seq <= last[0]:
            return True
        seqs[key] = (seq, now)
        seqs.move_to_end(key)
        if len(seqs) > MAX_REMEMBERED_SEQS:
            seqs.popitem(last=False)
        return False

    def _read(self, header: IpxHeader, data: bytes) -> Beacon | str:
        """The beacon, its signature checked if there is a key, or the codec's drop reason."""
        try:
            return parse_beacon(header, data, self._key)
        except WireError as exc:
            return exc.reason

    def peer_beacon(self, src: Address, header: IpxHeader, data: bytes, now: float) -> Verdict:
        """A peer's beacon over the peer link (its bridge id, tags and peers), judged."""
        beacon = self._read(header, data)
        if isinstance(beacon, str):
            return beacon, False
        if self._replayed(beacon.bridge_id, src, beacon.seq, now):
            return "beacon_replay", False
        before = self._peer_info.get(src)
        info = PeerBridge(now, beacon.seq, beacon.bridge_id, beacon.tags, beacon.peers)
        self._peer_info[src] = info
        if before is not None and (before.bridge_id, before.tags, before.peers) == (
            info.bridge_id,
            info.tags,
            info.peers,
        ):
            return "beacon", False
        self._changed()
        # New or changed (it just started, or opened a port): answer at once, on the peer
        # link and on every segment, so that both sides can confirm each other before the
        # next beacon tick.
        return "beacon", bool(self._segments) and self._may_answer(now)

    def segment_beacon(
        self, segment: Segment, header: IpxHeader, data: bytes, now: float, sender: object
    ) -> Verdict:
        """Another bridge's beacon on a segment, judged: remembered, believed only if trusted."""
        beacon = self._read(header, data)
        if isinstance(beacon, str):
            return beacon, False
        bridge = beacon.bridge_id
        if bridge == self.bridge_id:
            return "own_packet", False
        if beacon.tag[0] != KIND_CODE[segment.kind]:
            return "beacon_unverified", False  # a tag of another kind of port, copied here
        if self._replayed(bridge, segment, beacon.seq, now):
            return "beacon_replay", False
        seen = self._heard.setdefault(segment, OrderedDict())
        before = seen.pop(bridge, None)
        heard = HeardBridge(
            now, beacon.seq, beacon.tag, beacon.peers, beacon.signed, sender, beacon.tags
        )
        seen[bridge] = heard
        if len(seen) > MAX_BRIDGES_PER_SEGMENT:
            self._evict_bridge(seen, segment)
        was_trusted = before is not None and self._trusted(bridge, before, segment)
        trusted = self._trusted(bridge, heard, segment)
        if (was_trusted or trusted) and (
            was_trusted != trusted
            or before is None
            or (before.peers, before.sender) != (heard.peers, heard.sender)
        ):
            self._changed()  # only trusted bridges shape the targets
        # A bridge new here (it just started): answer at once, here and to the peers (which
        # may be that bridge), so that each echoes the other's tag within two round trips
        # and neither puts the other's packets on the segment for a beacon interval.
        here = segment in self._segments
        if not trusted:
            # Remembered (bounded), so a peer's confirmation or an echo that arrives later
            # counts, but it changes nothing until then: a bystander's forgery can at worst
            # leave a duplicate, never silence. A beacon heard on another segment than it was
            # sent on echoes that segment's tags, not this one's (``beacon_unbound``).
            unbound = (
                (heard.signed or self._key is None)
                and segment in self._tags
                and not self._echoes_own(heard, segment)
            )
            reason = "beacon_unbound" if unbound else "beacon_unverified"
            return reason, before is None and here and self._may_answer(now)
        return "beacon", not was_trusted and here and self._may_answer(now)

    def _evict_bridge(self, seen: OrderedDict[bytes, HeardBridge], segment: Segment) -> None:
        """Make room on a full segment: the least recently heard untrusted bridge goes first."""
        victim = next((b for b, h in seen.items() if not self._trusted(b, h, segment)), None)
        reason = "unproven"
        if victim is None:
            victim, reason = next(iter(seen)), "proven"
            self._changed()  # a trusted bridge goes: the cached targets with it
        del seen[victim]
        self._evictions[("bridges", reason)] += 1

    def _may_answer(self, now: float) -> bool:
        """Immediate beacon answers are rate-limited: a beacon never triggers a burst."""
        return self._answers.take(now)

    def beacons(self, now: float) -> list[tuple[bytes, Port]]:
        """Announce the bridge on every segment and to every peer; forget the silent.

        Only a bridge with segments announces itself: the rule is about segments.
        """
        if now < self._next_beacon:
            return []
        self._next_beacon = now + BEACON_INTERVAL
        for seen in self._heard.values():
            for bridge, heard in list(seen.items()):
                if now - heard.at >= BEACON_TTL:
                    del seen[bridge]
                    self._changed()
        for addr, info in list(self._peer_info.items()):
            if now - info.at >= BEACON_TTL:
                # Its tags confirm nothing any more: a port it closed is not believed forever.
                del self._peer_info[addr]
                self._changed()
        seqs = self._seqs
        while seqs and now - next(iter(seqs.values()))[1] >= SEQ_MEMORY:
            seqs.popitem(last=False)
        if not self._segments:
            return []
        return self.announcements()

    def _echo(self, segment: Segment) -> tuple[bytes, ...]:
        """The tags of the bridges heard on ``segment``, trusted or not.

        What a segment beacon echoes: proof that this bridge hears them there now.
        """
        heard = self._heard.get(segment)
        if not heard:
            return ()
        return tuple(dict.fromkeys(h.tag for h in heard.values()))[:MAX_BEACON_TAGS]

    def tag(self, segment: Segment) -> bytes | None:
        """This bridge's tag on ``segment`` (what the other bridges there must echo)."""
        return self._tags.get(segment)

    def announcements(self) -> list[tuple[bytes, Port]]:
        """This bridge's beacon on each segment (with its tag) and to each peer (all tags)."""
        peers = tuple(self.peer_identity(a) for a in self._peers)[:MAX_BEACON_PEERS]
        key = self._key
        seq = self._clock()
        out: list[tuple[bytes, Port]] = [
            (
                build_beacon(
                    self.bridge_id,
                    peers=peers,
                    seq=seq,
                    tag=tag,
                    tags=self._echo(segment),
                    key=key,
                ),
                segment,
            )
            for segment, tag in self._tags.items()
        ]
        tags = tuple(self._tags.values())[:MAX_BEACON_TAGS]
        out += [
            (build_beacon(self.bridge_id, p.node, peers, seq=seq, tags=tags, key=key), addr)
            for addr, p in self._peers.items()
        ]
        return out


# --- delivery watch --------------------------------------------------------------------------

WATCH_WINDOW: Final = 0.2  # seconds another bridge's copy has to appear on a segment
MAX_WATCHED: Final = 4096  # broadcasts watched at once; past that, sent at once
WATCH_OUTCOMES: Final = ("seen", "missing", "full")


@dataclass
class DeliveryWatch:
    """No belief about another bridge may silence a segment (rule 8).

    A broadcast that came over a peer link or an uplink and that this bridge leaves to
    another bridge for a segment (that bridge got it from the same peer) is watched there:
    when
    the other bridge's copy appears on the segment within ``window`` it is ``seen``;
    otherwise this bridge sends it itself (``missing``), so a forged, replayed or stale
    belief costs at most the window, never the packet. At most ``max_entries`` are watched;
    past that a broadcast is sent at once (``full``: a duplicate, never a silence).
    Per segment the ``missing`` ones are also counted for the log (``take_missing``).
    """

    window: float = WATCH_WINDOW
    max_entries: int = MAX_WATCHED
    # (packet identity, segment) -> (deadline, the copy to send); oldest deadline first
    _pending: OrderedDict[tuple[int, Segment], tuple[float, bytes]] = field(
        default_factory=OrderedDict
    )
    outcomes: Counter[str] = field(default_factory=Counter)
    _missing: Counter[Segment] = field(default_factory=Counter)

    @property
    def pending(self) -> bool:
        """Whether anything is watched (the switch's fast test)."""
        return bool(self._pending)

    def expect(self, identity: int, segment: Segment, packet: bytes, now: float) -> bool:
        """Watch for another bridge's copy of ``packet`` on ``segment``.

        Returns:
            False when the watch is full: the caller sends the packet itself now.
        """
        pending = self._pending
        key = (identity, segment)
        if key in pending:
            return True  # a repeat of a packet already watched there
        if len(pending) >= self.max_entries:
            self.outcomes["full"] += 1
            return False
        pending[key] = (now + self.window, packet)
        return True

    def seen(self, identity: int, segment: Segment) -> None:
        """A copy of the packet ``identity`` arrived on ``segment``."""
        if self._pending.pop((identity, segment), None) is not None:
            self.outcomes["seen"] += 1

    def due(self, now: float) -> list[tuple[bytes, Port]]:
        """The watched copies whose window passed: for this bridge to send itself."""
        pending = self._pending
        out: list[tuple[bytes, Port]] = []
        while pending:
            key, (deadline, packet) = next(iter(pending.items()))
            if deadline > now:
                break
            del pending[key]
            out.append((packet, key[1]))
            self._missing[key[1]] += 1
        self.outcomes["missing"] += len(out)
        return out

    def take_missing(self) -> dict[Segment, int]:
        """The ``missing`` copies per segment since the last call (for the log)."""
        missing = dict(self._missing)
        self._missing.clear()
        return missing

    def forget(self, segment: Segment) -> None:
        """A segment closed: nothing is watched there any more."""
        for key in [k for k in self._pending if k[1] == segment]:
            del self._pending[key]
