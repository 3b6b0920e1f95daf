"""Userspace WireGuard (wireguard-go) between two test namespaces.

The kernel here has no WireGuard module; wireguard-go is the real protocol in userspace
(docs/testbed.md). Interface names must be unique across namespaces because the UAPI sockets in
/var/run/wireguard/ are shared. Always start it with ``-f``.
"""

import subprocess
import time
from dataclasses import dataclass

from scripts.harness import Netns, sh


def genkey() -> tuple[str, str]:
    private = sh("wg", "genkey").stdout.strip()
    public = subprocess.run(
        ["wg", "pubkey"], input=private, capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()
    return private, public


@dataclass
class WgEnd:
    ns: str
    ifname: str
    tunnel_ip: str  # e.g. 10.98.0.1
    underlay_ip: str
    port: int
    private: str = ""
    public: str = ""
    proc: subprocess.Popen[bytes] | None = None


def start(net: Netns, end: WgEnd) -> None:
    """Start wireguard-go for ``end`` and wait until its interface exists."""
    end.proc = subprocess.Popen(
        net.exec_args(end.ns, "wireguard-go", "-f", end.ifname),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if sh("ip", "-n", end.ns, "link", "show", end.ifname, check=False).returncode == 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"wireguard-go did not create {end.ifname}")


def configure(net: Netns, end: WgEnd, other: WgEnd, allowed: str) -> None:
    key_file = f"/tmp/{end.ifname}.key"
    with open(key_file, "w") as f:  # noqa: PTH123
        f.write(end.private)
    sh(
        *net.exec_args(
            end.ns,
            "wg",
            "set",
            end.ifname,
            "listen-port",
            str(end.port),
            "private-key",
            key_file,
            "peer",
            other.public,
            "endpoint",
            f"{other.underlay_ip}:{other.port}",
            "allowed-ips",
            allowed,
            "persistent-keepalive",
            "1",
        )
    )
    sh("ip", "-n", end.ns, "addr", "add", f"{end.tunnel_ip}/24", "dev", end.ifname)
    sh("ip", "-n", end.ns, "link", "set", end.ifname, "up")


def pair(net: Netns, a: WgEnd, b: WgEnd, b_accepts_from_a: str = "") -> None:
    """Bring up a tunnel between ``a`` and ``b`` (underlay addresses must already route).

    ``b_accepts_from_a`` adds source prefixes ``b`` accepts from ``a`` (WireGuard drops
    packets whose inner source is outside the sending peer's AllowedIPs): a site-to-site
    setup lists the other site's LAN there.
    """
    for end in (a, b):
        if not end.private:
            end.private, end.public = genkey()
        start(net, end)
    configure(net, a, b, f"{b.tunnel_ip}/32")
    configure(net, b, a, f"{a.tunnel_ip}/32" + (f",{b_accepts_from_a}" if b_accepts_from_a else ""))


def stop(net: Netns, end: WgEnd) -> None:
    """Stop wireguard-go: its interface disappears (like wg-quick down)."""
    if end.proc is not None:
        end.proc.terminate()
        end.proc.wait(10)
        end.proc = None
    sh("ip", "-n", end.ns, "link", "del", end.ifname, check=False)
