"""The live game list: DirectPlay sessions seen on any path, expiring when no longer announced.

Contract:

* Rule 1. A session is identified by its instance GUID (DPSESSIONDESC2.guidInstance for
  DirectPlay 4, ApplicationInstanceGUID for DirectPlay 8). Every EnumSessionsReply or
  EnumResponse seen refreshes it; the newest announcement wins.
* Rule 2. A session not refreshed for ``expiry`` seconds (60 s by default) disappears.
* Rule 3. The table is bounded (``max_sessions``); when full, the least recently seen entry
  makes room, so a flood of forged replies cannot grow memory.

Pure: ``now`` is a monotonic time passed in; rendering converts to wall-clock time with a
second clock reading supplied by the caller.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ipxbridge.wire.directplay import DP8EnumResponse, EnumSessionsReply, format_guid

DP4_PASSWORD_REQUIRED = 0x0400  # DPSESSION_PASSWORDREQUIRED (protocols.md 1.6)
DP4_JOIN_DISABLED = 0x0020  # DPSESSION_JOINDISABLED (Wireshark labels it with the wrong sense)
DP4_NEW_PLAYERS_DISABLED = 0x0001


@dataclass(slots=True)
class Session:
    """One live game session."""

    instance_guid: UUID
    game_guid: UUID
    game: str | None
    session_name: str | None
    players: int
    max_players: int
    password: bool
    join_disabled: bool
    flags: int
    host: str
    transport: str  # ipx | dp4-udp | dp4-tcp | dp8
    version: int  # DirectPlay 4 or 8
    first_seen: float
    last_seen: float
    user: tuple[int, int, int, int] | None = None


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
        self._sessions: dict[UUID, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def observe_dp4(
        self, reply: EnumSessionsReply, host: str, transport: str, now: float
    ) -> Session:
        """Record a DirectPlay 4 EnumSessionsReply ([MC-DPL4CS] 2.2.x, protocols.md 1.5)."""
        desc = reply.desc
        return self._upsert(
            instance=desc.instance_guid,
            game_guid=desc.application_guid,
            name=reply.name,
            players=desc.current_players,
            max_players=desc.max_players,
            password=bool(desc.flags & DP4_PASSWORD_REQUIRED),
            join_disabled=bool(desc.flags & (DP4_JOIN_DISABLED | DP4_NEW_PLAYERS_DISABLED)),
            flags=desc.flags,
            host=host,
            transport=transport,
            version=4,
            now=now,
            user=desc.user,
        )

    def observe_dp8(self, resp: DP8EnumResponse, host: str, now: float) -> Session:
        """Record a DirectPlay 8 EnumResponse ([MC-DPLHP] 2.2.2, protocols.md 2.3)."""
        return self._upsert(
            instance=resp.instance_guid,
            game_guid=resp.application_guid,
            name=resp.session_name,
            players=resp.current_players,
            max_players=resp.max_players,
            password=resp.password_required,
            join_disabled=False,
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
        max_players: int,
        password: bool,
        join_disabled: bool,
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
            max_players=max_players,
            password=password,
            join_disabled=join_disabled,
            flags=flags,
            host=host,
            transport=transport,
            version=version,
            first_seen=first_seen,
            last_seen=now,
            user=user,
        )
        sessions[instance] = session  # re-inserted: dict order is least recently seen first
        if len(sessions) > self.max_sessions:
            del sessions[next(iter(sessions))]
        return session

    def expire(self, now: float) -> int:
        """Forget sessions not announced for ``expiry`` seconds; returns how many."""
        sessions = self._sessions
        removed = 0
        for key, session in list(sessions.items()):
            if now - session.last_seen <= self.expiry:
                break
            del sessions[key]
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


def session_json(session: Session, now: float, wall_now: float) -> dict[str, Any]:
    """JSON form of a session (keys fixed by issue 3; extra keys are additions)."""

    def wall(t: float) -> str:
        stamp = datetime.fromtimestamp(wall_now - (now - t), tz=UTC)
        return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")

    return {
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
        "join_disabled": session.join_disabled,
        "flags": session.flags,
        "directplay_version": session.version,
        "user": [f"0x{u:08x}" for u in session.user] if session.user else None,
    }
