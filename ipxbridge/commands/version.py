"""``ipxbridge version``: the installed version."""

import argparse

from ipxbridge import __version__
from ipxbridge.commands.common import EXIT_OK, SubParsers, add_command


def add_parser(sub: SubParsers) -> None:
    """Register ``version``."""
    add_command(sub, "version", run, summary="print the version")


def run(_args: argparse.Namespace) -> int:
    """Print ``ipxbridge VERSION``."""
    print(f"ipxbridge {__version__}")
    return EXIT_OK
