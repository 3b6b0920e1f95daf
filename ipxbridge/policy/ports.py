"""The switch's ports: UDP addresses and interface segments.

A UDP address is a DOSBox-protocol client, an RFC 1234 peer or an uplink (policy/switch.py),
or a browser player's WebSocket connection, named like one (policy/connections.py); a
segment is an interface spoken to in one encapsulation (rule 8's bridges live on segments:
policy/bridges.py).

Pure types, in a module of their own so that the switch and the rule-8 module can both use
them without importing each other.
"""

from dataclasses import dataclass
from enum import StrEnum

Address = tuple[str, int]


class PortKind(StrEnum):
    """The kinds of interface port; DOSBox clients and peers are UDP addresses."""

    ETHERNET = "ethernet"  # native IPX frames on an AF_PACKET socket (docs/protocols.md 3.1)
    IPXWRAPPER = "ipxwrapper"  # IPXWrapper's own UDP encapsulation, port 54792 (6)
    RFC1234 = "rfc1234"  # RFC 1234 hosts on a subnet, UDP 213 (5)


@dataclass(frozen=True)
class Segment:
    """One IPX segment: an interface, spoken to in one encapsulation."""

    interface: str
    kind: PortKind

    def __str__(self) -> str:
        return f"{self.interface}/{self.kind}"


# A port: a DOSBox-protocol client or RFC 1234 peer (its UDP address), or a segment.
Port = Address | Segment
