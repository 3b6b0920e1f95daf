"""tinc's and Nebula's own files as relay peer sources (wire/tinc_conf.py,
wire/nebula_conf.py, io/vpn_files.py): what each names, re-read on change, junk said once."""

import logging
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ipxbridge.io.vpn_files import NetPeers, VpnFiles
from ipxbridge.wire.nebula_conf import nebula_peers
from ipxbridge.wire.tinc_conf import host_addresses, read_tinc_conf, variables

KEY = (  # a host file's public key ends its variables: a Subnet inside is not read
    "-----BEGIN RSA PUBLIC KEY-----\nMIIBCgKCAQEAx\nSubnet = 10.9.9.9/32\n"
    "-----END RSA PUBLIC KEY-----\n"
)


# --- tinc.conf(5) ------------------------------------------------------------------------


def test_tinc_conf_names_the_node_and_the_interface_defaults_to_the_net() -> None:
    conf, problems = read_tinc_conf("Name = site_a\nMode = router\n", "lan")
    assert problems == []
    assert conf is not None
    assert (conf.name, conf.interface) == ("site_a", "lan")
    conf, _ = read_tinc_conf("name site_a\n# comment\nINTERFACE=tun7\n", "lan")
    assert conf is not None
    assert (conf.name, conf.interface) == ("site_a", "tun7")  # case and separators as tincd


def test_tinc_conf_without_a_valid_name_is_no_net_and_says_why() -> None:
    conf, problems = read_tinc_conf("Mode = router\n", "lan")
    assert conf is None
    assert [p.what for p in problems] == ["no Name: which node this is"]
    conf, problems = read_tinc_conf("Name = ../etc\n", "lan")
    assert conf is None
    assert "not a tinc node name" in problems[0].what


def test_host_file_gives_host_sized_subnets_only_and_stops_at_the_key() -> None:
    text = (
        "Address = 203.0.113.5 655\n"
        "Subnet = 10.20.0.2/32\n"
        "Subnet = 10.20.0.3\n"  # no prefix: a /32
        "Subnet = 10.20.0.2/32#10\n"  # a weight; the same address once
        "Subnet = 192.168.7.0/24\n"  # a LAN behind the node: a bridge there serves it
        "Subnet = 00:16:3e:00:00:01\n"  # switch mode's MAC subnet
        "Subnet = fd00::2/128\n" + KEY
    )
    addresses, problems = host_addresses(text)
    assert addresses == ("10.20.0.2", "10.20.0.3")  # not 10.9.9.9, inside the key block
    assert problems == []


def test_host_file_junk_is_a_problem_with_its_line() -> None:
    addresses, problems = host_addresses("Subnet = 10.20.0.4/32\n\nSubnet = 10.20.0.5/33\n???\n")
    assert addresses == ("10.20.0.4",)
    assert [p.line for p in problems] == [3, 4]
    assert "Subnet '10.20.0.5/33'" in problems[0].what


@given(st.text(max_size=400))
def test_tinc_parsers_never_raise(text: str) -> None:
    variables(text)
    host_addresses(text)
    read_tinc_conf(text, "net")


# --- nebula.yml(5) -------------------------------------------------------------------------


def test_nebula_vias_are_the_peers_on_tun_dev() -> None:
    doc = yaml.safe_load(
        """
tun:
  dev: neb0
  unsafe_routes:
    - route: 192.168.2.0/24
      via: 10.42.0.2
    - route: 192.168.3.0/24
      via: 10.42.0.3
    - route: 192.168.4.0/24
      via: 10.42.0.2
static_host_map:
  "10.42.0.9": ["203.0.113.9:4242"]
"""
    )
    assert nebula_peers(doc) == ("neb0", ("10.42.0.2", "10.42.0.3"), [])


def test_nebula_defaults_and_gateway_lists() -> None:
    assert nebula_peers({}) == ("nebula1", (), [])
    assert nebula_peers({"tun": None}) == ("nebula1", (), [])
    routes = {"tun": {"unsafe_routes": [{"route": "10.1.0.0/16", "via": [
        {"gateway": "10.42.0.7", "weight": 10}, {"gateway": "10.42.0.8"}]}]}}  # fmt: skip
    assert nebula_peers(routes) == ("nebula1", ("10.42.0.7", "10.42.0.8"), [])


def test_nebula_junk_is_a_problem_never_an_exception() -> None:
    assert nebula_peers("text")[2] == ["not a YAML mapping"]
    assert nebula_peers({"tun": 5})[2] == ["tun: not a mapping"]
    dev, vias, problems = nebula_peers(
        {"tun": {"dev": 7, "unsafe_routes": [None, {"via": "x"}, {"via": "10.42.0.2"}]}}
    )
    assert (dev, vias) == ("nebula1", ("10.42.0.2",))
    assert problems == [
        "tun.dev: not a name: 7",
        "tun.unsafe_routes[0]: not a mapping",
        "tun.unsafe_routes[1].via: not an IPv4 address: 'x'",
    ]


YAMLISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["tun", "dev", "unsafe_routes", "via", "gateway", "x"]),
                      inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(YAMLISH)
def test_nebula_peers_never_raise_and_give_only_addresses(doc: object) -> None:
    dev, vias, problems = nebula_peers({"tun": doc})
    assert isinstance(dev, str)
    assert all(v.count(".") == 3 for v in vias)
    assert all(isinstance(p, str) for p in problems)


# --- io/vpn_files.py: the files as Debian's units lay them out --------------------------------


def tinc_net(root: Path, net: str, me: str, nodes: dict[str, str], iface: str = "") -> Path:
    d = root / "tinc" / net
    (d / "hosts").mkdir(parents=True)
    (d / "tinc.conf").write_text(
        f"Name = {me}\nMode = router\n" + (f"Interface = {iface}\n" if iface else "")
    )
    for node, subnet in nodes.items():
        (d / "hosts" / node).write_text(f"Subnet = {subnet}\n" + KEY)
    return d


def test_two_tinc_nets_and_a_nebula_net_on_one_box(tmp_path: Path) -> None:
    tinc_net(tmp_path, "lan", "a", {"a": "10.20.0.1/32", "b": "10.20.0.2/32", "c": "10.20.0.3"})
    tinc_net(tmp_path, "wan", "x", {"x": "10.30.0.1/32", "y": "10.30.0.2/32"}, iface="tinc-wan")
    (tmp_path / "nebula").mkdir()
    (tmp_path / "nebula" / "site.yml").write_text(
        "tun:\n  dev: neb0\n  unsafe_routes:\n    - {route: 192.168.2.0/24, via: 10.42.0.2}\n"
    )
    files = VpnFiles()
    got = files.read([str(tmp_path / "tinc/*/tinc.conf")], [str(tmp_path / "nebula/*.yml")])
    assert got == [
        NetPeers("lan", f"tinc {tmp_path}/tinc/lan", ("10.20.0.2", "10.20.0.3")),
        NetPeers("tinc-wan", f"tinc {tmp_path}/tinc/wan", ("10.30.0.2",)),
        NetPeers("neb0", f"nebula {tmp_path}/nebula/site.yml", ("10.42.0.2",)),
    ]


def test_a_new_node_is_read_without_a_restart_and_junk_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tinc_net(tmp_path, "lan", "a", {"b": "10.20.0.2/32"})
    pattern = [str(tmp_path / "tinc/*/tinc.conf")]
    files = VpnFiles()
    assert files.read(pattern, [])[0].addresses == ("10.20.0.2",)
    (d / "hosts" / "d").write_text("Subnet = 10.20.0.4/32\nSubnet = nonsense\n")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert files.read(pattern, [])[0].addresses == ("10.20.0.2", "10.20.0.4")
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"{d}/hosts/d: line 2: Subnet 'nonsense': "
                    "Expected 4 octets in 'nonsense'"]  # fmt: skip
    # a changed file is read again (a new stamp), and a removed node goes
    (d / "hosts" / "b").write_text("Subnet = 10.20.0.22/32\n")
    os.utime(d / "hosts" / "b", ns=(1, 1))
    (d / "hosts" / "d").unlink()
    assert files.read(pattern, [])[0].addresses == ("10.20.0.22",)


def test_unreadable_and_broken_files_are_said_once_with_path_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "bad.yml").write_text("tun:\n  dev: neb0\n  unsafe_routes: [\n")
    (tmp_path / "dir.yml").mkdir()  # reading it fails
    files = VpnFiles()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert files.read([], [str(tmp_path / "*.yml")]) == []
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert said[0].startswith(f"{tmp_path}/bad.yml: line 4: not YAML"), said
    assert said[1].startswith(f"cannot read {tmp_path}/dir.yml"), said
