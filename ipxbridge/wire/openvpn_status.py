"""OpenVPN's status file: the connected clients' tunnel addresses (docs/relay.md, "Peers").

An OpenVPN server writes it when run with ``--status FILE [SECONDS]`` (Debian's
``openvpn-server@.service`` does: ``--status %t/openvpn-server/status-%i.log
--status-version 2``; ``openvpn@.service`` uses ``/run/openvpn/%i.status``, version 1).
The format is OpenVPN's manual page, ``--status-version``:

* version 1: a ``ROUTING TABLE`` section whose rows start with the virtual address
  (``10.8.0.6,client1,203.0.113.5:1194,...``), after a header row ``Virtual Address,...``;
* versions 2 and 3: ``HEADER,CLIENT_LIST,...`` names the columns (comma or tab separated),
  and every ``CLIENT_LIST`` row has the client's ``Virtual Address``.

Only single IPv4 addresses are taken: a routing-table row for an ``iroute`` subnet
(``192.168.5.0/24``) or a tap client's MAC address is not a peer to send to.

Pure; never raises on any text.
"""

import ipaddress
from typing import Final

MAX_STATUS_BYTES: Final = 1 << 20  # a server with thousands of clients fits
# Where Debian's units write it (the default of ``relay.openvpn_status``).
STATUS_FILES: Final = (
    "/run/openvpn-server/status-*.log",
    "/run/openvpn/*.status",
)


def _ipv4(text: str) -> str | None:
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        return None


def client_addresses(text: str) -> tuple[str, ...]:
    """The connected clients' virtual IPv4 addresses, each once, in the file's order."""
    found: dict[str, None] = {}
    column = -1  # the Virtual Address column of CLIENT_LIST rows (versions 2 and 3)
    in_routing = False  # version 1: inside ROUTING TABLE
    for line in text.splitlines():
        sep = "\t" if "\t" in line else ","
        fields = line.split(sep)
        head = fields[0]
        if head == "HEADER" and len(fields) > 1 and fields[1] == "CLIENT_LIST":
            names = fields[1:]  # the header's columns line up with the rows' (kind first)
            column = names.index("Virtual Address") if "Virtual Address" in names else -1
        elif head == "CLIENT_LIST":
            if 0 <= column < len(fields) and (addr := _ipv4(fields[column])):
                found[addr] = None
        elif head == "ROUTING TABLE":
            in_routing = True
        elif head in ("GLOBAL STATS", "END"):
            in_routing = False
        elif in_routing and (addr := _ipv4(head)):
            found[addr] = None
    return tuple(found)
