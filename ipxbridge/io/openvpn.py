"""Connected OpenVPN clients, read from the servers' status files (docs/relay.md, "Peers").

OpenVPN does not say on its tun interface who its peers are, but a server keeps its client
list in a status file (``wire/openvpn_status.py`` reads the format). ``STATUS_FILES`` are
where Debian's units put it (``openvpn-server@.service``: ``/run/openvpn-server/
status-NAME.log``; ``openvpn@.service``: ``/run/openvpn/NAME.status``); ``relay.openvpn_status``
adds others. A file is matched to an interface by its addresses: a client whose virtual
address is in the interface's subnet is a peer there (``policy/relay.build_plan``).

Reading is file I/O on the bridge's worker thread, with the WireGuard reads
(``app/vpn_peers.py``); a file that cannot be read is skipped (said once in the log), one
larger than ``MAX_STATUS_BYTES`` is read only that far. Never raises.
"""

import glob
import logging
from collections.abc import Iterable
from typing import Final

from ipxbridge.wire.openvpn_status import MAX_STATUS_BYTES, STATUS_FILES, client_addresses

logger = logging.getLogger(__name__)

MAX_FILES: Final = 64  # status files read per round, whatever the globs match

_unreadable: set[str] = set()  # files already said in the log


def openvpn_clients(patterns: Iterable[str] = STATUS_FILES) -> dict[str, tuple[str, ...]]:
    """Client addresses per status file, for every file the glob ``patterns`` match."""
    out: dict[str, tuple[str, ...]] = {}
    paths = sorted({p for pattern in patterns for p in glob.glob(pattern)})  # noqa: PTH207 - absolute globs[:MAX_FILES]
    for path in paths:
        try:
            with open(path, "rb") as f:  # noqa: PTH123 - bounded read of a small file
                data = f.read(MAX_STATUS_BYTES)
        except OSError as exc:
            if path not in _unreadable:
                _unreadable.add(path)
                logger.warning("cannot read the OpenVPN status file %s: %s", path, exc)
            continue
        _unreadable.discard(path)
        out[path] = client_addresses(data.decode("utf-8", "replace"))
    return out
