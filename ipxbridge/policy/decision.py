"""What the switch decides for one datagram: Outcome, Decision, the closed drop reasons.

policy/switch.py's rules make them; the I/O layer carries them out.
"""

from enum import StrEnum
from typing import Final, NamedTuple

from ipxbridge.policy.ports import Port
from ipxbridge.wire.ipx import IpxHeader


class Outcome(StrEnum):
    """What became of a received datagram. Every datagram gets exactly one."""

    FORWARDED = "forwarded"  # relayed to one or more ports
    CONTROL = "control"  # handled by the bridge itself (registration, ping, keepalive reply)
    DROPPED = "dropped"  # discarded; ``Decision.detail`` is the drop reason


# Closed set of drop reasons the policy can give, besides the codec's WIRE_REASONS.
POLICY_DROP_REASONS: Final[tuple[str, ...]] = (
    "unregistered",
    "not_allowed",
    "spoofed_source",
    "clients_full",
    "unexpected_registration",
    "loop",
    "duplicate",
    "filtered_socket",
    "destination_on_ingress",
    "no_destination",
    "unknown_destination",
    "hop_limit",
    "unverified_rate",
    "unverified_full",
    "source_port_zero",
    "own_packet",
    "egress_repeat",
    "beacon_replay",
    "beacon_unbound",  # a beacon that does not echo this bridge's tag there (rule 8)
)


class Decision(NamedTuple):
    """The result of handling one datagram.

    A named tuple, not a frozen dataclass: one is built per packet, and the dataclass's
    ``__init__`` cost about 1 µs more (``docs/benchmarks.md``, "Read coalescing").

    Attributes:
        outcome: forwarded, control or dropped.
        detail: what kind of that outcome, from a closed set per outcome: the drop reason
            (``POLICY_DROP_REASONS`` or the codec's), the kind of control packet (``batch``
            for a coalesced batch, rule 1), or the kind of forward (``broadcast``,
            ``unicast``, ``flooded``: unknown unicast, to peers).
        packet: the bytes to send to every port in ``targets`` (None when not forwarding).
        targets: where ``packet`` goes: UDP addresses and segments.
        replies: packets the bridge itself sends back, each with its address.
        header: the IPX header, for packets that were forwarded or delivered to the bridge
            itself (the DirectPlay inspector looks at their data).
        inner: for a batch, each packet in it with its own decision, in order (rule 1).
        client_packet: when set, the copy of ``packet`` for the DOSBox-protocol clients among
            ``targets``, addressed to their network (rule 10).
    """

    outcome: Outcome
    detail: str
    packet: bytes | None = None
    targets: tuple[Port, ...] = ()
    replies: tuple[tuple[bytes, Port], ...] = ()
    header: IpxHeader | None = None  # set when the payload is worth inspecting
    held: int = 0  # copies not sent: unverified clients over the reflection limit (rule 2)
    repeats: int = 0  # copies not sent: the port had this packet within EGRESS_WINDOW (rule 9)
    inner: tuple[tuple[bytes, "Decision"], ...] = ()  # a batch: (packet, its decision)
    client_packet: bytes | None = None  # what DOSBox-protocol clients get instead (rule 10)


def drop(reason: str) -> Decision:
    """A dropped datagram's decision."""
    return Decision(Outcome.DROPPED, reason)
