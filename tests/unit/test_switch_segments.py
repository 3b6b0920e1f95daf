"""Segments as switch ports: rules 6-8 for native, IPXWrapper and RFC 1234 ports.

Pure: the switch is driven with IPX packets and an injected clock, as the I/O layer drives
it (``io/segments.py`` hands ``handle_segment`` the IPX packet of each frame or datagram,
an Ethernet port with the frame's framing as ``via``).
"""

import pytest

from ipxbridge.policy.bridges import (
    ANSWER_BURST,
    BEACON_ANSWER_GAP,
    BEACON_INTERVAL,
    BEACON_TTL,
    MAX_BRIDGES_PER_SEGMENT,
)
from ipxbridge.policy.switch import (
    Address,
    IpxSwitch,
    Outcome,
    PortKind,
    Segment,
    SwitchSettings,
)
from ipxbridge.wire import ipx
from ipxbridge.wire.errors import WireError
from ipxbridge.wire.ethernet import Framing
from tests.unit.test_switch import NODE_FOR, SERVER_NODE, join, node

ETH0 = Segment("eth0", PortKind.ETHERNET)
WRAP = Segment("wg0", PortKind.IPXWRAPPER)
RFC = Segment("eth1", PortKind.RFC1234)
A: Address = ("10.0.0.11", 40001)
B: Address = ("10.0.0.12", 40002)
PEER: Address = ("192.0.2.50", 213)

ME = bytes.fromhex("020000000005")  # this bridge's id (locally administered, unicast)
LOWER = bytes.fromhex("020000000001")  # another bridge with a lower id
HIGHER = bytes.fromhex("020000000009")
PEER_ID = bytes.fromhex("0200000000aa")  # the bridge id PEER announces
NATIVE = bytes.fromhex("00a0c9123456")  # a DOS PC on eth0: its MAC is its node
NATIVE2 = bytes.fromhex("00a0c9abcdef")
UNKNOWN = bytes.fromhex("00a0c9000001")
GAME_SOCKET = 0x4545  # any game socket outside the default filter


def switch(*, peers: tuple[Address, ...] = (PEER,), clients: bool = True) -> IpxSwitch:
    """Three segments, a peer and (unless told not to) two verified DOSBox clients."""
    sw = IpxSwitch(
        SwitchSettings(),
        peers,
        lambda _addr: SERVER_NODE,
        segments=(ETH0, WRAP, RFC),
        bridge_id=ME,
        node_for=NODE_FOR,
    )
    if clients:
        for addr in (A, B):
            join(sw, addr)
    return sw


def packet(
    src: bytes, dst: bytes = ipx.BROADCAST_NODE, *, hops: int = 0, data: bytes = b"x"
) -> bytes:
    return ipx.build_packet(
        dst_node=dst,
        dst_socket=GAME_SOCKET,
        src_node=src,
        src_socket=GAME_SOCKET,
        hops=hops,
        payload=data,
    )


def hops_of(data: bytes | None) -> int:
    assert data is not None
    return ipx.parse_header(data).hops


# --- rule 7 across segments -----------------------------------------------------------------


def test_broadcast_from_a_segment_goes_everywhere_but_back() -> None:
    sw = switch()
    d = sw.handle_segment(ETH0, packet(NATIVE), 1.0, via=Framing.LLC)
    assert (d.outcome, d.detail) == (Outcome.FORWARDED, "broadcast")
    assert set(d.targets) == {A, B, PEER, WRAP, RFC}
    assert ETH0 not in d.targets
    assert d.header is not None  # inspected like any other forwarded packet


def test_broadcast_from_a_client_reaches_every_segment() -> None:
    sw = switch()
    d = sw.handle(packet(node(A)), A, 1.0)
    assert set(d.targets) == {B, PEER, ETH0, WRAP, RFC}


def test_learned_unicast_goes_to_the_segment_only() -> None:
    sw = switch()
    sw.handle_segment(ETH0, packet(NATIVE), 1.0, via=Framing.LLC)  # learns NATIVE on eth0
    assert sw.learned_on(ETH0) == 1
    d = sw.handle(packet(node(A), NATIVE, data=b"hello"), A, 2.0)
    assert (d.detail, d.targets) == ("unicast", (ETH0,))
    # And back: the native station answers the client's node.
    back = sw.handle_segment(ETH0, packet(NATIVE, node(A), data=b"hi"), 3.0, via=Framing.LLC)
    assert (back.detail, back.targets) == ("unicast", (A,))
    # A unicast to a node learned on the ingress segment is not sent back there.
    same = sw.handle_segment(ETH0, packet(NATIVE2, NATIVE), 4.0, via=Framing.LLC)
    assert same.detail == "destination_on_ingress"


def test_unknown_unicast_goes_to_peers_and_segments_never_to_dosbox_clients() -> None:
    sw = switch()
    d = sw.handle_segment(ETH0, packet(NATIVE, UNKNOWN), 1.0, via=Framing.LLC)
    assert d.detail == "flooded"
    assert set(d.targets) == {PEER, WRAP, RFC}
    assert not {A, B} & set(d.targets)  # a DOSBox client would take it as its own
    from_client = sw.handle(packet(node(A), UNKNOWN), A, 2.0)
    assert from_client.detail == "flooded"
    assert set(from_client.targets) == {PEER, ETH0, WRAP, RFC}
    # No peer and no other segment to try: nobody may own it.
    lone = IpxSwitch(SwitchSettings(), segments=(ETH0,), bridge_id=ME)
    assert lone.handle_segment(ETH0, packet(NATIVE, UNKNOWN), 1.0).detail == ("unknown_destination")


# --- rule 8: beacons ------------------------------------------------------------------------

KEY = b"a shared secret of the bridges on this LAN"


def tag(segment: Segment, n: int) -> bytes:
    """A segment tag as bridges make them: the kind's code, then random bytes."""
    code = {PortKind.ETHERNET: 1, PortKind.IPXWRAPPER: 2, PortKind.RFC1234: 3}[segment.kind]
    return bytes((code,)) + n.to_bytes(7, "big")


def keyed(*, peers: tuple[Address, ...] = (PEER,)) -> IpxSwitch:
    """A switch whose beacons are signed with ``KEY`` (``ipx.bridge_key_file``)."""
    sw = IpxSwitch(
        SwitchSettings(),
        peers,
        lambda _addr: SERVER_NODE,
        segments=(ETH0, WRAP, RFC),
        bridge_id=ME,
        beacon_key=KEY,
        node_for=NODE_FOR,
    )
    for addr in (A, B):
        join(sw, addr)
    return sw


def peer_says(
    sw: IpxSwitch, tags: tuple[bytes, ...], now: float = 1.0, *, peers: tuple[bytes, ...] = ()
) -> None:
    """PEER's beacon over the peer link: it is PEER_ID, on segments with these tags."""
    beacon = ipx.build_beacon(
        PEER_ID, ipx.rfc1234_node(PEER[0]), peers, seq=int(now * 1000), tags=tags
    )
    assert sw.handle(beacon, PEER, now).detail == "beacon"


def echo(sw: IpxSwitch, segment: Segment) -> tuple[bytes, ...]:
    """What a bridge that hears ``sw`` on ``segment`` echoes there: its tag (rule 8)."""
    own = sw.bridges.tag(segment)
    return (own,) if own is not None else ()


def heard(
    sw: IpxSwitch,
    segment: Segment,
    bridge: bytes,
    n: int,
    now: float = 1.0,
    *,
    peers: tuple[bytes, ...] = (),
    key: bytes | None = None,
) -> str:
    """A beacon of ``bridge`` heard on ``segment`` with tag number ``n``: the switch's detail."""
    beacon = ipx.build_beacon(
        bridge,
        peers=peers,
        seq=int(now * 1000),
        tag=tag(segment, n),
        tags=echo(sw, segment),
        key=key,
    )
    return sw.handle_segment(segment, beacon, now, via=Framing.LLC).detail


def test_beacons_are_consumed_and_make_a_peer_share_a_segment() -> None:
    sw = switch()
    # PEER says over the tunnel that it is on a segment with tag 7, then is heard on eth0 so.
    peer_says(sw, (tag(ETH0, 7),))
    d = sw.handle_segment(
        ETH0,
        ipx.build_beacon(PEER_ID, seq=1000, tag=tag(ETH0, 7), tags=echo(sw, ETH0)),
        1.0,
        via=Framing.LLC,
    )
    assert (d.outcome, d.detail, d.targets) == (Outcome.CONTROL, "beacon", ())
    assert sw.bridges_on(ETH0) == (PEER_ID,)
    assert sw.learned_on(ETH0) == 0  # a beacon teaches no station
    # A packet from that peer is not put on eth0 again: the peer put it there itself.
    d = sw.handle(packet(bytes.fromhex("00000a0a0a0a")), PEER, 2.0)
    assert d.detail == "broadcast"
    assert set(d.targets) == {A, B, WRAP, RFC}
    # Packets from the bridge's own clients and segments still go to eth0.
    assert ETH0 in sw.handle(packet(node(A)), A, 2.0).targets
    assert ETH0 in sw.handle_segment(WRAP, packet(NATIVE2), 2.0).targets
    # Unknown unicast from that peer: not to eth0 either.
    flood = sw.handle(packet(bytes.fromhex("00000a0a0a0a"), UNKNOWN, data=b"u"), PEER, 2.5)
    assert set(flood.targets) == {WRAP, RFC}
    # A station's packet on eth0 does not go to the peer: it heard it on eth0 itself (a copy
    # over the peer link would overtake that and arrive one hop further on).
    d = sw.handle_segment(ETH0, packet(NATIVE, data=b"s"), 3.0)
    assert d.outcome is Outcome.FORWARDED
    assert PEER not in d.targets
    assert {A, B} <= set(d.targets)


def test_a_forged_beacon_without_a_key_leaves_forwarding_as_it_was() -> None:
    """Without a key, a beacon the peer link does not confirm changes nothing (no silence)."""
    sw = switch()
    peer_says(sw, (tag(ETH0, 7),))
    before = set(sw.handle(packet(ipx.rfc1234_node(PEER[0]), data=b"0"), PEER, 1.5).targets)
    assert ETH0 in before
    forgeries = [
        (ETH0, PEER_ID, 8),  # the peer's id with a tag it never declared
        (ETH0, LOWER, 7),  # a lower id with the peer's tag
        (WRAP, PEER_ID, 7),  # the peer's real tag, copied onto another kind of port
    ]
    for n, (segment, bridge, number) in enumerate(forgeries):
        peers = (ipx.rfc1234_node(PEER[0]),)
        assert heard(sw, segment, bridge, number, 2.0 + n, peers=peers) == "beacon_unverified"
    # The WRAP forgery carried an ethernet tag: it is refused before it is even remembered.
    assert sw.bridges_on(ETH0) == sw.bridges_on(WRAP) == ()
    after = sw.handle(packet(ipx.rfc1234_node(PEER[0]), data=b"1"), PEER, 9.0)
    assert set(after.targets) == before
    # From a segment, every other segment still gets it (no lower trusted bridge anywhere).
    assert set(sw.handle_segment(ETH0, packet(NATIVE, data=b"2"), 9.0).targets) >= {WRAP, RFC}


def test_a_segment_beacon_heard_before_the_peer_link_counts_once_confirmed() -> None:
    sw = switch()
    assert heard(sw, ETH0, PEER_ID, 7) == "beacon_unverified"
    assert ETH0 in sw.handle(packet(ipx.rfc1234_node(PEER[0]), data=b"a"), PEER, 1.1).targets
    peer_says(sw, (tag(ETH0, 7),), 1.2)
    assert sw.bridges_on(ETH0) == (PEER_ID,)
    assert ETH0 not in sw.handle(packet(ipx.rfc1234_node(PEER[0]), data=b"b"), PEER, 1.3).targets
    # The peer closes that port: its next beacon no longer declares the tag.
    peer_says(sw, (), 2.0)
    assert sw.bridges_on(ETH0) == ()
    assert ETH0 in sw.handle(packet(ipx.rfc1234_node(PEER[0]), data=b"c"), PEER, 2.1).targets


def test_a_shared_segment_expires_after_beacon_ttl() -> None:
    sw = switch()
    peer_says(sw, (tag(ETH0, 7),))
    heard(sw, ETH0, PEER_ID, 7)
    now = 0.0
    # Beacons are judged when the bridge sends its own (every BEACON_INTERVAL, from tick).
    while now < 1.0 + BEACON_TTL - 0.5:
        sw.tick(now)
        now += 0.5
    assert sw.bridges_on(ETH0) == (PEER_ID,)
    assert ETH0 not in sw.handle(packet(ipx.rfc1234_node(PEER[0]), data=b"1"), PEER, now).targets
    end = 1.0 + BEACON_TTL + BEACON_INTERVAL
    while now <= end:
        sw.tick(now)
        now += 0.5
    assert sw.bridges_on(ETH0) == ()
    assert ETH0 in sw.handle(packet(ipx.rfc1234_node(PEER[0]), data=b"2"), PEER, now).targets


def test_of_the_bridges_that_have_the_peer_only_the_lowest_id_puts_it_on_the_segment() -> None:
    """Rule 8: P is a peer of two bridges on eth0; each gets P's packet, one puts it there.

    This bridge's id is ME; the other bridge on eth0 is LOWER or HIGHER, signed with the key.
    """
    low = keyed()
    high = keyed()
    p = (ipx.rfc1234_node(PEER[0]),)  # PEER named by 00 00 + IPv4: it sent no beacon
    # A bridge with a higher id that also has PEER.
    assert heard(low, ETH0, HIGHER, 1, peers=p, key=KEY) == "beacon"
    assert ETH0 in low.handle(packet(ipx.rfc1234_node(PEER[0])), PEER, 2.0).targets
    # One with a lower id: that one puts PEER's packets on eth0, this one does not.
    assert heard(high, ETH0, LOWER, 1, peers=p, key=KEY) == "beacon"
    assert ETH0 not in high.handle(packet(ipx.rfc1234_node(PEER[0])), PEER, 2.0).targets
    # A lower bridge that does not have PEER changes nothing.
    other = keyed()
    heard(other, ETH0, LOWER, 1, peers=(bytes.fromhex("00000a090909"),), key=KEY)
    assert ETH0 in other.handle(packet(ipx.rfc1234_node(PEER[0])), PEER, 2.0).targets


def test_with_a_key_only_signed_fresh_beacons_count() -> None:
    sw = keyed()
    assert heard(sw, ETH0, LOWER, 1, 1.0) == "beacon_unverified"  # unsigned
    assert heard(sw, ETH0, LOWER, 1, 1.0, key=b"another key") == "beacon_unverified"
    assert sw.bridges_on(ETH0) == ()
    assert heard(sw, ETH0, LOWER, 1, 2.0, key=KEY) == "beacon"
    assert sw.bridges_on(ETH0) == (LOWER,)
    # The same beacon again (a replay: its sequence is not newer) is refused.
    assert heard(sw, ETH0, LOWER, 1, 2.0, key=KEY) == "beacon_replay"
    # An unsigned beacon over the peer link does not count either.
    unsigned = ipx.build_beacon(PEER_ID, ipx.rfc1234_node(PEER[0]), seq=5, tags=(tag(ETH0, 9),))
    assert sw.handle(unsigned, PEER, 2.5).detail == "beacon_unverified"


def test_a_recorded_beacon_replayed_after_its_bridge_fell_silent_is_refused() -> None:
    """Rule 8 (policy/bridges.py): a signed beacon's sequence is remembered far beyond its
    record's expiry, so a recording replayed once the bridge is gone does not bring it back
    (before, the record expired with BEACON_TTL and the replay was new again)."""
    sw = keyed()
    p = (ipx.rfc1234_node(PEER[0]),)  # LOWER has PEER as a peer too, and a lower id
    recorded = ipx.build_beacon(
        LOWER, peers=p, seq=5000, tag=tag(ETH0, 1), tags=echo(sw, ETH0), key=KEY
    )
    assert sw.handle_segment(ETH0, recorded, 5.0, via=Framing.LLC).detail == "beacon"
    assert sw.bridges_on(ETH0) == (LOWER,)
    from_peer = ipx.rfc1234_node(PEER[0])
    assert ETH0 not in sw.handle(packet(from_peer, data=b"x"), PEER, 5.5).targets  # LOWER's
    now = 5.0
    while now < 5.0 + BEACON_TTL + BEACON_INTERVAL:  # LOWER switched off: nothing more
        sw.tick(now)
        now += 0.5
    assert sw.bridges_on(ETH0) == ()
    for n in range(10):  # replayed every 2 s from then on
        now += 2.0
        sw.tick(now)
        assert sw.handle_segment(ETH0, recorded, now, via=Framing.LLC).detail == "beacon_replay"
        assert sw.bridges_on(ETH0) == ()
        assert ETH0 in sw.handle(packet(from_peer, data=b"%d" % n), PEER, now).targets
    # The bridge itself, back with a newer sequence, counts at once.
    fresh = ipx.build_beacon(
        LOWER, peers=p, seq=int(now * 1000), tag=tag(ETH0, 1), tags=echo(sw, ETH0), key=KEY
    )
    assert sw.handle_segment(ETH0, fresh, now, via=Framing.LLC).detail == "beacon"
    assert sw.bridges_on(ETH0) == (LOWER,)
    # A sequence is remembered per way: the same round's beacon over the peer link counts.
    link = ipx.build_beacon(PEER_ID, sw.peers[PEER].node, seq=7000, tags=(tag(ETH0, 9),), key=KEY)
    on_seg = ipx.build_beacon(PEER_ID, seq=7000, tag=tag(ETH0, 9), tags=echo(sw, ETH0), key=KEY)
    assert sw.handle_segment(ETH0, on_seg, now, via=Framing.LLC).detail == "beacon"
    assert sw.handle(link, PEER, now).detail == "beacon"


def test_a_beacon_heard_on_another_segment_than_it_was_sent_on_is_refused() -> None:
    """Rule 8 (policy/bridges.py): a segment beacon echoes the tags of the bridges its sender
    hears there. One recorded on another segment, or forwarded from it as it comes (fresh
    and signed: the key proves who sent it, not where), echoes that segment's tags, not this
    bridge's tag here, and is refused (``beacon_unbound``); with the echo it counts."""
    sw = keyed()
    p = (ipx.rfc1234_node(PEER[0]),)
    elsewhere = ipx.build_beacon(
        LOWER, peers=p, seq=1000, tag=tag(ETH0, 1), tags=(tag(ETH0, 42),), key=KEY
    )
    assert sw.handle_segment(ETH0, elsewhere, 1.0, via=Framing.LLC).detail == "beacon_unbound"
    assert sw.bridges_on(ETH0) == ()
    assert ETH0 in sw.handle(packet(ipx.rfc1234_node(PEER[0]), data=b"a"), PEER, 1.1).targets
    here = ipx.build_beacon(
        LOWER, peers=p, seq=2000, tag=tag(ETH0, 1), tags=(tag(ETH0, 42), *echo(sw, ETH0)), key=KEY
    )
    assert sw.handle_segment(ETH0, here, 2.0, via=Framing.LLC).detail == "beacon"
    assert sw.bridges_on(ETH0) == (LOWER,)
    # Without a key the same holds for a beacon the peer link confirms.
    plain = switch()
    peer_says(plain, (tag(ETH0, 7),))
    assert heard(plain, ETH0, PEER_ID, 7) == "beacon"  # heard() echoes the tag here
    moved = ipx.build_beacon(PEER_ID, seq=3000, tag=tag(ETH0, 7), tags=(tag(ETH0, 42),))
    assert plain.handle_segment(ETH0, moved, 3.0, via=Framing.LLC).detail == "beacon_unbound"
    assert plain.bridges_on(ETH0) == ()


def test_each_bridge_echoes_the_tags_it_hears_and_two_bridges_agree() -> None:
    """Two real switches on one segment exchange beacons: each echoes the other's tag, and
    within two rounds of immediate answers each trusts the other."""
    a = IpxSwitch(SwitchSettings(), (), lambda _a: SERVER_NODE, segments=(ETH0,),
                  bridge_id=LOWER, beacon_key=KEY, node_for=NODE_FOR)  # fmt: skip
    b = IpxSwitch(SwitchSettings(), (), lambda _a: SERVER_NODE, segments=(ETH0,),
                  bridge_id=HIGHER, beacon_key=KEY, node_for=NODE_FOR)  # fmt: skip
    pending = [(a, frame) for frame, port in b.beacons(1.0) if port == ETH0]
    pending += [(b, frame) for frame, port in a.beacons(1.0) if port == ETH0]
    for _ in range(6):  # deliver each beacon and its immediate answers to the other
        nxt = []
        for to, frame in pending:
            other = b if to is a else a
            d = to.handle_segment(ETH0, frame, 1.1, via=Framing.LLC)
            nxt += [(other, r) for r, port in d.replies if port == ETH0]
        pending = nxt
    assert a.bridges_on(ETH0) == (HIGHER,)
    assert b.bridges_on(ETH0) == (LOWER,)


def test_packets_between_two_kinds_on_one_wire_are_translated_by_the_lowest_bridge() -> None:
    """Rule 8: the lowest trusted bridge on both segments carries a packet from one to the other.

    An Ethernet port and an IPXWrapper port on one LAN are one broadcast domain: two bridges
    that both translated would put every packet on the wire twice, and copies would loop.
    """
    sw = keyed()
    for segment in (ETH0, WRAP):
        assert heard(sw, segment, LOWER, 1 if segment is ETH0 else 2, key=KEY) == "beacon"
    d = sw.handle_segment(ETH0, packet(NATIVE, data=b"t"), 2.0)
    assert WRAP not in d.targets  # LOWER carries it from eth0 to IPXWrapper
    assert {A, B, PEER, RFC} <= set(d.targets)  # where LOWER is not, this bridge still goes
    d = sw.handle_segment(WRAP, packet(NATIVE2, data=b"u"), 2.0)
    assert ETH0 not in d.targets
    assert RFC in d.targets
    # With a higher bridge on both, this bridge is the lowest and translates.
    up = keyed()
    for segment in (ETH0, WRAP):
        heard(up, segment, HIGHER, 1 if segment is ETH0 else 2, key=KEY)
    assert WRAP in up.handle_segment(ETH0, packet(NATIVE, data=b"v"), 2.0).targets


def test_a_copy_another_bridge_put_on_the_segment_is_left_to_that_bridge() -> None:
    """Rule 8: a higher bridge's own client's packet, heard on eth0 from that bridge's port
    before its peer-link copy arrives, is not translated to IPXWrapper by the lower bridge:
    the higher one put it there itself (the race left an occasional duplicate)."""
    up_mac, up_ip = b"\x02\x00\x00\x00\x00\x09", "10.0.0.9"
    sw = keyed()
    for segment, sender, n in ((ETH0, up_mac, 1), (WRAP, up_ip, 2)):
        beacon = ipx.build_beacon(
            HIGHER, seq=1000, tag=tag(segment, n), tags=echo(sw, segment), key=KEY
        )
        assert sw.handle_segment(segment, beacon, 1.0, sender=sender).detail == "beacon"
    d = sw.handle_segment(ETH0, packet(NATIVE, data=b"w"), 2.0, sender=up_mac)
    assert d.outcome is Outcome.FORWARDED
    assert WRAP not in d.targets  # HIGHER serves IPXWrapper itself
    assert {A, B, RFC} <= set(d.targets)  # where HIGHER is not, this bridge still goes
    # The same packet from a station's own MAC is translated: this bridge is the lowest.
    d = sw.handle_segment(ETH0, packet(NATIVE, data=b"x"), 2.0, sender=b"\x02" * 6)
    assert WRAP in d.targets
    # An unsigned beacon claiming that port's MAC changes nothing (a bystander's).
    forged = ipx.build_beacon(LOWER, seq=2000, tag=tag(ETH0, 3), tags=echo(sw, ETH0))
    assert sw.handle_segment(ETH0, forged, 2.0, sender=b"\x02" * 6).detail != "beacon"
    d = sw.handle_segment(ETH0, packet(NATIVE, data=b"y"), 2.0, sender=b"\x02" * 6)
    assert WRAP in d.targets


def test_a_peer_that_has_the_sender_as_a_peer_gets_nothing_relayed_from_it() -> None:
    """Two bridges on one segment both peered with a hub: each gets the hub's packets directly.

    Relaying them to each other as well made the lower one take its neighbour for the sender
    at times (the relayed copy arrived first), and the neighbour is on the segment, so the
    packet was left off it by both: silence for the hub's broadcasts.
    """
    neighbour: Address = ("10.45.0.2", 213)
    sw = switch(peers=(PEER, neighbour))
    hub = ipx.rfc1234_node(PEER[0])
    says = ipx.build_beacon(HIGHER, ipx.rfc1234_node(neighbour[0]), (hub,), seq=1)
    assert sw.handle(says, neighbour, 1.0).detail == "beacon"
    d = sw.handle(packet(hub, data=b"from the hub"), PEER, 2.0)
    assert neighbour not in d.targets
    assert ETH0 in d.targets  # this bridge (the lower id) puts it on the segment
    # The neighbour's own packets still reach the hub, which does not list the neighbour.
    assert PEER in sw.handle(packet(HIGHER, data=b"from b2"), neighbour, 2.0).targets


def test_own_beacon_is_ignored() -> None:
    """Our own id heard back (a looped segment, or a forgery) is not another bridge."""
    sw = switch()
    assert heard(sw, ETH0, sw.bridge_id, 1) == "own_packet"
    assert sw.bridges_on(ETH0) == ()


def test_the_bridges_remembered_per_segment_are_bounded() -> None:
    sw = switch()
    peer_says(sw, (tag(ETH0, 7),))
    heard(sw, ETH0, PEER_ID, 7)
    for n in range(200):  # unique ids, each listing many peers, as a flood would
        bridge = bytes.fromhex("0300") + n.to_bytes(4, "big")
        many = tuple(bytes.fromhex("0400") + i.to_bytes(4, "big") for i in range(32))
        assert heard(sw, ETH0, bridge, n, 1.0 + n / 1000, peers=many) == "beacon_unverified"
    assert sw.bridges_on(ETH0) == (PEER_ID,)  # the confirmed one is kept
    # Room for MAX_BRIDGES_PER_SEGMENT: the confirmed bridge and the newest unconfirmed ones.
    assert sw.evictions[("bridges", "unproven")] == 200 - (MAX_BRIDGES_PER_SEGMENT - 1)


def test_tick_sends_beacons_to_every_segment_and_peer() -> None:
    sw = switch()
    out = sw.tick(0.0)
    beacons = [(data, to) for data, to in out if ipx.is_beacon(ipx.parse_header(data), data)]
    assert {to for _, to in beacons} == {ETH0, WRAP, RFC, PEER}
    parsed = {to: ipx.parse_beacon(ipx.parse_header(d), d, None) for d, to in beacons}
    assert {b.bridge_id for b in parsed.values()} == {ME}
    # Each segment's beacon carries that segment's tag (its kind in the first byte); the
    # beacon to the peer declares all of them and no tag of its own.
    assert [parsed[s].tag[0] for s in (ETH0, WRAP, RFC)] == [1, 2, 3]
    assert parsed[PEER].tags == {parsed[s].tag for s in (ETH0, WRAP, RFC)}
    assert parsed[PEER].tag == ipx.NO_TAG
    # The next ones only after BEACON_INTERVAL.
    assert not [t for _, t in sw.tick(BEACON_INTERVAL / 2) if isinstance(t, Segment)]
    assert {t for _, t in sw.tick(BEACON_INTERVAL) if isinstance(t, Segment)} == {
        ETH0,
        WRAP,
        RFC,
    }


def test_beacons_are_signed_with_the_key() -> None:
    out = keyed().tick(0.0)
    data, _ = out[0]
    header = ipx.parse_header(data)
    assert ipx.parse_beacon(header, data, KEY).signed
    with pytest.raises(WireError, match="beacon_unverified"):
        ipx.parse_beacon(header, data, b"wrong")


def test_nothing_sent_to_the_beacon_socket_is_relayed() -> None:
    """A client's or station's packet to the bridges' socket is not passed to other bridges."""
    sw = switch()
    fake = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=ipx.SOCKET_BEACON,
        src_node=node(A),
        src_socket=0x4000,
        payload=b"ipxbridge-beacon/2",
    )
    assert sw.handle(fake, A, 1.0).detail == "filtered_socket"


# --- rule 6 on segments: duplicates and hops ------------------------------------------------


def test_copies_in_two_framings_on_one_segment_are_duplicates() -> None:
    """A station bound to two frame types sends each packet once per framing (NetWare)."""
    sw = switch()
    data = packet(NATIVE, data=b"enum")
    assert sw.handle_segment(ETH0, data, 1.0, via=Framing.LLC).outcome is Outcome.FORWARDED
    second = sw.handle_segment(ETH0, data, 1.001, via=Framing.ETHERNET_II)
    assert (second.outcome, second.detail) == (Outcome.DROPPED, "duplicate")
    # The same packet again in the first framing is a game's resend: it passes.
    again = sw.handle_segment(ETH0, data, 1.5, via=Framing.LLC)
    assert again.outcome is Outcome.FORWARDED
    # And the same bytes arriving on another port are a loop copy too.
    assert sw.handle_segment(WRAP, data, 1.6).detail == "duplicate"


def test_hop_count_ethernet_and_rfc1234_count_ipxwrapper_takes_zero() -> None:
    sw = switch()
    sw.udp_segment_for = lambda ip: RFC if ip.startswith("10.9.") else None
    d = sw.handle_segment(ETH0, packet(NATIVE, hops=5, data=b"e"), 1.0, via=Framing.LLC)
    assert hops_of(d.packet) == 6
    assert sw.handle_segment(ETH0, packet(NATIVE, hops=15, data=b"f"), 1.0).detail == "hop_limit"
    # IPXWrapper's UDP header has no hop field: whatever the packet says, it starts at 0.
    w = sw.handle_segment(WRAP, packet(NATIVE2, hops=15, data=b"w"), 1.0)
    assert (w.detail, hops_of(w.packet)) == ("broadcast", 1)
    # An RFC 1234 host's datagram arrives on the tunnel socket from an address of eth1.
    host: Address = ("10.9.0.7", 213)
    r = sw.handle(packet(ipx.rfc1234_node(host[0]), hops=3, data=b"r"), host, 1.0)
    assert (r.detail, hops_of(r.packet)) == ("broadcast", 4)
    assert RFC not in r.targets
    assert sw.learned_on(RFC) == 1
    limit = sw.handle(packet(ipx.rfc1234_node(host[0]), hops=15, data=b"s"), host, 1.0)
    assert limit.detail == "hop_limit"


def test_own_broadcast_looped_back_on_an_rfc1234_segment() -> None:
    sw = switch()
    sw.udp_segment_for = lambda _ip: RFC
    sw.own_ips = frozenset({"10.9.0.1"})
    d = sw.handle(packet(ME, data=b"mine"), ("10.9.0.1", 213), 1.0)
    assert d.detail == "own_packet"


# --- loops and the bridge's own traffic -----------------------------------------------------


def test_node_of_the_bridge_or_a_local_client_from_a_segment_is_a_loop() -> None:
    sw = switch()
    assert sw.handle_segment(ETH0, packet(ME), 1.0).detail == "loop"
    assert sw.handle_segment(ETH0, packet(node(A), data=b"a"), 1.0).detail == "loop"
    assert sw.learned_on(ETH0) == 0


def test_replies_to_the_bridge_are_consumed() -> None:
    """Answers to the bridge's own probes on a segment come to its id (``to_bridge``)."""
    sw = switch()
    d = sw.handle_segment(ETH0, packet(NATIVE, ME, data=b"reply"), 1.0, via=Framing.LLC)
    assert (d.outcome, d.detail, d.targets) == (Outcome.CONTROL, "to_bridge", ())
    assert d.header is not None
    assert d.header.src_node == NATIVE  # inspected (a DirectPlay reply names its host)


def test_probe_packets_reach_every_segment_from_the_bridge_id() -> None:
    sw = switch()
    out = sw.probe_packets(0x0000, 0x4001, b"probe", 1.0)
    by_port = {to: data for data, to in out}
    assert set(by_port) == {A, B, ETH0, WRAP, RFC}  # clients and segments, not peers
    for segment in (ETH0, WRAP, RFC):
        header = ipx.parse_header(by_port[segment])
        assert (header.src_node, header.dst_node) == (ME, ipx.BROADCAST_NODE)
    assert ipx.parse_header(by_port[A]).src_node == SERVER_NODE


def test_remove_segment_forgets_its_nodes_and_bridges() -> None:
    sw = keyed()
    sw.handle_segment(ETH0, packet(NATIVE), 1.0)
    heard(sw, ETH0, LOWER, 1, key=KEY)
    assert (sw.learned_on(ETH0), sw.bridges_on(ETH0)) == (1, (LOWER,))
    sw.remove_segment(ETH0)
    assert ETH0 not in sw.segments
    assert (sw.learned_on(ETH0), sw.bridges_on(ETH0)) == (0, ())
    assert sw.learned_segment_nodes() == []
    # Its station is now unknown: a unicast to it is flooded, and not to the gone segment.
    d = sw.handle(packet(node(A), NATIVE, data=b"z"), A, 2.0)
    assert d.detail == "flooded"
    assert set(d.targets) == {PEER, WRAP, RFC}
    assert ETH0 not in sw.handle(packet(node(A), data=b"b"), A, 2.0).targets
    sw.remove_segment(ETH0)  # idempotent
    sw.add_segment(ETH0)
    assert ETH0 in sw.handle(packet(node(A), data=b"c"), A, 3.0).targets


def test_a_bridge_new_on_a_segment_is_answered_at_once() -> None:
    # Rule 8: until two bridges on one segment know each other, each may put the other's
    # packets there; the one already running answers a newcomer's first beacon at once
    # instead of at its next beacon tick (up to BEACON_INTERVAL later).
    sw = keyed()
    beacon = ipx.build_beacon(LOWER, seq=1, tag=tag(ETH0, 1), tags=echo(sw, ETH0), key=KEY)
    first = sw.handle_segment(ETH0, beacon, 1.0)
    assert first.outcome is Outcome.CONTROL
    assert {port for _, port in first.replies} == {ETH0, WRAP, RFC, PEER}  # everywhere
    reply = {port: data for data, port in first.replies}[ETH0]
    parsed = ipx.parse_beacon(ipx.parse_header(reply), reply, KEY)
    assert parsed.bridge_id == ME
    assert parsed.peers == {sw.peers[PEER].node}  # it lists its peer
    again = sw.handle_segment(
        ETH0, ipx.build_beacon(LOWER, seq=2, tag=tag(ETH0, 1), tags=echo(sw, ETH0), key=KEY), 6.0
    )
    assert again.replies == ()  # known: no answer, or two bridges would answer for ever
    # A peer's first beacon is answered at once too; a repeat is not.
    hello = ipx.build_beacon(PEER_ID, sw.peers[PEER].node, seq=3, key=KEY)
    assert PEER in {port for _, port in sw.handle(hello, PEER, 6.5).replies}
    hello = ipx.build_beacon(PEER_ID, sw.peers[PEER].node, seq=4, key=KEY)
    assert sw.handle(hello, PEER, 7.0).replies == ()
    # Answers are rate-limited: ANSWER_BURST at once, then one every BEACON_ANSWER_GAP, so
    # newcomers (or a stranger's beacons under new ids) never draw more than that.
    other = keyed()
    ids = [bytes.fromhex(f"0200000001{n:02x}") for n in range(ANSWER_BURST + 2)]
    answers = [
        other.handle_segment(
            ETH0, ipx.build_beacon(b, seq=1, tag=tag(ETH0, n), tags=echo(other, ETH0), key=KEY), 1.0
        )
        for n, b in enumerate(ids)
    ]
    assert [bool(d.replies) for d in answers] == [True] * ANSWER_BURST + [False, False]
    late = ipx.build_beacon(ids[-1], seq=2, tag=tag(ETH0, 9), tags=echo(other, ETH0), key=KEY)
    assert other.handle_segment(ETH0, late, 1.0 + BEACON_ANSWER_GAP).detail == "beacon"


def test_a_copy_returning_on_its_first_port_one_hop_further_is_a_duplicate() -> None:
    # Two bridges that do not know each other yet hand a station's broadcast back onto the
    # segment; the copy comes back on the port the first came in on, with more hops.
    sw = switch()
    assert sw.handle_segment(ETH0, packet(NATIVE), 1.0).outcome is Outcome.FORWARDED
    back = sw.handle_segment(ETH0, packet(NATIVE, hops=2), 1.01)
    assert back.outcome is Outcome.DROPPED
    assert back.detail == "duplicate"
    # The station repeating the same packet (same hop count) is a repeat, not a loop.
    assert sw.handle_segment(ETH0, packet(NATIVE), 1.5).outcome is Outcome.FORWARDED


# --- rule 10: one IPX network; rule 11: ipxbox's frames -----------------------------------------


def test_clients_get_a_packet_addressed_to_another_network_as_their_own() -> None:
    """Rule 10: native IPXWrapper broadcasts to its own network (00000001 by default), which
    IPXWrapper in DOSBox mode (network 00000000, from our registration reply) would not
    deliver (docs/protocols.md 6). Clients get network 00000000; segments and peers get the
    packet as it came."""
    sw = switch()
    sent = ipx.build_packet(
        dst_net=b"\0\0\0\1",
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=GAME_SOCKET,
        src_net=b"\0\0\0\1",
        src_node=NATIVE,
        src_socket=GAME_SOCKET,
        payload=b"n",
    )
    d = sw.handle_segment(WRAP, sent, 1.0)
    assert d.outcome is Outcome.FORWARDED
    assert {A, B, PEER} <= set(d.targets)
    assert d.packet is not None
    assert d.packet[6:10] == b"\0\0\0\1"
    assert d.client_packet is not None
    assert d.client_packet == d.packet[:6] + b"\0\0\0\0" + d.packet[10:]
    # 00000000 and FFFFFFFF are delivered by every client already: no second copy.
    for net in (b"\0\0\0\0", b"\xff\xff\xff\xff"):
        plain = ipx.build_packet(
            dst_net=net,
            dst_node=ipx.BROADCAST_NODE,
            dst_socket=GAME_SOCKET,
            src_node=NATIVE,
            src_socket=GAME_SOCKET,
            payload=net,
        )
        assert sw.handle_segment(WRAP, plain, 1.0).client_packet is None


def test_a_copy_with_its_network_rewritten_is_still_a_duplicate() -> None:
    """Rule 10 with rules 6 and 9: a copy another bridge sent on to IPXWrapper with network
    FFFFFFFF, heard again, is the same packet."""
    sw = switch()
    first = packet(NATIVE, data=b"same")
    assert sw.handle_segment(ETH0, first, 1.0).outcome is Outcome.FORWARDED
    rewritten = first[:6] + b"\xff" * 4 + first[10:]
    assert sw.handle_segment(WRAP, rewritten, 1.0).detail == "duplicate"


def test_ipxbox_frames_are_taken_as_hop_0_and_counted() -> None:
    """Rule 11: ipxbox writes checksum 0x0000 and transport control 127 on every frame it
    bridges (docs/protocols.md 3.8); strictly both are refused (bad checksum, hop limit)."""
    sw = switch()
    ours = packet(NATIVE, data=b"from ipxbox")
    theirs = b"\0\0" + ours[2:4] + bytes((127,)) + ours[5:]
    d = sw.handle_segment(ETH0, theirs, 1.0)
    assert (d.outcome, d.detail) == (Outcome.FORWARDED, "broadcast")
    assert d.packet is not None
    assert d.packet[:2] == b"\xff\xff"
    assert d.packet[4] == 1
    assert sw.forgiven[("ethernet", "eth0", "ipxbox_mark")] == 1
    # Checksum 0 alone: hops as written.
    zero = b"\0\0" + packet(NATIVE, hops=3, data=b"zero")[2:]
    d = sw.handle_segment(ETH0, zero, 1.0)
    assert d.packet is not None
    assert d.packet[4] == 4
    assert sw.forgiven[("ethernet", "eth0", "checksum_zero")] == 1
    # Any other checksum is refused, as the spec says; nothing forgiven.
    other = b"\x12\x34" + packet(NATIVE, data=b"sum")[2:]
    assert sw.handle_segment(ETH0, other, 1.0).detail == "bad_checksum"
    assert sum(sw.forgiven.values()) == 2
