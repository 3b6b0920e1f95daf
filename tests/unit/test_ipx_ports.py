"""Which interface ports the IPX switch gets: ``policy/port_plan.plan_ports``.

Topologies are built with the same helpers as the relay's tests (flags as this kernel
reports them for veth, tun and wireguard-go devices: tests/unit/test_topology.py).
"""

import pytest

from ipxbridge.policy.port_plan import (
    IpxInterface,
    PortPlan,
    Skipped,
    SourceIndex,
    carries_ethernet,
    plan_ports,
    segment_for_source,
)
from ipxbridge.policy.relay import Selection
from ipxbridge.policy.switch import PortKind, Segment
from ipxbridge.policy.topology import ARPHRD_NONE, Topology
from tests.unit.test_topology import TUN_NO_OWNER, VETH, WG_GO, addr, iface, lo

ETH = PortKind.ETHERNET
WRAP = PortKind.IPXWRAPPER
RFC = PortKind.RFC1234
ALL = (ETH, WRAP, RFC)
VETH_DOWN = VETH & ~0x1  # not IFF_UP

TOPO = Topology(
    (
        lo(),
        iface(2, "eth0", addr("10.1.2.3/24")),
        iface(3, "seg0"),  # a segment of DOS PCs: no IPv4 address on the bridge's side
        iface(
            4,
            "wg0",
            addr("10.98.0.1/24"),
            kind="tun",
            flags=WG_GO,
            operstate="UNKNOWN",
            link_type=ARPHRD_NONE,
            wireguard=True,
        ),
        iface(
            5,
            "tun1",
            addr("10.7.0.1/32", peer="10.7.0.2"),
            kind="tun",
            flags=WG_GO,  # held open: up, point-to-point
            operstate="UNKNOWN",
            link_type=ARPHRD_NONE,
        ),
        iface(6, "eth9", addr("10.9.0.1/24"), flags=VETH_DOWN, operstate="DOWN"),
        iface(
            7,
            "tun7",
            addr("10.8.0.1/32", peer="10.8.0.2"),
            kind="tun",
            flags=TUN_NO_OWNER,
            operstate="DOWN",
            link_type=ARPHRD_NONE,
        ),
    )
)
WG_PEERS = {"wg0": ["10.98.0.2", "10.98.0.3"]}


def by_segment(plans: tuple[PortPlan, ...]) -> dict[str, PortPlan]:
    return {str(p.segment): p for p in plans}


def why(skipped: tuple[Skipped, ...]) -> dict[str, str]:
    return {f"{s.interface}/{s.kind}": s.why for s in skipped}


def test_ethernet_needs_no_address_udp_kinds_do() -> None:
    plans, skipped = plan_ports(TOPO, (IpxInterface("seg0", ALL),), {})
    assert list(by_segment(plans)) == ["seg0/ethernet"]
    eth = plans[0]
    assert (eth.segment, eth.index, eth.role, eth.address, eth.networks) == (
        Segment("seg0", ETH), 3, "lan", "", (),
    )  # fmt: skip
    assert eth.framing == "auto"
    assert why(skipped) == {
        "seg0/ipxwrapper": "no IPv4 address (a UDP port sends from one)",
        "seg0/rfc1234": "no IPv4 address (a UDP port sends from one)",
    }


def test_lan_ports() -> None:
    plans, skipped = plan_ports(TOPO, (IpxInterface("eth0", ALL, framing="snap"),), {})
    assert skipped == ()
    found = by_segment(plans)
    assert list(found) == ["eth0/ethernet", "eth0/ipxwrapper", "eth0/rfc1234"]
    assert found["eth0/ethernet"].framing == "snap"
    assert found["eth0/ethernet"].address == "10.1.2.3"
    assert found["eth0/ethernet"].networks == ("10.1.2.0/24",)
    for kind in ("ipxwrapper", "rfc1234"):
        udp = found[f"eth0/{kind}"]
        assert (udp.role, udp.address, udp.broadcast, udp.peers, udp.networks, udp.mtu) == (
            "lan", "10.1.2.3", "10.1.2.255", (), ("10.1.2.0/24",), 1500,
        )  # fmt: skip


def test_ethernet_is_skipped_on_wireguard_and_tun_with_the_reason() -> None:
    entries = (IpxInterface("wg0", ALL), IpxInterface("tun1", ALL))
    plans, skipped = plan_ports(TOPO, entries, WG_PEERS)
    assert why(skipped) == {
        "wg0/ethernet": "a wireguard interface carries no Ethernet frames",
        "tun1/ethernet": "a tun interface carries no Ethernet frames",
    }
    assert set(by_segment(plans)) == {
        "wg0/ipxwrapper", "wg0/rfc1234", "tun1/ipxwrapper", "tun1/rfc1234",
    }  # fmt: skip
    interfaces = {i.name: i for i in TOPO.interfaces}
    assert not carries_ethernet(interfaces["wg0"])
    assert not carries_ethernet(interfaces["tun1"])
    assert carries_ethernet(interfaces["eth0"])
    assert carries_ethernet(interfaces["seg0"])


def test_p2p_peers_from_config_then_wireguard_then_the_peer_address() -> None:
    entries = (
        IpxInterface("wg0", (WRAP,)),
        IpxInterface("tun1", (RFC,)),
        IpxInterface("eth0", (WRAP,), role="p2p", peers=("10.1.2.40", "10.1.2.41")),
    )
    found = by_segment(plan_ports(TOPO, entries, WG_PEERS)[0])
    assert found["wg0/ipxwrapper"].peers == ("10.98.0.2", "10.98.0.3")  # AllowedIPs
    assert found["wg0/ipxwrapper"].role == "p2p"
    assert found["wg0/ipxwrapper"].broadcast == ""
    assert found["tun1/rfc1234"].peers == ("10.7.0.2",)  # the point-to-point peer address
    eth = found["eth0/ipxwrapper"]
    assert (eth.role, eth.peers, eth.broadcast) == ("p2p", ("10.1.2.40", "10.1.2.41"), "")
    # Static peers win over WireGuard's.
    static = plan_ports(TOPO, (IpxInterface("wg0", (WRAP,), peers=("10.98.0.9",)),), WG_PEERS)
    assert static[0][0].peers == ("10.98.0.9",)
    # WireGuard peers not read yet: a p2p port with no peers (nothing is sent there).
    assert plan_ports(TOPO, (IpxInterface("wg0", (WRAP,)),), {})[0][0].peers == ()


def test_first_matching_entry_wins() -> None:
    entries = (
        IpxInterface("eth0", (RFC,), framing="802.3"),
        IpxInterface("eth*", (ETH, WRAP)),
        IpxInterface("10.1.2.0/24", (ETH,), framing="snap"),
    )
    plans, skipped = plan_ports(TOPO, entries, {})
    assert list(by_segment(plans)) == ["eth0/rfc1234"]  # eth0's entry alone decides
    assert why(skipped) == {
        "eth9/ethernet": "interface is down",  # eth9 matches eth*, the second entry
        "eth9/ipxwrapper": "interface is down",
    }
    # The order of the entries, not the order of the topology, decides.
    flipped = plan_ports(TOPO, (entries[2], entries[0]), {})[0]
    assert [(str(p.segment), p.framing) for p in flipped] == [("eth0/ethernet", "snap")]


def test_down_interfaces_and_loopback_are_skipped() -> None:
    plans, skipped = plan_ports(TOPO, (IpxInterface("*", ALL),), WG_PEERS)
    assert not any(p.segment.interface in ("lo", "eth9", "tun7") for p in plans)
    reasons = why(skipped)
    for name in ("eth9", "tun7"):
        for kind in ("ethernet", "ipxwrapper", "rfc1234"):
            assert reasons[f"{name}/{kind}"] == "interface is down"
    assert not [s for s in skipped if s.interface == "lo"]  # never a port, never a reason
    # Nothing selected: nothing planned, nothing skipped.
    assert plan_ports(TOPO, (IpxInterface("nope*", ALL),), {}) == ((), ())
    assert plan_ports(TOPO, (), {}) == ((), ())


def test_entry_as_the_relay_takes_it() -> None:
    entry = IpxInterface("wg*", (WRAP,), "p2p", ("10.98.0.2",))
    assert entry.selection == Selection("wg*", "p2p", ("10.98.0.2",))


def test_bad_cidr_raises() -> None:
    with pytest.raises(ValueError, match="CIDR"):
        plan_ports(TOPO, (IpxInterface("10.1.2.0/33", (WRAP,)),), {})


# --- which port a UDP datagram came in on ---------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "ip", "expected"),
    [
        (WRAP, "10.1.2.77", Segment("eth0", WRAP)),  # on eth0's subnet
        (RFC, "10.1.2.77", Segment("eth0", RFC)),
        (WRAP, "10.98.0.3", Segment("wg0", WRAP)),  # a p2p peer
        (WRAP, "10.98.0.77", Segment("wg0", WRAP)),  # on wg0's prefix
        (RFC, "10.98.0.3", None),  # wg0 has no rfc1234 port
        (WRAP, "192.0.2.1", None),  # off every segment
        (WRAP, "not an address", None),
    ],
)
def test_segment_for_source(kind: PortKind, ip: str, expected: Segment | None) -> None:
    entries = (IpxInterface("eth0", ALL), IpxInterface("wg0", (WRAP,)))
    plans, _ = plan_ports(TOPO, entries, WG_PEERS)
    assert segment_for_source(plans, kind, ip) == expected
    index = SourceIndex(plans, kind)
    assert index(ip) == expected
    assert index(ip) == expected  # cached, same answer
    assert bool(index) == any(p.segment.kind is kind for p in plans)


def test_segment_for_source_p2p_peer_outside_every_prefix() -> None:
    """A static peer of a p2p port need not be on-link (routed over the tunnel)."""
    entries = (IpxInterface("tun1", (WRAP,), peers=("172.16.5.5",)),)
    plans, _ = plan_ports(TOPO, entries, {})
    assert segment_for_source(plans, WRAP, "172.16.5.5") == Segment("tun1", WRAP)
    assert segment_for_source(plans, WRAP, "172.16.5.6") is None


def test_source_index_is_bounded() -> None:
    plans, _ = plan_ports(TOPO, (IpxInterface("eth0", (WRAP,)),), {})
    index = SourceIndex(plans, WRAP, max_entries=4)
    for n in range(50):
        assert index(f"192.0.2.{n}") is None
    assert len(index._cache) <= 4  # the bound is the point
    assert index("10.1.2.5") == Segment("eth0", WRAP)
