"""Pure topology: computed broadcasts, roles, kinds, selection, primary and on-link owner."""

import dataclasses
import json

import pytest

from ipxbridge.commands.interfaces import NO_PEERS, describe, render_json, render_text
from ipxbridge.policy.port_plan import IpxInterface
from ipxbridge.policy.relay import Selection, build_plan
from ipxbridge.policy.switch import PortKind
from ipxbridge.policy.topology import (
    ARPHRD_ETHER,
    ARPHRD_LOOPBACK,
    ARPHRD_NONE,
    Interface,
    InterfaceAddress,
    Topology,
    Unmatched,
    broadcast_for,
    build_interface,
    classify_kind,
    flag_names,
    is_up,
    owner_of,
    select,
    unicast_targets,
    unmatched,
)

# ifi_flags as seen on this kernel (experiment in the task notes, see the report)
LO = 0x10049  # UP,LOOPBACK,RUNNING,LOWER_UP
VETH = 0x11043  # UP,BROADCAST,RUNNING,MULTICAST,LOWER_UP
TUN_NO_OWNER = 0x1091  # UP,POINTOPOINT,NOARP,MULTICAST (NO-CARRIER)
WG_GO = 0x110D1  # UP,POINTOPOINT,RUNNING,NOARP,MULTICAST,LOWER_UP


def addr(text: str, peer: str | None = None) -> InterfaceAddress:
    ip, _, plen = text.partition("/")
    return InterfaceAddress.compute(ip, int(plen or 32), peer)


def iface(
    index: int,
    name: str,
    *addresses: InterfaceAddress,
    kind: str | None = "veth",
    flags: int = VETH,
    operstate: str = "UP",
    metric: int | None = None,
    link_type: int = ARPHRD_ETHER,
    wireguard: bool = False,
) -> Interface:
    return build_interface(
        index=index,
        name=name,
        link_kind=kind,
        link_type=link_type,
        flags=flags,
        operstate=operstate,
        mtu=1500,
        addresses=addresses,
        default_route_metric=metric,
        wireguard_uapi=wireguard,
    )


def lo() -> Interface:
    return iface(
        1, "lo", addr("127.0.0.1/8"), kind=None, flags=LO, operstate="UNKNOWN", link_type=772
    )


TOPO = Topology(
    (
        lo(),
        iface(2, "eth0", addr("10.1.2.3/24"), metric=100),
        iface(3, "eth1", addr("10.5.0.1/24"), addr("192.168.7.1/24"), kind="bridge"),
        iface(
            4,
            "wg0",
            addr("10.98.0.1/24"),
            kind="tun",
            flags=WG_GO,
            operstate="UNKNOWN",
            link_type=ARPHRD_NONE,
            wireguard=True,
            metric=50,
        ),
        iface(
            5,
            "tun7",
            addr("10.7.0.1/32", peer="10.7.0.2"),
            kind="tun",
            flags=TUN_NO_OWNER,
            operstate="DOWN",
            link_type=ARPHRD_NONE,
        ),
        iface(6, "wg1", kind="tun", flags=WG_GO, link_type=ARPHRD_NONE, wireguard=True),
    )
)


# --- broadcast computation (docs/reliability.md item 8) -------------------------------------


@pytest.mark.parametrize(
    ("address", "prefixlen", "peer", "expected"),
    [
        ("10.1.2.3", 24, None, "10.1.2.255"),
        ("10.1.2.3", 16, None, "10.1.255.255"),
        ("10.1.3.7", 23, None, "10.1.3.255"),
        ("10.1.2.3", 0, None, "255.255.255.255"),
        ("10.1.2.4", 30, None, "10.1.2.7"),
        ("10.1.2.4", 31, None, ""),  # RFC 3021: no broadcast on /31
        ("10.1.2.5", 31, None, ""),
        ("10.1.2.3", 32, None, ""),
        ("10.7.0.1", 32, "10.7.0.2", ""),  # ip addr add 10.7.0.1 peer 10.7.0.2
        ("10.7.0.1", 24, "10.8.0.0", "10.8.0.255"),  # the prefix is the peer's
        ("10.1.2.255", 24, None, ""),  # would be our own address: refused
    ],
)
def test_broadcast_for(address: str, prefixlen: int, peer: str | None, expected: str) -> None:
    assert broadcast_for(address, prefixlen, peer) == expected
    assert InterfaceAddress.compute(address, prefixlen, peer).broadcast == expected


def test_broadcast_is_never_the_kernel_value() -> None:
    # `ip addr add 10.1.2.3/24` without `brd +`: kernel 0.0.0.0, glibc the own address
    for wrong in ("0.0.0.0", "10.1.2.3", ""):
        with pytest.raises(ValueError, match="computed"):
            InterfaceAddress("10.1.2.3", 24, wrong)
    assert InterfaceAddress("10.1.2.3", 24, "10.1.2.255").broadcast == "10.1.2.255"


@pytest.mark.parametrize(
    ("address", "prefixlen"), [("10.1.2.3", 33), ("10.1.2.3", -1), ("fe80::1", 64), ("x", 8)]
)
def test_malformed_addresses_raise(address: str, prefixlen: int) -> None:
    with pytest.raises(ValueError, match=r"."):
        InterfaceAddress.compute(address, prefixlen)


def test_peer_equal_to_local_is_not_a_peer() -> None:
    # the kernel repeats IFA_LOCAL in IFA_ADDRESS on ordinary addresses
    a = InterfaceAddress.compute("10.1.2.3", 24, "10.1.2.3")
    assert a.peer is None
    assert a.network.exploded == "10.1.2.0/24"


def test_network_of_p2p_address_is_the_peer_prefix() -> None:
    a = addr("10.7.0.1/32", peer="10.7.0.2")
    assert str(a.network) == "10.7.0.2/32"
    assert a.peer == "10.7.0.2"


# --- flags, up, kind, role ------------------------------------------------------------


def test_flag_names_in_ip_link_order() -> None:
    assert flag_names(WG_GO) == ("UP", "POINTOPOINT", "RUNNING", "NOARP", "MULTICAST", "LOWER_UP")
    assert flag_names(0) == ()


@pytest.mark.parametrize(
    ("flags", "operstate", "up"),
    [
        (VETH, "UP", True),
        (LO, "UNKNOWN", True),
        (WG_GO, "UNKNOWN", True),
        (TUN_NO_OWNER, "DOWN", False),  # IFF_UP but no carrier: nobody holds the tun open
        (0x1, "UNKNOWN", True),  # IFF_UP only, driver without carrier reporting
        (0x1, "LOWERLAYERDOWN", False),
        (VETH & ~0x1, "DOWN", False),  # administratively down
        (VETH & ~0x1, "UP", False),
    ],
)
def test_is_up(flags: int, operstate: str, up: bool) -> None:
    assert is_up(flags, operstate) is up


@pytest.mark.parametrize(
    ("kind", "flags", "link_type", "wireguard", "expected"),
    [
        (None, LO, ARPHRD_LOOPBACK, False, "loopback"),
        (None, VETH, ARPHRD_ETHER, False, "ethernet"),
        ("veth", VETH, ARPHRD_ETHER, False, "veth"),
        ("bridge", VETH, ARPHRD_ETHER, False, "bridge"),
        ("tun", TUN_NO_OWNER, ARPHRD_NONE, False, "tun"),
        ("tun", VETH, ARPHRD_ETHER, False, "tap"),  # OpenVPN dev tap, tinc switch mode
        ("tun", WG_GO, ARPHRD_NONE, True, "wireguard"),  # wireguard-go: tun + UAPI socket
        ("wireguard", WG_GO, ARPHRD_NONE, False, "wireguard"),  # kernel WireGuard
        ("vlan", VETH, ARPHRD_ETHER, False, "other"),
        (None, VETH, ARPHRD_NONE, False, "other"),
        ("veth", VETH, ARPHRD_ETHER, True, "veth"),  # a stray socket name does not matter
    ],
)
def test_classify_kind(
    kind: str | None, flags: int, link_type: int, wireguard: bool, expected: str
) -> None:
    assert classify_kind(kind, flags, link_type, wireguard_uapi=wireguard) == expected


def test_roles() -> None:
    roles = {i.name: i.role for i in TOPO.interfaces}
    assert roles == {
        "lo": "p2p",  # no IFF_BROADCAST; never selected anyway
        "eth0": "lan",
        "eth1": "lan",
        "wg0": "p2p",
        "tun7": "p2p",
        "wg1": "p2p",
    }
    # BROADCAST and POINTOPOINT together is still p2p
    both = dataclasses.replace(TOPO.interfaces[1], pointopoint=True)
    assert both.role == "p2p"


def test_lookup() -> None:
    assert TOPO.by_index(4) is TOPO.interfaces[3]
    assert TOPO.by_name("tun7") is TOPO.interfaces[4]
    assert TOPO.by_index(99) is None
    assert TOPO.by_name("eth9") is None


# --- primary ------------------------------------------------------------------------------


def test_primary_is_lowest_metric() -> None:
    primary = TOPO.primary
    assert primary is not None
    assert primary.name == "wg0"


def test_primary_tie_breaks_on_lowest_index() -> None:
    a = iface(7, "b", addr("10.3.0.1/24"), metric=10)
    b = iface(3, "a", addr("10.4.0.1/24"), metric=10)
    c = iface(2, "c", addr("10.5.0.1/24"), metric=11)
    primary = Topology((a, b, c)).primary
    assert primary is not None
    assert primary.index == 3


def test_metric_zero_counts_and_no_default_means_no_primary() -> None:
    zero = iface(9, "z", metric=0)
    primary = Topology((*TOPO.interfaces, zero)).primary
    assert primary is not None
    assert primary.name == "z"
    assert Topology((lo(), iface(2, "eth0"))).primary is None
    assert Topology(()).primary is None


# --- select ------------------------------------------------------------------------------


def names(found: list[Interface]) -> list[str]:
    return [i.name for i in found]


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["eth0"], ["eth0"]),
        (["wg*"], ["wg0", "wg1"]),
        (["eth?", "tun7"], ["eth0", "eth1", "tun7"]),
        (["10.1.2.0/24"], ["eth0"]),
        (["10.1.2.77/24"], ["eth0"]),  # host bits allowed in a pattern
        (["192.168.0.0/16"], ["eth1"]),  # any address of the interface
        (["10.0.0.0/8"], ["eth0", "eth1", "wg0", "tun7"]),
        (["lo"], []),  # loopback never selected
        (["*"], ["eth0", "eth1", "wg0", "tun7", "wg1"]),
        (["127.0.0.0/8"], []),
        (["ETH0"], []),  # case-sensitive like the kernel's names
        (["nothing*"], []),
    ],
)
def test_select(patterns: list[str], expected: list[str]) -> None:
    assert names(select(TOPO, patterns)) == expected


def test_select_keeps_topology_order_without_duplicates() -> None:
    found = select(TOPO, ["tun7", "eth*", "10.5.0.0/24", "eth1", "*"])
    assert names(found) == ["eth0", "eth1", "wg0", "tun7", "wg1"]


def test_select_nothing_means_every_non_loopback() -> None:
    assert names(select(TOPO, [])) == ["eth0", "eth1", "wg0", "tun7", "wg1"]


@pytest.mark.parametrize("pattern", ["10.1.2.0/33", "eth0/24", "fe80::/64", "/"])
def test_select_rejects_bad_cidr(pattern: str) -> None:
    with pytest.raises(ValueError, match="CIDR"):
        select(TOPO, [pattern])


def test_unmatched_names_each_pattern_that_selects_nothing_and_loopback_only_ones() -> None:
    found = unmatched(TOPO, ["eth0", "lo", "nosuch0", "127.0.0.0/8", "lo", "wg*", "l?"])
    assert found == (
        Unmatched("lo", ("lo",)),
        Unmatched("nosuch0"),
        Unmatched("127.0.0.0/8", ("lo",)),
        Unmatched("l?", ("lo",)),
    )
    assert [str(u) for u in found[:2]] == [
        "'lo' matches only loopback (lo), which is excluded",
        "'nosuch0' matches no interface",
    ]
    assert unmatched(TOPO, []) == ()  # no patterns: every interface, nothing unmatched
    with pytest.raises(ValueError, match="CIDR"):
        unmatched(TOPO, ["10.1.2.0/33"])
    # `ipxbridge interfaces --iface lo --ipx-iface lo` says the same
    ipx = (IpxInterface("lo", (PortKind.ETHERNET,)),)
    text = render_text(describe(TOPO, (Selection("lo"),), {}, ipx=ipx), (47624,), "x", "y")
    assert text.count("\n  'lo' matches only loopback (lo), which is excluded\n") == 2


# --- owner_of ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ip", "owner"),
    [
        ("10.1.2.77", "eth0"),
        ("10.1.2.3", "eth0"),  # our own address
        ("10.1.2.255", "eth0"),
        ("192.168.7.20", "eth1"),  # second address of an interface
        ("10.98.0.2", "wg0"),
        ("10.7.0.2", "tun7"),  # the p2p peer
        ("10.7.0.1", "tun7"),  # our side of the p2p link
        ("10.7.0.3", None),
        ("8.8.8.8", None),
        ("127.0.0.1", "lo"),
        ("not-an-ip", None),
        ("fe80::1", None),
    ],
)
def test_owner_of(ip: str, owner: str | None) -> None:
    found = owner_of(TOPO, ip)
    assert (found.name if found else None) == owner


def test_owner_of_prefers_longest_prefix_then_up() -> None:
    wide = iface(2, "wide", addr("10.0.0.1/8"))
    narrow = iface(3, "narrow", addr("10.1.0.1/16"))
    found = owner_of(Topology((wide, narrow)), "10.1.9.9")
    assert found is not None
    assert found.name == "narrow"
    down = iface(4, "down", addr("10.9.0.1/24"), flags=VETH & ~0x1, operstate="DOWN")
    up = iface(5, "up", addr("10.9.0.2/24"))
    found = owner_of(Topology((down, up)), "10.9.0.50")
    assert found is not None
    assert found.name == "up"


# --- WireGuard AllowedIPs -> unicast targets ---------------------------------------------


def test_unicast_targets_keeps_host_routes_only() -> None:
    allowed = [
        "10.98.0.3/32",
        "10.99.0.0/24",
        "10.98.0.2/32",
        "10.98.0.2/32",
        "0.0.0.0/0",
        "fd00::2/128",
        "224.0.0.1/32",
        "255.255.255.255/32",
        "0.0.0.0/32",
        "garbage",
        " 10.98.0.10/32 ",
    ]
    assert unicast_targets(allowed) == ["10.98.0.2", "10.98.0.3", "10.98.0.10"]
    assert unicast_targets([]) == []


# --- the interfaces command's plan (pure part) --------------------------------------------
# "One plan, not two": the command's plan is policy.relay.build_plan's, fed
# the same selections and WireGuard peers as the bridge (app.py), never a second planner.

WG_PEERS = {"wg0": ["10.98.0.2"]}


def test_plan_is_build_plans() -> None:
    selections = (Selection("eth*"), Selection("wg*"), Selection("tun7"), Selection("nope*"))
    report = describe(TOPO, selections, WG_PEERS)
    egresses, own, bcasts = build_plan(TOPO, selections, WG_PEERS)
    assert report.egresses == egresses
    assert report.own_addresses == own
    assert report.subnet_broadcasts == bcasts
    assert {i.interface.name: i.egress for i in report.interfaces if i.egress} == {
        e.name: e for e in egresses
    }
    assert report.matches == (("eth0", "eth1"), ("wg0", "wg1"), ("tun7",), ())
    assert report.unmatched == ("nope*",)
    assert report.selected_down == ("tun7", "wg1")


def test_plan_actions() -> None:
    report = describe(TOPO, (Selection("*"),), WG_PEERS, configured=False)
    assert not report.configured
    items = {p.interface.name: p for p in report.interfaces}
    assert items["lo"].action == "loopback: never used"
    assert (
        items["eth0"].action == "lan: re-send as subnet broadcast to 10.1.2.255 (bound to device)"
    )
    # Two addresses: the relay sends to the first one's subnet only (build_plan), and says so
    # (before: "... to 10.5.0.255, 192.168.7.255", a plan the relay never executed).
    assert items["eth1"].action == (
        "lan: re-send as subnet broadcast to 10.5.0.255 (bound to device)"
    )
    assert items["eth1"].egress is not None
    assert items["eth1"].egress.broadcast == "10.5.0.255"
    assert items["eth1"].notes == (
        "not to 192.168.7.255 (192.168.7.1/24): the relay uses the first address only, 10.5.0.1",
        "relays what arrives for 255.255.255.255, 10.5.0.255, 192.168.7.255",
    )
    assert items["wg0"].action == (
        "p2p: unicast copy to each peer: 10.98.0.2 (from WireGuard AllowedIPs)"
    )
    assert items["wg0"].egress is not None
    assert items["wg0"].egress.peers == ("10.98.0.2",)
    assert items["wg0"].primary
    assert items["tun7"].action == "down: skipped (no carrier, operstate DOWN)"
    assert items["tun7"].egress is None
    assert items["wg1"].action == "no IPv4 address: skipped"
    assert all(p.selected for n, p in items.items() if n != "lo")
    only = {p.interface.name: p for p in describe(TOPO, (Selection("eth1"),), {}).interfaces}
    assert only["eth0"].action == "not selected: skipped"
    assert not only["eth0"].selected
    assert only["eth1"].selected


def test_plan_roles_and_peers_from_the_config() -> None:
    """The first matching selection decides role and peers, as in build_plan."""
    selections = (Selection("eth1", "p2p", ("10.5.0.9",)), Selection("eth*"), Selection("wg0"))
    report = describe(TOPO, selections, {})  # no WireGuard peers read (yet)
    items = {p.interface.name: p for p in report.interfaces}
    assert items["eth1"].role == "p2p"
    assert items["eth1"].action == (
        "p2p: unicast copy to each peer: 10.5.0.9 (given in the config or --iface)"
    )
    assert items["eth0"].role == "lan"
    assert items["wg0"].action == NO_PEERS
    assert report.egresses == build_plan(TOPO, selections, {})[0]
    text = render_text(report, (47624,), "from test.yaml")
    assert "relay interfaces (from test.yaml): eth1 (p2p; peers 10.5.0.9), eth*, wg0" in text
    assert "3: eth1  bridge  p2p (set in the config; flags say lan)" in text
    assert "inet 10.5.0.1/24 brd 10.5.0.255 (unused: p2p)" in text
    assert text.endswith("plan: eth1, eth0, wg0 (3 interfaces)\n")


def test_plan_p2p_without_peers_and_p2p_peer_address() -> None:
    lonely = iface(
        8,
        "wg9",
        addr("10.97.0.1/24"),
        kind="tun",
        flags=WG_GO,
        link_type=ARPHRD_NONE,
        wireguard=True,
    )
    tun = iface(9, "tun8", addr("10.6.0.1/32", peer="10.6.0.2"), kind="tun", flags=WG_GO)
    items = describe(Topology((lonely, tun)), (Selection("*"),), {}).interfaces
    assert items[0].action == NO_PEERS
    assert items[1].action == (
        "p2p: unicast copy to each peer: 10.6.0.2 (from the point-to-point peer address)"
    )


def test_plan_json_holds_every_egress_field() -> None:
    report = describe(TOPO, (Selection("eth1"), Selection("wg0"), Selection("x")), WG_PEERS)
    doc = json.loads(render_json(report, (47624, 6073), "from --iface"))
    assert doc["egresses"] == [
        {
            "index": 3,
            "name": "eth1",
            "role": "lan",
            "address": "10.5.0.1",
            "broadcast": "10.5.0.255",
            "peers": [],
            "mtu": 1500,
            "networks": ["10.5.0.0/24", "192.168.7.0/24"],
            "addresses": ["10.5.0.1", "192.168.7.1"],
        },
        {
            "index": 4,
            "name": "wg0",
            "role": "p2p",
            "address": "10.98.0.1",
            "broadcast": "",
            "peers": ["10.98.0.2"],
            "mtu": 1500,
            "networks": ["10.98.0.0/24"],
            "addresses": ["10.98.0.1"],
        },
    ]
    assert doc["unmatched"] == ["x"]
    assert doc["selections"][2] == {"pattern": "x", "role": "auto", "peers": [], "matches": []}
    assert doc["primary"] == "wg0"
    assert doc["configured"] is True
    assert [i["name"] for i in doc["interfaces"] if i["used"]] == ["eth1", "wg0"]
