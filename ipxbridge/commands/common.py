"""What every subcommand shares: exit codes, one-line errors, argument types, the examples.

Exit codes (docs/architecture.md rule 12): 0 ok, 1 runtime failure, 2 usage, configuration or
start-up error. Errors are one clear line each, never a traceback.
"""

import argparse
import ipaddress
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

from ipxbridge.config import (
    DEFAULT_IPX_PORT,
    WEBSOCKET_PORT,
    check_interface_pattern,
    parse_host_port,
)

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
IPX_PORT_KINDS: Final = ("ethernet", "ipxwrapper", "rfc1234")

Handler: TypeAlias = Callable[[argparse.Namespace], int]
# argparse's subparsers type is generic only to the type checker
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_command(
    sub: SubParsers,
    name: str,
    handler: Handler,
    *,
    summary: str,
    examples: Sequence[tuple[str, str]],
    description: str = "",
) -> argparse.ArgumentParser:
    """Register one subcommand: its one-line summary, its handler, and examples to end --help.

    Args:
        sub: the top-level parser's subparsers.
        name: the subcommand.
        handler: what ``cli.main`` calls with the parsed arguments; returns the exit code.
        summary: the line ``ipxbridge --help`` lists it with.
        examples: (command line, what it does) pairs, two or three, shown in that order.
        description: the text above the options (kept as written); the summary without it.
    """
    parser = sub.add_parser(
        name,
        help=summary,
        description=description or summary,
        epilog=examples_text(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def examples_text(examples: Sequence[tuple[str, str]]) -> str:
    """The ``examples:`` block at the end of a --help: each command line, then what it does."""
    lines = ["examples:"]
    for command, what in examples:
        lines += [f"  {command}", f"      {what}"]
    return "\n".join(lines)


def report(errors: Sequence[str]) -> None:
    """Each error as one ``ipxbridge: ...`` line on stderr."""
    for line in errors:
        print(f"ipxbridge: {line}", file=sys.stderr)


def listen_arg(text: str, default_port: int = DEFAULT_IPX_PORT) -> str:
    """``ADDR:PORT`` or ``off`` (``--ipx-listen``, ``--metrics-listen``, ``--ws-listen``)."""
    if text.strip().lower() == "off":
        return "off"
    try:
        return str(parse_host_port(text, default_port))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (expected ADDR:PORT or off)") from None


def ws_listen_arg(text: str) -> str:
    """``--ws-listen``: without a port, js-dos's 1900."""
    return listen_arg(text, WEBSOCKET_PORT)


def peer_arg(text: str) -> str:
    """``HOST[:PORT]`` of a static RFC 1234 peer."""
    try:
        return str(parse_host_port(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def port_arg(text: str) -> int:
    """A UDP port, 1-65535."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a UDP port (1-65535)")
    return int(text)


def iface_arg(text: str) -> str:
    """``--iface``: a name, glob or CIDR; an empty one is a usage error (exit 2), not "none"."""
    try:
        return check_interface_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def relay_iface_arg(text: str) -> dict[str, Any]:
    """``--iface NAME[:PEER,PEER]``: a ``relay.interfaces`` entry; peers make it p2p.

    The peers are where a point-to-point VPN's copies go, one unicast each (OpenVPN, tinc,
    Nebula: their peers cannot be read from the interface, as WireGuard's AllowedIPs can).
    """
    name, sep, peers = text.partition(":")
    entry: dict[str, Any] = {"name": iface_arg(name)}
    if sep:
        chosen = [p.strip() for p in peers.split(",")]
        try:
            entry["peers"] = [str(ipaddress.IPv4Address(p)) for p in chosen]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{peers!r}: peers are IPv4 addresses, comma-separated (NAME:10.8.0.2,10.8.0.3)"
            ) from None
        entry["role"] = "p2p"
    return entry


def ipx_iface_arg(text: str) -> dict[str, Any]:
    """``--ipx-iface NAME[:KIND,KIND]``: an ``ipx.interfaces`` entry (kinds default)."""
    name, _, kinds = text.partition(":")
    entry: dict[str, Any] = {"name": iface_arg(name)}
    if kinds:
        chosen = [k.strip() for k in kinds.split(",")]
        bad = [k for k in chosen if k not in IPX_PORT_KINDS]
        if bad or not chosen:
            raise argparse.ArgumentTypeError(
                f"unknown port kind {', '.join(bad) or '(none)'} (expected "
                f"{', '.join(IPX_PORT_KINDS)})"
            )
        entry["kinds"] = chosen
    return entry
