"""Interface topology against the real kernel: ``ipxbridge interfaces`` and the watcher.

Topology (namespace ``box``):

- ``lan0``: veth to namespace ``h``, 10.61.1.1/24 added **without** ``brd +`` (kernel
  broadcast 0.0.0.0, glibc reports the own address: docs/reliability.md item 8);
  default route via 10.61.1.254 metric 100.
- ``br0``: Linux bridge without ports, 10.61.2.1/24; default route metric 20 (PRIMARY).
- ``tun0``: ``ip tuntap`` device nobody opens, 10.61.3.1 peer 10.61.3.2, set up.
- a wireguard-go interface (unique name), 10.98.0.1/24, one peer with AllowedIPs
  10.98.0.2/32 and 10.99.0.0/24.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyroute2.netlink.rtnl import RTM_NEWADDR

from ipxbridge.io import netlink
from ipxbridge.policy.topology import Interface, InterfaceAddress, Topology, build_interface
from scripts.harness import ROOT, BridgeProcess, Netns, bridge_get, sh
from tests.integration.conftest import require
from tests.integration.topo import WireGuardGo, start_watcher


def interfaces_cmd(net: Netns, ns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        net.exec_args(ns, sys.executable, "-m", "ipxbridge", "interfaces", *args),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


@pytest.fixture
def wg_name() -> str:
    return f"ixwg{os.getpid() % 100000}"  # <= 15 chars, unique across namespaces


@pytest.fixture
def box(net: Netns, tmp_path: Path, wg_name: str) -> Iterator[str]:
    require("wireguard-go", "wg")
    box, host = net.add("box"), net.add("h")
    sh(
        "ip",
        "link",
        "add",
        "lan0",
        "netns",
        box,
        "type",
        "veth",
        *("peer", "name", "eth0"),
        "netns",
        host,
    )
    sh("ip", "-n", box, "addr", "add", "10.61.1.1/24", "dev", "lan0")  # no "brd +"
    sh("ip", "-n", host, "addr", "add", "10.61.1.2/24", "dev", "eth0")
    sh("ip", "-n", box, "link", "set", "lan0", "up")
    sh("ip", "-n", host, "link", "set", "eth0", "up")
    sh("ip", "-n", box, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", box, "addr", "add", "10.61.2.1/24", "dev", "br0")
    sh("ip", "-n", box, "link", "set", "br0", "up")
    sh("ip", "-n", box, "tuntap", "add", "dev", "tun0", "mode", "tun")
    sh("ip", "-n", box, "addr", "add", "10.61.3.1", "peer", "10.61.3.2", "dev", "tun0")
    sh("ip", "-n", box, "link", "set", "tun0", "up")
    wg = WireGuardGo(net, box, wg_name)
    try:
        wg.configure(tmp_path, "10.98.0.1/24", "10.98.0.2/32,10.99.0.0/24")
        for gateway, dev, metric in (("10.61.1.254", "lan0", "100"), ("10.61.2.254", "br0", "20")):
            sh(
                "ip",
                "-n",
                box,
                "route",
                "add",
                "default",
                "via",
                gateway,
                "dev",
                dev,
                "metric",
                metric,
            )
        yield box
    finally:
        wg.stop()
    assert not wg.sock.exists()


@pytest.mark.netns
def test_interfaces_json(net: Netns, box: str, wg_name: str) -> None:
    res = interfaces_cmd(net, box, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    # no --iface, no config: the relay is off, and the plan shown is --iface '*''s
    assert doc["configured"] is False
    assert doc["selections"] == [
        {"pattern": "*", "role": "auto", "peers": [], "matches": ["lan0", "br0", "tun0", wg_name]}
    ]
    assert doc["ports"] == [47624, 6073]
    found = by_name(doc["interfaces"])
    assert set(found) == {"lo", "lan0", "br0", "tun0", wg_name}
    assert {n: i["kind"] for n, i in found.items()} == {
        "lo": "loopback",
        "lan0": "veth",
        "br0": "bridge",
        "tun0": "tun",
        wg_name: "wireguard",  # a tun device, recognised by its UAPI socket
    }
    lan = found["lan0"]
    # computed, although the kernel has no broadcast for this address (docs/reliability.md item 8)
    assert lan["addresses"] == [
        {"address": "10.61.1.1", "prefixlen": 24, "broadcast": "10.61.1.255", "peer": None}
    ]
    assert lan["role"] == "lan"
    assert lan["up"] is True
    assert lan["default_route_metric"] == 100
    assert lan["action"] == "lan: re-send as subnet broadcast to 10.61.1.255 (bound to device)"
    assert {"UP", "BROADCAST", "LOWER_UP"} <= set(lan["flags"])

    br = found["br0"]
    assert br["primary"] is True
    assert br["default_route_metric"] == 20
    assert [n for n, i in found.items() if i["primary"]] == ["br0"]
    assert br["action"] == "lan: re-send as subnet broadcast to 10.61.2.255 (bound to device)"

    tun = found["tun0"]
    assert tun["addresses"] == [
        {"address": "10.61.3.1", "prefixlen": 32, "broadcast": "", "peer": "10.61.3.2"}
    ]
    # nobody holds the tun open: IFF_UP but NO-CARRIER (no RUNNING/LOWER_UP), operstate DOWN
    assert "UP" in tun["flags"]
    assert {"POINTOPOINT", "NOARP"} <= set(tun["flags"])
    assert not {"BROADCAST", "RUNNING", "LOWER_UP"} & set(tun["flags"])
    assert tun["up"] is False
    assert tun["role"] == "p2p"
    assert tun["action"] == "down: skipped (no carrier, operstate DOWN)"
    assert tun["used"] is False

    wg = found[wg_name]
    assert wg["mtu"] == 1420
    assert {"UP", "POINTOPOINT", "NOARP", "RUNNING", "LOWER_UP"} <= set(wg["flags"])
    assert "BROADCAST" not in wg["flags"]
    assert wg["role"] == "p2p"
    assert wg["up"] is True
    assert wg["peers"] == ["10.98.0.2"]  # the /24 AllowedIP is a subnet, not a target
    assert wg["action"] == "p2p: unicast copy to each peer: 10.98.0.2 (from WireGuard AllowedIPs)"
    assert wg["default_route_metric"] is None

    assert found["lo"]["action"] == "loopback: never used"
    assert found["lo"]["selected"] is False
    assert all(i["selected"] for n, i in found.items() if n != "lo")
    assert [e["name"] for e in doc["egresses"]] == ["lan0", "br0", wg_name]
    assert doc["selected_down"] == ["tun0"]


@pytest.mark.netns
def test_interfaces_selection_and_text(net: Netns, box: str, wg_name: str) -> None:
    res = interfaces_cmd(net, box, "--json", "--iface", "ixwg*", "--iface", "10.61.1.0/24")
    assert res.returncode == 0, res.stderr
    found = by_name(json.loads(res.stdout)["interfaces"])
    assert {n for n, i in found.items() if i["selected"]} == {"lan0", wg_name}
    assert found["br0"]["action"] == "not selected: skipped"
    assert found["br0"]["primary"] is True  # still the primary, just not relayed

    res = interfaces_cmd(net, box, "--iface", "br0", "--relay-port", "2302")
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "relayed UDP ports: 2302" in text
    assert "primary: br0 (default route metric 20)" in text
    br_line = next(line for line in text.splitlines() if ": br0  bridge" in line)
    assert "PRIMARY" in br_line
    assert br_line.endswith("  selected")
    assert "inet 10.61.3.1 peer 10.61.3.2/32 no broadcast" in text
    assert "inet 10.61.1.1/24 brd 10.61.1.255" in text
    assert "relay interfaces (from --iface): br0\n" in text
    assert text.endswith("plan: br0\n  the relay needs at least two usable interfaces; have 1\n")

    bad = interfaces_cmd(net, box, "--iface", "10.61.0.0/99")
    assert bad.returncode == 2
    assert "CIDR" in bad.stderr


def api_interfaces(net: Netns, ns: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(bridge_get(ns, "/api/interfaces"))
    return data


@pytest.mark.netns
def test_interfaces_prints_the_plan_the_relay_executes(
    net: Netns, box: str, wg_name: str, workdir: Path
) -> None:
    """One plan, not two: the command's plan is the running relay's.

    lan0 gets a second address: the relay (policy.relay.build_plan) sends to the first
    address's subnet broadcast only, where the command used to promise one broadcast per
    address. The WireGuard interface's peers are read as the relay reads them.
    """
    sh("ip", "-n", box, "addr", "add", "10.61.7.1/24", "dev", "lan0")
    selection = ("--iface", "lan0", "--iface", "br0", "--iface", "tun0", "--iface", "ixwg*")
    res = interfaces_cmd(net, box, "--json", *selection, "--iface", "nomatch0")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    plan = by_name(doc["egresses"])
    assert list(plan) == ["lan0", "br0", wg_name]
    lan = plan["lan0"]
    assert (lan["role"], lan["address"], lan["broadcast"], lan["peers"], lan["mtu"]) == (
        "lan", "10.61.1.1", "10.61.1.255", [], 1500,
    )  # fmt: skip
    assert lan["addresses"] == ["10.61.1.1", "10.61.7.1"]
    assert lan["networks"] == ["10.61.1.0/24", "10.61.7.0/24"]
    wg = plan[wg_name]
    assert (wg["role"], wg["address"], wg["broadcast"], wg["peers"], wg["mtu"]) == (
        "p2p", "10.98.0.1", "", ["10.98.0.2"], 1420,
    )  # fmt: skip
    rows = by_name(doc["interfaces"])
    assert rows["lan0"]["action"] == (
        "lan: re-send as subnet broadcast to 10.61.1.255 (bound to device)"
    )
    assert rows["lan0"]["notes"][0] == (
        "not to 10.61.7.255 (10.61.7.1/24): the relay uses the first address only, 10.61.1.1"
    )
    assert rows[wg_name]["peers"] == ["10.98.0.2"]
    assert rows[wg_name]["action"] == (
        "p2p: unicast copy to each peer: 10.98.0.2 (from WireGuard AllowedIPs)"
    )
    assert rows["tun0"]["action"] == "down: skipped (no carrier, operstate DOWN)"
    assert doc["selected_down"] == ["tun0"]
    assert doc["unmatched"] == ["nomatch0"]

    # The same selection given to the bridge: its plan (the log line and /api/interfaces,
    # both made from the Egress tuples _apply_plan got) is the command's.
    bridge = BridgeProcess(
        net,
        box,
        *("--ipx-listen", "off", "--source-mode", "rewrite", *selection),
        log_dir=workdir,
        ready=rf"relaying between: .*lan0.*br0.*{wg_name}",
    )
    try:
        # The relay logs its plan before the HTTP API listens: wait for that too (this read
        # was refused once in CI, the API not yet up).
        bridge.wait_for(r"HTTP API on http://", 10)
        relayed = api_interfaces(net, box)
        log = bridge.log()
    finally:
        assert bridge.stop() == 0
    assert (
        f"relaying between: lan0 (lan, broadcast 10.61.1.255); br0 (lan, broadcast "
        f"10.61.2.255); {wg_name} (p2p, 1 peers: 10.98.0.2 (wireguard))"
    ) in log
    fields = ("role", "address", "broadcast", "peers", "mtu")
    assert {e["name"]: [e[f] or "" if f == "broadcast" else e[f] for f in fields]
            for e in relayed if e["up"]} == {
        e["name"]: [e[f] for f in fields] for e in doc["egresses"]
    }  # fmt: skip
    assert [e["name"] for e in relayed if not e["up"]] == doc["selected_down"]

    text = interfaces_cmd(net, box, *selection).stdout
    assert "-> lan: re-send as subnet broadcast to 10.61.1.255 (bound to device)\n" in text
    assert "10.61.7.255 (10.61.7.1/24): the relay uses the first address only" in text
    assert "relays what arrives for 255.255.255.255, 10.61.1.255, 10.61.7.255\n" in text
    assert text.endswith(f"plan: lan0, br0, {wg_name} (3 interfaces)\n")


@pytest.mark.netns
def test_interfaces_reads_the_relay_config(
    net: Netns, box: str, wg_name: str, tmp_path: Path
) -> None:
    """``--config``: the bridge's relay.interfaces (roles, static peers) and ports."""
    config = tmp_path / "relay.yaml"
    config.write_text(
        "relay:\n"
        "  ports: [47624, 2302]\n"
        "  interfaces:\n"
        "    - name: br0\n"
        "      role: p2p\n"
        "      peers: [10.61.2.9]\n"
        "    - name: 'ixwg*'\n"
        "    - name: 10.61.1.0/24\n"
    )
    res = interfaces_cmd(net, box, "--json", "--config", str(config))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["configured"] is True
    assert doc["source"] == f"from {config}"
    assert doc["ports"] == [47624, 2302]
    assert [(s["pattern"], s["role"], s["peers"]) for s in doc["selections"]] == [
        ("br0", "p2p", ["10.61.2.9"]),
        ("ixwg*", "auto", []),
        ("10.61.1.0/24", "auto", []),
    ]
    plan = by_name(doc["egresses"])
    assert list(plan) == ["br0", wg_name, "lan0"]
    assert (plan["br0"]["role"], plan["br0"]["broadcast"], plan["br0"]["peers"]) == (
        "p2p", "", ["10.61.2.9"],
    )  # fmt: skip
    assert by_name(doc["interfaces"])["br0"]["action"] == (
        "p2p: unicast copy to each peer: 10.61.2.9 (given in the config or --iface)"
    )
    assert plan[wg_name]["peers"] == ["10.98.0.2"]

    # --iface replaces relay.interfaces, as on `run`
    only = json.loads(interfaces_cmd(net, box, "--json", "--config", str(config), "--iface",
                                     "lan0").stdout)  # fmt: skip
    assert [e["name"] for e in only["egresses"]] == ["lan0"]
    assert only["ports"] == [47624, 2302]

    config.write_text("relay:\n  interfaces:\n    - name: br0\n      role: bridge\n")
    bad = interfaces_cmd(net, box, "--config", str(config))
    assert bad.returncode == 2
    assert f"{config}:4: relay.interfaces.0.role" in bad.stderr


IPX_SELECTION = (
    *("--ipx-iface", "lan0"),  # default kinds: ethernet, ipxwrapper
    *("--ipx-iface", "br0:rfc1234,ethernet"),
    *("--ipx-iface", "tun0:rfc1234"),
    *("--ipx-iface", "ixwg*:ethernet,ipxwrapper"),
    *("--ipx-iface", "nomatch0:ipxwrapper"),
)


def _ipx_log_line(log: str) -> dict[str, str]:
    """The bridge's last "IPX interface ports: ..." line, as {"iface/kind": what}."""
    line = [row for row in log.splitlines() if "IPX interface ports: " in row][-1]
    parts = line.split("IPX interface ports: ", 1)[1].split("; ")
    out = {}
    for part in parts:
        name, _, rest = part.partition(" ")
        out[name] = rest
    return out


@pytest.mark.netns
def test_interfaces_shows_the_ipx_ports_the_bridge_opens(
    net: Netns, box: str, wg_name: str, workdir: Path
) -> None:
    """What IPX does on each NIC is the plan the IPX service applies.

    The same --ipx-iface flags go to the command and to ``run``; the ports the command
    plans are the ones the bridge logs as open, and the kinds it skips the bridge logs as
    NOT open with the same reason (plan_ports's).
    """
    res = interfaces_cmd(net, box, "--json", *IPX_SELECTION)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    ipx = doc["ipx"]
    assert ipx["configured"] is True
    assert ipx["source"] == "from --ipx-iface"
    assert [(e["pattern"], e["kinds"], e["matches"]) for e in ipx["entries"]] == [
        ("lan0", ["ethernet", "ipxwrapper"], ["lan0"]),
        ("br0", ["rfc1234", "ethernet"], ["br0"]),
        ("tun0", ["rfc1234"], ["tun0"]),
        ("ixwg*", ["ethernet", "ipxwrapper"], [wg_name]),
        ("nomatch0", ["ipxwrapper"], []),
    ]
    assert ipx["unmatched"] == ["nomatch0"]
    assert sorted(ipx["ports"]) == sorted(
        ["lan0/ethernet", "lan0/ipxwrapper", "br0/rfc1234", "br0/ethernet",
         f"{wg_name}/ipxwrapper"]
    )  # fmt: skip
    assert sorted((s["interface"], s["kind"], s["why"]) for s in ipx["skipped"]) == sorted(
        [
            ("tun0", "rfc1234", "interface is down"),  # no carrier: nobody holds the tun
            (wg_name, "ethernet", "a wireguard interface carries no Ethernet frames"),
        ]
    )
    rows = {i["name"]: i["ipx"] for i in doc["interfaces"]}
    lan = {p["kind"]: p for p in rows["lan0"]["ports"]}
    assert lan["ethernet"]["framing"] == "auto"
    assert lan["ipxwrapper"]["broadcast"] == "10.61.1.255"  # computed: no "brd +" on lan0
    assert lan["ipxwrapper"]["address"] == "10.61.1.1"
    assert lan["ipxwrapper"]["udp_port"] == 54792
    br = {p["kind"]: p for p in rows["br0"]["ports"]}
    assert (br["rfc1234"]["broadcast"], br["rfc1234"]["udp_port"]) == ("10.61.2.255", 213)
    wg = {p["kind"]: p for p in rows[wg_name]["ports"]}
    assert (wg["ipxwrapper"]["role"], wg["ipxwrapper"]["peers"]) == ("p2p", ["10.98.0.2"])
    assert wg["ipxwrapper"]["action"].endswith("(from WireGuard AllowedIPs) from 10.98.0.1")
    assert rows["lo"] == {"selected": False, "entry": None, "ports": []}

    text = interfaces_cmd(net, box, *IPX_SELECTION).stdout
    assert "    ipx -> rfc1234: not opened: interface is down\n" in text
    lan_line = "    ipx -> ipxwrapper: udp 54792, lan: broadcasts to 10.61.1.255 from 10.61.1.1\n"
    assert lan_line in text
    assert "ipx ports: lan0/ethernet, lan0/ipxwrapper, br0/rfc1234, br0/ethernet, " in text

    bridge = BridgeProcess(
        net,
        box,
        *("--source-mode", "rewrite", *IPX_SELECTION),
        log_dir=workdir,
        ready=rf"IPX interface ports: .*{wg_name}/ipxwrapper \(p2p, peers 10\.98\.0\.2\)",
    )
    try:
        logged = _ipx_log_line(bridge.log())
        page = bridge_get(box, "/plain")  # the server-rendered status page
    finally:
        assert bridge.stop() == 0
    # The status page lists the same ports, open or not and why.
    ports = page.split("<h2>IPX interface ports</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<td>lan0</td><td>ethernet</td><td>open</td><td>lan</td>" in ports
    assert (
        f"<td>{wg_name}</td><td>ipxwrapper</td><td>open</td><td>p2p</td><td>peers 10.98.0.2</td>"
    ) in ports
    assert "<td>tun0</td><td>rfc1234</td><td>NOT open</td>" in ports
    assert "<td>interface is down</td>" in ports
    opened = {k for k, v in logged.items() if not v.startswith("NOT open")}
    assert opened == set(ipx["ports"])
    assert {k: v.removeprefix("NOT open: ") for k, v in logged.items() if k not in opened} == {
        f"{s['interface']}/{s['kind']}": s["why"] for s in ipx["skipped"]
    }


@pytest.mark.netns
def test_netifaces_fallback_computes_broadcast(net: Netns, box: str, wg_name: str) -> None:
    code = (
        "import json\n"
        "from ipxbridge.io.netlink import read_topology_fallback\n"
        "from ipxbridge.io.interfaces import select_ipv4\n"
        "t = read_topology_fallback()\n"
        "print(json.dumps({'topo': {i.name: [i.role, i.default_route_metric,"
        " [[a.address, a.broadcast, a.peer] for a in i.addresses]] for i in t.interfaces},"
        " 'legacy': [[i.name, i.broadcast] for i in select_ipv4(['lan0', 'tun0'])]}))\n"
    )
    res = subprocess.run(
        net.exec_args(box, sys.executable, "-c", code),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        cwd=ROOT,
    )
    data = json.loads(res.stdout)
    topo = data["topo"]
    # glibc reports 10.61.1.1 (our own address) as lan0's broadcast; we compute instead
    assert topo["lan0"] == ["lan", None, [["10.61.1.1", "10.61.1.255", None]]]
    assert topo["br0"][:2] == ["lan", 0]  # netifaces' default gateway; it knows no metrics
    assert topo["tun0"] == ["p2p", None, [["10.61.3.1", "", "10.61.3.2"]]]
    assert topo[wg_name][0] == "p2p"
    assert data["legacy"] == [["lan0", "10.61.1.255"], ["tun0", "10.61.3.1"]]


def _names(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in item["interfaces"]}


@pytest.mark.netns
def test_watcher_follows_link_and_address_changes(net: Netns) -> None:
    ns = net.add("w")
    sh("ip", "-n", ns, "link", "add", "wa", "type", "veth", "peer", "name", "wb")
    sh("ip", "-n", ns, "addr", "add", "10.62.0.1/24", "dev", "wa")
    sh("ip", "-n", ns, "link", "set", "wa", "up")
    sh("ip", "-n", ns, "link", "set", "wb", "up")
    proc, lines = start_watcher(net, ns)
    try:
        first = lines.wait_for(lambda i: "wa" in _names(i), 10)  # includes interpreter start
        old_index = _names(first)["wa"]["index"]
        assert _names(first)["wa"]["addresses"] == ["10.62.0.1/24"]
        assert first["events"] == dict.fromkeys(first["events"], 0)

        # delete and re-create: a new ifindex (the ENODEV case of docs/reliability.md item 6)
        sh("ip", "-n", ns, "link", "del", "wa")
        gone = lines.wait_for(lambda i: "wa" not in _names(i), 2)
        assert gone["events"]["link_del"] >= 2  # both ends of the pair
        sh("ip", "-n", ns, "link", "add", "wa", "type", "veth", "peer", "name", "wb")
        sh("ip", "-n", ns, "link", "set", "wa", "up")
        sh("ip", "-n", ns, "link", "set", "wb", "up")
        back = lines.wait_for(lambda i: _names(i).get("wa", {}).get("up") is True, 2)
        assert _names(back)["wa"]["index"] != old_index
        assert _names(back)["wa"]["addresses"] == []
        assert back["events"]["link_new"] >= 2
        assert back["events"]["link_up"] >= 1

        sh("ip", "-n", ns, "addr", "add", "10.62.5.1/24", "dev", "wa")
        added = lines.wait_for(lambda i: _names(i)["wa"]["addresses"] == ["10.62.5.1/24"], 2)
        assert added["events"]["addr_add"] >= 1
        assert added["events"]["route_add"] >= 1  # the prefix route

        # a burst (three addresses in one batch) is debounced into few re-reads
        before = len(lines.seen)
        subprocess.run(
            ["ip", "-n", ns, "-batch", "-"],
            input="".join(f"addr add 10.62.{n}.1/24 dev wa\n" for n in (6, 7, 8)),
            text=True,
            check=True,
        )
        burst = lines.wait_for(lambda i: len(_names(i)["wa"]["addresses"]) == 4, 2)
        assert len(lines.seen) - before <= 2, lines.seen[before:]

        sh("ip", "-n", ns, "addr", "flush", "dev", "wa")
        flushed = lines.wait_for(lambda i: _names(i)["wa"]["addresses"] == [], 2)
        assert flushed["events"]["addr_del"] >= 4
        assert flushed["events"]["route_del"] >= 1

        sh("ip", "-n", ns, "link", "set", "wb", "down")  # wa loses its carrier
        down = lines.wait_for(lambda i: _names(i)["wa"]["up"] is False, 2)
        assert down["events"]["link_down"] >= 2
        assert set(down["events"]) == {
            "link_up", "link_down", "link_new", "link_del",
            "addr_add", "addr_del", "route_add", "route_del",
        }  # fmt: skip
        assert burst["events"]["addr_add"] >= 4
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        lines.close()
    assert proc.returncode == 0


class _FakeMessage:
    def __init__(self, kind: int) -> None:
        self._fields: dict[str, Any] = {"header": {"type": kind}, "index": 7, "flags": 0}

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def get_attr(self, name: str) -> Any:
        return None


class _FakeMonitor:
    """Stands in for AsyncIPRoute: the first bind fails, later ones deliver one event."""

    opened = 0

    def __init__(self) -> None:
        type(self).opened += 1
        self.closed = False

    async def bind(self, groups: int) -> None:
        if type(self).opened == 1:
            raise OSError(105, "No buffer space available")  # ENOBUFS: monitor overrun

    async def _batch(self, first: bool) -> Any:
        if first:
            yield _FakeMessage(RTM_NEWADDR)
        else:
            await asyncio.sleep(3600)  # nothing more
            yield _FakeMessage(RTM_NEWADDR)

    def get(self) -> Any:
        first = not getattr(self, "_used", False)
        self._used = True
        return self._batch(first)

    def close(self) -> None:
        self.closed = True


def test_watcher_survives_netlink_and_callback_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """No root needed: the retry paths with a fake netlink socket."""
    a = Topology((_iface("a"),))
    b = Topology((_iface("b"),))
    reads: list[Topology | Exception] = [a, OSError(16, "busy"), b]

    async def fake_read() -> Topology:
        item = reads.pop(0) if reads else b
        if isinstance(item, Exception):
            raise item
        return item

    monkeypatch.setattr(netlink, "AsyncIPRoute", _FakeMonitor)
    monkeypatch.setattr(netlink, "read_topology", fake_read)
    monkeypatch.setattr(netlink, "REOPEN_DELAY", 0.01)
    monkeypatch.setattr(netlink, "DEBOUNCE", 0.01)
    _FakeMonitor.opened = 0
    seen: list[Topology] = []

    def on_change(topology: Topology) -> None:
        seen.append(topology)
        if len(seen) == 1:
            raise RuntimeError("callback bug")  # logged, the watcher carries on

    async def scenario() -> netlink.TopologyWatcher:
        watcher = netlink.TopologyWatcher(on_change)
        await watcher.start()
        for _ in range(200):
            if len(seen) >= 2 and watcher.events["addr_add"] >= 1:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        await watcher.close()
        return watcher

    watcher = asyncio.run(scenario())
    assert seen == [a, b]  # unchanged re-reads (after the event) are not reported
    assert watcher.topology == b
    assert watcher.events["addr_add"] == 1
    assert watcher.errors == 2  # the failed bind and the failed re-read, both retried
    assert _FakeMonitor.opened == 2


def _iface(name: str) -> Interface:
    return build_interface(
        index=7,
        name=name,
        link_kind="veth",
        link_type=1,
        flags=0x11043,
        operstate="UP",
        mtu=1500,
        addresses=(InterfaceAddress.compute("10.1.2.3", 24),),
        default_route_metric=None,
    )


@pytest.mark.netns
def test_a_tap_device_is_told_from_a_tun_device(net: Netns) -> None:
    """The tun driver makes both kinds: OpenVPN's ``dev tap`` and tinc's switch mode carry
    Ethernet frames (ARPHRD_ETHER, broadcast-capable: role lan), ``dev tun`` and tinc's router
    mode bare IP packets (point-to-point: role p2p). ``interfaces`` says which."""
    ns = net.add("tt")
    for dev, mode, address in (("tap7", "tap", "10.62.7.1/24"), ("tun7", "tun", "10.62.8.1/24")):
        sh("ip", "-n", ns, "tuntap", "add", "dev", dev, "mode", mode)
        sh("ip", "-n", ns, "addr", "add", address, "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
    res = interfaces_cmd(net, ns, "--json")
    assert res.returncode == 0, res.stderr
    found = by_name(json.loads(res.stdout)["interfaces"])
    assert (found["tap7"]["kind"], found["tap7"]["role"]) == ("tap", "lan")
    assert (found["tun7"]["kind"], found["tun7"]["role"]) == ("tun", "p2p")
    text = interfaces_cmd(net, ns)
    assert text.returncode == 0, text.stderr
    (tap_line,) = [line for line in text.stdout.splitlines() if "tap7" in line]
    assert "tap" in tap_line.replace("tap7", ""), text.stdout
