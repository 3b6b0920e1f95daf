"""Command line: the ``ipxbridge`` subcommands.

``run`` (the bridge), ``decode`` (frames offline), ``sessions`` (the game list), ``interfaces``
(the relay's plan), ``cleanup`` (kernel state of a dead run), ``check-config``,
``print-default-config``, ``version``.

Exit codes (house style rule 12): 0 ok, 1 runtime failure, 2 usage, configuration or
start-up error. Errors are one clear line each, never a traceback.
"""

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from ipxbridge import __version__, interfaces_cmd
from ipxbridge.config import (
    DEFAULT_CONFIG_YAML,
    ConfigError,
    check_interface_pattern,
    load_config,
    parse_host_port,
)
from ipxbridge.errors import StartupError
from ipxbridge.obs.logging import setup_logging

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def _listen_arg(text: str) -> str:
    if text.strip().lower() == "off":
        return "off"
    try:
        return str(parse_host_port(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (expected ADDR:PORT or off)") from None


def _peer_arg(text: str) -> str:
    try:
        return str(parse_host_port(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def iface_arg(text: str) -> str:
    """``--iface``: a name, glob or CIDR; an empty one is a usage error (exit 2), not "none"."""
    try:
        return check_interface_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


IPX_PORT_KINDS: Final = ("ethernet", "ipxwrapper", "rfc1234")


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (kept public so the docs and tests can introspect it)."""
    parser = argparse.ArgumentParser(
        prog="ipxbridge",
        description="IPX-over-UDP bridge for retro LAN games (RFC 1234 + DOSBox protocol).",
    )
    parser.add_argument("--version", action="version", version=f"ipxbridge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the bridge (embedded defaults without --config)")
    run.add_argument("--config", type=Path, metavar="FILE", help="YAML configuration file")
    run.add_argument(
        "--ipx-listen",
        type=_listen_arg,
        metavar="ADDR:PORT|off",
        help="UDP address of the IPX tunnel (default 0.0.0.0:213)",
    )
    run.add_argument(
        "--peer",
        type=_peer_arg,
        action="append",
        metavar="HOST[:PORT]",
        help="static RFC 1234 peer, repeatable (default port 213)",
    )
    run.add_argument(
        "--iface",
        type=iface_arg,
        action="append",
        metavar="NAME",
        help="relay broadcasts on this interface (name, glob or CIDR), repeatable",
    )
    run.add_argument(
        "--ipx-iface",
        type=ipx_iface_arg,
        action="append",
        metavar="NAME[:KIND,KIND]",
        help="IPX ports on this interface, repeatable; kinds ethernet, ipxwrapper, rfc1234 "
        "(default ethernet,ipxwrapper)",
    )
    run.add_argument(
        "--relay-port",
        type=int,
        action="append",
        metavar="PORT",
        help="UDP port to relay (default 47624 and 6073), repeatable",
    )
    run.add_argument(
        "--source-mode",
        choices=("auto", "preserve", "rewrite"),
        help="how relayed copies are sourced (default auto)",
    )
    run.add_argument(
        "--fast-path",
        choices=("auto", "on", "off"),
        help="kernel (nftables) fan-out in preserve mode (default auto)",
    )
    run.add_argument(
        "--probe-interval",
        type=float,
        metavar="SECONDS",
        help="send DirectPlay session probes every SECONDS (default 0 = off)",
    )
    run.add_argument(
        "--metrics-listen",
        type=_listen_arg,
        metavar="ADDR:PORT|off",
        help="HTTP API address (default 127.0.0.1:9213)",
    )
    run.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        type=str.lower,
        help="log level (default info)",
    )
    run.add_argument("--log-format", choices=("text", "json"), help="log format")

    dec = sub.add_parser("decode", help="decode IPX / DirectPlay frames offline")
    src = dec.add_mutually_exclusive_group(required=True)
    src.add_argument("--hex", metavar="HEX", help="one frame as hex (spaces allowed)")
    src.add_argument("--pcap", type=Path, metavar="FILE", help="a capture file: pcap or pcapng")
    dec.add_argument("--json", action="store_true", help="JSON list, one object per frame")

    ses = sub.add_parser("sessions", help="list DirectPlay game sessions")
    ses.add_argument("--json", action="store_true", help="JSON list")
    ses.add_argument(
        "--url",
        default="http://127.0.0.1:9213",
        help="HTTP API of the running bridge (default %(default)s)",
    )
    ses.add_argument(
        "--probe", action="store_true", help="probe directly instead of asking a running bridge"
    )
    ses.add_argument(
        "--iface",
        type=iface_arg,
        action="append",
        default=[],
        metavar="IF",
        help="interface (name, glob or CIDR) to probe on, repeatable",
    )
    ses.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="how long to collect answers when probing (default 3)",
    )

    interfaces_cmd.add_parser(sub)

    sub.add_parser(
        "cleanup",
        help="remove the kernel state a bridge that died left behind (needs CAP_NET_ADMIN)",
        description="Remove the nftables table ip ipxbridge of this network namespace (the "
        "fast path of a bridge killed before it could remove it keeps copying broadcasts). "
        "Run it with no bridge running here. Idempotent. Exit 0: removed or nothing to "
        "remove; 2: not permitted (run as root or with CAP_NET_ADMIN); 1: nft failed.",
    )
    check = sub.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", type=Path)
    sub.add_parser("print-default-config", help="print the embedded default configuration")
    sub.add_parser("version", help="print the version")
    return parser


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if args.ipx_listen is not None:
        flags.setdefault("ipx", {})["listen"] = args.ipx_listen
    if args.peer:
        flags.setdefault("ipx", {})["peers"] = list(args.peer)
    if args.iface:
        flags.setdefault("relay", {})["interfaces"] = [{"name": n} for n in args.iface]
    if args.ipx_iface:
        flags.setdefault("ipx", {})["interfaces"] = list(args.ipx_iface)
    if args.relay_port:
        flags.setdefault("relay", {})["ports"] = list(args.relay_port)
    if args.fast_path is not None:
        flags.setdefault("relay", {})["fast_path"] = args.fast_path
    if args.source_mode is not None:
        flags.setdefault("relay", {})["source_mode"] = args.source_mode
    if args.probe_interval is not None:
        flags.setdefault("directplay", {})["probe_interval"] = args.probe_interval
    if args.metrics_listen is not None:
        flags.setdefault("http", {})["listen"] = args.metrics_listen
    if args.log_level is not None:
        flags.setdefault("logging", {})["level"] = args.log_level
    if args.log_format is not None:
        flags.setdefault("logging", {})["format"] = args.log_format
    return flags


def _report(errors: Sequence[str]) -> None:
    for line in errors:
        print(f"ipxbridge: {line}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, flags=_flags(args))
    except ConfigError as exc:
        _report(exc.errors)
        return EXIT_USAGE
    setup_logging(config.logging.level, config.logging.format)
    from ipxbridge.app import serve  # noqa: PLC0415 - keep `--help` and check-config light

    try:
        return asyncio.run(serve(config, lambda: load_config(args.config, flags=_flags(args))))
    except StartupError as exc:
        _report([str(exc)])
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception:
        logging.getLogger("ipxbridge").exception("internal error, please report it")
        return EXIT_FAILURE


def _decode(args: argparse.Namespace) -> int:
    from ipxbridge.decode import decode_hex, decode_pcap, summary_line  # noqa: PLC0415
    from ipxbridge.games import game_table  # noqa: PLC0415
    from ipxbridge.wire.pcap import PcapError  # noqa: PLC0415

    games = game_table()
    if args.hex is not None:
        items = decode_hex(args.hex, games)
    else:
        try:
            items = decode_pcap(args.pcap.read_bytes(), games)
        except OSError as exc:
            _report([f"{args.pcap}: cannot read: {exc.strerror}"])
            return EXIT_USAGE
        except PcapError as exc:
            _report([f"{args.pcap}: {exc}"])
            return EXIT_USAGE
    if args.json:
        print(json.dumps(items, indent=1))
    else:
        for item in items:
            print(summary_line(item))
    return EXIT_OK if all(i["ok"] for i in items) else EXIT_FAILURE


def _sessions(args: argparse.Namespace) -> int:
    from ipxbridge.sessions_cmd import fetch_sessions, probe_sessions, render_table  # noqa: PLC0415

    try:
        if args.probe:
            if not args.iface:
                _report(["sessions --probe needs at least one --iface"])
                return EXIT_USAGE
            items = asyncio.run(probe_sessions(args.iface, args.timeout))
        else:
            items = fetch_sessions(args.url)
    except StartupError as exc:
        _report([str(exc)])
        return EXIT_USAGE if args.probe else EXIT_FAILURE
    if args.json:
        print(json.dumps(items, indent=1))
    else:
        sys.stdout.write(render_table(items))
    return EXIT_OK


def _cleanup() -> int:
    from ipxbridge.io.nftables import TABLE, Removal, remove_table  # noqa: PLC0415

    result = remove_table()
    what = f"nftables table ip {TABLE}"
    if result.outcome is Removal.REMOVED:
        rules = f"{result.rules} rule{'' if result.rules == 1 else 's'}"
        print(f"ipxbridge cleanup: removed {what} ({rules})")
    elif result.outcome is Removal.ABSENT:
        print(f"ipxbridge cleanup: nothing to remove (no {what})")
    elif result.outcome is Removal.NO_NFT:
        print("ipxbridge cleanup: nothing to remove (nft is not installed)")
    elif result.outcome is Removal.NOT_PERMITTED:
        _report([f"cleanup needs CAP_NET_ADMIN to remove the {what}: run it as root"])
        return EXIT_USAGE
    else:
        _report([f"cleanup: nft failed: {result.detail}"])
        return EXIT_FAILURE
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ipxbridge`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "interfaces":
        return interfaces_cmd.run(args)
    if args.command == "cleanup":
        return _cleanup()
    if args.command == "decode":
        return _decode(args)
    if args.command == "sessions":
        return _sessions(args)
    if args.command == "check-config":
        try:
            load_config(args.file)
        except ConfigError as exc:
            _report(exc.errors)
            return EXIT_USAGE
        print(f"{args.file}: OK")
        return EXIT_OK
    if args.command == "print-default-config":
        sys.stdout.write(DEFAULT_CONFIG_YAML)
        return EXIT_OK
    if args.command == "version":
        print(f"ipxbridge {__version__}")
        return EXIT_OK
    parser.print_help(sys.stderr)
    return EXIT_USAGE
