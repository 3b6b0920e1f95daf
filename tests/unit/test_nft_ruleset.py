"""The fast path's nft ruleset: every check the Python path makes before copying, each drop
counted under its reason, and ordered so the common broadcast walks the fewest rules (the
kernel copies on the sender's core, so each rule slows the whole segment's sender).

``nft_walk`` evaluates the rendered script for one packet; the kernel itself loads it in
tests/integration (test_relay.py, bench/hostile_relay.py).
"""

import ipaddress
import itertools
import re

import pytest

from ipxbridge.io.nftables import COMMON_WALK, FASTPATH_DROP_REASONS, ruleset
from ipxbridge.policy.relay import Egress, RelayPolicy, RelaySettings, SourceMode
from tests.unit.nft_walk import Packet, chains, run

LAN_A = Egress(2, "lanA", "lan", "10.0.1.1", "10.0.1.255", networks=("10.0.1.0/24",))
LAN_B = Egress(3, "lanB", "lan", "10.0.2.1", "10.0.2.255", networks=("10.0.2.0/24",))
WG = Egress(
    4, "wg0", "p2p", "10.98.0.1", "", ("10.98.0.2", "10.98.0.3"), networks=("10.98.0.0/24",)
)
PLAN = (LAN_A, LAN_B, WG)
PORTS = (47624, 6073)
SCRIPT, _ = ruleset(PLAN, PORTS)
PLAYER = "10.0.1.50"
# Every reason a datagram on a relay port stops in the kernel, each a counted drop rule.
DROPS = (
    "marked",
    "uninspected",
    "own_packet",
    "source_invalid",
    "source_off_link",
    "source_port_zero",
    "udp_malformed",
)


def test_the_common_broadcast_walks_ten_rules_and_is_copied() -> None:
    """A well-formed non-DirectPlay broadcast from an on-link source, past the inspection
    limit: 16 rules before the verdict maps (measured with the same walker), 10 now."""
    two_lans, _ = ruleset((LAN_A, LAN_B), (47624,))
    for script, iif, src, copies in (
        (two_lans, "lanA", PLAYER, 1),
        (two_lans, "lanB", "10.0.2.50", 1),
        (SCRIPT, "lanA", PLAYER, 3),
        (SCRIPT, "lanB", "10.0.2.50", 3),  # the second ingress costs the same
    ):
        out = run(script, Packet(iif, src))
        assert (out.verdict, out.reason, len(out.copies)) == ("drop", "uninspected", copies)
        assert out.walked == COMMON_WALK + copies - 1 == 9 + copies
        # below the limit the original is restored and goes on to the inspector
        inspected = run(script, Packet(iif, src, under_limit=True))
        assert (inspected.verdict, inspected.walked) == ("copied", out.walked + 1)
    # over p2p, to the tunnel address: the same checks but the off-link one
    wg = run(SCRIPT, Packet("wg0", "192.168.7.20", daddr="10.98.0.1", pkttype="host"))
    assert (wg.copies, wg.walked) == (["wg0>lanA", "wg0>lanB"], 12)
    # and a broadcast as a tun device delivers one (no link layer: pkttype host), to
    # 255.255.255.255 (tinc router mode, OpenVPN tun) or to the tunnel subnet's broadcast;
    # the Python path takes both as broadcasts too, so what it books the kernel copies
    for daddr in ("255.255.255.255", "10.98.0.255"):
        tun = run(SCRIPT, Packet("wg0", "192.168.7.20", daddr=daddr, pkttype="host"))
        assert (tun.copies, tun.walked) == (["wg0>lanA", "wg0>lanB"], 12), daddr
    # a datagram to another address on the tunnel is not a broadcast
    other = run(SCRIPT, Packet("wg0", "192.168.7.20", daddr="10.98.0.7", pkttype="host"))
    assert (other.copies, other.verdict) == ([], "accept")


def test_fanout_starts_with_a_cheap_test_and_one_lookup_per_kind_of_ingress() -> None:
    fanout = chains(SCRIPT)["fanout"]
    assert fanout == [
        # copies (marked) leave here, everything else fails on the DSCP byte at once
        "ip dscp 0x2e udp dport { 6073, 47624 } goto marked",
        "meta pkttype broadcast udp dport { 6073, 47624 }"
        ' iifname vmap { "lanA" : goto check_0, "lanB" : goto check_1 }',
        "udp dport { 6073, 47624 } iifname . ip daddr . udp dport vmap"
        ' { "wg0" . 10.98.0.1 . 6073 : goto check_2, "wg0" . 10.98.0.1 . 47624 : goto check_2,'
        ' "wg0" . 255.255.255.255 . 6073 : goto check_2,'
        ' "wg0" . 255.255.255.255 . 47624 : goto check_2,'
        ' "wg0" . 10.98.0.255 . 6073 : goto check_2, "wg0" . 10.98.0.255 . 47624 : goto check_2 }',
        # later fragments (no UDP header to match) behind one test
        "ip frag-off & 0x1fff != 0 goto fragments",
    ]
    # another site's bridge's copies (on a p2p ingress) go on to the LANs; the rest stop
    assert chains(SCRIPT)["marked"] == [
        'iifname . ip daddr vmap { "wg0" . 10.98.0.1 : goto check_2m,'
        ' "wg0" . 255.255.255.255 : goto check_2m, "wg0" . 10.98.0.255 : goto check_2m }',
        'counter drop comment "marked"',
    ]
    assert run(SCRIPT, Packet("lanB", PLAYER, dscp=0x2E)).walked == 3  # a loop copy
    single, _ = ruleset((LAN_A, LAN_B), (47624,))
    assert chains(single)["fanout"][0] == (
        'ip dscp 0x2e udp dport 47624 counter drop comment "marked"'  # a port: no set
    )
    assert run(single, Packet("lanB", PLAYER, dscp=0x2E)).walked == 1  # LANs only: one rule
    other = Packet("lanA", PLAYER, pkttype="host", daddr="10.0.1.1", dport=22)
    assert run(SCRIPT, other).verdict == "accept"


def test_another_sites_copies_go_on_to_the_lans_only() -> None:
    """policy/relay.py rule 5: a marked datagram on a p2p ingress is another site's bridge's
    copy; the kernel copies it to the LANs (never to a p2p peer), keeps its mark on the
    original for the Python side, and hands DirectPlay over as for an original."""
    far = "192.168.7.20"
    for daddr in ("10.98.0.1", "255.255.255.255", "10.98.0.255"):
        out = run(SCRIPT, Packet("wg0", far, daddr=daddr, pkttype="host", dscp=0x2E))
        assert (out.verdict, out.reason, out.copies) == (
            "drop",
            "uninspected",
            ["wg0>lanA", "wg0>lanB"],
        ), daddr
    assert chains(SCRIPT)["in_2m"] == [
        'ip daddr set 10.0.1.255 counter dup to 10.0.1.255 device "lanA" comment "wg0>lanA"',
        'ip daddr set 10.0.2.255 counter dup to 10.0.2.255 device "lanB" comment "wg0>lanB"',
        'limit rate over 5000/second counter drop comment "uninspected"',
        "ip daddr set 255.255.255.255",  # the mark stays: the Python side books it by it
    ]
    # the same source checks as for an original
    for src, reason in (("10.0.1.1", "own_packet"), ("127.0.0.1", "source_invalid")):
        out = run(SCRIPT, Packet("wg0", src, daddr="10.98.0.1", pkttype="host", dscp=0x2E))
        assert (out.reason, out.copies) == (reason, [])
    dp4 = Packet("wg0", far, daddr="10.98.0.1", pkttype="host", dscp=0x2E)
    dp4.payload = bytes(20) + b"play" + bytes(8)
    assert run(SCRIPT, dp4).verdict == "accept"  # to Python, which copies it to the LANs
    # a later fragment of a big one follows its first
    frag = Packet("wg0", far, daddr="10.98.0.1", pkttype="host", dscp=0x2E, sport=None)
    frag.frag_offset = 185
    assert run(SCRIPT, frag).copies == ["wg0>lanA", "wg0>lanB"]
    # to a tunnel address that is not ours: not a broadcast, not copied
    other = run(SCRIPT, Packet("wg0", far, daddr="10.98.0.7", pkttype="host", dscp=0x2E))
    assert (other.reason, other.copies) == ("marked", [])
    # the copies are listed once, whichever chain makes them
    _, rules = ruleset(PLAN, PORTS)
    assert len(rules) == len(set(rules)) == 8


def test_sources_are_one_verdict_map_in_the_policys_order() -> None:
    """own > invalid > on-link, as policy/relay.py checks them; the map cannot hold
    overlapping intervals, so the renderer splits the on-link prefix around the others."""
    check = chains(SCRIPT)["check_0"]
    assert check == [
        "ip saddr vmap { 0.0.0.0/8 : goto drop_invalid, 10.0.1.0 : goto form_0,"
        " 10.0.1.1 : goto drop_own, 10.0.1.2-10.0.1.254 : goto form_0,"
        " 10.0.1.255 : goto drop_invalid, 10.0.2.1 : goto drop_own,"
        " 10.0.2.255 : goto drop_invalid, 10.98.0.1 : goto drop_own,"
        " 10.98.0.255 : goto drop_invalid, 127.0.0.0/8 : goto drop_invalid,"
        " 224.0.0.0/3 : goto drop_invalid }",
        'counter drop comment "source_off_link"',  # what the map does not know is off-link
    ]
    assert chains(SCRIPT)["form_0"] == [
        'udp sport 0 counter drop comment "source_port_zero"',
        # the lookup first: a well-formed datagram skips the rest of the rule
        "ip length . udp length != @wellformed ip frag-off & 0x2000 == 0 ip length <= 1500"
        ' counter drop comment "udp_malformed"',
        "@th,224,32 0x706c6179 return",  # DP4 'play' at payload byte 20: to Python
        "@th,64,16 0x2 return",  # DP8 EnumQuery 00 02: to Python
        "ip ttl > 1 goto in_0",
    ]
    assert chains(SCRIPT)["in_0"] == [
        'ip dscp set 0x2e ip daddr set 10.0.2.255 counter dup to 10.0.2.255 device "lanB"'
        ' comment "lanA>lanB"',
        'ip daddr set 10.98.0.2 counter dup to 10.98.0.2 device "wg0" comment "lanA>wg0"',
        'ip daddr set 10.98.0.3 counter dup to 10.98.0.3 device "wg0" comment "lanA>wg0"',
        # an original past the limit is dropped before it is restored
        'limit rate over 5000/second counter drop comment "uninspected"',
        "ip dscp set 0 ip daddr set 255.255.255.255",
    ]


def test_overlapping_sources_go_to_the_first_class() -> None:
    # an own address inside an invalid range and an on-link prefix that holds both
    odd = Egress(5, "odd", "lan", "127.0.0.9", "127.255.255.255", networks=("127.0.0.0/8",))
    script, _ = ruleset((odd, LAN_B), (47624,))
    vmap = re.search(r"ip saddr vmap \{ ([^}]*) \}", chains(script)["check_0"][0])
    assert vmap
    spans = []
    for element in vmap.group(1).split(", "):
        key, verdict = element.split(" : ")
        lo, _, hi = key.partition("-")
        first = ipaddress.IPv4Network(lo, strict=False)
        last = ipaddress.IPv4Address(hi) if hi else first.broadcast_address
        spans.append((int(first.network_address), int(last), verdict))
    assert spans == sorted(spans)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # disjoint
    assert run(script, Packet("odd", "127.0.0.9")).reason == "own_packet"
    assert run(script, Packet("odd", "127.0.0.8")).reason == "source_invalid"
    assert run(script, Packet("odd", "8.8.8.8")).reason == "source_off_link"


def test_every_drop_reason_is_a_counted_rule() -> None:
    """KernelFanout reads the counters by comment, whatever chain holds the rule."""
    for reason in DROPS:
        assert re.search(rf'counter drop comment "{reason}"$', SCRIPT, re.M), reason
    assert set(FASTPATH_DROP_REASONS) <= set(DROPS)
    commented = re.findall(r'comment "([^"]+)"', SCRIPT)
    assert {c for c in commented if ">" not in c} == set(DROPS)


def policy_reason(src: str, sport: int, iif: str) -> str | None:
    p = RelayPolicy(RelaySettings(SourceMode.PRESERVE, kernel_fanout=True))
    p.set_plan(
        PLAN,
        frozenset({"10.0.1.1", "10.0.2.1", "10.98.0.1"}),
        {2: frozenset({"10.0.1.255"}), 3: frozenset({"10.0.2.255"}), 4: frozenset()},
    )
    index = {e.name: e.index for e in PLAN}[iif]
    dst = "10.98.0.1" if iif == "wg0" else "255.255.255.255"
    decision = p.decide(
        b"x", src=(src, sport), dst_ip=dst, dst_port=47624, ingress=index, ttl=64, now=0.0
    )
    return decision.drop_reason


@pytest.mark.parametrize(
    ("src", "sport", "iif", "reason"),
    [
        ("0.0.0.0", 68, "lanA", "source_invalid"),
        ("127.0.0.1", 2300, "lanA", "source_invalid"),
        ("224.0.0.251", 2300, "lanA", "source_invalid"),
        ("240.0.0.1", 2300, "lanA", "source_invalid"),
        ("255.255.255.255", 2300, "lanA", "source_invalid"),
        ("10.0.1.255", 2300, "lanA", "source_invalid"),
        ("10.0.2.255", 2300, "wg0", "source_invalid"),
        ("8.8.8.8", 2300, "lanA", "source_off_link"),
        ("10.0.2.50", 2300, "lanA", "source_off_link"),
        (PLAYER, 0, "lanA", "source_port_zero"),
        ("10.0.1.1", 2300, "lanA", "own_packet"),
        ("10.0.2.1", 2300, "wg0", "own_packet"),
        ("192.168.7.20", 2300, "wg0", None),  # a remote site's player is not off-link
        (PLAYER, 2300, "lanA", None),
    ],
)
def test_the_kernel_drops_what_the_policy_drops_under_the_same_reason(
    src: str, sport: int, iif: str, reason: str | None
) -> None:
    p2p = iif == "wg0"
    pkt = Packet(
        iif,
        src,
        sport=sport,
        daddr="10.98.0.1" if p2p else "255.255.255.255",
        pkttype="host" if p2p else "broadcast",
    )
    out = run(SCRIPT, pkt)
    assert (out.reason or None) == ("uninspected" if reason is None else reason)
    assert policy_reason(src, sport, iif) == reason


@pytest.mark.parametrize(
    ("packet", "verdict", "reason"),
    [
        (Packet("lanA", PLAYER, udp_length=200), "drop", "udp_malformed"),  # past the packet
        (Packet("lanA", PLAYER, udp_length=4), "drop", "udp_malformed"),  # under 8
        (Packet("lanA", PLAYER, payload=bytes(20) + b"play" + bytes(8)), "accept", ""),
        (Packet("lanA", PLAYER, payload=b"\x00\x02" + bytes(30)), "accept", ""),
        (Packet("lanA", PLAYER, ttl=1), "accept", ""),  # Python counts it as ttl_expired
        # a first fragment (MF) and a later one are copied; a later one's sources checked
        (
            Packet("lanA", PLAYER, more_fragments=True, ip_length=1500, udp_length=3008),
            "drop",
            "uninspected",
        ),
        (Packet("lanA", PLAYER, sport=None, frag_offset=185), "drop", "uninspected"),
        (Packet("lanA", "8.8.8.8", sport=None, frag_offset=185), "drop", "source_off_link"),
        (Packet("lanA", "10.0.2.1", sport=None, frag_offset=185), "drop", "own_packet"),
        (Packet("lanA", PLAYER, sport=None, frag_offset=185, dscp=0x2E), "accept", ""),
        (Packet("lanA", PLAYER, sport=None, frag_offset=185, ttl=1), "accept", ""),
        (Packet("lanB", PLAYER, dscp=0x2E), "drop", "marked"),
        (Packet("lanA", PLAYER, pkttype="host", daddr="10.0.1.1"), "accept", ""),  # unicast
        (Packet("lanA", PLAYER, dport=53), "accept", ""),  # not a relay port
    ],
)
def test_form_fragments_directplay_and_ttl(packet: Packet, verdict: str, reason: str) -> None:
    out = run(SCRIPT, packet)
    assert (out.verdict, out.reason) == (verdict, reason)
