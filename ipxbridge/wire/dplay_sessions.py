"""DirectPlay 4's session records: DPSESSIONDESC2, EnumSessions and EnumSessionsReply.

Sources: docs/protocols.md 1.4 (DPSP_MSG_ENUMSESSIONS), 1.5 (DPSP_MSG_ENUMSESSIONSREPLY) and
1.6 (DPSESSIONDESC2). The bodies only: offsets count from ``play`` (wire/directplay.py Rule
2); ``wire/dplay4.py`` puts a body in its message, and ``wire/directplay.py`` re-exports
everything here.
"""

import struct
from dataclasses import dataclass
from typing import Final
from uuid import UUID

from ipxbridge.wire.dplay_fields import (
    as_bytes,
    check_offset,
    encode_string,
    need,
    pack,
    read_nul_string,
)
from ipxbridge.wire.dplay_header import MESSAGE_HEADER_LEN
from ipxbridge.wire.errors import DPlayError
from ipxbridge.wire.guid import guid_from_wire, guid_to_wire

_U32: Final = struct.Struct("<I")

# DPSP_MSG_ENUMSESSIONS flags (docs/protocols.md 1.4).
ENUM_SESSIONS_AVAILABLE: Final = 0x01  # AV: joinable sessions
ENUM_SESSIONS_ALL: Final = 0x02  # AL: all sessions
ENUM_SESSIONS_PASSWORD: Final = 0x40  # PR: include password-protected sessions
ENUM_SESSIONS_RETURNSTATUS: Final = 0x80  # API flag seen on the wire (Total Annihilation 0x81)

# DPSESSIONDESC2.dwFlags (docs/protocols.md 1.6, mingw dplay.h DPSESSION_*).
SESSION_NEW_PLAYERS_DISABLED: Final = 0x0000_0001
SESSION_MIGRATE_HOST: Final = 0x0000_0004
SESSION_NO_MESSAGE_ID: Final = 0x0000_0008
SESSION_JOIN_DISABLED: Final = 0x0000_0020  # Wireshark's "can join" label has the wrong sense
SESSION_KEEPALIVE: Final = 0x0000_0040
SESSION_PASSWORD_REQUIRED: Final = 0x0000_0400
SESSION_CLIENT_SERVER: Final = 0x0000_1000
SESSION_DIRECTPLAY_PROTOCOL: Final = 0x0000_2000


@dataclass(frozen=True)
class EnumSessions:
    """DPSP_MSG_ENUMSESSIONS body (docs/protocols.md 1.4).

    PasswordOffset is derived: 0 without a password, 32 (from ``play``) with one.
    """

    application_guid: UUID
    flags: int
    password: str | None


@dataclass(frozen=True)
class SessionDesc:
    """DPSESSIONDESC2, 80 bytes little-endian (docs/protocols.md 1.6).

    ``pointers`` are the lpszSessionName / lpszPassword slots, 0 on the wire; kept so that an
    odd sender's bytes re-encode exactly. dwSize must be 80.
    """

    flags: int
    instance_guid: UUID
    application_guid: UUID
    max_players: int
    current_players: int
    user: tuple[int, int, int, int]
    reserved: tuple[int, int] = (0, 0)
    pointers: tuple[int, int] = (0, 0)

    @property
    def password_required(self) -> bool:
        """DPSESSION_PASSWORDREQUIRED (0x400)."""
        return bool(self.flags & SESSION_PASSWORD_REQUIRED)

    @property
    def join_disabled(self) -> bool:
        """DPSESSION_JOINDISABLED (0x20); Wireshark labels this bit "can join"."""
        return bool(self.flags & SESSION_JOIN_DISABLED)

    @property
    def new_players_disabled(self) -> bool:
        """DPSESSION_NEWPLAYERSDISABLED (0x1)."""
        return bool(self.flags & SESSION_NEW_PLAYERS_DISABLED)


@dataclass(frozen=True)
class EnumSessionsReply:
    """DPSP_MSG_ENUMSESSIONSREPLY body (docs/protocols.md 1.5): the description and the name.

    NameOffset is derived: 0 without a name, 92 (from ``play``) with one.
    """

    desc: SessionDesc
    name: str | None


# DPSP_MSG_ENUMSESSIONS: ApplicationGuid, PasswordOffset, Flags (docs/protocols.md 1.4).
_ENUM_SESSIONS: Final = struct.Struct("<16sII")
ENUM_SESSIONS_PASSWORD_OFFSET: Final = MESSAGE_HEADER_LEN + _ENUM_SESSIONS.size  # 32
# DPSESSIONDESC2 (docs/protocols.md 1.6): dwSize, dwFlags, guidInstance, guidApplication,
# dwMaxPlayers, dwCurrentPlayers, lpszSessionName, lpszPassword, dwReserved1..2, dwUser1..4.
_SESSION_DESC: Final = struct.Struct("<II16s16sIIIIII4I")
SESSION_DESC_LEN: Final = _SESSION_DESC.size  # 80
ENUM_SESSIONS_REPLY_NAME_OFFSET: Final = MESSAGE_HEADER_LEN + SESSION_DESC_LEN + 4  # 92


def parse_session_desc(data: bytes | bytearray | memoryview) -> SessionDesc:
    """Decode a DPSESSIONDESC2 from the first 80 bytes of ``data``.

    Raises:
        DPlayError: ``dplay_truncated`` (< 80 bytes) or ``dplay_bad_size`` (dwSize != 80).
    """
    buf = as_bytes(data)
    need(buf, SESSION_DESC_LEN, "DPSESSIONDESC2")
    (size, flags, instance, app, max_p, cur_p, p_name, p_pw, res1, res2, *user) = (
        _SESSION_DESC.unpack_from(buf)
    )
    if size != SESSION_DESC_LEN:
        raise DPlayError("dplay_bad_size", f"DPSESSIONDESC2.dwSize {size}, expected 80")
    return SessionDesc(
        flags=flags,
        instance_guid=guid_from_wire(instance),
        application_guid=guid_from_wire(app),
        max_players=max_p,
        current_players=cur_p,
        user=(user[0], user[1], user[2], user[3]),
        reserved=(res1, res2),
        pointers=(p_name, p_pw),
    )


def build_session_desc(desc: SessionDesc) -> bytes:
    """Encode a DPSESSIONDESC2 (80 bytes).

    Raises:
        ValueError: a field does not fit 32 bits.
    """
    return pack(
        _SESSION_DESC,
        SESSION_DESC_LEN,
        desc.flags,
        guid_to_wire(desc.instance_guid),
        guid_to_wire(desc.application_guid),
        desc.max_players,
        desc.current_players,
        *desc.pointers,
        *desc.reserved,
        *desc.user,
    )


def parse_enum_sessions_body(msg: bytes) -> EnumSessions:
    """An EnumSessions body; ``msg`` starts at ``play``, and offsets count from there."""
    need(msg, ENUM_SESSIONS_PASSWORD_OFFSET, "EnumSessions")
    guid, password_offset, flags = _ENUM_SESSIONS.unpack_from(msg, MESSAGE_HEADER_LEN)
    password = None
    if password_offset:
        check_offset(password_offset, ENUM_SESSIONS_PASSWORD_OFFSET, len(msg), "PasswordOffset")
        password, _ = read_nul_string(msg, password_offset, "password")
    return EnumSessions(guid_from_wire(guid), flags, password)


def parse_enum_sessions_reply_body(msg: bytes) -> EnumSessionsReply:
    """An EnumSessionsReply body; ``msg`` starts at ``play``."""
    need(msg, ENUM_SESSIONS_REPLY_NAME_OFFSET, "EnumSessionsReply")
    desc = parse_session_desc(msg[MESSAGE_HEADER_LEN : MESSAGE_HEADER_LEN + SESSION_DESC_LEN])
    name_offset = _U32.unpack_from(msg, MESSAGE_HEADER_LEN + SESSION_DESC_LEN)[0]
    name = None
    if name_offset:
        check_offset(name_offset, ENUM_SESSIONS_REPLY_NAME_OFFSET, len(msg), "NameOffset")
        # The message's own size bounds the name: a missing NUL is tolerated
        # (wire/directplay.py Rule 5).
        name, _ = read_nul_string(msg, name_offset, "session name", terminated=False)
    return EnumSessionsReply(desc, name)


def build_enum_sessions_body(msg: EnumSessions) -> bytes:
    """What follows the ``play`` header of DPSP_MSG_ENUMSESSIONS (docs/protocols.md 1.4).

    Raises:
        ValueError: a field does not fit, or the password contains NUL.
    """
    password = encode_string(msg.password)
    offset = ENUM_SESSIONS_PASSWORD_OFFSET if msg.password is not None else 0
    return pack(_ENUM_SESSIONS, guid_to_wire(msg.application_guid), offset, msg.flags) + password


def build_enum_sessions_reply_body(msg: EnumSessionsReply) -> bytes:
    """What follows the ``play`` header of DPSP_MSG_ENUMSESSIONSREPLY; NameOffset 92 or 0.

    Raises:
        ValueError: a field does not fit, or the name contains NUL.
    """
    name = encode_string(msg.name)
    offset = ENUM_SESSIONS_REPLY_NAME_OFFSET if msg.name is not None else 0
    return build_session_desc(msg.desc) + _U32.pack(offset) + name
