"""Switching decisions as pure functions with an injected clock (policy/switch.py rules)."""

from ipaddress import IPv4Network

from ipxbridge.policy.switch import Address, IpxSwitch, Outcome, SwitchSettings
from ipxbridge.wire import ipx

SERVER_NODE = ipx.dosbox_node("10.0.0.1", 213)
A: Address = ("10.0.0.11", 40001)
B: Address = ("10.0.0.12", 40002)
C: Address = ("10.0.0.13", 40003)
PEER: Address = ("192.0.2.50", 213)
PEER2: Address = ("192.0.2.51", 213)


def make(peers: tuple[Address, ...] = (), **kw: object) -> IpxSwitch:
    settings = SwitchSettings(**kw)  # type: ignore[arg-type]
    return IpxSwitch(settings, peers, lambda _addr: SERVER_NODE)


def node(addr: Address) -> bytes:
    return ipx.dosbox_node(*addr)


def register(sw: IpxSwitch, addr: Address, now: float = 0.0) -> bytes:
    d = sw.handle(ipx.build_registration(), addr, now)
    assert d.outcome is Outcome.CONTROL
    ((reply, to),) = d.replies
    assert to == addr
    return ipx.parse_header(reply).dst_node


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


def test_registration_assigns_ip_and_port_node_and_is_idempotent() -> None:
    sw = make()
    assert register(sw, A) == node(A) == bytes([10, 0, 0, 11]) + (40001).to_bytes(2, "big")
    d = sw.handle(ipx.build_registration(), A, 1.0)
    assert ipx.parse_header(d.replies[0][0]).dst_node == node(A)
    assert list(sw.clients) == [A]
    kinds = [e.kind for e in sw.pop_events()]
    assert kinds == ["registered", "reregistered"]


def test_registration_reply_is_the_only_thing_a_new_address_gets() -> None:
    sw = make()
    register(sw, A)
    d = sw.handle(data(node(A)), A, 0.1)
    assert d.outcome is Outcome.DROPPED  # nobody else yet
    assert d.reason == "no_destination"
    # B registers; the packet A sent before is not replayed to B.
    d = sw.handle(ipx.build_registration(), B, 0.2)
    assert len(d.replies) == 1
    assert d.targets == ()


def test_unregistered_sender_is_dropped() -> None:
    sw = make()
    register(sw, A)
    d = sw.handle(data(ipx.dosbox_node("10.9.9.9", 1)), B, 0.0)
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "unregistered")


def test_broadcast_goes_to_all_but_ingress_with_hop_incremented() -> None:
    sw = make()
    for addr in (A, B, C):
        register(sw, addr)
    pkt = data(node(A), hops=2)
    d = sw.handle(pkt, A, 1.0)
    assert d.outcome is Outcome.FORWARDED
    assert d.reason == "broadcast"
    assert set(d.targets) == {B, C}
    assert d.packet is not None
    assert d.packet[4] == 3
    assert d.packet[5:] == pkt[5:]


def test_unicast_goes_to_owner_only() -> None:
    sw = make()
    for addr in (A, B, C):
        register(sw, addr)
    d = sw.handle(data(node(A), dst=node(C)), A, 1.0)
    assert (d.outcome, d.reason, d.targets) == (Outcome.FORWARDED, "unicast", (C,))


def test_unknown_unicast_is_flooded_and_marked() -> None:
    sw = make()
    for addr in (A, B, C):
        register(sw, addr)
    d = sw.handle(data(node(A), dst=b"\x01\x02\x03\x04\x05\x06"), A, 1.0)
    assert (d.outcome, d.reason) == (Outcome.FORWARDED, "flooded")
    assert set(d.targets) == {B, C}


def test_spoofed_source_node_is_dropped() -> None:
    sw = make()
    register(sw, A)
    register(sw, B)
    d = sw.handle(data(node(B)), A, 1.0)  # A claims to be B
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "spoofed_source")


def test_filtered_sockets_are_not_relayed_by_default_and_can_be_enabled() -> None:
    sw = make()
    register(sw, A)
    register(sw, B)
    for sock in (0x0451, 0x0452, 0x0453, 0x0455, 0x0551, 0x0553, 0x900F, 0x9010):
        d = sw.handle(data(node(A), sock=sock), A, 1.0)
        assert (d.outcome, d.reason) == (Outcome.DROPPED, "filtered_socket")
    open_sw = make(filtered_sockets=frozenset())
    register(open_sw, A)
    register(open_sw, B)
    assert open_sw.handle(data(node(A), sock=0x0455), A, 1.0).outcome is Outcome.FORWARDED


def test_broadcast_ping_is_answered_by_the_bridge_and_forwarded() -> None:
    sw = make()
    register(sw, A)
    register(sw, B)
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
    assert d.reason == "no_destination"
    assert len(d.replies) == 1


def test_keepalive_to_idle_clients_and_reply_consumed() -> None:
    sw = make(keepalive_interval=5.0)
    register(sw, A, now=0.0)
    assert sw.tick(4.0) == []
    out = sw.tick(5.0)
    assert out == [(ipx.build_ping(SERVER_NODE), A)]
    hdr = ipx.parse_header(out[0][0])
    assert (hdr.checksum, hdr.length) == (0xFFFF, 30)  # well-formed, unlike ipxbox's
    assert sw.tick(6.0) == []  # not again before the interval
    reply = ipx.build_ping_reply(SERVER_NODE, node(A))
    d = sw.handle(reply, A, 6.5)
    assert (d.outcome, d.reason) == (Outcome.CONTROL, "ping_reply")
    assert sw.clients[A].verified


def test_unanswered_registration_gets_bounded_probes_then_expires() -> None:
    sw = make(keepalive_interval=5.0, unverified_probes=3)
    register(sw, A, now=0.0)
    sent = 0
    t = 0.0
    while t < 120 and A in sw.clients:
        t += 1.0
        sent += len(sw.tick(t))
    assert A not in sw.clients
    assert sent == 3
    assert "unverified" in [e.kind for e in sw.pop_events()]


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
    assert (d.outcome, d.reason) == (Outcome.CONTROL, "shutdown")
    assert A not in sw.clients


def test_max_clients_is_enforced() -> None:
    sw = make(max_clients=2)
    register(sw, A)
    register(sw, B)
    d = sw.handle(ipx.build_registration(), C, 0.0)
    assert (d.outcome, d.reason, d.replies) == (Outcome.DROPPED, "clients_full", ())


def test_peer_needs_no_registration_and_nodes_are_learned() -> None:
    sw = make(peers=(PEER,))
    register(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    d = sw.handle(data(remote), PEER, 1.0)
    assert (d.outcome, d.targets) == (Outcome.FORWARDED, (A,))
    # the unicast back goes to the peer only
    d = sw.handle(data(node(A), dst=remote), A, 1.1)
    assert (d.reason, d.targets) == ("unicast", (PEER,))


def test_rfc1234_node_of_a_peer_routes_to_it() -> None:
    sw = make(peers=(PEER, PEER2))
    register(sw, A)
    d = sw.handle(data(node(A), dst=ipx.rfc1234_node(PEER2[0])), A, 1.0)
    assert d.targets == (PEER2,)


def test_learned_node_expires() -> None:
    sw = make(peers=(PEER, PEER2), learned_node_ttl=300.0)
    register(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    sw.handle(data(remote), PEER, 0.0)
    sw.tick(301.0)
    sw.handle(data(node(A)), A, 301.0)  # keep A verified and alive
    d = sw.handle(data(node(A), dst=remote, payload=b"x"), A, 302.0)
    assert d.reason == "flooded"


def test_registration_from_a_peer_is_refused() -> None:
    sw = make(peers=(PEER,))
    d = sw.handle(ipx.build_registration(), PEER, 0.0)
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "unexpected_registration")


def test_own_client_node_coming_back_from_a_peer_is_a_loop() -> None:
    sw = make(peers=(PEER,))
    register(sw, A)
    register(sw, B)
    d = sw.handle(data(node(A), hops=2), PEER, 1.0)
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "loop")


def test_duplicate_via_other_port_dropped_same_port_repeats_pass() -> None:
    sw = make(peers=(PEER, PEER2), dedup_window=2.0)
    register(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    first = data(remote, hops=1)
    assert sw.handle(first, PEER, 0.0).outcome is Outcome.FORWARDED
    # the same packet via the other bridge, one hop more: a loop copy
    d = sw.handle(data(remote, hops=2), PEER2, 0.01)
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "duplicate")
    # identical legitimate retries 0.5 s apart through the same port all pass
    for i in range(1, 6):
        assert sw.handle(first, PEER, 0.5 * i).outcome is Outcome.FORWARDED


def test_hop_limit_on_forward() -> None:
    sw = make()
    register(sw, A)
    register(sw, B)
    d = sw.handle(data(node(A), hops=15), A, 0.0)
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "hop_limit")
    assert sw.handle(data(node(A), hops=14, payload=b"y"), A, 0.0).packet is not None


def test_coalesced_datagram_passes_unchanged() -> None:
    sw = make()
    register(sw, A)
    register(sw, B)
    inner = data(node(A)) + data(node(A), payload=b"second")
    outer = ipx.build_packet(
        dst_node=node(B), dst_socket=0, src_node=node(A), src_socket=0, packet_type=2, payload=inner
    )
    d = sw.handle(outer, A, 0.0)
    assert (d.outcome, d.targets, d.packet) == (Outcome.FORWARDED, (B,), outer)


def test_malformed_is_dropped_with_codec_reason() -> None:
    sw = make()
    register(sw, A)
    assert sw.handle(b"\xff\xff\x00", A, 0.0).reason == "truncated"
    assert sw.handle(b"\x00" * 30, B, 0.0).reason == "bad_checksum"


def test_unicast_to_a_port_on_the_ingress_is_dropped() -> None:
    sw = make(peers=(PEER,))
    register(sw, A)
    remote = ipx.dosbox_node("172.16.0.5", 5000)
    sw.handle(data(remote), PEER, 0.0)
    d = sw.handle(data(ipx.dosbox_node("172.16.0.6", 1), dst=remote), PEER, 0.1)
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "destination_on_ingress")


def test_client_known_before_rejoins_without_registration() -> None:
    sw = make()
    register(sw, B)
    # A never registered with this switch (e.g. the bridge restarted) but its packet carries
    # exactly the node this bridge assigns to A's address.
    d = sw.handle(data(node(A)), A, 1.0)
    assert (d.outcome, d.targets, d.replies) == (Outcome.FORWARDED, (B,), ())
    assert A in sw.clients
    assert "rejoined" in [e.kind for e in sw.pop_events()]
    # any other node from an unknown address is still refused
    d = sw.handle(data(b"\x01" * 6), C, 1.0)
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "unregistered")


def test_rejoin_can_be_disabled() -> None:
    sw = make(rejoin=False)
    register(sw, B)
    assert sw.handle(data(node(A)), A, 1.0).reason == "unregistered"


def test_broadcast_targets_follow_membership_changes() -> None:
    sw = make()
    register(sw, A)
    register(sw, B)
    assert sw.handle(data(node(A), payload=b"1"), A, 1.0).targets == (B,)
    register(sw, C, now=1.1)
    assert set(sw.handle(data(node(A), payload=b"2"), A, 1.2).targets) == {B, C}
    sw.handle(ipx.build_shutdown(node(B)), B, 1.3)
    assert sw.handle(data(node(A), payload=b"3"), A, 1.4).targets == (C,)


def test_clients_allow_keeps_strangers_out_but_not_peers() -> None:
    sw = make((PEER,), clients_allow=(IPv4Network("10.0.0.10/31"), IPv4Network("10.0.0.12/32")))
    register(sw, B)  # 10.0.0.12, allowed by its /32
    outsider: Address = ("10.0.0.13", 40003)  # C: outside both networks
    for packet in (ipx.build_registration(), data(node(outsider))):  # register, then rejoin
        d = sw.handle(packet, outsider, 1.0)
        assert (d.outcome, d.reason, d.replies) == (Outcome.DROPPED, "not_allowed", ())
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
    assert (d.outcome, d.reason) == (Outcome.DROPPED, "no_destination")
