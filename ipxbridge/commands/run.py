"""``ipxbridge run``: the bridge, on a configuration file or the embedded defaults."""

import argparse
import asyncio
import logging
from pathlib import Path
from typing import Any

from ipxbridge.commands.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    SubParsers,
    add_command,
    ipx_iface_arg,
    listen_arg,
    peer_arg,
    relay_iface_arg,
    report,
    ws_listen_arg,
)
from ipxbridge.config import ConfigError, load_config
from ipxbridge.errors import StartupError
from ipxbridge.obs.logging import setup_logging

EXAMPLES = (
    (
        "ipxbridge run",
        "the embedded defaults: IPX tunnel on udp 0.0.0.0:213, browser players on "
        "ws://0.0.0.0:1900/ipx/<room>, status page on http://127.0.0.1:9213/",
    ),
    (
        "ipxbridge run --ipx-listen 127.0.0.1:21300 --metrics-listen 127.0.0.1:9300",
        "a try-out without root: both on loopback, on unprivileged ports",
    ),
    (
        "ipxbridge run --config /etc/ipxbridge/config.yaml --iface eth0 --iface wg0",
        "a configuration file, and relay game broadcasts between a LAN and a WireGuard VPN",
    ),
)


def add_parser(sub: SubParsers) -> None:
    """Register ``run``."""
    run_parser = add_command(
        sub,
        "run",
        run,
        summary="run the bridge (embedded defaults without --config)",
        examples=EXAMPLES,
    )
    run_parser.add_argument("--config", type=Path, metavar="FILE", help="YAML configuration file")
    run_parser.add_argument(
        "--ipx-listen",
        type=listen_arg,
        metavar="ADDR:PORT|off",
        help="UDP address of the IPX tunnel (default 0.0.0.0:213)",
    )
    run_parser.add_argument(
        "--peer",
        type=peer_arg,
        action="append",
        metavar="HOST[:PORT]",
        help="static RFC 1234 peer, repeatable (default port 213)",
    )
    run_parser.add_argument(
        "--iface",
        type=relay_iface_arg,
        action="append",
        metavar="NAME[:PEER,PEER]",
        help="relay broadcasts on this interface (name, glob or CIDR), repeatable; with peers "
        "(IPv4, comma-separated) it is point-to-point and each peer gets a unicast copy "
        "(OpenVPN, tinc, Nebula; WireGuard's are read from the interface)",
    )
    run_parser.add_argument(
        "--ipx-iface",
        type=ipx_iface_arg,
        action="append",
        metavar="NAME[:KIND,KIND]",
        help="IPX ports on this interface, repeatable; kinds ethernet, ipxwrapper, rfc1234 "
        "(default ethernet,ipxwrapper)",
    )
    run_parser.add_argument(
        "--relay-port",
        type=int,
        action="append",
        metavar="PORT",
        help="UDP port to relay (default 47624 and 6073), repeatable",
    )
    run_parser.add_argument(
        "--source-mode",
        choices=("auto", "preserve", "rewrite"),
        help="how relayed copies are sourced (default auto)",
    )
    run_parser.add_argument(
        "--fast-path",
        choices=("auto", "on", "off"),
        help="kernel (nftables) fan-out in preserve mode (default auto)",
    )
    run_parser.add_argument(
        "--probe-interval",
        type=float,
        metavar="SECONDS",
        help="send DirectPlay session probes every SECONDS (default 0 = off)",
    )
    run_parser.add_argument(
        "--metrics-listen",
        type=listen_arg,
        metavar="ADDR:PORT|off",
        help="HTTP address of the status page, /metrics and the API (default 127.0.0.1:9213)",
    )
    run_parser.add_argument(
        "--ws-listen",
        type=ws_listen_arg,
        metavar="ADDR:PORT|off",
        help="TCP address of the WebSocket listener for browser players (js-dos) "
        "(default 0.0.0.0:1900)",
    )
    run_parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        type=str.lower,
        help="log level (default info)",
    )
    run_parser.add_argument("--log-format", choices=("text", "json"), help="log format")


def flags(args: argparse.Namespace) -> dict[str, Any]:
    """The command-line settings as the configuration overlay ``load_config`` takes."""
    out: dict[str, Any] = {}
    if args.ipx_listen is not None:
        out.setdefault("ipx", {})["listen"] = args.ipx_listen
    if args.peer:
        out.setdefault("ipx", {})["peers"] = list(args.peer)
    if args.iface:
        out.setdefault("relay", {})["interfaces"] = list(args.iface)
    if args.ipx_iface:
        out.setdefault("ipx", {})["interfaces"] = list(args.ipx_iface)
    if args.relay_port:
        out.setdefault("relay", {})["ports"] = list(args.relay_port)
    if args.fast_path is not None:
        out.setdefault("relay", {})["fast_path"] = args.fast_path
    if args.source_mode is not None:
        out.setdefault("relay", {})["source_mode"] = args.source_mode
    if args.probe_interval is not None:
        out.setdefault("directplay", {})["probe_interval"] = args.probe_interval
    if args.metrics_listen is not None:
        out.setdefault("http", {})["listen"] = args.metrics_listen
    if args.ws_listen is not None:
        out.setdefault("websocket", {})["listen"] = args.ws_listen
    if args.log_level is not None:
        out.setdefault("logging", {})["level"] = args.log_level
    if args.log_format is not None:
        out.setdefault("logging", {})["format"] = args.log_format
    return out


def run(args: argparse.Namespace) -> int:
    """Run the bridge until SIGTERM or SIGINT (SIGHUP reloads the same sources)."""
    try:
        config = load_config(args.config, flags=flags(args))
    except ConfigError as exc:
        report(exc.errors)
        return EXIT_USAGE
    setup_logging(config.logging.level, config.logging.format)
    from ipxbridge.app import serve  # noqa: PLC0415 - keep `--help` and check-config light

    try:
        return asyncio.run(serve(config, lambda: load_config(args.config, flags=flags(args))))
    except StartupError as exc:
        report([str(exc)])
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception:
        logging.getLogger("ipxbridge").exception("internal error, please report it")
        return EXIT_FAILURE
