"""Relay decisions (pure) and the generated nftables ruleset."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.io.nftables import ruleset
from ipxbridge.policy.dedup import LoopFilter
from ipxbridge.policy.relay import (
    RELAY_DROP_REASONS,
    Egress,
    RelayPolicy,
    RelaySettings,
    Selection,
    SourceMode,
    build_plan,
    wireguard_reads,
)
from ipxbridge.policy.topology import Interface, InterfaceAddress, Kind, Topology
from ipxbridge.wire.directplay import (
    DP4Message,
    EnumSessions,
    SockAddr,
    build_dp8_enum_query,
    build_enum_sessions,
    classify,
    parse_dplay,
)
from ipxbridge.wire.dplay8 import is_dp8_port

LAN_A = Egress(2, "lanA", "lan", "10.0.1.1", "10.0.1.255", networks=("10.0.1.0/24",))
LAN_B = Egress(3, "lanB", "lan", "10.0.2.1", "10.0.2.255", networks=("10.0.2.0/24",))
WG = Egress(
    4, "wg0", "p2p", "10.98.0.1", "", ("10.98.0.2", "10.98.0.3"), networks=("10.98.0.0/24",)
)
OWN = frozenset({"10.0.1.1", "10.0.2.1", "10.98.0.1"})
BCAST = {2: frozenset({"10.0.1.255"}), 3: frozenset({"10.0.2.255"}), 4: frozenset()}
PLAYER = ("10.0.1.50", 2300)


def policy(mode: SourceMode = SourceMode.PRESERVE, **kw: object) -> RelayPolicy:
    p = RelayPolicy(RelaySettings(mode, **kw))  # type: ignore[arg-type]
    p.set_plan((LAN_A, LAN_B, WG), OWN, BCAST)
    return p


def enum() -> bytes:
    return build_enum_sessions(
        EnumSessions(uuid.UUID(int=7), 0x81, None), sockaddr=SockAddr(2, 2300, "0.0.0.0")
    )


def decide(
    p: RelayPolicy,
    payload: bytes,
    *,
    ingress: int = 2,
    ttl: int = 64,
    dst: str = "255.255.255.255",
    src: tuple[str, int] = PLAYER,
    now: float = 0.0,
    tos: int = 0,
) -> tuple[str | None, list[tuple[str, str, int]]]:
    d = p.decide(
        payload, src=src, dst_ip=dst, dst_port=47624, ingress=ingress, ttl=ttl, now=now, tos=tos
    )
    return d.drop_reason, [(c.egress.name, c.dst, c.ttl) for c in d.copies]


def test_fan_out_to_every_other_interface_never_back() -> None:
    reason, copies = decide(policy(), b"hello")
    assert reason is None
    assert copies == [
        ("lanB", "10.0.2.255", 63),
        ("wg0", "10.98.0.2", 63),
        ("wg0", "10.98.0.3", 63),
    ]


def test_subnet_broadcast_counts_unicast_does_not() -> None:
    assert decide(policy(), b"a", dst="10.0.1.255")[0] is None
    assert decide(policy(), b"b", dst="10.0.1.7")[0] == "not_broadcast"
    assert decide(policy(), b"c", dst="10.0.2.255")[0] == "not_broadcast"  # not lanA's


def test_p2p_ingress_accepts_datagrams_to_our_tunnel_address() -> None:
    reason, copies = decide(policy(), b"x", ingress=4, dst="10.98.0.1", src=("10.98.0.2", 5000))
    assert reason is None
    assert [c[0] for c in copies] == ["lanA", "lanB"]


def test_own_packets_unselected_interfaces_and_ttl() -> None:
    assert decide(policy(), b"x", src=("10.0.2.1", 47624))[0] == "own_packet"
    assert decide(policy(), b"x", ingress=9)[0] == "not_selected"
    assert decide(policy(), b"y", ttl=1)[0] == "ttl_expired"


def test_loop_copy_with_lower_ttl_is_dropped_retries_pass() -> None:
    p = policy()
    assert decide(p, b"storm", ttl=64, now=0.0)[0] is None
    # back over the tunnel (p2p: the player's address is not off-link there) / on LAN A
    assert decide(p, b"storm", ingress=4, dst="10.98.0.1", ttl=63, now=0.01)[0] == "duplicate"
    assert decide(p, b"storm", ingress=2, ttl=62, now=0.02)[0] == "duplicate"  # came back
    for i in range(1, 6):  # the player's identical retries, 0.5 s apart
        assert decide(p, b"storm", ttl=64, now=0.5 * i)[0] is None
    # another player sending the same bytes is not a loop copy either
    assert decide(p, b"storm", src=("10.0.1.51", 2300), ttl=64, now=3.1)[0] is None


def test_rewrite_mode_names_the_player_in_the_dp4_sockaddr() -> None:
    p = policy(SourceMode.REWRITE)
    d = p.decide(
        enum(), src=PLAYER, dst_ip="255.255.255.255", dst_port=47624, ingress=2, ttl=64, now=0.0
    )
    assert d.sockaddr_rewritten
    msg = parse_dplay(d.copies[0].payload)
    assert isinstance(msg, DP4Message)
    assert msg.header is not None
    assert msg.header.sockaddr.address == "10.0.1.50"
    assert msg.header.sockaddr.port == 2300
    assert msg.parsed == parse_dplay(enum()).parsed  # type: ignore[union-attr]
    # the rewritten form coming back round a loop is recognised too
    assert (
        decide(p, d.copies[0].payload, ingress=3, ttl=63, src=("10.0.2.9", 47624), now=0.1)[0]
        == "duplicate"
    )


def test_preserve_mode_keeps_the_payload() -> None:
    d = policy().decide(
        enum(), src=PLAYER, dst_ip="255.255.255.255", dst_port=47624, ingress=2, ttl=64, now=0.0
    )
    assert not d.sockaddr_rewritten
    assert all(c.payload == enum() for c in d.copies)


def bad_sockaddr(family: bytes = b"\x02\x00", sin_zero: bytes = bytes(8)) -> bytes:
    """``enum()`` with its SOCKADDR's family (bytes 4..6) and sin_zero (12..20) replaced."""
    data = enum()
    return data[:4] + family + data[6:12] + sin_zero + data[20:]


@pytest.mark.parametrize(
    "payload",
    [
        bad_sockaddr(family=b"\x06\x00"),  # AF_IPX: classify still says DP4
        bad_sockaddr(family=b"\xff\xff"),
        bad_sockaddr(sin_zero=b"\x00" * 7 + b"\x01"),
    ],
    ids=["af_ipx", "family_ffff", "sin_zero"],
)
def test_rewrite_mode_drops_a_dp4_header_it_cannot_rewrite(payload: bytes) -> None:
    """Rule 7: decide() used to raise DPlayError into the receive loop here."""
    d = policy(SourceMode.REWRITE).decide(
        payload, src=PLAYER, dst_ip="255.255.255.255", dst_port=47624, ingress=2, ttl=64, now=0.0
    )
    assert (d.drop_reason, d.copies, d.sockaddr_rewritten) == ("bad_sockaddr", (), False)
    assert "bad_sockaddr" in RELAY_DROP_REASONS  # exported as 0 from the start
    # Preserve mode touches nothing and relays it as it is; a malformed SOCKADDR that names
    # an address needs no rewrite and is relayed unchanged in rewrite mode too.
    assert decide(policy(), payload)[0] is None
    named = payload[:8] + bytes((10, 0, 1, 50)) + payload[12:]
    d = policy(SourceMode.REWRITE).decide(
        named, src=PLAYER, dst_ip="255.255.255.255", dst_port=47624, ingress=2, ttl=64, now=0.0
    )
    assert d.drop_reason is None
    assert all(c.payload == named for c in d.copies)


def dp4_like() -> st.SearchStrategy[bytes]:
    """SP-header-shaped payloads (a valid token, 'play' at 20, any SOCKADDR), so the rewrite
    branch is reached far more often than by uniform random bytes."""
    return st.builds(
        lambda size, token, sockaddr, rest: (
            (token << 20 | size).to_bytes(4, "little") + sockaddr + b"play" + rest
        ),
        st.integers(0, (1 << 20) - 1),
        st.sampled_from([0xFAB, 0xCAB, 0xBAB]),
        st.one_of(
            st.binary(min_size=16, max_size=16),
            st.builds(
                lambda fam, port, zero: fam + port + bytes(4) + zero,
                st.sampled_from([b"\x02\x00", b"\x06\x00", b"\x00\x02"]),
                st.binary(min_size=2, max_size=2),
                st.sampled_from([bytes(8), b"\x01" + bytes(7)]),
            ),
        ),
        st.binary(max_size=64),
    )


@settings(max_examples=400, deadline=None)
@given(
    mode=st.sampled_from(list(SourceMode)),
    payload=st.one_of(st.binary(max_size=128), dp4_like()),
    ingress=st.sampled_from([2, 3, 4, 9]),
    dst=st.sampled_from(["255.255.255.255", "10.0.1.255", "10.0.2.255", "10.98.0.1", "10.0.1.7"]),
    src=st.sampled_from([PLAYER, ("10.98.0.2", 5000), ("10.0.2.1", 47624)]),
    port=st.integers(0, 65535),
    ttl=st.integers(0, 255),
    tos=st.integers(0, 255),
)
def test_decide_never_raises_and_reasons_are_closed(
    mode: SourceMode,
    payload: bytes,
    ingress: int,
    dst: str,
    src: tuple[str, int],
    port: int,
    ttl: int,
    tos: int,
) -> None:
    p = policy(mode)
    for now in (0.0, 0.1):  # the second time round, the loop filter has seen it
        d = p.decide(
            payload, src=src, dst_ip=dst, dst_port=port, ingress=ingress, ttl=ttl, now=now, tos=tos
        )
        if d.drop_reason is not None:
            assert d.drop_reason in RELAY_DROP_REASONS
            assert not d.copies
            continue
        assert d.copies
        for c in d.copies:
            assert c.egress.index != ingress
            assert c.ttl == ttl - 1
            if mode is SourceMode.PRESERVE or not d.sockaddr_rewritten:
                assert c.payload == payload
            else:  # only the SOCKADDR's address, now the player's
                assert c.payload[:8] + c.payload[12:] == payload[:8] + payload[12:]
                assert c.payload[8:12] == bytes(map(int, src[0].split(".")))


def test_kernel_mode_only_classifies() -> None:
    p = policy(kernel_fanout=True)
    assert decide(p, b"k") == (None, [])
    assert decide(p, b"k2", tos=0x2E << 2)[0] == "marked_copy"  # on a LAN


def test_loop_filter_bound() -> None:
    f = LoopFilter(window=1.0, max_entries=4)
    for i in range(100):
        f.is_loop_copy(i, 64, 0.0)
    assert len(f) == 4


def iface(
    index: int,
    name: str,
    address: str,
    prefix: int,
    *,
    kind: Kind = "veth",
    bcast: bool = True,
    p2p: bool = False,
    up: bool = True,
) -> Interface:
    return Interface(
        index=index,
        name=name,
        kind=kind,
        up=up,
        broadcast_capable=bcast,
        pointopoint=p2p,
        noarp=p2p,
        mtu=1500,
        addresses=(InterfaceAddress.compute(address, prefix),),
        default_route_metric=None,
    )


def test_build_plan_roles_peers_and_skips() -> None:
    topo = Topology(
        (
            iface(2, "eth0", "10.0.1.1", 24),
            iface(3, "wg0", "10.98.0.1", 24, kind="wireguard", bcast=False, p2p=True),
            iface(4, "tun0", "10.99.0.1", 24, kind="tun", bcast=False, p2p=True),
            iface(5, "eth1", "10.0.3.1", 24, up=False),
        )
    )
    sels = (Selection("eth*"), Selection("wg0"), Selection("tun0", peers=("10.99.0.7",)))
    # Only wg0 needs its WireGuard peers read (tun0 has static ones, eth1 is down); the
    # reading is I/O done off the loop (io/wireguard.py), the plan is pure.
    assert wireguard_reads(topo, sels) == ("wg0",)
    egresses, own, bcasts = build_plan(topo, sels, {"wg0": ["10.98.0.2"]})
    assert [(e.name, e.role, e.broadcast, e.peers) for e in egresses] == [
        ("eth0", "lan", "10.0.1.255", ()),
        ("wg0", "p2p", "", ("10.98.0.2",)),
        ("tun0", "p2p", "", ("10.99.0.7",)),
    ]
    assert own == {"10.0.1.1", "10.98.0.1", "10.99.0.1", "10.0.3.1"}
    assert bcasts[2] == {"10.0.1.255"}
    # peers not read yet: the WireGuard interface is planned with none (until the read lands)
    assert build_plan(topo, sels, {})[0][1].peers == ()


def test_nft_ruleset_copies_and_loop_guard() -> None:
    script, rules = ruleset((LAN_A, LAN_B, WG), (47624, 6073))
    assert [(r.ingress, r.egress, r.target) for r in rules] == [
        ("lanA", "lanB", "10.0.2.255"),
        ("lanA", "wg0", "10.98.0.2"),
        ("lanA", "wg0", "10.98.0.3"),
        ("lanB", "lanA", "10.0.1.255"),
        ("lanB", "wg0", "10.98.0.2"),
        ("lanB", "wg0", "10.98.0.3"),
        ("wg0", "lanA", "10.0.1.255"),
        ("wg0", "lanB", "10.0.2.255"),
    ]
    # marked copies first (on to the LANs from a p2p ingress, else dropped); lan broadcasts
    # and p2p datagrams to our tunnel address each reach their ingress's checks through one
    # verdict map (tests/unit/test_nft_ruleset.py)
    assert "ip dscp 0x2e udp dport { 6073, 47624 } goto marked" in script
    assert 'meta pkttype broadcast udp dport { 6073, 47624 } iifname vmap { "lanA" : goto' in script
    assert '"wg0" . 10.98.0.1 . 47624 : goto check_2' in script
    assert 'dup to 10.98.0.3 device "wg0"' in script
    assert script.count("ip dscp set 0 ip daddr set 255.255.255.255") == 3
    assert script.count("    ip daddr set 255.255.255.255\n") == 1  # a copy of a copy


# --- hostile sources (docs/reliability.md R7, R9) -------------------------------------------------


@pytest.mark.parametrize("mode", list(SourceMode))
@pytest.mark.parametrize(
    ("src", "ingress", "reason"),
    [
        (("0.0.0.0", 2300), 2, "source_invalid"),  # "this network"
        (("127.0.0.1", 2300), 2, "source_invalid"),  # loopback
        (("224.0.0.5", 2300), 2, "source_invalid"),  # multicast
        (("255.255.255.255", 2300), 2, "source_invalid"),  # the limited broadcast
        (("10.0.1.255", 2300), 2, "source_invalid"),  # this segment's directed broadcast
        (("10.0.2.255", 2300), 4, "source_invalid"),  # another segment's, even over p2p
        (("8.8.8.8", 2300), 2, "source_off_link"),  # off-link on a LAN
        (("10.0.2.50", 2300), 2, "source_off_link"),  # segment B's host spoofed onto A
        (("10.0.1.50", 0), 2, "source_port_zero"),  # nothing can answer port 0
        (("10.0.1.1", 2300), 2, "own_packet"),  # the bridge's own address
    ],
)
def test_sources_no_host_sends_from_are_dropped_by_reason(
    mode: SourceMode, src: tuple[str, int], ingress: int, reason: str
) -> None:
    """R9: before, every one of these was fanned out (only own_packet was checked)."""
    dst = "10.98.0.1" if ingress == 4 else "255.255.255.255"
    assert decide(policy(mode), b"x", src=src, ingress=ingress, dst=dst) == (reason, [])


def test_a_remote_sites_player_over_p2p_is_not_off_link() -> None:
    # WireGuard already held the inner source to the peer's AllowedIPs; a remote LAN's
    # address arrives on the tunnel as it is.
    reason, copies = decide(policy(), b"x", src=("192.168.7.20", 2300), ingress=4, dst="10.98.0.1")
    assert reason is None
    assert {name for name, _, _ in copies} == {"lanA", "lanB"}


def enum_naming(address: str) -> bytes:
    return build_enum_sessions(
        EnumSessions(uuid.UUID(int=7), 0x81, None), sockaddr=SockAddr(2, 2300, address)
    )


@pytest.mark.parametrize("mode", list(SourceMode))
def test_a_dp4_sockaddr_naming_someone_else_is_never_relayed(mode: SourceMode) -> None:
    """R7: every host that hears an EnumSessions opens TCP to its SOCKADDR. Before, one naming
    a victim was relayed to every segment (preserve mode) or as it was (rewrite mode)."""
    p = policy(mode)
    assert decide(p, enum_naming("10.0.9.9")) == ("dp4_sockaddr_mismatch", [])
    # malformed around the address: judged by the address all the same
    bad_family = enum_naming("10.0.9.9")[:4] + b"\x06\x00" + enum_naming("10.0.9.9")[6:]
    assert decide(p, bad_family)[0] == "dp4_sockaddr_mismatch"
    # the sender's own address, and 0.0.0.0 ("the packet's source"), are relayed
    assert decide(p, enum_naming(PLAYER[0]), now=1.0)[0] is None
    assert decide(p, enum_naming("0.0.0.0"), now=2.0)[0] is None


def test_enumerations_are_bounded_per_source() -> None:
    """R7: 20 at once, then 10 a second, per source IP; other sources and other traffic are
    not touched."""
    p = policy(SourceMode.PRESERVE)
    outcomes = [decide(p, enum(), src=(PLAYER[0], 2300 + i), now=0.0)[0] for i in range(25)]
    assert outcomes == [None] * 20 + ["enum_rate"] * 5  # any port of one address: one bucket
    assert decide(p, enum(), src=("10.0.1.51", 2300), now=0.0)[0] is None  # a neighbour
    assert decide(p, b"plain broadcast", now=0.0)[0] is None  # not an enumeration
    assert decide(p, build_dp8_enum_query(cookie=1), now=0.0)[0] == "enum_rate"  # DP8 too
    allowed = sum(decide(p, enum(), now=0.5 + i / 100)[0] is None for i in range(50))
    assert allowed == 9  # 0.99 s at 10/s since the burst was spent
    assert decide(p, enum(), now=10.0)[0] is None  # refilled


def test_enumeration_buckets_are_bounded() -> None:
    p = RelayPolicy(RelaySettings(SourceMode.PRESERVE, enum_sources=8))
    p.set_plan((LAN_A, LAN_B, WG), OWN, BCAST)
    for i in range(100):
        decide(p, enum(), src=(f"10.0.1.{100 + i % 100}", 2300), now=float(i))
    assert len(p._enums) == 8


def test_kernel_mode_hands_directplay_to_python() -> None:
    """Rule 5: the fast path cannot compare a SOCKADDR with the IP source or keep a bucket per
    source, so its nft rules leave DP4 and DP8 EnumQuery to the Python path."""
    p = policy(kernel_fanout=True)
    assert decide(p, b"plain") == (None, [])  # the kernel copied it
    reason, copies = decide(p, enum())
    assert reason is None
    assert {n for n, _, _ in copies} == {"lanB", "wg0"}
    assert decide(p, enum_naming("10.0.9.9"), now=1.0)[0] == "dp4_sockaddr_mismatch"
    script, _ = ruleset((LAN_A, LAN_B, WG), (47624, 6073))
    assert "@th,224,32 0x706c6179 return" in script  # 'play' at payload byte 20
    assert "@th,64,16 0x2 return" in script  # 00 02 at payload byte 0


MARK = 0x2E << 2  # the TOS byte of a bridge's copy


@pytest.mark.parametrize("kernel", [False, True])
def test_a_copy_from_another_sites_bridge_goes_on_to_the_lans_only(kernel: bool) -> None:
    """Rule 5: a marked datagram on a p2p interface is another site's bridge's copy (a VPN
    carries the DSCP unchanged). It goes once more, to the LANs, never to a p2p peer; a
    marked datagram on a LAN (a copy some bridge made onto it) is never relayed again."""
    p = policy(kernel_fanout=kernel)
    remote = ("192.168.7.20", 2300)  # a far site's player, its address kept (preserve)
    for dst in ("10.98.0.1", "255.255.255.255"):  # (BCAST gives wg0 no subnet broadcast)
        reason, copies = decide(p, b"far " + dst.encode(), ingress=4, dst=dst, src=remote, tos=MARK)
        if kernel:
            assert (reason, copies) == (None, [])  # the kernel copied it (to the LANs)
        else:
            assert reason is None
            assert copies == [("lanA", "10.0.1.255", 63), ("lanB", "10.0.2.255", 63)]
    # DirectPlay is the Python path's on both paths, and goes to the LANs only as well
    reason, copies = decide(p, enum(), ingress=4, dst="10.98.0.1", src=remote, tos=MARK)
    assert reason is None
    assert {name for name, _, _ in copies} == {"lanA", "lanB"}
    # unmarked, the same datagram also goes to the other peers (an original)
    reason, copies = decide(p, b"orig", ingress=4, dst="10.98.0.1", src=remote, now=1.0)
    assert reason is None
    if not kernel:
        assert {name for name, _, _ in copies} == {"lanA", "lanB"}  # wg0 is the ingress
    # a copy onto a LAN, this bridge's looped back or a parallel bridge's: never again
    assert decide(p, b"seg", ingress=3, src=("10.0.2.9", 2300), tos=MARK)[0] == "marked_copy"


def test_a_copy_of_a_copy_with_no_lan_to_go_to_is_dropped() -> None:
    """A hub with only p2p interfaces does not pass one spoke's copies to another."""
    other = Egress(5, "tun1", "p2p", "10.99.0.1", "", ("10.99.0.2",), networks=("10.99.0.0/24",))
    for kernel in (False, True):
        p = RelayPolicy(RelaySettings(SourceMode.PRESERVE, kernel_fanout=kernel))
        p.set_plan((WG, other), frozenset({"10.98.0.1", "10.99.0.1"}), {4: frozenset()})
        marked = decide(p, b"x", ingress=4, dst="10.98.0.1", src=("10.98.0.2", 9), tos=MARK)
        assert marked[0] == "marked_copy"
        reason, copies = decide(p, b"y", ingress=4, dst="10.98.0.1", src=("10.98.0.2", 9))
        assert reason is None
        assert copies == ([] if kernel else [("tun1", "10.99.0.2", 63)])


def test_nft_ruleset_validates_sources_and_form_like_the_policy() -> None:
    script, _ = ruleset((LAN_A, LAN_B, WG), (47624, 6073))
    # one verdict map per ingress: own, invalid, then (lan) on-link on to the datagram's form
    for own in ("10.0.1.1", "10.0.2.1", "10.98.0.1"):
        assert f"{own} : goto drop_own" in script
    for bad in ("0.0.0.0/8", "10.0.1.255", "10.0.2.255", "10.98.0.255", "127.0.0.0/8"):
        assert f"{bad} : goto drop_invalid" in script
    assert "224.0.0.0/3 : goto drop_invalid" in script
    assert "10.0.1.2-10.0.1.254 : goto form_0" in script
    assert 'counter drop comment "own_packet"' in script
    assert 'counter drop comment "source_invalid"' in script
    assert '    counter drop comment "source_off_link"' in script  # a miss in the lan map
    assert 'udp sport 0 counter drop comment "source_port_zero"' in script
    assert "ip length . udp length != @wellformed ip frag-off" in script
    assert 'counter drop comment "udp_malformed"' in script
    assert "1500 . 1480" in script


def test_the_decision_carries_the_kind_the_inspector_would_work_out() -> None:
    """The relay hands its classification to the inspector instead of classifying the same
    bytes twice per datagram, so it must be the inspector's: with the port's DP8 context."""
    p = policy()
    frame = b"\x01\x00\x00\x00" + bytes(12)  # a DP8 DFRAME: DirectPlay 8 only on its ports
    for port, payload in ((47624, enum()), (6073, frame), (47624, frame), (6073, b"hello")):
        d = p.decide(
            payload,
            src=PLAYER,
            dst_ip="255.255.255.255",
            dst_port=port,
            ingress=2,
            ttl=64,
            now=float(port),
        )
        assert d.drop_reason is None
        assert d.kind is classify(payload, dp8_context=is_dp8_port(port)), (port, d.kind)
    assert (
        p.decide(
            b"x", src=PLAYER, dst_ip="255.255.255.255", dst_port=47624, ingress=9, ttl=64, now=0.0
        ).kind
        is None
    )  # not_selected: decided before any look at the payload
