"""``ipxbridge interfaces``: what IPX does on each NIC, pure part.

The command's IPX ports are ``policy.port_plan.plan_ports``'s for the same topology and
WireGuard peers (one plan, as for the relay): these tests compare against that function and
check the words and JSON built from it.
"""

import json
import subprocess
import sys

import pytest

from ipxbridge.commands.interfaces import describe, render_json, render_text
from ipxbridge.policy.port_plan import IpxInterface, plan_ports
from ipxbridge.policy.relay import Selection
from ipxbridge.policy.switch import PortKind
from tests.unit.test_topology import TOPO, WG_PEERS

ETH = PortKind.ETHERNET
WRAP = PortKind.IPXWRAPPER
RFC = PortKind.RFC1234

ENTRIES = (
    IpxInterface("eth1", (ETH, WRAP), framing="snap"),
    IpxInterface("eth*", (ETH, RFC)),
    IpxInterface("wg*", (ETH, WRAP, RFC)),
    IpxInterface("tun7", (RFC,)),
    IpxInterface("nothing*", (WRAP,)),
)


def test_ipx_ports_are_plan_ports() -> None:
    report = describe(TOPO, (Selection("*"),), WG_PEERS, ipx=ENTRIES, rfc1234_port=2130)
    plans, skipped = plan_ports(TOPO, ENTRIES, WG_PEERS)
    assert report.ipx_ports == plans
    assert report.ipx_skipped == skipped
    assert report.ipx_matches == (("eth1",), ("eth0", "eth1"), ("wg0", "wg1"), ("tun7",), ())
    assert report.ipx_unmatched == ("nothing*",)
    # Every planned port and every skipped kind shows up on its interface, and nothing else.
    shown = {
        (i.interface.name, r.kind, r.plan is not None) for i in report.interfaces for r in i.ipx
    }
    assert shown == {(p.segment.interface, p.segment.kind, True) for p in plans} | {
        (s.interface, s.kind, False) for s in skipped
    }


def test_ipx_rows_per_interface() -> None:
    report = describe(TOPO, (Selection("*"),), WG_PEERS, ipx=ENTRIES, rfc1234_port=2130)
    items = {i.interface.name: i for i in report.interfaces}
    assert items["lo"].ipx_entry is None
    assert items["lo"].ipx == ()
    # eth1: the first matching entry decides (eth1, not eth*): its kinds, its fixed framing.
    eth1 = items["eth1"]
    assert eth1.ipx_entry is ENTRIES[0]
    assert [(r.kind, r.action) for r in eth1.ipx] == [
        (ETH, "ethernet: native IPX frames, framing snap (fixed); promiscuous while open "
              "(CAP_NET_RAW)"),
        (WRAP, "ipxwrapper: udp 54792, lan: broadcasts to 10.5.0.255 from 10.5.0.1"),
    ]  # fmt: skip
    eth0 = items["eth0"]
    assert eth0.ipx_entry is ENTRIES[1]
    assert [r.action for r in eth0.ipx] == [
        "ethernet: native IPX frames, framing auto (learned per station, 802.2 until one is "
        "heard); promiscuous while open (CAP_NET_RAW)",
        "rfc1234: udp 2130, lan: broadcasts to 10.1.2.255 from 10.1.2.3",
    ]
    # wg0: WireGuard carries no Ethernet frames; its UDP ports copy to the WireGuard peer.
    wg0 = items["wg0"]
    assert [(r.kind, r.plan is None, r.why) for r in wg0.ipx] == [
        (ETH, True, "a wireguard interface carries no Ethernet frames"),
        (WRAP, False, ""),
        (RFC, False, ""),
    ]
    assert wg0.ipx[1].action == (
        "ipxwrapper: udp 54792, p2p: a unicast copy to each peer: 10.98.0.2 "
        "(from WireGuard AllowedIPs) from 10.98.0.1"
    )
    assert wg0.ipx[0].action == (
        "ethernet: not opened: a wireguard interface carries no Ethernet frames"
    )
    # wg1 is up but has no address; tun7 is down.
    assert [(r.kind, r.why) for r in items["wg1"].ipx] == [
        (ETH, "a wireguard interface carries no Ethernet frames"),
        (WRAP, "no IPv4 address (a UDP port sends from one)"),
        (RFC, "no IPv4 address (a UDP port sends from one)"),
    ]
    assert [(r.kind, r.why) for r in items["tun7"].ipx] == [(RFC, "interface is down")]


def test_ipx_p2p_peer_sources_and_no_peers() -> None:
    entries = (IpxInterface("eth0", (RFC,), "p2p", ("10.1.2.9",)), IpxInterface("wg0", (WRAP,)))
    items = {
        i.interface.name: i for i in describe(TOPO, (), {}, ipx=entries).interfaces
    }  # no WireGuard peers read (yet)
    assert items["eth0"].ipx[0].action == (
        "rfc1234: udp 213, p2p: a unicast copy to each peer: 10.1.2.9 (from the config) "
        "from 10.1.2.3"
    )
    assert items["wg0"].ipx[0].action == (
        "ipxwrapper: udp 54792, p2p: no peers known — nothing would be sent; "
        "give peers in the config"
    )


def test_ipx_text() -> None:
    report = describe(TOPO, (Selection("*"),), WG_PEERS, configured=False, ipx=ENTRIES)
    text = render_text(report, (47624,), "none", "from --ipx-iface")
    assert (
        "IPX interface ports (from --ipx-iface): eth1 (ethernet,ipxwrapper; framing snap), "
        "eth* (ethernet,rfc1234), wg* (ethernet,ipxwrapper,rfc1234), tun7 (rfc1234), "
        "nothing* (ipxwrapper)\n  'nothing*' matches no interface\n"
    ) in text
    assert "    ipx -> ipxwrapper: udp 54792, lan: broadcasts to 10.5.0.255 from 10.5.0.1\n" in text
    assert "    ipx -> rfc1234: not opened: interface is down\n" in text
    assert text.endswith(
        "ipx ports: eth0/ethernet, eth0/rfc1234, eth1/ethernet, eth1/ipxwrapper, "
        "wg0/ipxwrapper, wg0/rfc1234 (6 planned)\n"
    )
    # An interface no entry selects says so (only when IPX ports are configured).
    only = describe(TOPO, (Selection("*"),), WG_PEERS, ipx=(IpxInterface("eth0", (ETH,)),))
    lines = render_text(only, (47624,), "x", "y").splitlines()
    eth1 = lines.index(next(line for line in lines if ": eth1  bridge" in line))
    block = lines[eth1 + 1 :]
    block = block[: next(n for n, line in enumerate(block) if not line.startswith(" "))]
    assert block[-1] == "    ipx: not selected by ipx.interfaces"
    none = render_text(describe(TOPO, (Selection("*"),), {}), (47624,), "x", "no ipx")
    assert "IPX interface ports: none (no ipx)\n" in none
    assert "ipx" not in none.split("IPX interface ports: none (no ipx)\n", 1)[1]


def test_ipx_json() -> None:
    report = describe(
        TOPO, (Selection("*"),), WG_PEERS, configured=False, ipx=ENTRIES, rfc1234_port=2130
    )
    doc = json.loads(render_json(report, (47624,), "none", "from test.yaml"))
    ipx = doc["ipx"]
    assert ipx["configured"] is True
    assert ipx["source"] == "from test.yaml"
    assert ipx["entries"][0] == {
        "pattern": "eth1",
        "kinds": ["ethernet", "ipxwrapper"],
        "role": "auto",
        "peers": [],
        "framing": "snap",
        "matches": ["eth1"],
    }
    assert ipx["unmatched"] == ["nothing*"]
    assert ipx["ports"] == [str(p.segment) for p in report.ipx_ports]
    assert {"interface": "tun7", "kind": "rfc1234", "why": "interface is down"} in ipx["skipped"]
    rows = {i["name"]: i["ipx"] for i in doc["interfaces"]}
    assert rows["lo"] == {"selected": False, "entry": None, "ports": []}
    assert rows["eth0"]["entry"] == "eth*"
    eth, rfc = rows["eth0"]["ports"]
    assert eth["kind"] == "ethernet"
    assert eth["framing"] == "auto"
    assert eth["udp_port"] is None
    assert (eth["planned"], eth["role"], eth["address"]) == (True, "lan", "10.1.2.3")
    assert rfc == {
        "kind": "rfc1234",
        "planned": True,
        "action": "rfc1234: udp 2130, lan: broadcasts to 10.1.2.255 from 10.1.2.3",
        "role": "lan",
        "address": "10.1.2.3",
        "broadcast": "10.1.2.255",
        "peers": [],
        "networks": ["10.1.2.0/24"],
        "mtu": 1500,
        "framing": None,
        "udp_port": 2130,
    }
    assert rows["wg0"]["ports"][0] == {
        "kind": "ethernet",
        "planned": False,
        "action": "ethernet: not opened: a wireguard interface carries no Ethernet frames",
        "why": "a wireguard interface carries no Ethernet frames",
    }
    assert rows["wg0"]["ports"][1]["peers"] == ["10.98.0.2"]
    # Without entries the section says so and no interface carries ports.
    plain = json.loads(render_json(describe(TOPO, (), {}), (47624,), "x"))
    assert plain["ipx"]["configured"] is False
    assert all(i["ipx"]["ports"] == [] for i in plain["interfaces"])


def test_bad_ipx_cidr_raises() -> None:
    with pytest.raises(ValueError, match="CIDR"):
        describe(TOPO, (), {}, ipx=(IpxInterface("10.0.0.0/99", (WRAP,)),))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ipx-iface", "eth0:bogus"], "unknown port kind bogus"),
        (["--ipx-iface", ":ethernet"], "empty interface name"),
        (["--ipx-iface", "eth0:"], None),  # no kinds after the colon: the defaults
    ],
)
def test_ipx_iface_flag_is_runs(args: list[str], message: str | None) -> None:
    """``--ipx-iface`` is parsed by ``commands.common.ipx_iface_arg`` as on ``run``: bad kinds
    exit 2."""
    res = subprocess.run(
        [sys.executable, "-m", "ipxbridge", "interfaces", "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if message is None:
        assert res.returncode in (0, 1), res.stderr  # 1: no interfaces readable here
        if res.returncode == 0:
            entries = json.loads(res.stdout)["ipx"]["entries"]
            assert [(e["pattern"], e["kinds"]) for e in entries] == [
                ("eth0", ["ethernet", "ipxwrapper"])
            ]
        return
    assert res.returncode == 2
    assert message in res.stderr
