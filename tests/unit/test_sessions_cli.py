"""``ipxbridge sessions --probe``: what it says when there is nothing to probe from."""

import asyncio
import subprocess
import sys

import pytest

from ipxbridge.commands.sessions import probe_sessions
from ipxbridge.errors import StartupError


def test_probe_on_loopback_only_says_loopback_is_excluded() -> None:
    # lo has 127.0.0.1 on every Linux box (a namespace too): "matches no interface" was untrue
    with pytest.raises(StartupError) as info:
        asyncio.run(probe_sessions(["lo", "nosuch0"], 0.1))
    assert str(info.value) == (
        "no IPv4 interface to probe: 'lo' matches only loopback (lo), which is excluded; "
        "'nosuch0' matches no interface"
    )
    res = subprocess.run(
        [sys.executable, "-m", "ipxbridge", "sessions", "--probe", "--iface", "lo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert res.stderr == (
        "ipxbridge: no IPv4 interface to probe: 'lo' matches only loopback (lo), "
        "which is excluded\n"
    )
