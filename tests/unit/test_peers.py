"""Peers of a p2p interface found without a list: OpenVPN status files, addresses heard
there, WireGuard's AllowedIPs; each says where it came from (docs/relay.md, "Peers")."""

from hypothesis import given
from hypothesis import strategies as st

from ipxbridge.commands.interfaces import HEARD_NOTE, NO_PEERS, describe
from ipxbridge.policy.relay import (
    Egress,
    RelayPolicy,
    RelaySettings,
    Selection,
    SourceMode,
    build_plan,
    finding_peers,
    peer_sources,
    plan_peer_sources,
)
from ipxbridge.policy.relay_peers import HeardPeers
from ipxbridge.policy.topology import Interface, InterfaceAddress, Topology
from ipxbridge.wire.openvpn_status import client_addresses
from tests.unit.test_relay_policy import iface

# openvpn 2.6 --status-version 2, as the server in tests/integration/test_vpns.py writes it
# (the columns are the manual's; one client routed with an iroute subnet)
STATUS_V2 = """TITLE,OpenVPN 2.6.14 x86_64-pc-linux-gnu
TIME,2026-11-28 20:00:00,1795896000
HEADER,CLIENT_LIST,Common Name,Real Address,Virtual Address,Virtual IPv6 Address,\
Bytes Received,Bytes Sent,Connected Since,Connected Since (time_t),Username,Client ID,\
Peer ID,Data Channel Cipher
CLIENT_LIST,alice,10.97.0.2:41000,10.8.0.2,,5120,4096,2026-11-28 19:59:00,1795895940,\
UNDEF,0,0,AES-256-GCM
CLIENT_LIST,bob,10.97.0.3:41001,10.8.0.3,,5120,4096,2026-11-28 19:59:00,1795895940,\
UNDEF,1,1,AES-256-GCM
HEADER,ROUTING_TABLE,Virtual Address,Common Name,Real Address,Last Ref,Last Ref (time_t)
ROUTING_TABLE,10.8.0.2,alice,10.97.0.2:41000,2026-11-28 19:59:59,1795895999
ROUTING_TABLE,192.168.5.0/24,bob,10.97.0.3:41001,2026-11-28 19:59:59,1795895999
GLOBAL_STATS,Max bcast/mcast queue length,0
END
"""
# version 1 (openvpn@.service's default): the ROUTING TABLE section; a tap client's row
# starts with its MAC address
STATUS_V1 = """OpenVPN CLIENT LIST
Updated,2026-11-28 20:00:00
Common Name,Real Address,Bytes Received,Bytes Sent,Connected Since
carol,10.97.0.4:41002,100,200,2026-11-28 19:59:00
ROUTING TABLE
Virtual Address,Common Name,Real Address,Last Ref
10.8.1.6,carol,10.97.0.4:41002,2026-11-28 19:59:59
0a:1b:2c:3d:4e:5f,dave,10.97.0.5:41003,2026-11-28 19:59:59
GLOBAL STATS
Max bcast/mcast queue length,1
END
"""


def test_openvpn_status_versions_1_to_3() -> None:
    assert client_addresses(STATUS_V2) == ("10.8.0.2", "10.8.0.3")
    assert client_addresses(STATUS_V2.replace(",", "\t")) == ("10.8.0.2", "10.8.0.3")  # v3
    assert client_addresses(STATUS_V1) == ("10.8.1.6",)
    assert client_addresses("") == ()


@given(st.text(max_size=400))
def test_openvpn_status_never_raises_and_gives_only_addresses(text: str) -> None:
    for address in client_addresses(text):
        assert address.count(".") == 3


def tun_topology() -> Topology:
    return Topology(
        (
            iface(2, "eth0", "10.0.1.1", 24),
            iface(3, "tun0", "10.8.0.1", 24, kind="tun", bcast=False, p2p=True),
            iface(4, "wg0", "10.98.0.1", 24, kind="wireguard", bcast=False, p2p=True),
        )
    )


def test_peers_come_from_the_status_file_of_the_interfaces_subnet_and_from_what_was_heard() -> None:
    topo = tun_topology()
    sels = (Selection("eth0"), Selection("tun0"), Selection("wg0"))
    assert finding_peers(topo, sels)
    openvpn = {
        "/run/openvpn-server/status-site.log": ("10.8.0.2", "10.8.0.3", "10.8.0.1"),
        "/run/openvpn/other.status": ("10.77.0.2",),  # another server's subnet
    }
    heard = {"tun0": ("10.8.0.3", "10.8.0.9"), "wg0": ("10.98.0.5",)}
    egresses, _, _ = build_plan(topo, sels, {"wg0": ["10.98.0.2"]}, openvpn, heard)
    assert [(e.name, e.peers) for e in egresses] == [
        ("eth0", ()),
        ("tun0", ("10.8.0.2", "10.8.0.3", "10.8.0.9")),  # own address never; each once
        ("wg0", ("10.98.0.2", "10.98.0.5")),
    ]
    sources = plan_peer_sources(topo, sels, {"wg0": ["10.98.0.2"]}, openvpn, heard)
    assert sources == {
        "tun0": {
            "10.8.0.2": "openvpn /run/openvpn-server/status-site.log",
            "10.8.0.3": "openvpn /run/openvpn-server/status-site.log",
            "10.8.0.9": "heard",
        },
        "wg0": {"10.98.0.2": "wireguard", "10.98.0.5": "heard"},
    }
    # listed peers are the only ones
    listed = (Selection("eth0"), Selection("tun0", peers=("10.8.0.50",)))
    assert not finding_peers(topo, listed)
    tun = topo.interfaces[1]
    assert peer_sources(tun, listed[1], {}, openvpn, heard) == {"10.8.0.50": "listed"}


def test_tinc_and_nebula_peers_count_on_the_interface_their_files_name() -> None:
    """``named`` (io/vpn_files.by_interface): before OpenVPN's and heard peers, never the
    box's own address, only on the interface named, and listed peers still replace them."""
    topo = tun_topology()
    sels = (Selection("eth0"), Selection("tun0"), Selection("wg0"))
    named: dict[str, list[tuple[str, tuple[str, ...]]]] = {
        "tun0": [
            ("tinc /etc/tinc/lan", ("10.8.0.2", "10.8.0.1")),  # .1: this box (a stray file)
            ("nebula /etc/nebula/site.yml", ("10.8.0.7", "10.8.0.2")),
        ],
        "nebula9": [("nebula /etc/nebula/other.yml", ("10.42.0.3",))],  # not here
    }
    openvpn = {"/run/openvpn/x.status": ("10.8.0.7", "10.8.0.8")}
    heard = {"tun0": ("10.8.0.9",)}
    egresses, _, _ = build_plan(topo, sels, {}, openvpn, heard, named=named)
    assert [e.peers for e in egresses if e.name == "tun0"] == [
        ("10.8.0.2", "10.8.0.7", "10.8.0.8", "10.8.0.9")
    ]
    assert plan_peer_sources(topo, sels, {}, openvpn, heard, named=named)["tun0"] == {
        "10.8.0.2": "tinc /etc/tinc/lan",
        "10.8.0.7": "nebula /etc/nebula/site.yml",
        "10.8.0.8": "openvpn /run/openvpn/x.status",
        "10.8.0.9": "heard",
    }
    tun = topo.interfaces[1]
    listed = Selection("tun0", peers=("10.8.0.50",))
    assert peer_sources(tun, listed, {}, {}, {}, named=named) == {"10.8.0.50": "listed"}


def test_a_point_to_point_peer_only_when_nothing_else_is_known() -> None:
    tun = Interface(
        index=3,
        name="tun0",
        kind="tun",
        up=True,
        broadcast_capable=False,
        pointopoint=True,
        noarp=True,
        mtu=1500,
        addresses=(InterfaceAddress.compute("10.8.0.1", 32, "10.8.0.2"),),
        default_route_metric=None,
    )
    assert peer_sources(tun, Selection("tun0"), {}, {}, {}) == {"10.8.0.2": "point-to-point"}
    heard = {"tun0": ("10.8.0.2",)}
    assert peer_sources(tun, Selection("tun0"), {}, {}, heard) == {"10.8.0.2": "heard"}


def test_heard_peers_are_bounded_expire_and_are_counted() -> None:
    heard = HeardPeers(max_per_interface=3, expire_seconds=10.0)
    for i in range(5):
        heard.hear("tun0", f"10.8.0.{i + 2}", float(i))
    assert heard.peers() == {"tun0": ("10.8.0.4", "10.8.0.5", "10.8.0.6")}
    assert heard.events == {"learned": 5, "evicted": 2}
    assert heard.take_changed()
    assert not heard.take_changed()
    heard.hear("tun0", "10.8.0.4", 8.0)  # heard again: kept, moved last, nothing new
    assert not heard.take_changed()
    heard.expire(14.5)  # 10.8.0.5 last heard at 3, 10.8.0.6 at 4: both gone by 14.5
    assert heard.peers() == {"tun0": ("10.8.0.4",)}
    assert heard.events["expired"] == 2
    assert heard.take_changed()
    heard.expire(100.0)
    assert heard.peers() == {}


WG = Egress(4, "tun0", "p2p", "10.8.0.1", "", ("10.8.0.2",), networks=("10.8.0.0/24",))
LAN = Egress(2, "eth0", "lan", "10.0.1.1", "10.0.1.255", networks=("10.0.1.0/24",))


def test_the_relay_hears_peers_only_from_broadcasts_of_the_tunnels_own_subnet() -> None:
    p = RelayPolicy(RelaySettings(SourceMode.PRESERVE, heard_peers=2))
    p.set_plan((LAN, WG), frozenset({"10.0.1.1", "10.8.0.1"}), {2: frozenset({"10.0.1.255"})})

    def send(src: str, dst: str = "255.255.255.255", ingress: int = 4, port: int = 5000) -> None:
        p.decide(b"x", src=(src, port), dst_ip=dst, dst_port=47624, ingress=ingress, ttl=64, now=0)

    send("10.8.0.7")  # a peer's broadcast
    send("192.168.5.20")  # a far site's player behind its bridge: reached through it
    send("10.8.0.8", dst="10.8.0.99")  # not a broadcast
    send("10.8.0.9", port=0)  # port 0: dropped before
    send("127.0.0.1")  # invalid
    send("10.0.1.50", ingress=2)  # a LAN player
    assert p.heard.peers() == {"tun0": ("10.8.0.7",)}
    for n in range(10, 20):  # a stranger naming many sources: bounded
        send(f"10.8.0.{n}")
    assert len(p.heard.peers()["tun0"]) == 2
    assert p.heard.events["evicted"] == 9


def test_interfaces_says_where_each_peer_came_from() -> None:
    topo = tun_topology()
    sels = (Selection("eth0"), Selection("tun0"), Selection("wg0"))
    openvpn = {"/run/openvpn-server/status-site.log": ("10.8.0.2", "10.8.0.3")}
    rows = {r.interface.name: r for r in describe(topo, sels, {}, openvpn=openvpn).interfaces}
    assert rows["tun0"].action == (
        "p2p: unicast copy to each peer: 10.8.0.2, 10.8.0.3 (connected OpenVPN clients in"
        " /run/openvpn-server/status-site.log)"
    )
    assert HEARD_NOTE in rows["tun0"].notes
    assert rows["wg0"].action == NO_PEERS  # none read, none listed: learned while running
    listed = (Selection("eth0"), Selection("tun0", peers=("10.8.0.9",)))
    row = describe(topo, listed, {}, openvpn=openvpn).interfaces[1]
    assert row.action == "p2p: unicast copy to each peer: 10.8.0.9 (given in the config or --iface)"
    assert HEARD_NOTE not in row.notes
