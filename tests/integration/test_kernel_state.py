"""Kernel state the bridge owns: the fast path's nftables table outlives a killed bridge
(docs/reliability.md R18), and its counters close the books under a flood (R13).

Topology (all private to the namespaces made here)::

    pa (players) 10.72.1.10, .11 --lanA-- box 10.72.1.1 | 10.72.2.1 --lanB-- hb (host) 10.72.2.20

The kernel never forwards a broadcast, so whatever reaches ``hb`` on a relay port was copied
by a relay in ``box``: the bridge's Python path, or the table ``ip ipxbridge``.
"""

import re
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.harness import ROOT, BridgeProcess, Netns, inside, sh
from tests.integration.conftest import require

PORT = 47624
LAN_A_BCAST = "10.72.1.255"
READY = r"relaying between: .*lanA.*lanB"


@dataclass
class Site:
    net: Netns
    pa: str
    box: str
    hb: str


@pytest.fixture
def site(net: Netns) -> Site:
    require("nft", "setpriv")
    pa, box, hb = net.add("pa"), net.add("box"), net.add("hb")
    net.link(pa, "eth0", "10.72.1.10/24", box, "lanA", "10.72.1.1/24")
    net.link(box, "lanB", "10.72.2.1/24", hb, "eth0", "10.72.2.20/24")
    sh("ip", "-n", pa, "addr", "add", "10.72.1.11/24", "brd", "+", "dev", "eth0")
    return Site(net, pa, box, hb)


def start(s: Site, workdir: Path, *args: str, ready: str = READY) -> BridgeProcess:
    return BridgeProcess(
        s.net, s.box, "--metrics-listen", "off", *args, log_dir=workdir, ready=ready
    )


def relay_args(fast_path: str) -> tuple[str, ...]:
    return (
        *("--ipx-listen", "off", "--iface", "lanA", "--iface", "lanB"),
        *("--source-mode", "preserve", "--fast-path", fast_path),
    )


def kill_hard(bridge: BridgeProcess) -> None:
    """SIGKILL: no handler runs, nothing is removed (a crash, the OOM killer)."""
    bridge.proc.kill()  # `ip netns exec` exec'd the bridge: this is its pid
    bridge.proc.wait(10)
    bridge.stop()  # only closes the log now


def has_table(ns: str) -> bool:
    res = sh("ip", "netns", "exec", ns, "nft", "list", "table", "ip", "ipxbridge", check=False)
    return res.returncode == 0


def copies_at_host(s: Site, count: int, tag: bytes) -> Counter[bytes]:
    """Send ``count`` distinct broadcasts from pa; how many copies of each reached hb."""
    with inside(s.pa):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with inside(s.hb):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    seen: Counter[bytes] = Counter()
    with tx, rx:
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        tx.bind(("10.72.1.10", 0))
        rx.bind(("0.0.0.0", PORT))
        rx.settimeout(0.05)
        for n in range(count):
            tx.sendto(tag + b" %d" % n, (LAN_A_BCAST, PORT))
            time.sleep(0.01)  # well under the fast path's inspection rate
        deadline = time.monotonic() + 1.0  # a copy arrives in well under a millisecond
        while time.monotonic() < deadline:
            try:
                data, _ = rx.recvfrom(2048)
            except TimeoutError:
                continue
            seen[data] += 1
    return seen


def left_behind_by_a_killed_fast_path(s: Site, workdir: Path) -> None:
    """A fast-path bridge is SIGKILLed; its table stays and goes on copying by itself."""
    bridge = start(s, workdir, *relay_args("on"))
    kill_hard(bridge)
    assert has_table(s.box)
    crossed = copies_at_host(s, 5, b"no bridge")
    assert sorted(crossed.values()) == [1] * 5, crossed  # the kernel alone relays


@pytest.mark.netns
def test_a_restart_on_the_python_path_removes_a_killed_fast_paths_table(
    site: Site, workdir: Path
) -> None:
    """R18: after a SIGKILL the table kept relaying, and a restart with ``--fast-path off``
    left it in place, so every broadcast reached the far LAN twice (kernel + Python)."""
    left_behind_by_a_killed_fast_path(site, workdir)
    bridge = start(site, workdir, *relay_args("off"))
    try:
        crossed = copies_at_host(site, 20, b"python path")
        assert len(crossed) == 20, crossed
        assert set(crossed.values()) == {1}, f"copies per broadcast: {crossed}"
        assert not has_table(site.box)
    finally:
        assert bridge.stop() == 0
    assert "removed the nftables table ip ipxbridge an earlier run left behind" in bridge.log()


@pytest.mark.netns
def test_a_restart_with_the_relay_off_removes_a_killed_fast_paths_table(
    site: Site, workdir: Path
) -> None:
    """R18: with the relay off the bridge relays nothing, and neither may its kernel state."""
    left_behind_by_a_killed_fast_path(site, workdir)
    bridge = start(site, workdir, "--ipx-listen", "0.0.0.0:213", ready=r"IPX tunnel on udp")
    try:
        crossed = copies_at_host(site, 5, b"relay off")
        assert crossed == Counter(), f"relayed with the relay off: {crossed}"
        assert not has_table(site.box)
    finally:
        assert bridge.stop() == 0


def cleanup(ns: str, *, net_admin: bool = True) -> subprocess.CompletedProcess[str]:
    # Root without CAP_NET_ADMIN: out of the bounding set, so exec cannot grant it.
    drop = [] if net_admin else ["setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin"]
    return subprocess.run(
        ["ip", "netns", "exec", ns, *drop, sys.executable, "-m", "ipxbridge", "cleanup"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )


@pytest.mark.netns
def test_cleanup_removes_the_table_once_and_needs_net_admin(site: Site, workdir: Path) -> None:
    """``ipxbridge cleanup``: the operator's way after a crash; idempotent, exit 0; one line
    and exit 2 without CAP_NET_ADMIN."""
    left_behind_by_a_killed_fast_path(site, workdir)
    refused = cleanup(site.box, net_admin=False)
    assert refused.returncode == 2, refused
    assert refused.stderr == (
        "ipxbridge: cleanup needs CAP_NET_ADMIN to remove the nftables table ip ipxbridge:"
        " run it as root\n"
    )
    assert has_table(site.box)

    done = cleanup(site.box)
    assert done.returncode == 0, done
    assert re.fullmatch(
        r"ipxbridge cleanup: removed nftables table ip ipxbridge \(\d+ rules\)\n", done.stdout
    ), done.stdout
    assert not has_table(site.box)
    assert copies_at_host(site, 5, b"after cleanup") == Counter()

    again = cleanup(site.box)
    assert (again.returncode, again.stdout) == (
        0,
        "ipxbridge cleanup: nothing to remove (no nftables table ip ipxbridge)\n",
    )
