"""WireGuard peers as unicast targets for the broadcast relay.

Contract: :func:`wireguard_peers` never raises and never blocks for long (1 s for the UAPI
socket, 2 s for generic netlink). A WireGuard interface is point-to-point and drops
255.255.255.255 silently (docs/reliability.md item 7), so the relay reaches the other side only by
unicasting to each peer's tunnel address; those are the /32 entries of the peers'
AllowedIPs (``policy.topology.unicast_targets``).

Two sources, in order:

1. wireguard-go's UAPI socket ``/var/run/wireguard/<ifname>.sock`` (the cross-platform
   configuration protocol, https://www.wireguard.com/xplatform/): send ``get=1`` and a
   blank line, read ``key=value`` lines up to a blank line, ``errno=0`` on success. The
   reply holds the private key: it is parsed for ``allowed_ip=`` only and never logged.
   The directory is shared by every namespace (docs/testbed.md section 4), hence the unique
   interface names there.
2. Kernel WireGuard over generic netlink (pyroute2, in ``io/netlink.py``); the kernel here
   has no ``CONFIG_WIREGUARD``, so this path returns nothing on this box.

Both block (a socket timeout, a thread join): a stuck wireguard-go costs about 1 s per
interface and a slow generic netlink up to 3 s. The event loop must never wait for that (it
carries every datagram and ``/-/healthy``), so the bridge calls :func:`read_wireguard_peers`,
which runs the reads in a worker thread and returns the result for the pure planner
(``policy.relay.build_plan``).
"""

import asyncio
import logging
import socket
from collections.abc import Iterable
from concurrent.futures import Executor
from typing import Final

from ipxbridge.io.netlink import uapi_socket, wireguard_allowed_ips
from ipxbridge.policy.topology import unicast_targets

logger = logging.getLogger(__name__)

UAPI_TIMEOUT: Final = 1.0  # seconds; wireguard-go answers a local get in well under 1 ms
UAPI_MAX_REPLY: Final = 1 << 20  # ~5,000 peers' worth; stops a runaway reply

# WireGuard peer changes (wg set) raise no netlink event: users re-read them this often.
PEER_REFRESH_SECONDS: Final = 10.0


def parse_uapi_get(reply: str) -> list[str] | None:
    """The ``allowed_ip`` values of a UAPI ``get=1`` reply; ``None`` if it reports an error.

    Raises:
        Nothing.
    """
    allowed: list[str] = []
    status: str | None = None
    for line in reply.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "allowed_ip":
            allowed.append(value.strip())
        elif key == "errno":
            status = value.strip()
    return allowed if status == "0" else None


def _uapi_allowed_ips(ifname: str) -> list[str] | None:
    path = uapi_socket(ifname)
    if path is None or not path.exists():
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(UAPI_TIMEOUT)
            sock.connect(str(path))
            sock.sendall(b"get=1\n\n")
            while size < UAPI_MAX_REPLY:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if b"\n\n" in b"".join(chunks[-2:]):  # the reply ends with a blank line
                    break
    except OSError as exc:
        logger.debug("WireGuard UAPI %s: %s", path, exc)
        return None
    return parse_uapi_get(b"".join(chunks).decode("utf-8", "replace"))


def wireguard_peers(ifname: str) -> list[str]:
    """Peer tunnel addresses usable as unicast targets on a WireGuard interface.

    For each peer's AllowedIPs, host routes (/32) are kept and wider prefixes dropped (a
    subnet cannot be unicast to). Tries the userspace UAPI socket (wireguard-go), then
    kernel WireGuard's generic netlink; ``[]`` if neither answers.

    Returns:
        Sorted, unique IPv4 address strings.
    """
    try:
        allowed = _uapi_allowed_ips(ifname)
        if allowed is None:
            allowed = wireguard_allowed_ips(ifname)
        return unicast_targets(allowed or ())
    except Exception:  # documented never to raise: a bug here must not stop the relay
        logger.exception("reading WireGuard peers of %s failed", ifname)
        return []


async def read_wireguard_peers(
    names: Iterable[str], executor: Executor | None = None
) -> dict[str, list[str]]:
    """:func:`wireguard_peers` of each interface, read in ``executor`` (a worker thread).

    The caller's event loop keeps running while the reads block. The worker thread is created
    from the loop's thread, so it reads in the same network namespace.

    Raises:
        Nothing but ``asyncio.CancelledError`` (the reads themselves never raise).
    """
    wanted = tuple(names)

    def read_all() -> dict[str, list[str]]:
        return {name: wireguard_peers(name) for name in wanted}

    return await asyncio.get_running_loop().run_in_executor(executor, read_all)
