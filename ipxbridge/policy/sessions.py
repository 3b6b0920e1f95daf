"""The live game list: DirectPlay sessions seen on any path, expiring when no longer announced.

Contract:

* Rule 1. A session is identified by its instance GUID (DPSESSIONDESC2.guidInstance for
  DirectPlay 4, ApplicationInstanceGUID for DirectPlay 8). Every EnumSessionsReply or
  EnumResponse seen refreshes it; the newest announcement wins.
* Rule 2. A session not refreshed for ``expiry`` seconds (60 s by default) disappears.
* Rule 3. The table is bounded (``max_sessions``); when full, the least recently seen entry
  makes room, so a flood of forged replies cannot grow memory.
* Rule 4. Whether a session is open comes from every field that says so (``Lobby``): the
  DirectPlay flags and, for games in ``wire.dplay_user``'s table, the game's own user fields
  (docs/protocols.md 1.6.1: Star Trek: Armada keeps password, closed and started there and sends
  dwMaxPlayers 0). Either source saying "password" or "closed" makes the session not open.
  A field nothing announces is None ("unknown"), never a guess.

Pure: ``now`` is a monotonic time passed in; rendering converts to wall-clock time with a
second clock reading supplied by the caller.
"""

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ipxbridge.wire.directplay import (
    SESSION_JOIN_DISABLED,
    SESSION_NEW_PLAYERS_DISABLED,
    SESSION_PASSWORD_REQUIRED,
    DP8EnumResponse,
    EnumSessionsReply,
    SessionDesc,
    format_guid,
)
from ipxbridge.wire.dplay_user import decode_user_fields, user_bytes


@dataclass(frozen=True)
class Lobby:
    """How a session can be joined, from every field of its announcement that says so.

    Attributes:
        max_players: the maximum number of players; None means no limit (DirectPlay 8
            MaxPlayers 0, docs/protocols.md 2.3). For DirectPlay 4 it is dwMaxPlayers unless the
            game's user fields carry the real one (Armada sends dwMaxPlayers 0).
        password: a password is needed (DPSESSION_PASSWORDREQUIRED 0x400, DP8
            REQUIREPASSWORD 0x80, or the game's own bit).
        join_disabled: joining is closed (DPSESSION_JOINDISABLED 0x20 or NEWPLAYERSDISABLED
            0x1, or the game's own bit); None for DirectPlay 8, which announces no such flag.
        started: the match is running; None unless the game's user fields say.
        head_to_head: a one-against-one match; None unless the game's user fields say.
        map: the map name; None unless the game's user fields carry one.
    """

    max_players: int | None
    password: bool
    join_disabled: bool | None
    started: bool | None = None
    head_to_head: bool | None = None
    map: str | None = None

    @property
    def open(self) -> bool:
        """Joinable as far as the announcement tells: no password, not closed, not started."""
        return not self.password and self.join_disabled is not True and self.started is not True


def dp4_lobby(desc: SessionDesc) -> Lobby:
    """The lobby state of a DirectPlay 4 session.

    Flags: docs/protocols.md 1.6; user fields: 1.6.1.
    """
    password = bool(desc.flags & SESSION_PASSWORD_REQUIRED)
    join_disabled = bool(desc.flags & (SESSION_JOIN_DISABLED | SESSION_NEW_PLAYERS_DISABLED))
    game = decode_user_fields(desc.application_guid, desc.user)
    if game is None:
        return Lobby(desc.max_players, password, join_disabled)
    return Lobby(
        max_players=desc.max_players if game.max_players is None else game.max_players,
        password=password or bool(game.password),
        join_disabled=join_disabled or bool(game.closed),
        started=game.started,
        head_to_head=game.head_to_head,
        map=game.map,
    )


def dp8_lobby(resp: DP8EnumResponse) -> Lobby:
    """The lobby state of a DirectPlay 8 session (docs/protocols.md 2.3)."""
    # MaxPlayers 0 is DirectPlay 8's "no limit" (DPN_APPLICATION_DESC), shown as such.
    return Lobby(resp.max_players or None, resp.password_required, None)


def lobby_json(lobby: Lobby) -> dict[str, Any]:
    """The lobby keys shared by ``/api/sessions`` and ``decode --json`` (fixed names)."""
    return {
        "max_players": lobby.max_players,
        "password": lobby.password,
        "join_disabled": lobby.join_disabled,
        "started": lobby.started,
        "head_to_head": lobby.head_to_head,
        "map": lobby.map,
        "open": lobby.open,
    }


def user_hex(user: tuple[int, int, int, int]) -> str:
    """dwUser1..4 as hex in wire order, one group per word (``00034400 6d617031 ...``)."""
    raw = user_bytes(user)
    return " ".join(raw[i : i + 4].hex() for i in range(0, len(raw), 4))


def players_text(players: int | None, max_players: int | None) -> str:
    """``3/8``, or ``3/unlimited`` for a session with no maximum (never ``3/0``)."""
    return f"{players}/{'unlimited' if max_players is None else max_players}"


def stale_after(expiry: float, probe_interval: float) -> float:
    """Seconds without an announcement after which a session is shown as not answering.

    With probing on, a live host answers every round: missing two and a half rounds means
    it stopped. Without, announcements come only when someone searches, so half the expiry.
    It is never past the expiry itself (then the session is gone, rule 2).
    """
    if probe_interval > 0:
        return min(2.5 * probe_interval, expiry)
    return expiry / 2


def status_text(item: Mapping[str, Any]) -> str:
    """``open``, or why not (``password``, ``closed``, ``started``), plus ``head-to-head``.

    Reads a ``session_json`` item, so the CLI shows the same words for a bridge's API answer.
    """
    reasons = [
        word
        for key, word in (
            ("password", "password"),
            ("join_disabled", "closed"),
            ("started", "started"),
        )
        if item.get(key)
    ]
    if item.get("head_to_head"):
        return ", ".join([*(reasons or ["open"]), "head-to-head"])
    return ", ".join(reasons) or "open"


@dataclass
class Session:
    """One live game session."""

    instance_guid: UUID
    game_guid: UUID
    game: str | None
    session_name: str | None
    players: int
    max_players: int | None  # None: no limit
    password: bool
    join_disabled: bool | None
    flags: int
    host: str
    transport: str  # ipx | dp4-udp | dp4-tcp | dp8
    version: int  # DirectPlay 4 or 8
    first_seen: float
    last_seen: float
    user: tuple[int, int, int, int] | None = None
    started: bool | None = None
    head_to_head: bool | None = None
    map: str | None = None

    @property
    def lobby(self) -> Lobby:
        """The lobby fields as one record."""
        return Lobby(
            self.max_players,
            self.password,
            self.join_disabled,
            self.started,
            self.head_to_head,
            self.map,
        )

    @property
    def open(self) -> bool:
        """Listed as open (``Lobby.open``)."""
        return self.lobby.open


class SessionTable:
    """Sessions keyed by instance GUID, with expiry and a size bound."""

    def __init__(
        self,
        games: Mapping[UUID, str],
        expiry: float = 60.0,
        max_sessions: int = 1024,
    ) -> None:
        self.games = games
        self.expiry = expiry
        self.max_sessions = max_sessions
        # Least recently announced first: eviction and expiry take the front in O(1)
        # (policy/dedup.py says why not a plain dict).
        self._sessions: OrderedDict[UUID, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def observe_dp4(
        self, reply: EnumSessionsReply, host: str, transport: str, now: float
    ) -> Session:
        """Record a DirectPlay 4 EnumSessionsReply ([MC-DPL4CS] 2.2.x, docs/protocols.md 1.5)."""
        desc = reply.desc
        return self._upsert(
            instance=desc.instance_guid,
            game_guid=desc.application_guid,
            name=reply.name,
            players=desc.current_players,
            lobby=dp4_lobby(desc),
            flags=desc.flags,
            host=host,
            transport=transport,
            version=4,
            now=now,
            user=desc.user,
        )

    def observe_dp8(self, resp: DP8EnumResponse, host: str, now: float) -> Session:
        """Record a DirectPlay 8 EnumResponse ([MC-DPLHP] 2.2.2, docs/protocols.md 2.3)."""
        return self._upsert(
            instance=resp.instance_guid,
            game_guid=resp.application_guid,
            name=resp.session_name,
            players=resp.current_players,
            lobby=dp8_lobby(resp),
            flags=resp.flags,
            host=host,
            transport="dp8",
            version=8,
            now=now,
            user=None,
        )

    def _upsert(
        self,
        *,
        instance: UUID,
        game_guid: UUID,
        name: str | None,
        players: int,
        lobby: Lobby,
        flags: int,
        host: str,
        transport: str,
        version: int,
        now: float,
        user: tuple[int, int, int, int] | None,
    ) -> Session:
        sessions = self._sessions
        old = sessions.pop(instance, None)
        first_seen = old.first_seen if old is not None else now
        session = Session(
            instance_guid=instance,
            game_guid=game_guid,
            game=self.games.get(game_guid),
            session_name=name,
            players=players,
            max_players=lobby.max_players,
            password=lobby.password,
            join_disabled=lobby.join_disabled,
            flags=flags,
            host=host,
            transport=transport,
            version=version,
            first_seen=first_seen,
            last_seen=now,
            user=user,
            started=lobby.started,
            head_to_head=lobby.head_to_head,
            map=lobby.map,
        )
        sessions[instance] = session  # re-inserted: dict order is least recently seen first
        if len(sessions) > self.max_sessions:
            sessions.popitem(last=False)
        return session

    def expire(self, now: float) -> int:
        """Forget sessions not announced for ``expiry`` seconds; returns how many."""
        sessions = self._sessions
        removed = 0
        while sessions:
            _, session = next(iter(sessions.items()))
            if now - session.last_seen <= self.expiry:
                break
            sessions.popitem(last=False)
            removed += 1
        return removed

    def snapshot(self, now: float) -> list[Session]:
        """Live sessions, newest first."""
        self.expire(now)
        return sorted(self._sessions.values(), key=lambda s: -s.last_seen)

    def players_by_game(self, now: float) -> dict[str, tuple[int, int]]:
        """(sessions, players) per game title, unknown games under ``other``."""
        out: dict[str, tuple[int, int]] = {}
        for s in self.snapshot(now):
            title = s.game or "other"
            count, players = out.get(title, (0, 0))
            out[title] = (count + 1, players + s.players)
        return out

    def sessions_by_game_and_open(self, now: float) -> dict[tuple[str, bool], int]:
        """Live sessions per (game title or ``other``, listed as open)."""
        out: dict[tuple[str, bool], int] = {}
        for s in self.snapshot(now):
            key = (s.game or "other", s.open)
            out[key] = out.get(key, 0) + 1
        return out


def session_json(session: Session, now: float, wall_now: float) -> dict[str, Any]:
    """JSON form of a session (fixed keys; extra keys are additions).

    The lobby keys are ``lobby_json``'s: ``max_players`` null means no limit, and
    ``join_disabled`` / ``started`` / ``head_to_head`` / ``map`` null mean "not announced".
    ``user`` keeps the raw dwUser1..4 words and ``user_bytes`` the same 16 bytes in wire order.
    """

    def wall(t: float) -> str:
        stamp = datetime.fromtimestamp(wall_now - (now - t), tz=UTC)
        return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")

    out: dict[str, Any] = {
        "game": session.game,
        "game_guid": format_guid(session.game_guid),
        "session_name": session.session_name,
        "players": session.players,
        "max_players": session.max_players,
        "password": session.password,
        "host": session.host,
        "transport": session.transport,
        "last_seen": wall(session.last_seen),
        "first_seen": wall(session.first_seen),
        "age_seconds": round(now - session.last_seen, 1),
        "instance_guid": format_guid(session.instance_guid),
    }
    out.update(lobby_json(session.lobby))  # join_disabled, started, head_to_head, map, open
    out.update(
        flags=session.flags,
        directplay_version=session.version,
        user=[f"0x{u:08x}" for u in session.user] if session.user else None,
        user_bytes=user_hex(session.user) if session.user else None,
    )
    return out
