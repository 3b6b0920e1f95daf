"""The status page (``/``): IPX clients, stations on interface ports and the ports themselves.

The page lists native and IPXWrapper stations with their interface and
framing (``/api/clients`` items of kind ethernet, ipxwrapper, rfc1234) and every interface
port, open or not and why.
"""

import re

import pytest

from ipxbridge.app import Bridge
from ipxbridge.app.http import ipx_port_rows
from ipxbridge.app.ipx import IpxService
from ipxbridge.config import load_config
from ipxbridge.obs.status import render_status
from ipxbridge.policy.port_plan import PortPlan, Skipped
from ipxbridge.policy.switch import IpxSwitch, PortKind, Segment, SwitchSettings
from ipxbridge.wire import ipx

ETH0 = Segment("eth0", PortKind.ETHERNET)
WG0 = Segment("wg0", PortKind.IPXWRAPPER)
LAN = Segment("eth0", PortKind.RFC1234)
NATIVE = bytes.fromhex("00a0c9123456")  # a DOS PC's NIC: its MAC is its node

CLIENTS = [
    {"kind": "ethernet", "interface": "eth0", "node": "00:a0:c9:12:34:56",
     "idle_seconds": 1.5, "framing": "802.2"},
    {"kind": "ipxwrapper", "interface": "wg0", "node": "02:11:22:33:44:55",
     "idle_seconds": 0.2, "address": "10.98.0.2:54792"},
    {"kind": "rfc1234", "interface": "eth0", "node": "00:00:0a:01:02:09",
     "idle_seconds": 3.0, "address": "10.1.2.9:213"},
    {"kind": "dosbox", "address": "10.54.0.11:40001", "node": "0a:36:00:0b:9c:41",
     "idle_seconds": 0.4, "verified": True},
    {"kind": "peer", "address": "192.0.2.50:213", "node": "00:00:c0:00:02:32"},
]  # fmt: skip


def section(page: str, title: str) -> str:
    """The HTML between ``<h2>title</h2>`` and the next heading."""
    start = page.index(f"<h2>{title}</h2>") + len(title) + 9
    end = page.find("<h2>", start)
    return page[start : end if end >= 0 else None]


def rows(html: str) -> list[list[str]]:
    """Cells of each data row (the header row left out)."""
    found = re.findall(r"<tr>(.*?)</tr>", html)
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in found if "<td" in row]


def test_stations_listed_with_interface_and_framing() -> None:
    page = render_status({"clients": CLIENTS, "ipx_ports": [], "ipx_ports_configured": True})
    stations = rows(section(page, "IPX stations on interfaces"))
    assert stations == [
        ["native IPX", "eth0", "00:a0:c9:12:34:56", "802.2", "-", "1.5"],
        ["IPXWrapper", "wg0", "02:11:22:33:44:55", "-", "10.98.0.2:54792", "0.2"],
        ["RFC 1234 host", "eth0", "00:00:0a:01:02:09", "-", "10.1.2.9:213", "3.0"],
    ]
    # The tunnel's clients and peers stay in their own table, stations are not repeated there.
    tunnel = rows(section(page, "IPX clients and peers"))
    assert tunnel == [
        ["dosbox", "10.54.0.11:40001", "0a:36:00:0b:9c:41", "yes", "0.4"],
        ["peer", "192.0.2.50:213", "00:00:c0:00:02:32", "-", "-"],
    ]


def test_ports_open_or_not_and_why() -> None:
    ports = [
        {"interface": "eth0", "kind": "ethernet", "open": True, "role": "lan",
         "detail": "framing auto: 802.2, ethernet_ii heard", "stations": 1, "bridges": 1,
         "why": ""},
        {"interface": "wg0", "kind": "ethernet", "open": False,
         "why": "a wireguard interface carries no Ethernet frames"},
        {"interface": "eth1", "kind": "ethernet", "open": False,
         "why": "no <CAP_NET_RAW> & more"},
    ]  # fmt: skip
    page = render_status({"clients": [], "ipx_ports": ports, "ipx_ports_configured": True})
    assert rows(section(page, "IPX interface ports")) == [
        ["eth0", "ethernet", "open", "lan", "framing auto: 802.2, ethernet_ii heard", "1", "1",
         "-"],
        ["wg0", "ethernet", "NOT open", "-", "-", "-", "-",
         "a wireguard interface carries no Ethernet frames"],
        ["eth1", "ethernet", "NOT open", "-", "-", "-", "-", "no &lt;CAP_NET_RAW&gt; &amp; more"],
    ]  # fmt: skip
    assert "<CAP_NET_RAW>" not in page  # escaped, never markup
    assert "No native, IPXWrapper or RFC 1234 station heard yet." in page


def test_no_ports_says_whether_any_are_configured() -> None:
    off = render_status({"clients": []})
    assert "No IPX interface ports (ipx.interfaces, --ipx-iface)." in section(
        off, "IPX interface ports"
    )
    assert "No IPX interface ports" in section(off, "IPX stations on interfaces")
    none = render_status({"clients": [], "ipx_ports": [], "ipx_ports_configured": True})
    assert "No interface matches ipx.interfaces." in section(none, "IPX interface ports")


def plan(
    segment: Segment, *, peers: tuple[str, ...] = (), broadcast: str = "", framing: str = "auto"
) -> PortPlan:
    role = "p2p" if segment.interface.startswith("wg") else "lan"
    return PortPlan(segment, 3, role, 1500, "10.1.2.3", broadcast, peers, ("10.1.2.0/24",), framing)


def test_port_rows_count_stations_and_bridges_from_the_switch() -> None:
    key = b"the bridges' shared key"
    sw = IpxSwitch(
        SwitchSettings(),
        segments=(ETH0, WG0, LAN),
        bridge_id=b"\x02\x00\x00\x00\x00\x01",
        beacon_key=key,
    )
    # A native station's broadcast (hop byte 0, as a native stack sends) teaches its node.
    hello = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE, dst_socket=0x4000, src_node=NATIVE, src_socket=0x4000
    )
    assert sw.handle_segment(ETH0, hello, 1.0).detail == "broadcast"
    # Another bridge announces itself on eth0 with a signed beacon (rule 8).
    ethernet_tag = b"\x01" + bytes(7)
    echoed = (sw.bridges.tag(ETH0) or b"",)  # it hears this bridge there (its tag echoed)
    other = ipx.build_beacon(
        b"\x02\x00\x00\x00\x00\x02", seq=1, tag=ethernet_tag, tags=echoed, key=key
    )
    assert sw.handle_segment(ETH0, other, 1.0).detail == "beacon"
    plans = {
        ETH0: plan(ETH0),
        WG0: plan(WG0, peers=("10.98.0.2",)),
        LAN: plan(LAN, broadcast="10.1.2.255"),
    }
    skipped = (
        Skipped("wg0", PortKind.ETHERNET, "a wireguard interface carries no Ethernet frames"),
    )
    out = ipx_port_rows(plans, skipped, sw, {ETH0: ["802.2", "snap"]})
    assert out == [
        {"interface": "eth0", "kind": "ethernet", "open": True, "role": "lan",
         "detail": "framing auto: 802.2, snap heard", "stations": 1, "bridges": 1, "why": ""},
        {"interface": "eth0", "kind": "rfc1234", "open": True, "role": "lan",
         "detail": "broadcast 10.1.2.255 from 10.1.2.3", "stations": 0, "bridges": 0,
         "why": ""},
        {"interface": "wg0", "kind": "ipxwrapper", "open": True, "role": "p2p",
         "detail": "peers 10.98.0.2", "stations": 0, "bridges": 0, "why": ""},
        {"interface": "wg0", "kind": "ethernet", "open": False,
         "why": "a wireguard interface carries no Ethernet frames"},
    ]  # fmt: skip
    # What the other framings and roles say.
    fixed = ipx_port_rows({ETH0: plan(ETH0, framing="snap")}, (), None, {})
    assert (fixed[0]["detail"], fixed[0]["stations"]) == ("framing snap (fixed)", None)
    quiet = ipx_port_rows({ETH0: plan(ETH0)}, (), sw, {})
    assert quiet[0]["detail"] == "framing auto: none heard yet (802.2 until one is)"
    lonely = ipx_port_rows({WG0: plan(WG0)}, (), sw, {})
    assert lonely[0]["detail"] == "no peers known: nothing sent"


def test_status_data_carries_the_ipx_service_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HttpService.status_data`` hands the page the IPX service's plan and skipped ports."""
    config = load_config(
        None,
        {},
        {
            "ipx": {"interfaces": [{"name": "nomatch0", "kinds": ["ethernet"]}]},
            "http": {"listen": "off"},
        },
    )
    bridge = Bridge(config)  # not started: no endpoint, so no counts from a switch
    # The plans of the open ports (IpxService.plans reads them from the open ports).
    opened = {ETH0: plan(ETH0, framing="802.3")}
    monkeypatch.setattr(IpxService, "plans", property(lambda _self: opened))
    bridge.ipx.skipped = (Skipped("eth1", PortKind.ETHERNET, "no CAP_NET_RAW"),)
    data = bridge.http.status_data()
    assert data["ipx_ports_configured"] is True
    assert data["ipx_ports"] == [
        {"interface": "eth0", "kind": "ethernet", "open": True, "role": "lan",
         "detail": "framing 802.3 (fixed)", "stations": None, "bridges": None, "why": ""},
        {"interface": "eth1", "kind": "ethernet", "open": False, "why": "no CAP_NET_RAW"},
    ]  # fmt: skip
    page = render_status(data)
    assert rows(section(page, "IPX interface ports"))[1][-1] == "no CAP_NET_RAW"
