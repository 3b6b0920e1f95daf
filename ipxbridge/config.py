"""Configuration: one YAML file, environment overrides, validated all at once.

Order of precedence (docs/architecture.md rule 12): the embedded defaults, then the YAML file, then
``IPXBRIDGE_<SECTION>__<KEY>`` environment variables, then command-line flags (applied by
the CLI). Validation reports **every** error as ``FILE:LINE: path.to.key: message``. Unknown
keys are errors, and so are a key given twice in one mapping (YAML would silently keep the
last one) and a boolean where a number belongs (pydantic would take ``true`` as 1): numbers are
strict, which the environment keeps working with since its values are read as YAML too. The
result is immutable.
"""

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from uuid import UUID

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ipxbridge.errors import IpxbridgeError
from ipxbridge.policy.relay import DEFAULT_RELAY_PORTS
from ipxbridge.policy.relay_peers import EXPIRE_SECONDS, MAX_PER_INTERFACE
from ipxbridge.policy.rooms import room_name
from ipxbridge.wire.ipx import DEFAULT_FILTERED_SOCKETS, IPX_UDP_PORT
from ipxbridge.wire.ipxwrapper import IPXWRAPPER_DEFAULT_NET
from ipxbridge.wire.nebula_conf import NEBULA_CONFIGS
from ipxbridge.wire.openvpn_status import STATUS_FILES
from ipxbridge.wire.tinc_conf import TINC_CONFIGS

DEFAULT_IPX_PORT: Final = IPX_UDP_PORT
# The server side of the uplink protocol takes its password from here when ipx.uplink_password_file
# is empty (docs/ipx.md, "ipxbox uplinks").
UPLINK_PASSWORD_ENV: Final = "IPXBRIDGE_UPLINK_PASSWORD"  # noqa: S105 - a variable name

# The embedded default configuration, with a comment for every setting: what `ipxbridge run`
# uses without --config and what `ipxbridge print-default-config` prints (package data).
DEFAULT_CONFIG_YAML: Final = (
    resources.files("ipxbridge").joinpath("data/config.yaml").read_text(encoding="utf-8")
)


class ConfigError(IpxbridgeError):
    """The configuration is invalid; ``errors`` holds one ``FILE:LINE: path: message`` each."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class HostPort:
    """A parsed ``host[:port]``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_host_port(text: str, default_port: int = DEFAULT_IPX_PORT) -> HostPort:
    """Parse ``host[:port]`` (IPv4 literal or name).

    Raises:
        ValueError: with a sentence a person can act on.
    """
    text = text.strip()
    if not text:
        raise ValueError("empty address")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"{text!r} has no host")
    port = default_port
    if port_text:
        if not port_text.isdigit():
            raise ValueError(f"port {port_text!r} in {text!r} is not a number")
        port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} in {text!r} is outside 1-65535")
    if not re.fullmatch(r"[A-Za-z0-9.\-_]+", host):
        raise ValueError(f"{host!r} is not an IPv4 address or host name")
    return HostPort(host, port)


def resolve_ipv4(hp: HostPort) -> tuple[str, int]:
    """Resolve a host name to an IPv4 address (IPv4 literals pass through).

    Raises:
        ValueError: the name does not resolve to IPv4.
    """
    try:
        return (str(ipaddress.IPv4Address(hp.host)), hp.port)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(hp.host, hp.port, socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as exc:
        raise ValueError(f"cannot resolve {hp.host!r}: {exc}") from None
    return (str(infos[0][4][0]), hp.port)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_listen(value: str, default_port: int = DEFAULT_IPX_PORT) -> str:
    if value.strip().lower() == "off":
        return "off"
    hp = parse_host_port(value, default_port)
    ipaddress.IPv4Address(hp.host)  # a bind address must be a literal
    return str(hp)


def _listen(value: str, default_port: int = DEFAULT_IPX_PORT) -> str:
    try:
        return _check_listen(value, default_port)
    except ValueError as exc:
        raise ValueError(f"{exc} (expected ADDR:PORT or off)") from None


# What a ``listen`` key takes: ADDR:PORT with a literal IPv4 address, or "off".
ListenAddress = Annotated[str, AfterValidator(_listen)]
# The browser players' listener: without a port, js-dos's 1900 (docs/protocols.md 4.10).
WEBSOCKET_PORT: Final = 1900
WebSocketListen = Annotated[str, AfterValidator(lambda v: _listen(v, WEBSOCKET_PORT))]


PeerAddress = Annotated[str, AfterValidator(lambda v: str(parse_host_port(v)))]


def _network(value: object) -> ipaddress.IPv4Network:
    # Lenient on host bits: "192.168.1.10/24" means that LAN, as in most firewalls.
    try:
        return ipaddress.IPv4Network(str(value).strip(), strict=False)
    except ValueError:
        raise ValueError("not an IPv4 network like 192.168.1.0/24") from None


Network = Annotated[ipaddress.IPv4Network, BeforeValidator(_network)]


def check_interface_pattern(value: str) -> str:
    """An interface name, glob or CIDR as given: anything but empty.

    Raises:
        ValueError: the pattern is empty or only blanks (it would select nothing, silently).
    """
    if not value.strip():
        raise ValueError("empty interface name (expected a name, a glob like wg* or a CIDR)")
    return value


InterfacePattern = Annotated[str, AfterValidator(check_interface_pattern)]


def _check_path(value: str) -> str:
    if not value.strip():
        raise ValueError("empty path")
    if "\0" in value:
        raise ValueError("a path cannot contain a NUL byte")
    return value


def check_password_file(value: str) -> str:
    """A readable, non-empty password file (the uplink's shared secret), or "" for none.

    Raises:
        ValueError: unreadable or empty, with the reason.
    """
    if not value:
        return value
    _check_path(value)
    try:
        secret = Path(value).read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise ValueError(f"cannot read {value}: {exc.strerror}") from None
    if not secret:
        raise ValueError(f"{value} is empty: the uplink password is its first line")
    return value


PasswordFile = Annotated[str, AfterValidator(check_password_file)]


class UplinkEntry(_Model):
    """One client uplink to an ipxbox (or ipxbridge) server (docs/protocols.md 3.9)."""

    server: PeerAddress
    password_file: PasswordFile = ""
    password_env: str = ""  # the name of an environment variable holding the password

    @field_validator("password_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "UplinkEntry":
        if self.password_file and self.password_env:
            raise ValueError("give password_file or password_env, not both")
        if not self.password_file and not self.password_env:
            raise ValueError("an uplink needs password_file or password_env (never the password)")
        return self


def _ipx_network(value: object) -> str:
    if not isinstance(value, str):
        # YAML reads 00000010 as a number (octal, even): the digits would be lost.
        raise ValueError(  # noqa: TRY004 - pydantic reports ValueError, not TypeError
            f'{value!r}: write the network in quotes, like "00000001"'
        )
    text = value.strip().lower().removeprefix("0x")
    if len(text) != 8 or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"{value!r} is not an IPX network number like 00000001 (8 hex digits)")
    if text in ("00000000", "ffffffff"):
        raise ValueError(f"{value!r} cannot be a host's own network (0 and FFFFFFFF are not)")
    return text


PortKindName = Literal["ethernet", "ipxwrapper", "rfc1234"]
FramingName = Literal["auto", "ethernet_ii", "802.3", "802.2", "snap"]
Ipv4Text = Annotated[str, AfterValidator(lambda v: str(ipaddress.IPv4Address(v)))]


class IpxInterface(_Model):
    """Interface ports of the IPX switch on one interface (or a set: glob / CIDR)."""

    name: InterfacePattern  # interface name, glob ("eth*") or CIDR ("10.8.0.0/24")
    # ethernet: native IPX frames (CAP_NET_RAW); ipxwrapper: IPXWrapper's UDP 54792;
    # rfc1234: RFC 1234 hosts on the subnet (UDP on the tunnel's port).
    kinds: tuple[PortKindName, ...] = ("ethernet", "ipxwrapper")
    role: Literal["auto", "lan", "p2p"] = "auto"
    # Unicast targets on a p2p interface; empty = the WireGuard AllowedIPs (/32s).
    peers: tuple[Ipv4Text, ...] = ()
    # Ethernet frame type: auto = learned per station (802.2 until one is heard), or fixed.
    framing: FramingName = "auto"
    # ipxwrapper: the IPX network number of the hosts there (8 hex digits; IPXWrapper's
    # default is 00000001). A unicast carries the receiver's network, as heard from it, else
    # this: IPXWrapper refuses a unicast to any other, FFFFFFFF included.
    network: Annotated[str, BeforeValidator(_ipx_network)] = IPXWRAPPER_DEFAULT_NET.hex()

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one of ethernet, ipxwrapper, rfc1234")
        if len(set(value)) != len(value):
            raise ValueError("each kind at most once")
        return value


# The settings of the per-client budget that the reflection limit replaced (an unverified
# client was once sent no more than it sent itself, which left listeners deaf).
_REMOVED_UNVERIFIED_KEYS: Final = frozenset(
    (
        "unverified_packets_per_second",
        "unverified_packet_burst",
        "unverified_bytes_per_second",
        "unverified_byte_burst",
        "unverified_credit_ratio",
    )
)
# A burst must hold one full IPX packet on a LAN (576 bytes, docs/protocols.md 3.1).
MIN_UNVERIFIED_BURST: Final = 576


class IpxSection(_Model):
    """The IPX-over-UDP tunnel."""

    listen: ListenAddress = f"0.0.0.0:{DEFAULT_IPX_PORT}"
    peers: tuple[PeerAddress, ...] = ()
    max_clients: Annotated[int, Field(ge=1, le=65_536, strict=True)] = 256
    idle_timeout: Annotated[float, Field(gt=0, le=86_400, strict=True)] = 600.0
    keepalive_interval: Annotated[float, Field(gt=0, le=3_600, strict=True)] = 5.0
    answer_pings: bool = True
    # keyed: unpredictable nodes that prove receipt (wire.ipx.keyed_node); address: IPv4+port.
    node_assignment: Literal["keyed", "address"] = "keyed"
    node_key_file: Annotated[str, AfterValidator(_check_path)] = "/var/lib/ipxbridge/node.key"
    # Bytes per second toward addresses that have not proven receipt (policy/budget.py).
    unverified_address_bytes_per_second: Annotated[
        float, Field(ge=0, le=100_000_000, strict=True)
    ] = 16_384.0
    unverified_address_byte_burst: Annotated[int, Field(ge=0, le=100_000_000, strict=True)] = 32_768
    unverified_total_bytes_per_second: Annotated[
        float, Field(ge=0, le=1_000_000_000, strict=True)
    ] = 262_144.0
    unverified_total_byte_burst: Annotated[int, Field(ge=0, le=1_000_000_000, strict=True)] = (
        524_288
    )
    max_unverified: Annotated[int, Field(ge=1, le=65_536, strict=True)] = 256
    max_unverified_per_ip: Annotated[int, Field(ge=1, le=65_536, strict=True)] = 16
    rejoin: bool = True
    # Networks whose DOSBox-protocol clients may register; empty = anyone (RFC 1234 peers are
    # listed in ``peers`` and are not affected).
    clients_allow: tuple[Network, ...] = ()
    dedup_window: Annotated[float, Field(ge=0, le=60, strict=True)] = 2.0
    filter_sockets: bool = True
    # Timed drains of the tunnel socket under load (policy/pacing.py); 0 = never.
    coalesce_ms: Annotated[float, Field(ge=0, le=10, strict=True)] = 2.0
    filtered_sockets: tuple[Annotated[int, Field(ge=0, le=0xFFFF, strict=True)], ...] = tuple(
        sorted(DEFAULT_FILTERED_SOCKETS)
    )
    # Interface ports (native Ethernet, IPXWrapper, RFC 1234 segments); empty = none.
    interfaces: tuple[IpxInterface, ...] = ()
    # The beacons' shared secret (rule 8, policy/bridges.py); "" = beacons unsigned.
    bridge_key_file: str = ""
    # The uplink protocol (docs/protocols.md 3.9): server side on the listen port, and the
    # uplinks this bridge opens as a client.
    uplink_password_file: PasswordFile = ""
    uplinks: tuple[UplinkEntry, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: object) -> object:
        removed = (
            sorted(_REMOVED_UNVERIFIED_KEYS.intersection(data)) if isinstance(data, dict) else []
        )
        if removed:
            raise ValueError(
                f"{', '.join(removed)} {'was' if len(removed) == 1 else 'were'} removed: what is "
                "sent to unverified clients is now bounded in bytes per second "
                "(unverified_address_bytes_per_second, unverified_total_bytes_per_second; "
                "docs/ipx.md, Verification)"
            )
        return data

    @model_validator(mode="after")
    def _bursts(self) -> "IpxSection":
        for name in ("address", "total"):
            rate = getattr(self, f"unverified_{name}_bytes_per_second")
            burst = getattr(self, f"unverified_{name}_byte_burst")
            if rate > 0 and burst < MIN_UNVERIFIED_BURST:
                raise ValueError(
                    f"unverified_{name}_byte_burst {burst} is less than one full IPX packet "
                    f"({MIN_UNVERIFIED_BURST} bytes): such a packet could never be sent"
                )
        return self

    @field_validator("uplinks")
    @classmethod
    def _uplinks(
        cls, value: tuple[UplinkEntry, ...], info: ValidationInfo
    ) -> tuple[UplinkEntry, ...]:
        if value and info.data.get("listen") == "off":
            raise ValueError("uplinks need the IPX switch: ipx.listen is off")
        servers = [u.server for u in value]
        if len(set(servers)) != len(servers):
            raise ValueError("each server at most once")
        return value

    @field_validator("interfaces")
    @classmethod
    def _interfaces(
        cls, value: tuple[IpxInterface, ...], info: ValidationInfo
    ) -> tuple[IpxInterface, ...]:
        listen = info.data.get("listen")
        if value and listen == "off":
            raise ValueError("interface ports need the IPX switch: ipx.listen is off")
        wildcard = listen is None or parse_host_port(listen).host == "0.0.0.0"
        if not wildcard and any("rfc1234" in i.kinds for i in value):
            raise ValueError(
                f"rfc1234 ports receive subnet broadcasts: ipx.listen must be 0.0.0.0:PORT, "
                f"not {listen}"
            )
        return value


def _check_guid_table(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        try:
            UUID(key.strip().strip("{}"))
        except ValueError:
            raise ValueError(f"{key!r} is not a GUID like {{76F93801-9340-11D2-...}}") from None
    return value


class DirectPlaySection(_Model):
    """DirectPlay inspection, the session list and active probing."""

    # Seconds between probe rounds; 0 turns probing off. At most one round per second.
    probe_interval: Annotated[float, Field(ge=0, le=3600, strict=True)] = 0.0
    # Interfaces to probe on (names, globs or CIDRs); empty = every IPv4 interface but lo.
    probe_interfaces: tuple[InterfacePattern, ...] = ()
    probe_ipx: bool = True
    session_expiry: Annotated[float, Field(gt=0, le=86_400, strict=True)] = 60.0
    max_sessions: Annotated[int, Field(ge=1, le=100_000, strict=True)] = 1024
    games: Annotated[dict[str, str], AfterValidator(_check_guid_table)] = Field(
        default_factory=dict
    )

    @field_validator("probe_interval")
    @classmethod
    def _bounded(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError("probe_interval must be 0 (off) or at least 1 second")
        return value


class RelayInterface(_Model):
    """One interface (or a set: glob / CIDR) to relay broadcasts on."""

    name: InterfacePattern  # interface name, glob ("wg*") or CIDR ("10.8.0.0/24")
    role: Literal["auto", "lan", "p2p"] = "auto"
    # Unicast targets on a p2p interface; empty = found (WireGuard's /32 AllowedIPs, OpenVPN
    # status files, addresses heard there: policy/relay.peer_sources).
    peers: tuple[Annotated[str, AfterValidator(lambda v: str(ipaddress.IPv4Address(v)))], ...] = ()


class RelaySection(_Model):
    """Broadcast fan-out across interfaces and VPNs."""

    interfaces: tuple[RelayInterface, ...] = ()  # empty: the relay is off
    ports: tuple[Annotated[int, Field(ge=1, le=65_535, strict=True)], ...] = DEFAULT_RELAY_PORTS
    source_mode: Literal["auto", "preserve", "rewrite"] = "auto"
    # Kernel fast path (nftables dup) for preserve mode: auto = when nft and CAP_NET_ADMIN
    # are available. Off: every copy is made in Python (same decisions, slower).
    fast_path: Literal["auto", "on", "off"] = "auto"
    dedup_window: Annotated[float, Field(ge=0, le=60, strict=True)] = 2.0
    # Rewrite-mode flow table (policy/flows.py): sockets in all, of which unproven at most,
    # and flows per player address.
    max_flows: Annotated[int, Field(ge=2, le=65_536, strict=True)] = 1024
    max_unproven_flows: Annotated[int, Field(ge=1, le=65_535, strict=True)] = 128
    max_flows_per_source: Annotated[int, Field(ge=1, le=65_536, strict=True)] = 16
    # Peers found for a p2p interface without listed ones (docs/relay.md, "Peers"): OpenVPN
    # servers' status files, tinc's and Nebula's configs (globs), and addresses of the tunnel's
    # subnet heard sending broadcasts there, at most heard_peers per interface (0: none),
    # each kept this long.
    openvpn_status: tuple[Annotated[str, Field(min_length=1)], ...] = STATUS_FILES
    tinc_config: tuple[Annotated[str, Field(min_length=1)], ...] = TINC_CONFIGS
    nebula_config: tuple[Annotated[str, Field(min_length=1)], ...] = NEBULA_CONFIGS
    heard_peers: Annotated[int, Field(ge=0, le=1024, strict=True)] = MAX_PER_INTERFACE
    heard_peer_seconds: Annotated[float, Field(ge=10, le=86_400)] = EXPIRE_SECONDS

    @field_validator("max_unproven_flows")
    @classmethod
    def _room_for_proven(cls, value: int, info: ValidationInfo) -> int:
        total = info.data.get("max_flows")
        if total is not None and value >= total:
            raise ValueError(f"must be smaller than max_flows ({total}): proven flows need room")
        return value


def _proxy_network(value: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(str(value).strip(), strict=False)
    except ValueError:
        raise ValueError("not a network like 127.0.0.1/32 or ::1/128") from None


ProxyNetwork = Annotated[
    ipaddress.IPv4Network | ipaddress.IPv6Network, BeforeValidator(_proxy_network)
]


class WebSocketSection(_Model):
    """The WebSocket listener for browser players (io/websocket.py)."""

    listen: WebSocketListen = f"0.0.0.0:{WEBSOCKET_PORT}"
    bridge_room: str = "default"
    certificate: str = ""
    key: str = ""
    origins: tuple[str, ...] = ()
    trusted_proxies: tuple[ProxyNetwork, ...] = ()
    max_connections: Annotated[int, Field(ge=1, le=65_536, strict=True)] = 512
    max_rooms: Annotated[int, Field(ge=0, le=65_536, strict=True)] = 64
    max_connections_per_room: Annotated[int, Field(ge=1, le=65_536, strict=True)] = 64
    max_connections_per_address: Annotated[int, Field(ge=1, le=65_536, strict=True)] = 16
    ping_interval: Annotated[float, Field(ge=1, le=600, strict=True)] = 10.0
    max_buffer: Annotated[int, Field(ge=4_096, le=64 << 20, strict=True)] = 262_144
    behind_seconds: Annotated[float, Field(ge=1, le=3_600, strict=True)] = 10.0

    @field_validator("bridge_room")
    @classmethod
    def _room(cls, value: str) -> str:
        if room_name(value) is None:
            raise ValueError("a room name is 1-64 letters, digits, '_', '.', '~' or '-'")
        return value

    @field_validator("certificate", "key")
    @classmethod
    def _readable(cls, value: str) -> str:
        if value and not os.access(value, os.R_OK):
            raise ValueError(f"{value} cannot be read")
        return value

    @model_validator(mode="after")
    def _pair(self) -> "WebSocketSection":
        if bool(self.certificate) != bool(self.key):
            raise ValueError("certificate and key go together (wss://), or neither (ws://)")
        return self


class HttpSection(_Model):
    """The HTTP endpoint: /metrics, health, the status page and the JSON API."""

    listen: ListenAddress = "127.0.0.1:9213"


class LoggingSection(_Model):
    """Log output."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"

    @field_validator("level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:  # noqa: ANN401 - pydantic hands over raw YAML
        return value.lower() if isinstance(value, str) else value


class Config(_Model):
    """The whole configuration."""

    ipx: IpxSection = IpxSection()
    relay: RelaySection = RelaySection()
    directplay: DirectPlaySection = DirectPlaySection()
    websocket: WebSocketSection = WebSocketSection()
    http: HttpSection = HttpSection()
    logging: LoggingSection = LoggingSection()


# --- loading ------------------------------------------------------------------------------

ENV_PREFIX: Final = "IPXBRIDGE_"


def _env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Map ``IPXBRIDGE_SECTION__KEY=value`` to a nested dict; values are parsed as YAML."""
    out: dict[str, Any] = {}
    errors: list[str] = []
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        if any(not p for p in parts):
            errors.append(f"environment {name}: malformed variable name")
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out, errors


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _line_of(root: yaml.Node | None, path: tuple[int | str, ...]) -> int | None:
    """1-based line of the YAML node at ``path`` (or of its deepest existing parent)."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in path:
        if isinstance(node, yaml.MappingNode):
            # last occurrence first: that is the value YAML keeps (a duplicate is an error too)
            for key_node, value_node in reversed(node.value):
                if key_node.value == part:
                    # an unknown key is reported on the key's own line
                    line = key_node.start_mark.line + 1
                    node = value_node
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _duplicate_keys(root: yaml.Node | None, label: str) -> list[str]:
    """``FILE:LINE: path: duplicate key`` for every key given twice in one mapping.

    PyYAML keeps the last value without a word, so a setting written twice (two ``relay:``
    sections, say) silently loses the first. Merge keys (``<<``) are YAML's own way of
    combining mappings and are not counted. Each node is visited once, so aliases can neither
    loop nor multiply the work.
    """
    errors: list[str] = []
    seen_nodes: set[int] = set()
    todo: list[tuple[yaml.Node, tuple[int | str, ...]]] = [] if root is None else [(root, ())]
    while todo:
        node, path = todo.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value)
                line = key_node.start_mark.line + 1
                if isinstance(key_node, yaml.ScalarNode) and key != "<<":
                    ident = (key_node.tag, key)
                    if ident in first:
                        dotted = ".".join(str(p) for p in (*path, key))
                        errors.append(
                            f"{label}:{line}: {dotted}: duplicate key {key!r} (first at line "
                            f"{first[ident]}; YAML would silently keep only this one)"
                        )
                    else:
                        first[ident] = line
                todo.append((value_node, (*path, key)))
        elif isinstance(node, yaml.SequenceNode):
            todo += [(item, (*path, i)) for i, item in enumerate(node.value)]
    return sorted(errors, key=lambda e: int(e[len(label) + 1 :].split(":", 1)[0]))


def load_config(
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Config:
    """Load and validate the configuration.

    Args:
        path: a YAML file, or None for the embedded defaults.
        environ: environment for ``IPXBRIDGE_*`` overrides (default: ``os.environ``).
        flags: nested overrides from the command line (already checked by the CLI).

    Raises:
        ConfigError: every problem found, each as ``FILE:LINE: path: message``.
    """
    env = os.environ if environ is None else environ
    label = str(path) if path is not None else "<default config>"
    text = DEFAULT_CONFIG_YAML
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError([f"{label}: cannot read: {exc.strerror}"]) from None
        except UnicodeDecodeError:
            raise ConfigError([f"{label}: not UTF-8 text"]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        # Point at where the construct began (e.g. an unclosed quote), not where the
        # parser gave up, which may be the end of the file.
        mark = exc.context_mark or exc.problem_mark
        where = f"{label}:{mark.line + 1}" if mark is not None else label
        what = f"{exc.context}: {exc.problem}" if exc.context else str(exc.problem)
        raise ConfigError([f"{where}: YAML syntax error: {what}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{label}: YAML error: {exc}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{label}:1: the top level must be a mapping of sections"])
    duplicates = _duplicate_keys(root, label)
    overrides, errors = _env_overrides(env)
    merged = _merge(data, overrides)
    if flags:
        merged = _merge(merged, flags)
    errors = duplicates + errors
    try:
        config = Config.model_validate(merged)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(err["loc"])
            dotted = ".".join(str(p) for p in loc) or "(top level)"
            env_key = _env_key(loc, overrides)
            if flags and _env_key(loc, flags) is not None:
                where = "command line"  # a flag set it (flags win over the environment)
            elif env_key is not None:
                where = "environment " + env_key
            else:
                line = _line_of(root, loc)
                where = f"{label}:{line}" if line is not None else label
            message = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            elif err["type"] in {"int_type", "float_type"} and isinstance(err["input"], bool):
                # YAML's true/false/yes/no/on/off: pydantic's lax mode would have read 1 or 0
                wanted = "an integer" if err["type"] == "int_type" else "a number"
                message = f"expected {wanted}, not the boolean {str(err['input']).lower()}"
            elif "input" in err and not isinstance(err["input"], dict | list):
                message += f" (got {err['input']!r})"
            errors.append(f"{where}: {dotted}: {message}")
        raise ConfigError(errors) from None
    if errors:
        raise ConfigError(errors)
    return config


def _env_key(loc: tuple[int | str, ...], overrides: Mapping[str, Any]) -> str | None:
    """The environment variable that set the value at ``loc``, if one did."""
    node: Any = overrides
    for depth, part in enumerate(loc):
        if not isinstance(node, Mapping):  # a list set from the environment: its items too
            return _env_name(loc[:depth])
        if part not in node:
            return None
        node = node[part]
    return _env_name(loc)


def _env_name(loc: tuple[int | str, ...]) -> str:
    return ENV_PREFIX + "__".join(str(p).upper() for p in loc)
