"""Rooms of browser players: which connection may join which room (docs/ipx.md, "Rooms").

js-dos players connect to ``/ipx/<room>`` (docs/protocols.md 3.10). Each room is an IPX
network of its own, as on the reference server; one room (``websocket.bridge_room``) is the
bridge's own network, with its DOSBox clients, interface ports, peers and uplinks. A room
exists while it has connections: the last one to leave takes it away, so no idle room is
kept. What a stranger can hold is bounded here: rooms, connections in all, per room and per
client address. Pure: the listener (io/websocket.py) asks and reports.
"""

import re
from collections import Counter
from dataclasses import dataclass
from typing import Final

# What a room name may hold: js-dos's UI turns "@" into "_" and puts the name in the path
# (docs/protocols.md 3.10); letters, digits and a few marks cover what people type, and
# nothing that would need escaping in a log line, a URL or a label.
ROOM_NAME: Final = re.compile(r"[A-Za-z0-9_.~-]{1,64}")

# Why a connection was refused, a closed set (ipxbridge_ws_refused_total{reason}).
REFUSALS: Final[tuple[str, ...]] = (
    "bad_room",  # not a room name (ROOM_NAME)
    "origin",  # its Origin is not in websocket.origins
    "not_allowed",  # outside ipx.clients_allow
    "not_websocket",  # an HTTP request that is no WebSocket handshake (or a huge one)
    "handshake_timeout",  # no whole handshake within its time
    "handshakes_full",  # too many connections in their handshake at once
    "rooms_full",  # a new room, and max_rooms are open
    "room_full",  # the room has max_connections_per_room
    "address_full",  # this address has max_connections_per_address
    "connections_full",  # max_connections are open
)


def room_name(text: str) -> str | None:
    """``text`` if it is a room name, else None."""
    return text if ROOM_NAME.fullmatch(text) else None


@dataclass(frozen=True)
class RoomLimits:
    """What the listener holds at most (``websocket`` section)."""

    max_connections: int = 512
    max_rooms: int = 64
    max_connections_per_room: int = 64
    max_connections_per_address: int = 16


class RoomTable:
    """Who is in which room; the bounds of ``RoomLimits``."""

    def __init__(self, limits: RoomLimits, bridge_room: str) -> None:
        """Bounds ``limits``; ``bridge_room`` is always open.

        Strangers filling ``max_rooms`` cannot keep the bridge's own players out of it: it
        does not count toward ``max_rooms``.
        """
        self.limits = limits
        self.bridge_room = bridge_room
        self.rooms: Counter[str] = Counter()  # room -> connections
        self._by_address: Counter[str] = Counter()  # client IP -> connections
        self.total = 0

    def admit(self, room: str, ip: str) -> str | None:
        """Take a connection from ``ip`` into ``room``; the refusal reason if not.

        An admitted connection must be ``release``d once when it closes.
        """
        limits = self.limits
        if self.total >= limits.max_connections:
            return "connections_full"
        if self._by_address[ip] >= limits.max_connections_per_address:
            return "address_full"
        here = self.rooms.get(room, 0)
        if here == 0 and room != self.bridge_room and self.others() >= limits.max_rooms:
            return "rooms_full"
        if here >= limits.max_connections_per_room:
            return "room_full"
        self.rooms[room] = here + 1
        self._by_address[ip] += 1
        self.total += 1
        return None

    def others(self) -> int:
        """Rooms open besides the bridge's."""
        return len(self.rooms) - (self.bridge_room in self.rooms)

    def release(self, room: str, ip: str) -> bool:
        """A connection left ``room``; True when that emptied the room (it is gone)."""
        self.total -= 1
        _take_one(self._by_address, ip)
        return _take_one(self.rooms, room)


def _take_one(counts: Counter[str], key: str) -> bool:
    """One less under ``key``, forgotten at zero (a Counter keeps zeros); True if so."""
    left = counts[key] - 1
    if left > 0:
        counts[key] = left
        return False
    del counts[key]
    return True
