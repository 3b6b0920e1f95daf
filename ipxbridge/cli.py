"""Command line: parses the arguments and dispatches to a subcommand of ``ipxbridge.commands``.

``run`` (the bridge), ``decode`` (frames offline), ``sessions`` (the game list), ``interfaces``
(the relay's plan), ``cleanup`` (kernel state of a dead run), ``check-config``,
``print-default-config``, ``version``. Each lives in its own module there, which registers
its parser and handler; exit codes and error lines are in ``commands/common.py``.
"""

import argparse
import sys
from collections.abc import Sequence

from ipxbridge import __version__, build
from ipxbridge.commands import (
    check_config,
    cleanup,
    decode,
    interfaces,
    print_default_config,
    run,
    sessions,
    version,
)
from ipxbridge.commands.common import EXIT_USAGE, Handler, examples_text

# In the order `ipxbridge --help` lists them.
COMMANDS = (
    run,
    decode,
    sessions,
    interfaces,
    cleanup,
    check_config,
    print_default_config,
    version,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (kept public so the docs and tests can introspect it)."""
    parser = argparse.ArgumentParser(
        prog="ipxbridge",
        description="IPX-over-UDP bridge for retro LAN games (RFC 1234 + DOSBox protocol).",
        epilog=examples_text(
            (
                ("ipxbridge run", "the bridge on its embedded defaults"),
                ("ipxbridge sessions", "the games the running bridge has seen"),
                ("ipxbridge COMMAND --help", "the options of one command, and its examples"),
            )
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"ipxbridge {__version__}, {build.describe()}"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ipxbridge`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return handler(args)
