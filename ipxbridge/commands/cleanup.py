"""``ipxbridge cleanup``: remove the kernel state a bridge that died left behind."""

import argparse

from ipxbridge.commands.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    SubParsers,
    add_command,
    report,
)

DESCRIPTION = """\
Remove the nftables table ip ipxbridge of this network namespace (the fast path of a
bridge killed before it could remove it keeps copying broadcasts). Run it with no bridge
running here. Idempotent. Exit 0: removed or nothing to remove; 2: not permitted (run as
root or with CAP_NET_ADMIN); 1: nft failed."""
EXAMPLES = (
    ("ipxbridge cleanup", "after a bridge was killed (kill -9, out of memory) on this box"),
    (
        "ip netns exec lan ipxbridge cleanup",
        "the same for a bridge that ran in the network namespace lan",
    ),
)


def add_parser(sub: SubParsers) -> None:
    """Register ``cleanup``."""
    add_command(
        sub,
        "cleanup",
        run,
        summary="remove the kernel state a bridge that died left behind (needs CAP_NET_ADMIN)",
        description=DESCRIPTION,
        examples=EXAMPLES,
    )


def run(_args: argparse.Namespace) -> int:
    """Remove the fast path's nftables table, and say what was there."""
    from ipxbridge.io.nftables import TABLE, Removal, remove_table  # noqa: PLC0415 - light --help

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
        report([f"cleanup needs CAP_NET_ADMIN to remove the {what}: run it as root"])
        return EXIT_USAGE
    else:
        report([f"cleanup: nft failed: {result.detail}"])
        return EXIT_FAILURE
    return EXIT_OK
