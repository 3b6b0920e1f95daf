"""``ipxbridge print-default-config``: the embedded configuration ``run`` uses without one."""

import argparse
import sys

from ipxbridge.commands.common import EXIT_OK, SubParsers, add_command
from ipxbridge.config import DEFAULT_CONFIG_YAML


def add_parser(sub: SubParsers) -> None:
    """Register ``print-default-config``."""
    add_command(
        sub, "print-default-config", run, summary="print the embedded default configuration"
    )


def run(_args: argparse.Namespace) -> int:
    """Write the embedded YAML to stdout."""
    sys.stdout.write(DEFAULT_CONFIG_YAML)
    return EXIT_OK
