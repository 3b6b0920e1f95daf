"""Configuration: every error with FILE:LINE, overrides, exit codes (docs/architecture.md B4)."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ipxbridge.cli import build_parser, main
from ipxbridge.config import (
    DEFAULT_CONFIG_YAML,
    Config,
    ConfigError,
    load_config,
    parse_host_port,
)

CONF = Path(__file__).parent / "conffiles"


def errors_of(name: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(CONF / name, environ or {})
    return info.value.errors


def test_embedded_default() -> None:
    cfg = load_config(None, {})
    assert cfg.ipx.listen == "0.0.0.0:213"
    assert cfg.ipx.peers == ()
    assert cfg.ipx.idle_timeout == 600


def test_default_nodes_are_keyed_and_unproven_addresses_are_held_to_a_rate() -> None:
    ipx = load_config(None, {}).ipx
    assert (ipx.node_assignment, ipx.node_key_file) == ("keyed", "/var/lib/ipxbridge/node.key")
    limits = (
        ipx.unverified_address_bytes_per_second,
        ipx.unverified_address_byte_burst,
        ipx.unverified_total_bytes_per_second,
        ipx.unverified_total_byte_burst,
    )
    assert limits == (16_384.0, 32_768, 262_144.0, 524_288)
    assert (ipx.max_unverified, ipx.max_unverified_per_ip) == (256, 16)
    # and the embedded file says what a stranger can make the bridge send
    assert "toward one victim" in DEFAULT_CONFIG_YAML


def test_a_removed_budget_setting_is_named_with_its_line_and_what_replaced_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.yaml"
    path.write_text("ipx:\n  max_clients: 8\n  unverified_credit_ratio: 16\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    (error,) = info.value.errors
    assert error.startswith(f"{path}:"), error
    assert "unverified_credit_ratio was removed" in error, error
    assert "unverified_address_bytes_per_second" in error, error


def test_a_burst_smaller_than_one_packet_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text("ipx:\n  unverified_total_byte_burst: 100\n")
    with pytest.raises(ConfigError, match="less than one full IPX packet"):
        load_config(path, {})


def test_an_ipxwrapper_network_must_be_a_hosts_own(tmp_path: Path) -> None:
    path = tmp_path / "net.yaml"
    path.write_text(
        "ipx:\n  interfaces:\n    - name: eth0\n      kinds: [ipxwrapper]\n"
        "      network: ffffffff\n"
    )
    with pytest.raises(ConfigError, match="cannot be a host's own network"):
        load_config(path, {})
    path.write_text("ipx:\n  interfaces:\n    - name: eth0\n      network: 00000010\n")
    with pytest.raises(ConfigError, match="in quotes"):  # YAML's octal 8
        load_config(path, {})
    path.write_text('ipx:\n  interfaces:\n    - name: eth0\n      network: "0x0000ABCD"\n')
    assert load_config(path, {}).ipx.interfaces[0].network == "0000abcd"


def test_good_file() -> None:
    cfg = load_config(CONF / "good.yaml", {})
    assert cfg.ipx.peers == ("192.0.2.7:213", "192.0.2.8:3000")
    assert cfg.logging.level == "debug"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bad_port.yaml", [":2: ipx.listen: port 'two-thirteen'"]),
        ("unknown_key.yaml", [":3: ipx.max_client: unknown key"]),
        ("syntax.yaml", [":2: YAML syntax error: while scanning a quoted scalar"]),
        ("not_mapping.yaml", [":1: the top level must be a mapping"]),
        (
            "bad_allow.yaml",
            [":4: ipx.clients_allow.1: not an IPv4 network like 192.168.1.0/24 (got '192.168"],
        ),
        (
            "multiple.yaml",
            [
                ":4: ipx.peers.1: 'bad host' is not an IPv4 address or host name",
                ":5: ipx.keepalive_interval: Input should be greater than 0",
                ":7: logging.level: Input should be 'debug', 'info', 'warning' or 'error'",
            ],
        ),
        # PyYAML keeps the last of two equal keys without a word.
        (
            "duplicate_key.yaml",
            [
                ":4: ipx.max_clients: duplicate key 'max_clients' (first at line 2;",
                ":7: relay: duplicate key 'relay' (first at line 5;",
            ],
        ),
        # ...and pydantic's lax mode read a boolean as 1 or 0 where a number belongs.
        (
            "bool_number.yaml",
            [
                ":2: ipx.max_clients: expected an integer, not the boolean true",
                ":3: ipx.idle_timeout: expected a number, not the boolean false",
                ":5: relay.ports.1: expected an integer, not the boolean true",
                ":7: directplay.probe_interval: expected a number, not the boolean true",
            ],
        ),
        (
            "empty_iface.yaml",
            [
                ":4: relay.interfaces.1.name: empty interface name",
                ":6: directplay.probe_interfaces.0: empty interface name",
            ],
        ),
        (
            "flow_limits.yaml",
            [":3: relay.max_unproven_flows: must be smaller than max_flows (64)"],
        ),
        (
            "node_keys.yaml",
            [
                ":3: ipx.node_assignment: Input should be 'keyed' or 'address' (got 'random')",
                ":4: ipx.node_key_file: empty path",
            ],
        ),
    ],
)
def test_broken_files_report_file_line_and_path(name: str, expected: list[str]) -> None:
    errors = errors_of(name)
    assert len(errors) == len(expected), errors
    for line, want in zip(errors, expected, strict=True):
        assert line.startswith(str(CONF / name)), line
        assert want in line, line


def test_environment_overrides_file_and_errors_name_the_variable() -> None:
    cfg = load_config(CONF / "good.yaml", {"IPXBRIDGE_IPX__MAX_CLIENTS": "7"})
    assert cfg.ipx.max_clients == 7
    errors = errors_of("good.yaml", {"IPXBRIDGE_IPX__MAX_CLIENTS": "many"})
    assert errors == [
        "environment IPXBRIDGE_IPX__MAX_CLIENTS: ipx.max_clients: Input should be a valid "
        "integer (got 'many')"
    ]


def test_numbers_from_the_environment_still_work_and_a_boolean_there_is_an_error() -> None:
    """Strict numbers: the environment's values are read as YAML, so 7 and 2.5 are numbers."""
    env = {"IPXBRIDGE_IPX__MAX_CLIENTS": "7", "IPXBRIDGE_IPX__IDLE_TIMEOUT": "30"}
    cfg = load_config(CONF / "good.yaml", env)
    assert (cfg.ipx.max_clients, cfg.ipx.idle_timeout) == (7, 30.0)
    assert errors_of("good.yaml", {"IPXBRIDGE_DIRECTPLAY__MAX_SESSIONS": "yes"}) == [
        "environment IPXBRIDGE_DIRECTPLAY__MAX_SESSIONS: directplay.max_sessions: expected an "
        "integer, not the boolean true"
    ]


def errors_in(path: Path, text: str) -> list[str]:
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    return info.value.errors


def test_a_duplicate_key_is_reported_with_every_other_error(tmp_path: Path) -> None:
    errors = errors_in(tmp_path / "c.yaml", "ipx:\n  max_clients: 1\n  max_clients: true\n")
    assert [e.split(": ", 1)[1] for e in errors] == [
        "ipx.max_clients: duplicate key 'max_clients' (first at line 2; YAML would silently "
        "keep only this one)",
        "ipx.max_clients: expected an integer, not the boolean true",  # the value YAML kept
    ]
    assert [e.split(": ", 1)[0].rsplit(":", 1)[1] for e in errors] == ["3", "3"]


def test_aliases_and_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    text = "base: &b {level: info}\nlogging:\n  <<: *b\n  format: json\n"
    assert errors_in(path, text) == [f"{path}:1: base: unknown key"]


def test_clients_allow_is_lenient_on_host_bits_and_names_the_variable_of_a_bad_item() -> None:
    cfg = load_config(None, {"IPXBRIDGE_IPX__CLIENTS_ALLOW": "[192.168.1.10/24, 10.8.0.5]"})
    assert [str(n) for n in cfg.ipx.clients_allow] == ["192.168.1.0/24", "10.8.0.5/32"]
    errors = errors_of("good.yaml", {"IPXBRIDGE_IPX__CLIENTS_ALLOW": "[10.0.0.0/8, bogus]"})
    assert errors == [
        "environment IPXBRIDGE_IPX__CLIENTS_ALLOW: ipx.clients_allow.1: not an IPv4 network "
        "like 192.168.1.0/24 (got 'bogus')"
    ]


def test_flags_override_environment() -> None:
    cfg = load_config(
        None, {"IPXBRIDGE_IPX__LISTEN": "127.0.0.1:1000"}, {"ipx": {"listen": "127.0.0.1:2000"}}
    )
    assert cfg.ipx.listen == "127.0.0.1:2000"


# --- ipx.interfaces: every error with FILE:LINE and the entry's path ----------

IPX_KINDS_YAML = """\
ipx:
  interfaces:
    - name: eth0
      kinds: [ethernet, token_ring]
    - name: wg0
      kinds: []
    - name: ''
      kinds: [ipxwrapper, ipxwrapper]
    - kinds: [ethernet]
"""

IPX_FIELDS_YAML = """\
ipx:
  interfaces:
    - name: eth0
      framing: novell
      role: bridge
      peers: [10.0.0.300]
      promisc: true
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            IPX_KINDS_YAML,
            [
                "4: ipx.interfaces.0.kinds.1: Input should be 'ethernet', 'ipxwrapper' or "
                "'rfc1234' (got 'token_ring')",
                "6: ipx.interfaces.1.kinds: at least one of ethernet, ipxwrapper, rfc1234",
                "7: ipx.interfaces.2.name: empty interface name (expected a name, a glob like "
                "wg* or a CIDR) (got '')",
                "8: ipx.interfaces.2.kinds: each kind at most once",
                "9: ipx.interfaces.3.name: Field required",
            ],
        ),
        (
            IPX_FIELDS_YAML,
            [
                "4: ipx.interfaces.0.framing: Input should be 'auto', 'ethernet_ii', '802.3', "
                "'802.2' or 'snap' (got 'novell')",
                "5: ipx.interfaces.0.role: Input should be 'auto', 'lan' or 'p2p' (got 'bridge')",
                "6: ipx.interfaces.0.peers.0: Octet 300 (> 255) not permitted in '10.0.0.300'",
                "7: ipx.interfaces.0.promisc: unknown key",
            ],
        ),
        (
            "ipx:\n  listen: 'off'\n  interfaces:\n    - name: eth0\n",
            ["3: ipx.interfaces: interface ports need the IPX switch: ipx.listen is off"],
        ),
        (
            "ipx:\n  listen: 10.0.0.1:213\n  interfaces:\n    - name: eth0\n"
            "      kinds: [rfc1234]\n",
            [
                "3: ipx.interfaces: rfc1234 ports receive subnet broadcasts: ipx.listen must "
                "be 0.0.0.0:PORT, not 10.0.0.1:213"
            ],
        ),
        ("ipx:\n  interfaces: eth0\n", ["2: ipx.interfaces: Input should be a valid tuple"]),
    ],
)
def test_ipx_interfaces_errors_name_file_line_and_entry(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_errors_in_order(tmp_path / "ipx.yaml", text, expected)


def test_ipx_interfaces_good_and_from_the_environment() -> None:
    text = (
        "ipx:\n  interfaces:\n    - name: eth1\n    - name: 'wg*'\n      kinds: [ipxwrapper]\n"
        "      role: p2p\n      peers: [10.98.0.2]\n    - name: 10.5.0.0/24\n"
        "      kinds: [ethernet]\n      framing: snap\n"
    )
    cfg = Config.model_validate(yaml.safe_load(text))
    assert [(i.name, i.kinds, i.role, i.peers, i.framing) for i in cfg.ipx.interfaces] == [
        ("eth1", ("ethernet", "ipxwrapper"), "auto", (), "auto"),  # the default kinds
        ("wg*", ("ipxwrapper",), "p2p", ("10.98.0.2",), "auto"),
        ("10.5.0.0/24", ("ethernet",), "auto", (), "snap"),
    ]
    env = {"IPXBRIDGE_IPX__INTERFACES": "[{name: eth0, kinds: [rfc1234]}]"}
    assert load_config(None, env).ipx.interfaces[0].kinds == ("rfc1234",)
    assert errors_of("good.yaml", {"IPXBRIDGE_IPX__INTERFACES": "[{name: eth0, kinds: [x]}]"}) == [
        "environment IPXBRIDGE_IPX__INTERFACES: ipx.interfaces.0.kinds.0: Input should be "
        "'ethernet', 'ipxwrapper' or 'rfc1234' (got 'x')"
    ]


def test_an_error_in_a_value_a_flag_set_names_the_command_line() -> None:
    """Not the default file's line: ``--ipx-iface eth0 --ipx-listen off`` is the flags' fault."""
    with pytest.raises(ConfigError) as info:
        load_config(None, {}, {"ipx": {"listen": "off", "interfaces": [{"name": "eth0"}]}})
    assert info.value.errors == [
        "command line: ipx.interfaces: interface ports need the IPX switch: ipx.listen is off"
    ]
    res = run_cli("run", "--ipx-iface", "eth0", "--ipx-listen", "off")
    assert res.returncode == 2
    assert res.stderr == (
        "ipxbridge: command line: ipx.interfaces: interface ports need the IPX switch: "
        "ipx.listen is off\n"
    )


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("eth0", {"name": "eth0"}),  # kinds: the config's default (ethernet, ipxwrapper)
        ("eth0:", {"name": "eth0"}),
        ("wg*:ipxwrapper", {"name": "wg*", "kinds": ["ipxwrapper"]}),
        ("eth1:ethernet, rfc1234", {"name": "eth1", "kinds": ["ethernet", "rfc1234"]}),
        ("10.5.0.0/24:rfc1234", {"name": "10.5.0.0/24", "kinds": ["rfc1234"]}),
    ],
)
def test_ipx_iface_flag_parses_into_an_ipx_interfaces_entry(
    text: str, entry: dict[str, object]
) -> None:
    args = build_parser().parse_args(["run", "--ipx-iface", text, "--ipx-iface", "seg0"])
    assert args.ipx_iface == [entry, {"name": "seg0"}]
    cfg = load_config(None, {}, {"ipx": {"interfaces": args.ipx_iface}})
    assert cfg.ipx.interfaces[0].name == entry["name"]
    assert list(cfg.ipx.interfaces[0].kinds) == entry.get("kinds", ["ethernet", "ipxwrapper"])


@pytest.mark.parametrize("command", ["run", "interfaces"])
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "eth0:token_ring",
            "unknown port kind token_ring (expected ethernet, ipxwrapper, rfc1234)",
        ),
        ("eth0:ethernet,", "unknown port kind (none) (expected ethernet, ipxwrapper, rfc1234)"),
        (":ethernet", "empty interface name (expected a name, a glob like wg* or a CIDR)"),
    ],
)
def test_bad_ipx_iface_flag_exits_2_naming_the_flag(command: str, text: str, message: str) -> None:
    res = run_cli(command, "--ipx-iface", text)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        f"ipxbridge {command}: error: argument --ipx-iface: {message}"
    )
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("command", ["run", "interfaces"])
def test_iface_flag_with_peers_makes_a_p2p_relay_entry(command: str) -> None:
    """OpenVPN, tinc and Nebula peers cannot be read from their interface, as WireGuard's
    AllowedIPs can: ``--iface NAME:PEER,PEER`` gives them on the command line."""
    args = build_parser().parse_args(
        [command, "--iface", "tun0:10.8.0.2, 10.8.0.3", "--iface", "eth0"]
    )
    assert args.iface == [
        {"name": "tun0", "role": "p2p", "peers": ["10.8.0.2", "10.8.0.3"]},
        {"name": "eth0"},
    ]
    cfg = load_config(None, {}, {"relay": {"interfaces": args.iface}})
    tun = cfg.relay.interfaces[0]
    assert (tun.name, tun.role, tuple(tun.peers)) == ("tun0", "p2p", ("10.8.0.2", "10.8.0.3"))
    res = run_cli(command, "--iface", "tun0:10.8.0.999")
    assert res.returncode == 2
    assert "argument --iface: '10.8.0.999': peers are IPv4 addresses" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [("h", "h", 213), ("10.0.0.1:5000", "10.0.0.1", 5000), ("a-b.example:1", "a-b.example", 1)],
)
def test_host_port(text: str, host: str, port: int) -> None:
    hp = parse_host_port(text)
    assert (hp.host, hp.port) == (host, port)


@pytest.mark.parametrize("text", ["", ":213", "h:0", "h:65536", "h:x", "a b"])
def test_host_port_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_host_port(text)


def test_check_config_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(CONF / "good.yaml")]) == 0
    assert main(["check-config", str(CONF / "multiple.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("ipxbridge: ") == 3
    assert "Traceback" not in err


def test_print_default_config_passes_check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["print-default-config"]) == 0
    out = capsys.readouterr().out
    assert out == DEFAULT_CONFIG_YAML
    path = tmp_path / "c.yaml"
    path.write_text(out)
    assert main(["check-config", str(path)]) == 0


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ipxbridge", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_version() -> None:
    res = run_cli("--version")
    assert res.returncode == 0
    assert res.stdout.startswith("ipxbridge ")


def test_bad_flag_is_usage_error() -> None:
    res = run_cli("run", "--ipx-listen", "nowhere:port")
    assert res.returncode == 2
    assert "expected ADDR:PORT or off" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("command", ["run", "sessions", "interfaces"])
@pytest.mark.parametrize("name", ["", "  "])
def test_empty_iface_flag_is_a_usage_error_naming_the_flag(command: str, name: str) -> None:
    """``--iface ''`` used to start a bridge that relays nothing."""
    extra = ["--probe"] if command == "sessions" else []
    res = run_cli(command, *extra, "--iface", name)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        f"ipxbridge {command}: error: argument --iface: empty interface name (expected a name,"
        " a glob like wg* or a CIDR)"
    )
    assert "Traceback" not in res.stderr


def test_port_in_use_is_one_clear_line() -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        res = run_cli("run", "--ipx-listen", f"127.0.0.1:{port}")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"ipxbridge: cannot listen on 127.0.0.1:{port}/udp: address already in use "
        "(is another IPX server such as DOSBox or ipxbox running?)"
    ]


def test_nothing_to_run() -> None:
    res = run_cli("run", "--ipx-listen", "off", "--ws-listen", "off")
    assert res.returncode == 2
    assert "nothing to run" in res.stderr


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "deploy" / "examples").glob("*.yaml"))


def test_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "lan-party.yaml",
        "wireguard-site.yaml",
        "site-to-site.yaml",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes_check_config(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: OK"


# Left out of the embedded file on purpose: a table users rarely change (docs/protocols.md 3.1).
NOT_IN_EMBEDDED_YAML = {("ipx", "filtered_sockets")}


def test_the_embedded_yaml_and_the_model_give_every_default_alike() -> None:
    """Each default is written twice (the YAML users see and print, the
    pydantic model); field by field they must agree, and every field is in the YAML."""
    shown = yaml.safe_load(DEFAULT_CONFIG_YAML)
    model = Config().model_dump(mode="json")
    differ = {
        f"{section}.{key}": (value, model[section][key])
        for section, values in shown.items()
        for key, value in (values or {}).items()
        if value != model[section][key]
    }
    assert differ == {}
    unshown = {(s, k) for s in model for k in model[s] if k not in (shown.get(s) or {})}
    assert unshown == NOT_IN_EMBEDDED_YAML


def assert_errors_in_order(path: Path, text: str, expected: list[str]) -> None:
    """``text`` written to ``path`` fails with exactly ``expected``, by line: each error
    starts with ``PATH:LINE: key: ...`` as given."""
    errors = sorted(errors_in(path, text), key=lambda e: int(e.split(":")[1]))
    assert len(errors) == len(expected), errors
    for line, want in zip(errors, expected, strict=True):
        assert line.startswith(f"{path}:{want}"), (line, want)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "websocket:\n  listen: 'example.org:1900'\n",
            ["2: websocket.listen: Expected 4 octets in 'example.org' (expected ADDR:PORT or off)"],
        ),
        (
            "websocket:\n  bridge_room: 'my room'\n",
            ["2: websocket.bridge_room: a room name is 1-64 letters"],
        ),
        (
            "websocket:\n  certificate: /nonexistent/cert.pem\n  key: /nonexistent/key.pem\n",
            [
                "2: websocket.certificate: /nonexistent/cert.pem cannot be read",
                "3: websocket.key: /nonexistent/key.pem cannot be read",
            ],
        ),
        (
            "websocket:\n  trusted_proxies: [nginx]\n",
            ["2: websocket.trusted_proxies.0: not a network like 127.0.0.1/32"],
        ),
        ("websocket:\n  max_buffer: 10\n", ["2: websocket.max_buffer: Input should be greater"]),
    ],
)
def test_websocket_errors_name_file_line_and_key(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_errors_in_order(tmp_path / "ws.yaml", text, expected)


def test_websocket_certificate_without_key_is_refused(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("not checked until the bridge starts\n")
    errors = errors_in(tmp_path / "ws.yaml", f"websocket:\n  certificate: {cert}\n")
    assert len(errors) == 1
    assert "certificate and key go together" in errors[0]


def test_ws_listen_off_on_the_command_line() -> None:
    assert load_config(None, {}, flags={"websocket": {"listen": "off"}}).websocket.listen == "off"
    assert load_config(None, {}).websocket.listen == "0.0.0.0:1900"
