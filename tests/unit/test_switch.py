"""Switching decisions as pure functions with an injected clock (policy/switch.py rules)."""

import hashlib
import hmac
from ipaddress import IPv4Network

import pytest

from ipxbridge.policy.clients import FIRST_PROBE_DELAY, ClientTable
from ipxbridge.policy.switch import (
    Address,
    IpxSwitch,
    Outcome,
    SwitchSettings,
)
from ipxbridge.wire import ipx
from ipxbridge.wire.ipx import address_node, keyed_nodes

SERVER_NODE = ipx.dosbox_node("10.0.0.1", 213)  # the bridge's own node stays IPv4 + port
KEY = bytes(range(32))  # a fixed node key, so nodes are the same in every run
NODE_FOR = keyed_nodes(KEY)
A: Address = ("10.0.0.11", 40001)
B: Address = ("10.0.0.12", 40002)
C: Address = ("10.0.0.13", 40003)
PEER: Address = ("192.0.2.50", 213)
PEER2: Address = ("192.0.2.51", 213)


def make(peers: tuple[Address, ...] = (), /, **kw: object) -> IpxSwitch:
    settings = SwitchSettings(**kw)  # type: ignore[arg-type]
    node_for = address_node if settings.node_assignment == "address" else NODE_FOR
    return IpxSwitch(settings, peers, lambda _addr: SERVER_NODE, node_for=node_for)


def node(addr: Address) -> bytes:
    """The keyed node the switches of these tests give ``addr``."""
    return NODE_FOR(addr)


def register(sw: IpxSwitch, addr: Address, now: float = 0.0) -> bytes:
    d = sw.handle(ipx.build_registration(), addr, now)
    assert d.outcome is Outcome.CONTROL
    ((reply, to),) = d.replies
    assert to == addr
    return ipx.parse_header(reply).dst_node


def verify(sw: IpxSwitch, addr: Address, now: float = 0.0) -> None:
    """Answer the client's probe as DOSBox does: a unicast to the pinger's node (docs/protocols.md
    4.5), which for an unverified client is its nonce (policy/switch.py rule 2). Used where
    a probe went out: with a base budget, or once the client earned one."""
    reply = ipx.build_ping_reply(sw.clients[addr].nonce, sw.clients[addr].node)
    assert sw.handle(reply, addr, now).detail == "ping_reply"
    assert sw.clients[addr].verified


def join(sw: IpxSwitch, addr: Address, now: float = 0.0) -> bytes:
    """Register, then send what a game sends first: a broadcast announcing itself (DOOM's
    setup, DirectPlay's EnumSessions). It carries the keyed node only our reply told the
    client, so the client is verified at once (rule 2). Returns the node."""
    n = register(sw, addr, now)
    sw.handle(data(n, sock=ANNOUNCE_SOCKET, payload=b"here"), addr, now)
    assert sw.clients[addr].verified
    return n


def join_by_probe(sw: IpxSwitch, addr: Address, now: float = 0.0) -> None:
    """Verify a client the way address nodes allow: register, send a game packet (it pays
    for a probe), answer the probe (rule 2)."""
    n = register(sw, addr, now)
    d = sw.handle(data(n, sock=ANNOUNCE_SOCKET, payload=b"here"), addr, now)
    probes = [p for p, to in d.replies if to == addr]  # with its first packet
    probes += [p for p, to in sw.tick(now + FIRST_PROBE_DELAY) if to == addr]
    assert probes == [ipx.build_ping(sw.clients[addr].nonce)]
    verify(sw, addr, now + FIRST_PROBE_DELAY)


# A game announcing itself (``join``); the tests' own traffic uses 0x4545.
ANNOUNCE_SOCKET = 0x4546


def data(
    src: bytes,
    dst: bytes = ipx.BROADCAST_NODE,
    sock: int = 0x4545,
    payload: bytes = b"game",
    hops: int = 0,
) -> bytes:
    return ipx.build_packet(
        dst_node=dst, dst_socket=sock, src_node=src, src_socket=sock, payload=payload, hops=hops
    )


def test_registration_assigns_the_keyed_node_and_is_idempotent() -> None:
    sw = make()
    keyed = b"\x02" + hmac.new(KEY, b"10.0.0.11:40001", hashlib.sha256).digest()[:5]
    assert register(sw, A) == node(A) == keyed
    d = sw.handle(ipx.build_registration(), A, 1.0)
    assert ipx.parse_header(d.replies[0][0]).dst_node == node(A)
    assert list(sw.clients) == [A]
    kinds = [e.kind for e in sw.pop_events()]
    assert kinds == ["registered", "reregistered"]


def test_keyed_nodes_are_fixed_by_the_key_and_differ_per_address() -> None:
    # The same key gives the same node after a restart; another address or another key
    # gives another. 02: unicast and locally administered, never a vendor's MAC.
    again = keyed_nodes(bytes(KEY))
    assert node(A) == again(A)
    nodes = {node(a) for a in (A, B, C, ("10.0.0.11", 40002), ("10.0.0.12", 40001))}
    assert len(nodes) == 5
    assert keyed_nodes(b"another key of 32 bytes........!")(A) != node(A)
    assert all(n[0] == 0x02 for n in nodes)
    assert ipx.keyed_node(KEY, *A) == node(A)


def test_address_nodes_are_ipv4_and_port() -> None:
    sw = make(node_assignment="address")
    assert register(sw, A) == bytes([10, 0, 0, 11]) + (40001).to_bytes(2, "big")


def test_registration_reply_is_the_only_thing_a_new_address_gets() -> None:
    sw = make()
    register(sw, A)
    d = sw.handle(data(node(A)), A, 0.1)
    assert d.outcome is Outcome.DROPPED  # nobody else yet
    assert d.detail == "no_destination"
    # B registers; the packet A sent before is not replayed to B.
    d = sw.handle(ipx.build_registration(), B, 0.2)
    assert len(d.replies) == 1
    assert d.targets == ()


def test_unregistered_sender_is_dropped() -> None:
    sw = make()
    register(sw, A)
    d = sw.handle(data(ipx.dosbox_node("10.9.9.9", 1)), B, 0.0)
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "unregistered")


def test_broadcast_goes_to_all_but_ingress_with_hop_incremented() -> None:
    sw = make((PEER,))
    for addr in (A, B, C):
        join(sw, addr)
    pkt = data(ipx.dosbox_node("172.16.0.5", 5000), hops=2)
    d = sw.handle(pkt, PEER, 1.0)
    assert d.outcome is Outcome.FORWARDED
    assert d.detail == "broadcast"
    assert set(d.targets) == {A, B, C}
    assert d.packet is not None
    assert d.packet[4] == 3  # a peer's count is kept and incremented
    assert d.packet[5:] == pkt[5:]


def test_dosbox_client_hop_byte_is_taken_as_zero() -> None:
    # DOSBox never writes transport control: it carries whatever the DOS program left in
    # its buffer (docs/protocols.md 4.1). 0x5A is such garbage; the old switch dropped it.
    sw = make((PEER,))
    join(sw, A)
    join(sw, B)
    pkt = data(node(A), hops=0x5A)
    d = sw.handle(pkt, A, 1.0)
    assert (d.outcome, d.detail) == (Outcome.FORWARDED, "broadcast")
    assert set(d.targets) == {B, PEER}
    assert d.packet is not None
    assert d.packet[4] == 1  # counted from 0: one trip through this bridge
    assert d.packet[5:] == pkt[5:]


def test_ping_pong_of_40_round_trips_between_two_clients() -> None:
    # A game answering from its receive buffer sends back the hop count it received, so the
    # byte climbs by one per trip through the bridge (docs/protocols.md 4.1). Each client here
    # copies the received byte into its answer, as such a DOS program does.
    sw = make()
    join(sw, A)
    join(sw, B)
    hops = 0
    src, dst = A, B
    for i in range(80):  # 40 round trips
        pkt = data(node(src), dst=node(dst), payload=i.to_bytes(2, "big"), hops=hops)
        d = sw.handle(pkt, src, 1.0 + 0.01 * i)
        assert (d.outcome, d.targets) == (Outcome.FORWARDED, (dst,)), (i, d.detail)
        assert d.packet is not None
        hops = d.packet[4]
        src, dst = dst, src


def test_hop_limit_still_ends_loops_between_bridges() -> None:
    sw = make((PEER, PEER2))
    register(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    d = sw.handle(data(remote, hops=15), PEER, 0.0)
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "hop_limit")
    d = sw.handle(data(remote, hops=14, payload=b"y"), PEER, 0.0)
    assert d.packet is not None
    assert d.packet[4] == 15


def test_unicast_goes_to_owner_only() -> None:
    sw = make()
    for addr in (A, B, C):
        join(sw, addr)
    d = sw.handle(data(node(A), dst=node(C)), A, 1.0)
    assert (d.outcome, d.detail, d.targets) == (Outcome.FORWARDED, "unicast", (C,))


def test_unknown_unicast_never_reaches_dosbox_clients() -> None:
    # A DOSBox client does not check the destination node (docs/protocols.md 4.4): a flooded
    # unicast would reach each game as if addressed to it. DOSBox's own server drops it.
    sw = make()
    for addr in (A, B, C):
        register(sw, addr)
    d = sw.handle(data(node(A), dst=b"\x01\x02\x03\x04\x05\x06"), A, 1.0)
    assert (d.outcome, d.detail, d.targets) == (Outcome.DROPPED, "unknown_destination", ())


def test_unknown_unicast_goes_to_peers_only_marked_flooded() -> None:
    sw = make((PEER, PEER2))
    for addr in (A, B):
        register(sw, addr)
    d = sw.handle(data(node(A), dst=b"\x01\x02\x03\x04\x05\x06"), A, 1.0)
    assert (d.outcome, d.detail) == (Outcome.FORWARDED, "flooded")
    assert set(d.targets) == {PEER, PEER2}
    # from a peer: the other peers may own it, the ingress and the clients never get it
    d = sw.handle(data(ipx.dosbox_node("172.16.0.5", 5000), dst=b"\x0a" * 6), PEER, 1.0)
    assert (d.detail, d.targets) == ("flooded", (PEER2,))


def test_spoofed_source_node_is_dropped() -> None:
    sw = make()
    register(sw, A)
    register(sw, B)
    d = sw.handle(data(node(B)), A, 1.0)  # A claims to be B
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "spoofed_source")


def test_filtered_sockets_are_not_relayed_by_default_and_can_be_enabled() -> None:
    sw = make()
    join(sw, A)
    join(sw, B)
    for sock in (0x0451, 0x0452, 0x0453, 0x0455, 0x0551, 0x0553, 0x900F, 0x9010):
        d = sw.handle(data(node(A), sock=sock), A, 1.0)
        assert (d.outcome, d.detail) == (Outcome.DROPPED, "filtered_socket")
    open_sw = make(filtered_sockets=frozenset())
    join(open_sw, A)
    join(open_sw, B)
    assert open_sw.handle(data(node(A), sock=0x0455), A, 1.0).outcome is Outcome.FORWARDED


def test_broadcast_ping_is_answered_by_the_bridge_and_forwarded() -> None:
    sw = make()
    join(sw, A)
    join(sw, B)
    d = sw.handle(ipx.build_ping(node(A)), A, 1.0)
    assert d.outcome is Outcome.FORWARDED
    assert d.targets == (B,)
    ((reply, to),) = d.replies
    assert to == A
    assert reply == ipx.build_ping_reply(node(A), SERVER_NODE)


def test_lone_client_ping_still_gets_the_bridge_answer() -> None:
    sw = make()
    register(sw, A)
    d = sw.handle(ipx.build_ping(node(A)), A, 1.0)
    assert d.outcome is Outcome.DROPPED
    assert d.detail == "no_destination"
    assert len(d.replies) == 1


def test_keepalive_to_idle_clients_and_reply_consumed() -> None:
    sw = make(keepalive_interval=5.0)
    register(sw, A, now=0.0)
    assert sw.tick(0.9) == []  # the registration reply must not be overtaken
    out = sw.tick(1.0)  # a new client is probed after 1 s, so a real one verifies quickly
    nonce = sw.clients[A].nonce
    assert nonce not in (SERVER_NODE, ipx.ZERO_NODE)
    assert out == [(ipx.build_ping(nonce), A)]  # from the nonce: only a receiver knows it
    hdr = ipx.parse_header(out[0][0])
    assert (hdr.checksum, hdr.length) == (0xFFFF, 30)  # well-formed, unlike ipxbox's
    assert sw.tick(5.9) == []  # not again before the interval
    reply = ipx.build_ping_reply(nonce, node(A))  # DOSBox answers the pinger's node
    d = sw.handle(reply, A, 6.5)
    assert (d.outcome, d.detail) == (Outcome.CONTROL, "ping_reply")
    assert sw.clients[A].verified
    assert sw.tick(11.0) == []  # a verified client is pinged after 5 s of silence
    assert sw.tick(11.5) == [(ipx.build_ping(SERVER_NODE), A)]


def test_silent_client_gets_bounded_probes_and_stays_until_idle_timeout() -> None:
    # IPXWrapper never answers socket-2 pings and sends no keepalive (docs/protocols.md 6): it
    # must stay registered (the old switch dropped it after 3 probes, ~20 s), and a spoofed
    # registration draws a bounded number of probes.
    sw = make(keepalive_interval=5.0, unverified_probes=3, idle_timeout=600.0)
    register(sw, A, now=0.0)
    sent = 0
    t = 0.0
    while t < 599:
        t += 1.0
        sent += len(sw.tick(t))
    assert A in sw.clients
    assert sent == 3
    sw.tick(600.5)
    assert A not in sw.clients
    assert [e.kind for e in sw.pop_events()] == ["registered", "expired"]


def test_a_client_is_probed_with_its_first_packet_or_a_second_after_registering() -> None:
    # Address nodes prove nothing, so only the probe's answer verifies. The probe goes with
    # the first packet (that shows the client has its registration reply, so the probe
    # cannot be taken for it: docs/protocols.md 4.2), or a second after registration for a
    # client that only listens.
    sw = make(node_assignment="address", keepalive_interval=5.0)
    register(sw, A)
    d = sw.handle(data(address_node(A), payload=b"game"), A, 0.5)
    assert not sw.clients[A].verified  # its node is predictable: the packet proves nothing
    assert d.replies == ((ipx.build_ping(sw.clients[A].nonce), A),)
    assert sw.tick(1.0) == []  # not probed twice
    d = sw.handle(data(address_node(A), payload=b"more"), A, 0.6)
    assert d.replies == ()
    verify(sw, A, 0.55)  # one round trip after its first packet
    register(sw, B, 2.0)
    assert sw.tick(2.9) == []
    assert sw.tick(3.0) == [(ipx.build_ping(sw.clients[B].nonce), B)]


def test_silent_dplay_host_answers_an_enumeration_60_s_after_registering() -> None:
    # Stands in for a DirectPlay host behind IPXWrapper: registers, never answers the
    # probes, then answers the EnumSessions it receives 60 s later (docs/protocols.md 1.9,
    # 6). Its answer carries its keyed node, which verifies it.
    sw = make(keepalive_interval=5.0)
    host, player = A, B
    register(sw, host, now=0.0)
    for t in range(1, 61):
        sw.tick(float(t))
    assert not sw.clients[host].verified
    register(sw, player, now=60.0)
    enum = data(node(player), sock=0xA57F, payload=b"play\x02\x00\x0e\x00" + bytes(24))
    d = sw.handle(enum, player, 60.5)
    assert (d.outcome, d.targets, d.held) == (Outcome.FORWARDED, (host,), 0)
    reply = data(node(host), dst=node(player), sock=0x4002, payload=b"play\x01\x00")
    d = sw.handle(reply, host, 60.6)
    assert (d.outcome, d.detail, d.targets) == (Outcome.FORWARDED, "unicast", (player,))
    assert sw.clients[host].verified is True  # only our reply told it that node


def test_a_listener_gets_broadcasts_and_unicasts_from_the_moment_it_registers() -> None:
    # A DOS program waiting for another's broadcast sends nothing at all (docs/protocols.md
    # 4.4, "Silent after registration"): it must hear the game anyway, at once.
    sw = make()
    listener, player = A, B
    register(sw, listener, 0.0)
    join(sw, player, 0.0)
    d = sw.handle(data(node(player), payload=b"lobby"), player, 0.01)
    assert (d.outcome, d.targets, d.held) == (Outcome.FORWARDED, (listener,), 0)
    d = sw.handle(data(node(player), dst=node(listener), payload=b"to you"), player, 0.02)
    assert (d.outcome, d.detail, d.targets) == (Outcome.FORWARDED, "unicast", (listener,))
    assert not sw.clients[listener].verified


def test_copies_to_an_unproven_address_stop_at_its_rate_and_the_rest_is_counted() -> None:
    sw = make(unverified_address_bytes_per_second=1000.0, unverified_address_byte_burst=2000)
    register(sw, A)
    register(sw, B)  # silent: its registration may have been spoofed
    register(sw, C)
    verify(sw, A)
    verify(sw, C)
    got_b = held = 0
    for i in range(129):  # 129 broadcasts of 100 bytes over exactly one second
        d = sw.handle(data(node(A), payload=i.to_bytes(2, "big") * 35), A, i / 128)
        assert d.outcome is Outcome.FORWARDED
        assert C in d.targets  # verified clients are never held
        got_b += B in d.targets
        held += d.held
    # B's address had 2,000 bytes, less the 30-byte reply, and earned 1,000 over the second;
    # copies leave 60 bytes for a probe and a reply.
    assert got_b == (2000 - 30 + 1000 - 60) // 100
    assert held == 129 - got_b
    assert sw.reflection.refused[("copy", "address")] == held
    assert sw.reflection.sent_bytes == 3 * 30 + got_b * 100  # replies and copies
    # once B answers its probe it is verified and limited no longer
    verify(sw, B, 1.0)
    for i in range(50):
        assert B in sw.handle(data(node(A), payload=b"free %d" % i), A, 1.0).targets


def test_all_unproven_addresses_together_stop_at_the_total_rate() -> None:
    sw = make(unverified_total_bytes_per_second=500.0, unverified_total_byte_burst=1000)
    join(sw, A)
    listeners = [(f"10.0.1.{n}", 5000) for n in range(1, 11)]
    for addr in listeners:
        register(sw, addr)  # 10 x 30 bytes of replies
    got = 0
    for i in range(20):  # 2 s of 100-byte broadcasts, 10 a second, each to 10 listeners
        d = sw.handle(data(node(A), payload=i.to_bytes(2, "big") * 35), A, i / 10)
        got += sum(1 for t in d.targets if t in listeners)
    assert got * 100 + 300 <= 1000 + 500 * 1.9
    assert got >= (1000 - 300 + 500 * 1.9 - 60) // 100 - 1
    assert sw.reflection.refused[("copy", "total")] == 20 * 10 - got


def test_the_limits_reload() -> None:
    sw = make(unverified_address_bytes_per_second=0.0, unverified_address_byte_burst=100)
    join(sw, A)
    register(sw, B)
    assert sw.handle(data(node(A), payload=b"x" * 70), A, 0.0).held == 1  # 70 left < 100
    sw.reconfigure(SwitchSettings(), ())  # the defaults: 16 KiB/s
    assert sw.handle(data(node(A), payload=b"y" * 70), A, 1.0).targets == (B,)


def test_verified_client_idles_out_after_idle_timeout_only() -> None:
    sw = make(keepalive_interval=5.0, idle_timeout=600.0)
    register(sw, A, now=0.0)
    sw.handle(data(node(A)), A, 1.0)  # any packet verifies
    sw.tick(599.0)
    assert A in sw.clients
    sw.tick(601.5)
    assert A not in sw.clients


def test_shutdown_disconnects_client() -> None:
    sw = make()
    register(sw, A)
    d = sw.handle(ipx.build_shutdown(node(A)), A, 1.0)
    assert (d.outcome, d.detail) == (Outcome.CONTROL, "shutdown")
    assert A not in sw.clients


def test_max_clients_is_enforced() -> None:
    sw = make(max_clients=2)
    register(sw, A)
    register(sw, B)
    verify(sw, A)
    verify(sw, B)
    d = sw.handle(ipx.build_registration(), C, 0.0)
    assert (d.outcome, d.detail, d.replies) == (Outcome.DROPPED, "clients_full", ())


def test_peer_needs_no_registration_and_nodes_are_learned() -> None:
    sw = make((PEER,))
    join(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    d = sw.handle(data(remote), PEER, 1.0)
    assert (d.outcome, d.targets) == (Outcome.FORWARDED, (A,))
    # the unicast back goes to the peer only
    d = sw.handle(data(node(A), dst=remote), A, 1.1)
    assert (d.detail, d.targets) == ("unicast", (PEER,))


def test_rfc1234_node_of_a_peer_routes_to_it() -> None:
    sw = make((PEER, PEER2))
    register(sw, A)
    d = sw.handle(data(node(A), dst=ipx.rfc1234_node(PEER2[0])), A, 1.0)
    assert d.targets == (PEER2,)


def test_learned_node_expires() -> None:
    sw = make((PEER, PEER2), learned_node_ttl=300.0)
    register(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    sw.handle(data(remote), PEER, 0.0)
    sw.tick(301.0)
    sw.handle(data(node(A)), A, 301.0)  # keep A verified and alive
    d = sw.handle(data(node(A), dst=remote, payload=b"x"), A, 302.0)
    assert (d.detail, set(d.targets)) == ("flooded", {PEER, PEER2})


def test_registration_from_a_peer_is_refused() -> None:
    sw = make((PEER,))
    d = sw.handle(ipx.build_registration(), PEER, 0.0)
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "unexpected_registration")


def test_own_client_node_coming_back_from_a_peer_is_a_loop() -> None:
    sw = make((PEER,))
    register(sw, A)
    register(sw, B)
    d = sw.handle(data(node(A), hops=2), PEER, 1.0)
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "loop")


def test_duplicate_via_other_port_dropped_same_port_repeats_pass() -> None:
    sw = make((PEER, PEER2), dedup_window=2.0)
    register(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    first = data(remote, hops=1)
    assert sw.handle(first, PEER, 0.0).outcome is Outcome.FORWARDED
    # the same packet via the other bridge, one hop more: a loop copy
    d = sw.handle(data(remote, hops=2), PEER2, 0.01)
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "duplicate")
    # identical legitimate retries 0.5 s apart through the same port all pass
    for i in range(1, 6):
        assert sw.handle(first, PEER, 0.5 * i).outcome is Outcome.FORWARDED


def test_hop_byte_from_a_client_never_drops() -> None:
    sw = make()
    join(sw, A)
    join(sw, B)
    for hops in (15, 16, 0xFF):
        d = sw.handle(data(node(A), hops=hops, payload=bytes([hops])), A, 0.0)
        assert (d.outcome, d.targets) == (Outcome.FORWARDED, (B,)), hops


def test_malformed_is_dropped_with_codec_reason() -> None:
    sw = make()
    register(sw, A)
    assert sw.handle(b"\xff\xff\x00", A, 0.0).detail == "truncated"
    assert sw.handle(b"\x00" * 30, B, 0.0).detail == "bad_checksum"


def test_unicast_to_a_port_on_the_ingress_is_dropped() -> None:
    sw = make((PEER,))
    register(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    sw.handle(data(remote), PEER, 0.0)
    d = sw.handle(data(ipx.dosbox_node("172.16.0.6", 1), dst=remote), PEER, 0.1)
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "destination_on_ingress")


def test_client_known_before_rejoins_without_registration_verified() -> None:
    sw = make()
    join(sw, B)
    sw.pop_events()
    # A never registered with this switch (the bridge restarted: same key, so the same
    # nodes) but its packet carries exactly the node this bridge assigns to A's address.
    # Only a receiver of our earlier reply knows it: A is back, verified.
    d = sw.handle(data(node(A)), A, 1.0)
    assert (d.outcome, d.targets, d.replies) == (Outcome.FORWARDED, (B,), ())
    assert sw.clients[A].verified
    assert [e.kind for e in sw.pop_events()] == ["rejoined", "verified"]
    d = sw.handle(data(node(B), payload=b"to A"), B, 1.1)
    assert (d.outcome, d.targets, d.held) == (Outcome.FORWARDED, (A,), 0)


def test_a_rejoin_with_any_other_node_is_refused() -> None:
    # A spoofer knows the victim's address, not its keyed node: the DOSBox convention,
    # another client's node, the node of another address or port, a guess: all refused.
    sw = make()
    join(sw, B)
    victim: Address = ("10.0.0.99", 5000)
    for guess in (
        address_node(victim),
        node(B),
        node(("10.0.0.99", 5001)),
        node(("10.0.0.98", 5000)),
        b"\x02" + bytes(5),
        b"\x01" * 6,
    ):
        d = sw.handle(data(guess), victim, 1.0)
        assert (d.outcome, d.detail, d.replies) == (Outcome.DROPPED, "unregistered", ()), guess
    assert list(sw.clients) == [B]


def test_with_address_nodes_a_rejoin_stays_unverified() -> None:
    sw = make(node_assignment="address")
    d = sw.handle(data(address_node(A)), A, 1.0)
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "no_destination")
    assert A in sw.clients
    assert not sw.clients[A].verified  # anyone can compute that node


def test_rejoin_can_be_disabled() -> None:
    sw = make(rejoin=False)
    register(sw, B)
    assert sw.handle(data(node(A)), A, 1.0).detail == "unregistered"


def test_broadcast_targets_follow_membership_changes() -> None:
    sw = make()
    join(sw, A)
    join(sw, B)
    assert sw.handle(data(node(A), payload=b"1"), A, 1.0).targets == (B,)
    join(sw, C, now=1.1)
    assert set(sw.handle(data(node(A), payload=b"2"), A, 1.2).targets) == {B, C}
    sw.handle(ipx.build_shutdown(node(B)), B, 1.3)
    assert sw.handle(data(node(A), payload=b"3"), A, 1.4).targets == (C,)


def test_clients_allow_keeps_strangers_out_but_not_peers() -> None:
    sw = make((PEER,), clients_allow=(IPv4Network("10.0.0.10/31"), IPv4Network("10.0.0.12/32")))
    join(sw, B)  # 10.0.0.12, allowed by its /32
    outsider: Address = ("10.0.0.13", 40003)  # C: outside both networks
    for packet in (ipx.build_registration(), data(node(outsider))):  # register, then rejoin
        d = sw.handle(packet, outsider, 1.0)
        assert (d.outcome, d.detail, d.replies) == (Outcome.DROPPED, "not_allowed", ())
    assert list(sw.clients) == [B]
    # RFC 1234 peers are configured, not registered: the list does not apply to them.
    d = sw.handle(data(ipx.rfc1234_node("172.16.0.9")), PEER, 2.0)
    assert d.outcome is Outcome.FORWARDED
    assert d.targets == (B,)
    register(sw, A)  # 10.0.0.11 is inside 10.0.0.10/31
    assert set(sw.clients) == {A, B}


def test_narrowing_clients_allow_on_reload_drops_clients_outside_it() -> None:
    sw = make()
    register(sw, A)
    register(sw, B)
    sw.pop_events()
    sw.reconfigure(SwitchSettings(clients_allow=(IPv4Network("10.0.0.11/32"),)), ())
    assert list(sw.clients) == [A]
    assert [(e.kind, e.addr) for e in sw.pop_events()] == [("not_allowed", B)]
    d = sw.handle(data(node(A)), A, 1.0)  # B no longer receives A's broadcasts
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "no_destination")


# --- spoofed DOSBox sources (docs/reliability.md R7) -----------------------------------


def test_a_spoofed_rejoin_with_address_nodes_stays_unverified_until_the_nonce_comes_back() -> None:
    # One spoofed packet carrying the node the bridge assigns to a victim's address used to
    # subscribe the victim to every broadcast, verified, until idle_timeout. With address
    # nodes anyone can compute that node; with keyed nodes it is refused (above).
    sw = make(node_assignment="address")
    join_by_probe(sw, A)
    victim: Address = ("10.0.0.99", 5000)
    d = sw.handle(data(address_node(victim), payload=b"spoofed"), victim, 1.0)
    assert d.outcome is Outcome.FORWARDED  # the game traffic itself is passed on
    assert sw.clients[victim].verified is False
    probes = [p for p, to in d.replies if to == victim and p[10:16] == ipx.BROADCAST_NODE]
    # answers that do not carry the nonce prove nothing
    for wrong in (SERVER_NODE, ipx.ZERO_NODE, b"\x00\x00\x00\x00\x00\x01"):
        d = sw.handle(ipx.build_ping_reply(wrong, address_node(victim)), victim, 1.5)
        probes += [p for p, to in d.replies if to == victim and p[10:16] == ipx.BROADCAST_NODE]
        assert sw.clients[victim].verified is False
    probes += [p for p, to in sw.tick(2.0) if to == victim]  # paid by what it sent
    assert probes == [ipx.build_ping(sw.clients[victim].nonce)]  # one probe, however asked
    verify(sw, victim, 2.1)


def test_nonces_come_from_the_injected_source() -> None:
    drawn = iter([b"\xaa" * 6, b"\xbb" * 6])
    sw = IpxSwitch(
        SwitchSettings(), (), lambda _a: SERVER_NODE, lambda n: next(drawn)[:n], node_for=NODE_FOR
    )
    register(sw, A)
    register(sw, B)
    assert (sw.clients[A].nonce, sw.clients[B].nonce) == (b"\xaa" * 6, b"\xbb" * 6)


def test_without_node_for_the_switch_keys_nodes_from_its_random_source() -> None:
    sw = IpxSwitch(SwitchSettings(), (), lambda _a: SERVER_NODE, lambda n: b"\x07" * n)
    assert register(sw, A) == ipx.keyed_node(b"\x07" * 32, *A)
    plain = IpxSwitch(SwitchSettings(node_assignment="address"))
    assert register(plain, A) == ipx.dosbox_node(*A)


def test_spoofed_registrations_cannot_lock_out_real_players() -> None:
    sw = make(max_clients=4, max_unverified=16, max_unverified_per_ip=4)
    for addr in (A, B, C):
        join(sw, addr)
    refused = 0
    for i in range(1000):  # 1,000 spoofed addresses; none ever sends a packet with its node
        spoofed = (f"198.51.{i // 250}.{i % 250 + 1}", 1024 + i)
        d = sw.handle(ipx.build_registration(), spoofed, i / 1000)
        refused += d.detail == "unverified_full"
        sw.tick(i / 1000)
    assert len(sw.clients) == 3 + 16  # the unverified table is bounded on its own
    assert refused == 1000 - 16
    assert all(sw.clients[a].verified for a in (A, B, C))  # nobody real was pushed out
    # A real player arriving during the flood gets in: the spoofed entries had their time to
    # prove themselves (no probe was paid for: a second past when it was due), so one makes
    # room, and the newcomer's first packet carries its keyed node.
    player: Address = ("10.0.0.50", 6000)
    assert register(sw, player, now=2.2) == node(player)
    sw.handle(data(node(player), payload=b"hello"), player, 2.3)
    assert sum(c.verified for c in sw.clients.values()) == 4
    assert "evicted" in [e.kind for e in sw.pop_events()]


def test_a_full_address_makes_room_with_its_oldest_unverified_client() -> None:
    # Players behind one NAT share its address; IPXWrapper hosts that never speak stay
    # unverified. The newest registration from an address at max_unverified_per_ip replaces
    # that address's oldest unverified client, never a verified one, never another address's.
    sw = make(max_unverified=64, max_unverified_per_ip=4)
    nat = "10.0.0.66"
    player: Address = (nat, 1999)
    join(sw, player)  # verified: not counted against the address's unverified clients
    register(sw, A)
    sw.pop_events()
    reasons = [
        sw.handle(ipx.build_registration(), (nat, 2000 + i), float(i)).detail for i in range(10)
    ]
    assert reasons == ["registration"] * 10  # nobody locked out
    assert sorted(a for a in sw.clients if a[0] == nat) == [player] + [
        (nat, 2000 + i) for i in range(6, 10)
    ]
    evicted = [(e.kind, e.addr) for e in sw.pop_events() if e.kind == "evicted"]
    assert evicted == [("evicted", (nat, 2000 + i)) for i in range(6)]  # oldest first
    assert A in sw.clients  # another address is not affected
    # an evicted client that was real rejoins with its first packet (its keyed node)
    d = sw.handle(data(node((nat, 2000)), payload=b"back"), (nat, 2000), 20.0)
    assert d.outcome is Outcome.FORWARDED
    assert sw.clients[(nat, 2000)].verified


def test_registration_from_udp_port_0_is_refused() -> None:
    sw = make()
    d = sw.handle(ipx.build_registration(), ("10.0.0.11", 0), 0.0)
    assert (d.outcome, d.detail, d.replies) == (Outcome.DROPPED, "source_port_zero", ())


def test_an_ipxwrapper_client_is_verified_by_its_first_packet() -> None:
    # IPXWrapper never answers pings, but it sends from the node our reply gave it.
    sw = make()
    join(sw, A)
    register(sw, B)
    d = sw.handle(data(node(B), payload=b"ipxwrapper plays"), B, 1.0)
    assert (d.outcome, d.targets) == (Outcome.FORWARDED, (A,))
    assert sw.clients[B].verified
    assert sw.handle(data(node(A), payload=b"everything now"), A, 1.1).targets == (B,)


def test_an_unproven_ipxwrapper_host_that_plays_gets_the_whole_game() -> None:
    # With address nodes an IPXWrapper host (it never answers pings) never verifies; a
    # 10-player game (20 packets a second to it) is far inside the address's rate.
    sw = make(node_assignment="address")
    join_by_probe(sw, A)
    register(sw, B)  # never answers a probe
    got = 0
    for tick in range(100):  # 10 s
        now = 1 + tick / 10
        if tick % 5 == 0:
            sw.handle(data(address_node(B), payload=b"b%d" % tick), B, now)
        for k in range(2):
            d = sw.handle(data(address_node(A), payload=b"a%d.%d" % (tick, k)), A, now)
            got += B in d.targets
    assert sw.clients[B].verified is False
    assert got == 200


def test_a_receiver_kept_busy_by_broadcasts_still_gets_its_probe() -> None:
    # Broadcasts at 1,000 a second would take every token of the address's rate; copies
    # leave room for the probe, or a real DOSBox client under load could never verify
    # (found by bench/soak.py).
    sw = make(unverified_address_bytes_per_second=4000.0, unverified_address_byte_burst=600)
    join(sw, A)
    register(sw, B)
    probes = []
    held = 0
    for i in range(2000):  # 1,000 broadcasts a second for 2 s
        now = i / 1000
        held += sw.handle(data(node(A), payload=i.to_bytes(2, "big")), A, now).held
        probes += [p for p, to in sw.tick(now) if to == B]
    assert held > 0  # the rate was reached
    assert probes == [ipx.build_ping(sw.clients[B].nonce)]


def test_a_spoofed_rejoin_gets_no_more_than_the_address_rate() -> None:
    # With address nodes anyone can rejoin as a victim; what reaches the victim in a minute
    # of a busy game is bounded by its address's rate, probes included (R26).
    sw = make(node_assignment="address")
    join_by_probe(sw, A)
    victim: Address = ("10.0.0.99", 5000)
    sw.handle(data(address_node(victim), payload=b"x" * 30), victim, 1.0)  # a spoofed rejoin
    sent = 0
    for i in range(1200):  # 20 KiB/s of broadcasts for a minute
        now = 1 + i / 20
        d = sw.handle(data(address_node(A), payload=i.to_bytes(2, "big") * 500), A, now)
        sent += len(d.packet or b"") if victim in d.targets else 0
        sent += sum(len(p) for p, to in sw.tick(now) if to == victim)
    cfg = sw.settings
    assert sent <= cfg.unverified_address_byte_burst + 60 * cfg.unverified_address_bytes_per_second
    assert sent > 60 * cfg.unverified_address_bytes_per_second * 0.9  # and it was reached


def test_spoofed_registrations_from_one_address_and_from_many_stay_within_the_limits() -> None:
    # Registrations spoofed as one victim (many ports, 1,000 a second) and as 10,000
    # addresses, while a verified player broadcasts 1,000-byte packets 10 times a second:
    # the bytes toward the victim and toward everyone unproven stay within the limits.
    sw = make()
    join(sw, A)
    cfg = sw.settings
    victim_ip = "10.0.0.99"
    to_victim = to_all = 0
    seconds = 10
    for i in range(seconds * 1000):
        now = 1 + i / 1000
        d = sw.handle(ipx.build_registration(), (victim_ip, 1024 + i % 4000), now)
        out = list(d.replies)
        d = sw.handle(
            ipx.build_registration(),
            (f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}", 999),
            now,
        )
        out += d.replies
        if i % 100 == 0:
            d = sw.handle(data(node(A), payload=i.to_bytes(4, "big") * 250), A, now)
            out += [(d.packet or b"", to) for to in d.targets]
        out += sw.tick(now)
        for packet, to in out:
            if isinstance(to, tuple) and to != A:
                to_all += len(packet)
                to_victim += len(packet) if to[0] == victim_ip else 0
    assert (
        to_victim
        <= cfg.unverified_address_byte_burst + seconds * cfg.unverified_address_bytes_per_second
    )
    assert (
        to_all <= cfg.unverified_total_byte_burst + seconds * cfg.unverified_total_bytes_per_second
    )
    assert to_victim > 0


def test_a_newcomer_is_admitted_only_when_its_reply_can_go() -> None:
    # DOSBox takes the first datagram it receives as its registration reply (docs/protocols.md
    # 4.2): a client whose reply the limit holds is not admitted, so nothing can reach it first.
    sw = make(unverified_address_bytes_per_second=0.0, unverified_address_byte_burst=60)
    register(sw, B)  # 30 of 60
    register(sw, B, 1.0)  # a lost reply: asked again, answered again (60 of 60)
    victim2: Address = (B[0], B[1] + 1)
    d = sw.handle(ipx.build_registration(), victim2, 2.0)
    assert (d.outcome, d.detail, d.replies) == (Outcome.DROPPED, "unverified_rate", ())
    assert victim2 not in sw.clients
    d = sw.handle(ipx.build_registration(), B, 3.0)  # and B's own third ask is held
    assert (d.outcome, d.detail) == (Outcome.DROPPED, "unverified_rate")
    assert sw.reflection.refused[("registration_reply", "address")] == 2


def test_a_peer_keeps_books_of_what_it_sent_for_the_status_page() -> None:
    peer: Address = ("10.45.0.9", 213)
    sw = IpxSwitch(SwitchSettings(), (peer,), lambda _a: SERVER_NODE, node_for=NODE_FOR)
    pkt = data(bytes.fromhex("00000a2d0009"), payload=b"from the other site")
    sw.handle(pkt, peer, 1.0)
    sw.handle(pkt[:-1] + b"!", peer, 1.1)
    assert (sw.peers[peer].rx_packets, sw.peers[peer].rx_bytes) == (2, 2 * len(pkt))


def test_a_client_sending_the_same_broadcast_35_times_a_second_reaches_everyone_35_times() -> None:
    # Games resend identical packets (retries, status with no counter, redundancy against
    # loss): a sender repeating itself is not a loop (rule 9). 16 clients, 500 a second each
    # (what rule 9 used to cut to 0.8 %), and 35 a second for a second.
    sw = make()
    clients = [(f"10.0.2.{n}", 6000) for n in range(1, 17)]
    for addr in clients:
        join(sw, addr)
    got = dict.fromkeys(clients, 0)
    for i in range(35):
        d = sw.handle(data(node(clients[0]), payload=b"same status"), clients[0], i / 35)
        for to in d.targets:
            got[to] += 1  # type: ignore[index]
    assert [got[c] for c in clients[1:]] == [35] * 15
    copies = 0
    for i in range(500):
        for addr in clients:
            d = sw.handle(data(node(addr), payload=b"burst"), addr, 2 + i / 500)
            copies += len(d.targets)
    assert copies == 500 * 16 * 15


@pytest.mark.patches_code
def test_a_full_table_of_young_registrations_is_not_walked_for_each_newcomer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A flood of spoofed registrations from many addresses keeps the unverified table full of
    # entries younger than PROOF_WAIT, none of which can have had its chance: each newcomer
    # is refused after one look, not a walk over the whole table (bench/reflect.py, R26).
    sw = make(max_unverified=256)
    looked: list[Address] = []
    chance = ClientTable._had_its_chance

    def counting(self: ClientTable, addr: Address, now: float) -> bool:
        looked.append(addr)
        return chance(self, addr, now)

    monkeypatch.setattr(ClientTable, "_had_its_chance", counting)
    for i in range(256):
        register(sw, (f"10.9.{i // 250}.{i % 250 + 1}", 5000), i / 1000)
    refused = [sw.handle(ipx.build_registration(), ("10.8.0.1", 6000 + n), 0.3) for n in range(100)]
    assert {d.detail for d in refused} == {"unverified_full"}
    assert looked == []
    # Two seconds on, the oldest had its chance (its probe went at 1 s, unanswered): the
    # newcomer takes its place after one look.
    sw.tick(1.0)
    assert register(sw, ("10.8.0.2", 7000), 2.1) == node(("10.8.0.2", 7000))
    assert len(looked) == 1
    assert ("10.9.0.1", 5000) not in sw.clients
