"""Helpers for the interface-topology tests: wireguard-go, a watcher process, JSON lines.

``python -m tests.integration.topo watch`` (run inside a namespace with ``ip netns exec``)
starts a :class:`~ipxbridge.io.netlink.TopologyWatcher` and prints one JSON line per
``on_change``: the interfaces (index, name, up, addresses) and the event counters.
"""

import asyncio
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.harness import ROOT, Netns, sh

UAPI_DIR = Path("/var/run/wireguard")


class WireGuardGo:
    """``wireguard-go -f NAME`` inside a namespace (docs/testbed.md section 4).

    The UAPI directory is shared by all namespaces, so the name carries the pid. Stop it with
    SIGTERM (not the SIGKILL of ``Netns.close``) so it removes its UAPI socket.
    """

    def __init__(self, net: Netns, ns: str, name: str) -> None:
        self.ns = ns
        self.name = name
        self.sock = UAPI_DIR / f"{name}.sock"
        env = {k: v for k, v in os.environ.items() if k != "WG_PROCESS_FOREGROUND"}
        self.proc = subprocess.Popen(
            net.exec_args(ns, "wireguard-go", "-f", name),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        deadline = time.monotonic() + 5
        while not self.sock.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"wireguard-go {name} did not start")
            time.sleep(0.02)

    def configure(self, key_dir: Path, address: str, allowed_ips: str) -> str:
        """Key, one peer with ``allowed_ips``, ``address``, link up; returns the peer's key."""
        key = key_dir / f"{self.name}.key"
        key.write_text(sh("wg", "genkey").stdout)
        key.chmod(0o600)
        peer_public = subprocess.run(
            ["wg", "pubkey"],
            input=sh("wg", "genkey").stdout,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        sh(
            "ip", "netns", "exec", self.ns, "wg", "set", self.name, "private-key", str(key),
            "peer", peer_public, "allowed-ips", allowed_ips,
        )  # fmt: skip
        sh("ip", "-n", self.ns, "addr", "add", address, "dev", self.name)
        sh("ip", "-n", self.ns, "link", "set", self.name, "up")
        return peer_public

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # ip netns exec passes it on (exec)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        with contextlib.suppress(FileNotFoundError):
            self.sock.unlink()  # only if it was not cleaned up


class JsonLines:
    """Reads JSON lines from a child's stdout with a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self._fd = proc.stdout.fileno()
        os.set_blocking(self._fd, False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._fd, selectors.EVENT_READ)
        self._buf = b""
        self.seen: list[dict[str, Any]] = []

    def next(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sel.select(left):
                return None
            chunk = os.read(self._fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        item: dict[str, Any] = json.loads(line)
        self.seen.append(item)
        return item

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any]:
        """The first line satisfying ``predicate`` within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while (left := deadline - time.monotonic()) > 0:
            item = self.next(left)
            if item is None:
                break
            last = item
            if predicate(item):
                return item
        raise AssertionError(f"no matching topology within {timeout}s; last: {last}")

    def close(self) -> None:
        self._sel.close()


def start_watcher(net: Netns, ns: str) -> tuple[subprocess.Popen[bytes], JsonLines]:
    proc = subprocess.Popen(
        net.exec_args(ns, sys.executable, "-m", "tests.integration.topo", "watch"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    return proc, JsonLines(proc)


async def _watch() -> None:
    from ipxbridge.io.netlink import TopologyWatcher
    from ipxbridge.policy.topology import Topology

    def on_change(topology: Topology) -> None:
        rows = [
            {
                "index": i.index,
                "name": i.name,
                "up": i.up,
                "addresses": [f"{a.address}/{a.prefixlen}" for a in i.addresses],
            }
            for i in topology.interfaces
        ]
        # `watcher` is bound before start() first calls back
        sys.stdout.write(json.dumps({"interfaces": rows, "events": dict(watcher.events)}) + "\n")
        sys.stdout.flush()

    watcher = TopologyWatcher(on_change)
    await watcher.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await watcher.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["watch"]:
        asyncio.run(_watch())
