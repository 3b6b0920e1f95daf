"""``--help`` of every subcommand ends with two or three examples, and each example parses."""

import argparse
import contextlib
import io
import re
import shlex
import subprocess
import sys

import pytest

from ipxbridge.cli import build_parser

COMMANDS = (
    "run",
    "decode",
    "sessions",
    "interfaces",
    "cleanup",
    "check-config",
    "print-default-config",
    "version",
)


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def examples(help_text: str) -> list[tuple[str, str]]:
    """The (command, what) pairs of the ``examples:`` block that ends ``help_text``."""
    _, found, block = help_text.rpartition("\nexamples:\n")
    assert found, help_text
    lines = block.rstrip("\n").split("\n")
    assert len(lines) % 2 == 0, lines  # a command line, then what it does, each time
    pairs = list(zip(lines[0::2], lines[1::2], strict=True))
    for command, what in pairs:
        assert re.match(r"  \S", command), command
        assert re.match(r"      \S", what), what
    return [(c.strip(), w.strip()) for c, w in pairs]


def parses(command: str) -> None:
    """Every ``ipxbridge ...`` of a shell line is accepted by the real parser."""
    for part in re.split(r"\s(?:&&|\||>)\s", command):
        argv = shlex.split(part)
        if "ipxbridge" not in argv:
            continue  # the file a redirection writes
        args = argv[argv.index("ipxbridge") + 1 :]
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                build_parser().parse_args(args)
            except SystemExit as exc:  # --version prints and exits 0
                assert exc.code == 0, command


def test_every_subcommand_is_listed_here() -> None:
    assert set(subparsers()) == set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_ends_with_two_or_three_examples_that_parse(name: str) -> None:
    pairs = examples(subparsers()[name].format_help())
    assert 2 <= len(pairs) <= 3, pairs
    assert all(f"ipxbridge {name}" in c or c == "ipxbridge --version" for c, _ in pairs), pairs
    for command, _ in pairs:
        parses(command)


def test_help_as_a_user_sees_it() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "ipxbridge", "decode", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pairs = examples(res.stdout)
    assert pairs[1] == (
        "ipxbridge decode --pcap lan-party.pcapng",
        "each UDP and TCP frame of a capture, one line each; others (ICMP, ARP) counted last",
    )
    # kept as written: the hex example is one line, not re-wrapped
    assert pairs[0][0].endswith("020000000001 4002'")
