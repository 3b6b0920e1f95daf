"""tinc's configuration: this node, its interface, the other nodes' addresses.

docs/relay.md, "Peers".

tinc 1.0 (Debian's ``tinc``; ``tinc@NET.service`` runs ``tincd -n NET`` in ``/etc/tinc/NET``)
reads ``tinc.conf`` and one host file per node, ``hosts/NODE``; the format is tinc.conf(5):

* one ``Variable = Value`` a line (or ``Variable Value``: the separator is ``=`` and/or blanks);
  names are case-insensitive; ``#`` starts a comment line; a host file ends its variables
  where its public key (``-----BEGIN RSA PUBLIC KEY-----``) starts;
* ``tinc.conf``: ``Name`` is this node (a host file is named after the node it describes),
  ``Interface`` the network interface, the net's name when it is not set (tincd on Linux);
* ``hosts/NODE``: ``Subnet = ADDRESS[/PREFIX][#WEIGHT]``, the addresses the node owns. An IPv4
  address without a prefix is a /32. A host-sized subnet is the node itself, a peer to send
  to; a wider one is a LAN behind it, reached only through a bridge there (as with
  WireGuard's AllowedIPs); MAC and IPv6 subnets are not IPv4 peers.

Node names are ``[A-Za-z0-9_]`` (tinc.conf(5)); a host file with any other name is not a node.
Pure; never raises on any text: what it cannot take is returned as a problem with its line.
"""

import ipaddress
import re
from dataclasses import dataclass
from typing import Final

# Where Debian's tinc@NET unit has tincd read them (the default of relay.tinc_config).
TINC_CONFIGS: Final = ("/etc/tinc/*/tinc.conf",)
MAX_CONF_BYTES: Final = 64 * 1024  # tinc.conf and each host file: a few lines and a key
MAX_HOSTS: Final = 1024  # host files read per net, whatever the directory holds
NODE_NAME: Final = re.compile(r"[A-Za-z0-9_]+\Z")
_KEY_START: Final = "-----BEGIN"


@dataclass(frozen=True)
class Problem:
    """A line that could not be taken, for the log (``line`` 0: the file as a whole)."""

    line: int
    what: str


def variables(text: str) -> tuple[list[tuple[int, str, str]], list[Problem]]:
    """``(line, lower-cased name, value)`` of each variable, and the lines that are not.

    A host file's variables end where its public key block starts.
    """
    found: list[tuple[int, str, str]] = []
    problems: list[Problem] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(_KEY_START):
            break
        match = re.match(r"([A-Za-z]+)\s*(?:=\s*|\s+)(.*)\Z", line)
        if match is None or not match.group(2).strip():
            problems.append(Problem(number, f"not 'Variable = Value': {line[:60]!r}"))
            continue
        found.append((number, match.group(1).lower(), match.group(2).strip()))
    return found, problems


@dataclass(frozen=True)
class TincConf:
    """What ``tinc.conf`` says of this node: its name and its interface."""

    name: str
    interface: str


def read_tinc_conf(text: str, net: str) -> tuple[TincConf | None, list[Problem]]:
    """This node's name and interface (``net`` when ``Interface`` is unset).

    None without a valid ``Name``.
    """
    found, problems = variables(text)
    values: dict[str, str] = {}
    for number, name, value in found:
        if name in ("name", "interface"):
            if name in values:
                problems.append(Problem(number, f"{name.capitalize()} given twice"))
                continue
            values[name] = value
    name = values.get("name", "")
    if not name:
        problems.append(Problem(0, "no Name: which node this is"))
        return None, problems
    if NODE_NAME.match(name) is None:
        problems.append(Problem(0, f"Name {name!r} is not a tinc node name ([A-Za-z0-9_])"))
        return None, problems
    return TincConf(name, values.get("interface", net)), problems


def host_addresses(text: str) -> tuple[tuple[str, ...], list[Problem]]:
    """The IPv4 addresses of a host file's host-sized ``Subnet`` lines, each once, in order."""
    found, problems = variables(text)
    out: dict[str, None] = {}
    for number, name, value in found:
        if name != "subnet":
            continue
        subnet = value.split("#", 1)[0].strip()  # "#WEIGHT" (tinc.conf(5))
        if ":" in subnet:
            continue  # a MAC (switch mode) or an IPv6 subnet: not an IPv4 peer
        try:
            network = ipaddress.IPv4Network(subnet, strict=True)
        except ValueError as exc:
            problems.append(Problem(number, f"Subnet {value!r}: {exc}"))
            continue
        if network.prefixlen == 32:
            out[str(network.network_address)] = None
    return tuple(out), sorted(problems, key=lambda p: p.line)
