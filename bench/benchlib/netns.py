"""Network namespaces for a bench run: made here, always removed, and nothing left running."""

import contextlib
import os
import shlex
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Final

from pyroute2 import netns as pr_netns

from benchlib import BenchError

NETNS_DIR: Final = Path("/var/run/netns")


def sh(*args: str, check: bool = True, stdin: str | None = None, timeout: float = 30) -> str:
    """Run a command (never through a shell) and return its output.

    Raises:
        BenchError: it failed and ``check`` is set (the message carries its stderr).
    """
    res = subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, check=False, input=stdin
    )
    if check and res.returncode != 0:
        raise BenchError(f"{shlex.join(args)}: {res.stderr.strip()}")
    return res.stdout


def nsexec(ns: str, *args: str, check: bool = True, stdin: str | None = None) -> str:
    """``sh`` inside namespace ``ns``."""
    return sh("ip", "netns", "exec", ns, *args, check=check, stdin=stdin)


def remove(name: str) -> None:
    """Kill whatever still runs in namespace ``name``, then delete it; never raises."""
    with contextlib.suppress(BenchError, subprocess.TimeoutExpired):
        for pid in sh("ip", "netns", "pids", name, check=False).split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        sh("ip", "netns", "del", name, check=False)


@contextlib.contextmanager
def namespaces(*names: str) -> Iterator[tuple[str, ...]]:
    """Create ``names`` with ``lo`` up; on the way out (an exception, Ctrl-C) remove each one
    this call created, and never one that was there before."""
    made: list[str] = []
    try:
        for name in names:
            if (NETNS_DIR / name).exists():
                raise BenchError(
                    f"network namespace {name} already exists (another run, or a stale one: "
                    f"'ip netns del {name}'); not touching it"
                )
            sh("ip", "netns", "add", name)
            made.append(name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        yield names
    finally:
        for name in made:
            remove(name)


End = tuple[str, str, str]  # (namespace, interface, "A.B.C.D/len")


def veth(a: End, b: End, *, brd: bool = True) -> None:
    """A veth pair between two namespaces with their addresses, both ends up.

    ``brd`` gives each address its subnet broadcast (``brd +``), which a relay needs.
    """
    (ns_a, if_a, _), (ns_b, if_b, _) = a, b
    sh(
        *("ip", "link", "add", if_a, "netns", ns_a, "type", "veth"),
        *("peer", "name", if_b, "netns", ns_b),
    )
    for ns, ifname, addr in (a, b):
        sh("ip", "-n", ns, "addr", "add", addr, *(("brd", "+") if brd else ()), "dev", ifname)
        sh("ip", "-n", ns, "link", "set", ifname, "up")


@contextlib.contextmanager
def two_segments(
    prefix: str, *, pa: str, box_a: str, box_b: str, hb: str
) -> Iterator[dict[str, str]]:
    """The relay's test network: namespaces ``PREFIX_pa``, ``PREFIX_box``, ``PREFIX_hb``::

        pa  eth0 PA  --lanA--  BOX_A lanA  box  lanB BOX_B  --lanB--  eth0 HB  hb

    Addresses are ``A.B.C.D/len``, each with its subnet broadcast; hb's default route is the
    box. Yields ``{"pa": NAME, "box": NAME, "hb": NAME}``; all is removed on the way out.
    """
    names = {short: f"{prefix}_{short}" for short in ("pa", "box", "hb")}
    with namespaces(*names.values()):
        veth((names["pa"], "eth0", pa), (names["box"], "lanA", box_a))
        veth((names["box"], "lanB", box_b), (names["hb"], "eth0", hb))
        gateway = box_b.partition("/")[0]
        sh("ip", "-n", names["hb"], "route", "add", "default", "via", gateway)
        yield names


@contextlib.contextmanager
def inside(ns: str | None) -> Iterator[None]:
    """Run the block in namespace ``ns`` (this thread only; None: where we are). Sockets made
    in it stay in ``ns``."""
    if ns is None:
        yield
        return
    pr_netns.pushns(ns)
    try:
        yield
    finally:
        pr_netns.popns()


def socket_in(ns: str | None, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket created inside namespace ``ns`` (None: where we are)."""
    with inside(ns):
        return socket.socket(family, kind, proto)


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP end the script through its ``finally`` blocks (as Ctrl-C does), so
    the namespaces it made are removed."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
