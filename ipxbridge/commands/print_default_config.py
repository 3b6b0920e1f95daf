"""``ipxbridge print-default-config``: the embedded configuration ``run`` uses without one."""

import argparse
import sys

from ipxbridge.commands.common import EXIT_OK, SubParsers, add_command
from ipxbridge.config import DEFAULT_CONFIG_YAML

EXAMPLES = (
    ("ipxbridge print-default-config", "what `ipxbridge run` uses without --config"),
    (
        "ipxbridge print-default-config > /etc/ipxbridge/config.yaml",
        "a commented file to edit, then: ipxbridge run --config /etc/ipxbridge/config.yaml",
    ),
)


def add_parser(sub: SubParsers) -> None:
    """Register ``print-default-config``."""
    add_command(
        sub,
        "print-default-config",
        run,
        summary="print the embedded default configuration",
        examples=EXAMPLES,
    )


def run(_args: argparse.Namespace) -> int:
    """Write the embedded YAML to stdout."""
    sys.stdout.write(DEFAULT_CONFIG_YAML)
    return EXIT_OK
