"""DirectPlay 4 and DirectPlay 8 message codec: classification, parsing and building.

Sources: ``docs/protocols.md`` sections 1 (DirectPlay 4, [MC-DPL4CS]), 2 (DirectPlay 8,
[MC-DPLHP] / [MS-DPDX] / [MC-DPL8R]) and 9 (what Wireshark does and does not check).

Contract:

* Rule 1. ``classify`` tries DirectPlay 4 before DirectPlay 8 (docs/protocols.md 2.5): a DP4
  message of exactly 512 or 768 bytes starts ``00 02`` / ``00 03`` because its size field is
  little-endian, which the DP8 test alone would take for an EnumQuery / EnumResponse. DP8
  reliable-protocol frames (CFRAME / DFRAME) are only recognised with ``dp8_context=True``
  (the payload used a DP8 port), because almost any byte soup has a non-zero first byte.
* Rule 2. Offsets inside DP4 messages count from the ``play`` signature, not from byte 0
  (docs/protocols.md 1.2, "trap"); offsets in a DP8 EnumResponse count from byte 4, the byte after
  the cookie (docs/protocols.md 2.3). Every offset and length is checked against the buffer before
  it is used, and an offset may not point back into the fixed part of its structure.
* Rule 3. Malformed remote input raises ``DPlayError`` with a reason from ``DPLAY_REASONS``
  and never any other exception (no IndexError, struct.error, UnicodeDecodeError, ...).
  An unknown DP4 command is not an error: the message is returned with ``parsed=None`` and its
  body kept raw. ``parse_dplay`` raises ``DPlayError("not_dplay")`` when ``classify`` says
  ``NONE``; for every other kind it returns a ``DPlayMessage``.
* Rule 4. Parsers follow offsets and sizes and ignore bytes nothing points at (as DirectPlay
  and Wireshark do). Builders write the canonical layout: variable fields in declaration order
  straight after the fixed part, absent fields as offset 0 / size 0, the SP header size
  computed from the real length. So ``parse(build(x)) == x`` for every record the builder
  accepts, and ``build(parse(b)) == b`` for canonically laid-out bytes (all shared vectors).
* Rule 5. Strings are UTF-16LE with a NUL terminator. A string located by an offset ends at
  its first NUL (which must exist, except for an EnumSessionsReply's SessionName: the message
  size bounds it, so a name running to the end of the message is accepted); a string with a
  byte count must be of even length and contain no NUL but an optional final one. Unpaired
  surrogates are kept (``surrogatepass``) so re-encoding is byte-exact. (The one exception to
  Rule 4: a ``str`` holding a surrogate pair as two code points encodes as that pair and reads
  back as one character.)
* Rule 6. Builders raise ``ValueError`` for local misuse (a value that does not fit its field,
  a record whose parts contradict each other, a string containing NUL). That is a bug in the
  caller, not remote input.
* Rule 7. ``play`` followed by 0xFF is DirectPlay's own reliable protocol
  (DPSESSION_DIRECTPLAYPROTOCOL, 0x2000), not a DPSP message: no command, no version. It is
  parsed to a ``DP4Message`` with ``reliable=True``, command 0xFF, version 0 and the bytes after
  the 0xFF kept raw; never ``dplay_bad_version``. Its frame layout is not in our notes.
* Rule 8. Versions 0x01 (DX3) to 0x0E (DX9) are accepted: DX3 = 1, DX5 = 7, DX5a = 8 as well as
  the 0x09..0x0E of docs/protocols.md 1.3 (older hosts still answer enumeration).

DP4 over the IPX service provider carries no 20-byte SP header: the IPX data starts with
``play`` (docs/protocols.md 1.9); that is ``DPlayKind.DP4_BARE`` and ``header=None``.

This module is the public API. It holds classification and dispatch, and re-exports the
parts, so callers import everything from here: DP4's envelope (``wire.dplay_header``: the SP
header, SOCKADDR_IN, the ``play`` header and its commands), its session records
(``wire.dplay_sessions``: DPSESSIONDESC2, EnumSessions and its reply), its messages
(``wire.dplay4``), the player records (``wire.dplay_players``), the DP8 codec
(``wire.dplay8``), ``DPlayError`` and the GUID helpers.
"""

import struct
from enum import StrEnum
from typing import Final

from ipxbridge.wire.dplay4 import (
    PACKET_COMMANDS,
    PACKET_DATA_OFFSET,
    DP4Message,
    PacketFragment,
    build_dp4,
    build_dp4_message,
    build_dp4_player,
    build_enum_sessions,
    build_enum_sessions_reply,
    build_packet_fragment,
    parse_dp4,
    parse_dp4_player,
)
from ipxbridge.wire.dplay8 import (
    DP8_APP_DESC_SIZE,
    DP8_CFRAME,
    DP8_CFRAME_LEN,
    DP8_CONNECT_OPCODES,
    DP8_CONTROL_KEEPALIVE,
    DP8_CONTROL_MASK_BITS,
    DP8_DATA,
    DP8_DFRAME_LEN,
    DP8_ENUM_PORT,
    DP8_ENUM_QUERY,
    DP8_ENUM_RESPONSE,
    DP8_LEAD_ENUM,
    DP8_POLL,
    DP8_QUERY_ANY,
    DP8_QUERY_GUID_MIN,
    DP8_QUERY_MIN,
    DP8_QUERY_WITH_GUID,
    DP8_RESPONSE_LEN,
    DP8_SACK_LEN,
    DP8_SACK_MASK_BITS,
    DP8_SACK_RESPONSE,
    DP8_SESSION_CLIENT_SERVER,
    DP8_SESSION_MIGRATE_HOST,
    DP8_SESSION_NODPNSVR,
    DP8_SESSION_NOENUMS,
    DP8_SESSION_REQUIRE_PASSWORD,
    DP8DataFrame,
    DP8EnumQuery,
    DP8EnumResponse,
    DP8ExtOpcode,
    DP8Frame,
    DP8Sack,
    build_dp8_enum_query,
    build_dp8_enum_response,
    build_dp8_frame,
    dp8_frame_name,
    parse_dp8_enum_query,
    parse_dp8_enum_response,
    parse_dp8_frame,
)
from ipxbridge.wire.dplay_fields import (
    as_bytes,
)
from ipxbridge.wire.dplay_header import (
    AF_INET_WIRE,
    DP4_ENUM_PORT,
    DP4_HEADER_LEN,
    DP8_QUERY_LEAD,
    MAX_STREAM_MESSAGE,
    MESSAGE_HEADER_LEN,
    RELIABLE_MARK,
    RELIABLE_NAME,
    SIGNATURE,
    SIGNATURE_END,
    SIGNATURE_OFFSET,
    SIZE_MASK,
    SOCKADDR_LEN,
    SP_HEADER_LEN,
    TOKEN_FORWARD,
    TOKEN_REMOTE,
    TOKEN_SERVER,
    TOKEN_SHIFT,
    TOKENS,
    VERSION_DX3,
    VERSION_DX5,
    VERSION_DX5A,
    VERSION_DX9,
    VERSION_MAX,
    VERSION_MIN,
    DP4Command,
    SockAddr,
    SPHeader,
    build_sockaddr,
    build_winsock_sp_data,
    command_name,
    dp4_command_of,
    has_dplay_lead,
    parse_sockaddr,
    parse_winsock_sp_data,
    peek_dp4,
    rewrite_sockaddr,
    split_dp4_stream,
)
from ipxbridge.wire.dplay_players import (
    PLAYER_IN_GROUP,
    PLAYER_LOCAL,
    PLAYER_NAME_SERVER,
    PLAYER_SYSTEM,
    SPP_LONG_NAME,
    SPP_PARENT_ID,
    SPP_PLAYER_COUNT_SHIFT,
    SPP_PLAYER_DATA_SHIFT,
    SPP_SHORT_NAME,
    SPP_SHORTCUT_COUNT_SHIFT,
    SPP_SP_LENGTH_SHIFT,
    PackedPlayer,
    SuperPackedPlayer,
    build_packed_player,
    build_super_packed_player,
    parse_packed_player,
    parse_super_packed_player,
)
from ipxbridge.wire.dplay_sessions import (
    ENUM_SESSIONS_ALL,
    ENUM_SESSIONS_AVAILABLE,
    ENUM_SESSIONS_PASSWORD,
    ENUM_SESSIONS_PASSWORD_OFFSET,
    ENUM_SESSIONS_REPLY_NAME_OFFSET,
    ENUM_SESSIONS_RETURNSTATUS,
    SESSION_CLIENT_SERVER,
    SESSION_DESC_LEN,
    SESSION_DIRECTPLAY_PROTOCOL,
    SESSION_JOIN_DISABLED,
    SESSION_KEEPALIVE,
    SESSION_MIGRATE_HOST,
    SESSION_NEW_PLAYERS_DISABLED,
    SESSION_NO_MESSAGE_ID,
    SESSION_PASSWORD_REQUIRED,
    EnumSessions,
    EnumSessionsReply,
    SessionDesc,
    build_session_desc,
    parse_session_desc,
)
from ipxbridge.wire.errors import (
    DPLAY_REASONS,
    DPlayError,
)
from ipxbridge.wire.guid import (
    format_guid,
    guid_from_wire,
    guid_to_wire,
)

__all__ = [
    "AF_INET_WIRE",
    "DP4_ENUM_PORT",
    "DP4_HEADER_LEN",
    "DP8_APP_DESC_SIZE",
    "DP8_CONTROL_KEEPALIVE",
    "DP8_CONTROL_MASK_BITS",
    "DP8_ENUM_PORT",
    "DP8_QUERY_LEAD",
    "DP8_SACK_MASK_BITS",
    "DP8_SACK_RESPONSE",
    "DP8_SESSION_CLIENT_SERVER",
    "DP8_SESSION_MIGRATE_HOST",
    "DP8_SESSION_NODPNSVR",
    "DP8_SESSION_NOENUMS",
    "DP8_SESSION_REQUIRE_PASSWORD",
    "DPLAY_REASONS",
    "ENUM_SESSIONS_ALL",
    "ENUM_SESSIONS_AVAILABLE",
    "ENUM_SESSIONS_PASSWORD",
    "ENUM_SESSIONS_PASSWORD_OFFSET",
    "ENUM_SESSIONS_REPLY_NAME_OFFSET",
    "ENUM_SESSIONS_RETURNSTATUS",
    "MAX_STREAM_MESSAGE",
    "MESSAGE_HEADER_LEN",
    "PACKET_COMMANDS",
    "PACKET_DATA_OFFSET",
    "PLAYER_IN_GROUP",
    "PLAYER_LOCAL",
    "PLAYER_NAME_SERVER",
    "PLAYER_SYSTEM",
    "RELIABLE_MARK",
    "RELIABLE_NAME",
    "SESSION_CLIENT_SERVER",
    "SESSION_DESC_LEN",
    "SESSION_DIRECTPLAY_PROTOCOL",
    "SESSION_JOIN_DISABLED",
    "SESSION_KEEPALIVE",
    "SESSION_MIGRATE_HOST",
    "SESSION_NEW_PLAYERS_DISABLED",
    "SESSION_NO_MESSAGE_ID",
    "SESSION_PASSWORD_REQUIRED",
    "SIGNATURE",
    "SIGNATURE_OFFSET",
    "SIZE_MASK",
    "SOCKADDR_LEN",
    "SPP_LONG_NAME",
    "SPP_PARENT_ID",
    "SPP_PLAYER_COUNT_SHIFT",
    "SPP_PLAYER_DATA_SHIFT",
    "SPP_SHORTCUT_COUNT_SHIFT",
    "SPP_SHORT_NAME",
    "SPP_SP_LENGTH_SHIFT",
    "SP_HEADER_LEN",
    "TOKENS",
    "TOKEN_FORWARD",
    "TOKEN_REMOTE",
    "TOKEN_SERVER",
    "TOKEN_SHIFT",
    "VERSION_DX3",
    "VERSION_DX5",
    "VERSION_DX5A",
    "VERSION_DX9",
    "VERSION_MAX",
    "VERSION_MIN",
    "DP4Command",
    "DP4Message",
    "DP8DataFrame",
    "DP8EnumQuery",
    "DP8EnumResponse",
    "DP8ExtOpcode",
    "DP8Frame",
    "DP8Sack",
    "DPlayError",
    "DPlayKind",
    "DPlayMessage",
    "EnumSessions",
    "EnumSessionsReply",
    "PackedPlayer",
    "PacketFragment",
    "SPHeader",
    "SessionDesc",
    "SockAddr",
    "SuperPackedPlayer",
    "build_dp4",
    "build_dp4_message",
    "build_dp4_player",
    "build_dp8_enum_query",
    "build_dp8_enum_response",
    "build_dp8_frame",
    "build_dplay",
    "build_enum_sessions",
    "build_enum_sessions_reply",
    "build_packed_player",
    "build_packet_fragment",
    "build_session_desc",
    "build_sockaddr",
    "build_super_packed_player",
    "build_winsock_sp_data",
    "classify",
    "command_name",
    "dp4_command_of",
    "dp8_frame_name",
    "format_guid",
    "guid_from_wire",
    "guid_to_wire",
    "has_dplay_lead",
    "parse_dp4",
    "parse_dp4_player",
    "parse_dp8_enum_query",
    "parse_dp8_enum_response",
    "parse_dp8_frame",
    "parse_dplay",
    "parse_packed_player",
    "parse_session_desc",
    "parse_sockaddr",
    "parse_super_packed_player",
    "parse_winsock_sp_data",
    "peek_dp4",
    "rewrite_sockaddr",
    "split_dp4_stream",
]

_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_ZERO8: Final = bytes(8)


class DPlayKind(StrEnum):
    """What ``classify`` thinks a payload is (docs/protocols.md 2.5)."""

    DP4 = "dp4"  # DPSP message with the 20-byte SP header then 'play' (UDP/TCP)
    DP4_BARE = "dp4_bare"  # payload starts with 'play' (IPX SP, docs/protocols.md 1.9)
    DP4_PLAYER = "dp4_player"  # token + AF_INET sockaddr, no 'play': player-to-player data
    DP8_ENUM_QUERY = "dp8_enum_query"
    DP8_ENUM_RESPONSE = "dp8_enum_response"
    DP8_CFRAME = "dp8_cframe"  # connect/connected/.../SACK control frames
    DP8_DFRAME = "dp8_dframe"
    NONE = "none"


# --- classification and dispatch -------------------------------------------------------------

DPlayMessage = DP4Message | DP8EnumQuery | DP8EnumResponse | DP8Frame


def _classify_dp8(data: bytes, *, dp8_context: bool) -> DPlayKind:
    size = len(data)
    if size >= DP8_QUERY_MIN and data[0] == DP8_LEAD_ENUM:
        query_type = data[4]
        if data[1] == DP8_ENUM_QUERY and (
            query_type == DP8_QUERY_ANY
            or (query_type == DP8_QUERY_WITH_GUID and size >= DP8_QUERY_GUID_MIN)
        ):
            return DPlayKind.DP8_ENUM_QUERY
        if data[1] == DP8_ENUM_RESPONSE and size >= DP8_RESPONSE_LEN:
            return DPlayKind.DP8_ENUM_RESPONSE
    if not dp8_context or not size:
        return DPlayKind.NONE
    command = data[0]
    if command & DP8_DATA:
        return DPlayKind.DP8_DFRAME if size >= DP8_DFRAME_LEN else DPlayKind.NONE
    # docs/protocols.md 2.4: 0x80 or 0x88; a CFRAME with any other bit set is ignored.
    if command & DP8_CFRAME and not command & ~(DP8_CFRAME | DP8_POLL) and size >= DP8_SACK_LEN:
        opcode = data[1]
        if opcode == DP8ExtOpcode.SACK or (
            opcode in DP8_CONNECT_OPCODES and size >= DP8_CFRAME_LEN
        ):
            return DPlayKind.DP8_CFRAME
    return DPlayKind.NONE


def classify(payload: bytes | bytearray | memoryview, *, dp8_context: bool = False) -> DPlayKind:
    """Tell the DirectPlay formats apart without decoding them (docs/protocols.md 2.5). Total.

    In this order:

    1. ``DP4``: a valid SP token and ``play`` at byte 20;
    2. ``DP4_PLAYER``: a valid SP token, AF_INET and zero ``sin_zero``, no ``play``
       (Wireshark's second heuristic);
    3. ``DP4_BARE``: ``play`` at byte 0, at least 8 bytes (5 for ``play`` + 0xFF, a
       reliable-protocol frame);
    4. ``DP8_ENUM_QUERY``: ``00 02``, type 2 (>= 5 bytes) or type 1 (>= 21 bytes);
       ``DP8_ENUM_RESPONSE``: ``00 03``, >= 92 bytes;
    5. only with ``dp8_context``: ``DP8_DFRAME`` (bit 0x01, >= 4 bytes) and ``DP8_CFRAME``
       (0x80/0x88 with a known opcode: SACK >= 12 bytes, the connect family >= 16).

    Steps 1 and 2 come first because a 512- or 768-byte DP4 message starts ``00 02`` /
    ``00 03`` (little-endian size), exactly like a DP8 enumeration packet.
    """
    data = as_bytes(payload)
    if len(data) >= SP_HEADER_LEN and _U32.unpack_from(data)[0] >> TOKEN_SHIFT in TOKENS:
        if data[SP_HEADER_LEN:SIGNATURE_END] == SIGNATURE:
            return DPlayKind.DP4
        if _U16.unpack_from(data, 4)[0] == AF_INET_WIRE and data[12:SP_HEADER_LEN] == _ZERO8:
            return DPlayKind.DP4_PLAYER
    if data.startswith(SIGNATURE) and (
        len(data) >= MESSAGE_HEADER_LEN
        or (len(data) > len(SIGNATURE) and data[len(SIGNATURE)] == RELIABLE_MARK)
    ):
        return DPlayKind.DP4_BARE
    return _classify_dp8(data, dp8_context=dp8_context)


def parse_dplay(
    payload: bytes | bytearray | memoryview, *, dp8_context: bool = False
) -> DPlayMessage:
    """Classify and decode one payload.

    ``DP4_PLAYER`` decodes to a ``DP4Message`` with ``signature=False``; CFRAMEs and DFRAMEs
    to a ``DP8Frame``.

    Raises:
        DPlayError: ``not_dplay`` when ``classify`` says ``NONE``, otherwise any reason of
            the parser for the kind.
    """
    data = as_bytes(payload)
    kind = classify(data, dp8_context=dp8_context)
    match kind:
        case DPlayKind.DP4:
            return parse_dp4(data)
        case DPlayKind.DP4_BARE:
            return parse_dp4(data, bare=True)
        case DPlayKind.DP4_PLAYER:
            return parse_dp4_player(data)
        case DPlayKind.DP8_ENUM_QUERY:
            return parse_dp8_enum_query(data)
        case DPlayKind.DP8_ENUM_RESPONSE:
            return parse_dp8_enum_response(data)
        case DPlayKind.DP8_CFRAME | DPlayKind.DP8_DFRAME:
            return parse_dp8_frame(data)
        case DPlayKind.NONE:
            raise DPlayError("not_dplay", f"{len(data)} bytes, no DirectPlay format matches")


def build_dplay(msg: DPlayMessage) -> bytes:
    """Encode any decoded message (DP4 from its raw body).

    Raises:
        ValueError: as the builder for the type.
    """
    if isinstance(msg, DP4Message):
        return build_dp4_message(msg)
    if isinstance(msg, DP8EnumQuery):
        return build_dp8_enum_query(msg)
    if isinstance(msg, DP8EnumResponse):
        return build_dp8_enum_response(msg)
    return build_dp8_frame(msg)
