"""Command line: ``ipxbridge run | check-config | print-default-config | version``.

Exit codes (house style rule 12): 0 ok, 1 runtime failure, 2 usage, configuration or
start-up error. Errors are one clear line each, never a traceback.
"""

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ipxbridge import __version__
from ipxbridge.config import DEFAULT_CONFIG_YAML, ConfigError, load_config, parse_host_port
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
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        type=str.lower,
        help="log level (default info)",
    )
    run.add_argument("--log-format", choices=("text", "json"), help="log format")

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
        return asyncio.run(serve(config))
    except StartupError as exc:
        _report([str(exc)])
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception:
        logging.getLogger("ipxbridge").exception("internal error, please report it")
        return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ipxbridge`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        return _run(args)
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
