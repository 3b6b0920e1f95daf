"""``ipxbridge version``: the installed version."""

import argparse

from ipxbridge import __version__, build
from ipxbridge.commands.common import EXIT_OK, SubParsers, add_command

EXAMPLES = (
    ("ipxbridge version", "prints ipxbridge VERSION and which build: compiled or pure Python"),
    ("ipxbridge --version", "the same"),
)


def add_parser(sub: SubParsers) -> None:
    """Register ``version``."""
    add_command(sub, "version", run, summary="print the version", examples=EXAMPLES)


def run(_args: argparse.Namespace) -> int:
    """Print ``ipxbridge VERSION, BUILD`` (``ipxbridge/build.py``)."""
    print(f"ipxbridge {__version__}, {build.describe()}")
    return EXIT_OK
