"""``ipxbridge check-config``: validate a configuration file as ``run`` would load it."""

import argparse
from pathlib import Path

from ipxbridge.commands.common import EXIT_OK, EXIT_USAGE, SubParsers, add_command, report
from ipxbridge.config import ConfigError, load_config

EXAMPLES = (
    (
        "ipxbridge check-config /etc/ipxbridge/config.yaml",
        "each error on a line of its own (exit 2), or FILE: OK (exit 0)",
    ),
    (
        "ipxbridge print-default-config > my.yaml && ipxbridge check-config my.yaml",
        "start a file of your own from the defaults and check it after each edit",
    ),
)


def add_parser(sub: SubParsers) -> None:
    """Register ``check-config``."""
    parser = add_command(
        sub, "check-config", run, summary="validate a configuration file", examples=EXAMPLES
    )
    parser.add_argument("file", type=Path)


def run(args: argparse.Namespace) -> int:
    """Every error of the file, one line each (exit 2), or ``FILE: OK``."""
    try:
        load_config(args.file)
    except ConfigError as exc:
        report(exc.errors)
        return EXIT_USAGE
    print(f"{args.file}: OK")
    return EXIT_OK
