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

This module is the public API. It holds the DP4 messages, classification and dispatch, and
re-exports the player records (``wire.dplay_players``), the DP8 codec (``wire.dplay8``),
``DPlayError`` and the GUID helpers, so callers import everything from here.
"""

import ipaddress
import struct
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Final
from uuid import UUID

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
    check_offset,
    check_span,
    encode_string,
    need,
    pack,
    read_nul_string,
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
from ipxbridge.wire.errors import DPLAY_REASONS, DPlayError
from ipxbridge.wire.guid import format_guid, guid_from_wire, guid_to_wire

__all__ = [
    "AF_INET_WIRE",
    "DP4_ENUM_PORT",
    "DP4_HEADER_LEN",
    "DP8_APP_DESC_SIZE",
    "DP8_CONTROL_KEEPALIVE",
    "DP8_CONTROL_MASK_BITS",
    "DP8_ENUM_PORT",
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
    "ENUM_SESSIONS_RETURNSTATUS",
    "MAX_STREAM_MESSAGE",
    "PLAYER_IN_GROUP",
    "PLAYER_LOCAL",
    "PLAYER_NAME_SERVER",
    "PLAYER_SYSTEM",
    "RELIABLE_MARK",
    "RELIABLE_NAME",
    "SESSION_CLIENT_SERVER",
    "SESSION_DIRECTPLAY_PROTOCOL",
    "SESSION_JOIN_DISABLED",
    "SESSION_KEEPALIVE",
    "SESSION_MIGRATE_HOST",
    "SESSION_NEW_PLAYERS_DISABLED",
    "SESSION_NO_MESSAGE_ID",
    "SESSION_PASSWORD_REQUIRED",
    "SIGNATURE",
    "SPP_LONG_NAME",
    "SPP_PARENT_ID",
    "SPP_PLAYER_COUNT_SHIFT",
    "SPP_PLAYER_DATA_SHIFT",
    "SPP_SHORTCUT_COUNT_SHIFT",
    "SPP_SHORT_NAME",
    "SPP_SP_LENGTH_SHIFT",
    "SP_HEADER_LEN",
    "TOKEN_FORWARD",
    "TOKEN_REMOTE",
    "TOKEN_SERVER",
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
    "dp8_frame_name",
    "format_guid",
    "guid_from_wire",
    "guid_to_wire",
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

# --- ports (docs/protocols.md 1.1 and 2.1) ------------------------------------------------------

DP4_ENUM_PORT: Final = 47624  # [MC-DPL4CS] 2.1: EnumSessions broadcast, also a TCP listener

# --- DPSP_MSG_HEADER (docs/protocols.md 1.2, [MC-DPL4CS] 2.2.6) ---------------------------------

SP_HEADER_LEN: Final = 20  # size|token (4) + SOCKADDR_IN (16); absent over IPX
MESSAGE_HEADER_LEN: Final = 8  # 'play' + command (u16 LE) + version (u16 LE)
DP4_HEADER_LEN: Final = SP_HEADER_LEN + MESSAGE_HEADER_LEN  # 28
SIGNATURE: Final = b"play"  # u32 LE 0x79616C70
_SIGNATURE_END: Final = SP_HEADER_LEN + len(SIGNATURE)  # 'play' sits at bytes 20..24
SIZE_MASK: Final = 0x000F_FFFF  # low 20 bits: whole message size including the SP header
TOKEN_SHIFT: Final = 20  # high 12 bits: token
TOKEN_REMOTE: Final = 0xFAB  # from a remote DirectPlay machine (normal)
TOKEN_FORWARD: Final = 0xCAB  # to be forwarded to all registered servers
TOKEN_SERVER: Final = 0xBAB  # received from a DirectPlay server (dplaysvr)
TOKENS: Final = frozenset({TOKEN_REMOTE, TOKEN_FORWARD, TOKEN_SERVER})
AF_INET_WIRE: Final = 2  # Winsock AF_INET, little-endian on the wire
SOCKADDR_LEN: Final = 16  # family (LE) + port (BE) + IPv4 (BE) + 8 zero bytes
MAX_STREAM_MESSAGE: Final = SIZE_MASK  # a 20-bit size field cannot claim more (1 MiB - 1)

# Versions 0x09 (DX6) .. 0x0E (DX9) per docs/protocols.md 1.3, and below them DX3 = 0x01, DX5 =
# 0x07, DX5a = 0x08 (Rule 8): all of 0x01..0x0E is accepted; 0 and above 0x0E are not.
VERSION_MIN: Final = 0x01
VERSION_MAX: Final = 0x0E
VERSION_DX3: Final = 0x01
VERSION_DX5: Final = 0x07
VERSION_DX5A: Final = 0x08
VERSION_DX9: Final = 0x0E  # what Windows and the [MC-DPL4CS] 4.1 sample send
# DirectPlay's reliable protocol puts 0xFF where a DPSP message has its command (Rule 7).
RELIABLE_MARK: Final = 0xFF
RELIABLE_NAME: Final = "Reliable"

# The two byte matches a filter without a parser can make (the nft fast path hands these to
# the Python path, policy/relay.py rule 5): 'play' after a DP4 SP header, and the lead bytes
# of a DP8 EnumQuery (docs/protocols.md 1.2 and 2.3).
SIGNATURE_OFFSET: Final = SP_HEADER_LEN
DP8_QUERY_LEAD: Final = bytes((DP8_LEAD_ENUM, DP8_ENUM_QUERY))


def has_dplay_lead(payload: bytes | bytearray | memoryview) -> bool:
    """``play`` at byte 20 or ``00 02`` at byte 0: maybe DirectPlay, worth a full look.

    A payload that matches but is not DirectPlay only costs a look; one that does not match
    is no DirectPlay enumeration (DP4 over UDP carries the SP header; DP8's query leads so).
    """
    return (
        bytes(payload[SIGNATURE_OFFSET:_SIGNATURE_END]) == SIGNATURE
        or bytes(payload[:2]) == DP8_QUERY_LEAD
    )


def dp4_command_of(payload: bytes | bytearray | memoryview, *, bare: bool) -> int | None:
    """The command id of a message ``classify`` called DP4 (``bare``: DP4_BARE, no SP header).

    None for DirectPlay's reliable protocol, whose 0xFF sits where the command is (Rule 7).
    Reads two bytes, nothing else is checked (a cheap count of what is not decoded in full).
    """
    at = len(SIGNATURE) if bare else _SIGNATURE_END
    field = bytes(payload[at : at + 2])
    if field[:1] == bytes((RELIABLE_MARK,)):
        return None
    return int.from_bytes(field, "little")


_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_MESSAGE_HEADER: Final = struct.Struct("<4sHH")
_ZERO8: Final = bytes(8)


class DP4Command(IntEnum):
    """DirectPlay 4 command IDs (docs/protocols.md 1.3; [MC-DPL4CS] 2.2.x, Wireshark's table)."""

    ENUMSESSIONSREPLY = 0x01
    ENUMSESSIONS = 0x02
    ENUMPLAYERSREPLY = 0x03
    ENUMPLAYER = 0x04
    REQUESTPLAYERID = 0x05
    REQUESTGROUPID = 0x06
    REQUESTPLAYERREPLY = 0x07
    CREATEPLAYER = 0x08
    CREATEGROUP = 0x09
    PLAYERMESSAGE = 0x0A  # no 'play' header: the player-to-player form (DPlayKind.DP4_PLAYER)
    DELETEPLAYER = 0x0B
    DELETEGROUP = 0x0C
    ADDPLAYERTOGROUP = 0x0D
    DELETEPLAYERFROMGROUP = 0x0E
    PLAYERDATACHANGED = 0x0F
    PLAYERNAMECHANGED = 0x10
    GROUPDATACHANGED = 0x11
    GROUPNAMECHANGED = 0x12
    ADDFORWARDREQUEST = 0x13
    PACKET = 0x15
    PING = 0x16
    PINGREPLY = 0x17
    YOUAREDEAD = 0x18
    PLAYERWRAPPER = 0x19
    SESSIONDESCCHANGED = 0x1A
    CHALLENGE = 0x1C
    ACCESSGRANTED = 0x1D
    LOGONDENIED = 0x1E
    AUTHERROR = 0x1F
    NEGOTIATE = 0x20
    CHALLENGERESPONSE = 0x21
    SIGNED = 0x22
    ADDFORWARDREPLY = 0x24
    ASK4MULTICAST = 0x25
    ASK4MULTICASTGUARANTEED = 0x26
    ADDSHORTCUTTOGROUP = 0x27
    DELETEGROUPFROMGROUP = 0x28
    SUPERENUMPLAYERSREPLY = 0x29
    KEYEXCHANGE = 0x2B
    KEYEXCHANGEREPLY = 0x2C
    CHAT = 0x2D
    ADDFORWARD = 0x2E
    ADDFORWARDACK = 0x2F
    PACKET2_DATA = 0x30
    PACKET2_ACK = 0x31
    IAMNAMESERVER = 0x35
    VOICE = 0x36
    MULTICASTDELIVERY = 0x37
    CREATEPLAYERVERIFY = 0x38


# CamelCase display names of the docs/protocols.md 1.3 table, for logs and metric labels.
_COMMAND_NAMES: Final[dict[int, str]] = {
    0x01: "EnumSessionsReply",
    0x02: "EnumSessions",
    0x03: "EnumPlayersReply",
    0x04: "EnumPlayer",
    0x05: "RequestPlayerId",
    0x06: "RequestGroupId",
    0x07: "RequestPlayerReply",
    0x08: "CreatePlayer",
    0x09: "CreateGroup",
    0x0A: "PlayerMessage",
    0x0B: "DeletePlayer",
    0x0C: "DeleteGroup",
    0x0D: "AddPlayerToGroup",
    0x0E: "DeletePlayerFromGroup",
    0x0F: "PlayerDataChanged",
    0x10: "PlayerNameChanged",
    0x11: "GroupDataChanged",
    0x12: "GroupNameChanged",
    0x13: "AddForwardRequest",
    0x15: "Packet",
    0x16: "Ping",
    0x17: "PingReply",
    0x18: "YouAreDead",
    0x19: "PlayerWrapper",
    0x1A: "SessionDescChanged",
    0x1C: "Challenge",
    0x1D: "AccessGranted",
    0x1E: "LogonDenied",
    0x1F: "AuthError",
    0x20: "Negotiate",
    0x21: "ChallengeResponse",
    0x22: "Signed",
    0x24: "AddForwardReply",
    0x25: "Ask4Multicast",
    0x26: "Ask4MulticastGuaranteed",
    0x27: "AddShortcutToGroup",
    0x28: "DeleteGroupFromGroup",
    0x29: "SuperEnumPlayersReply",
    0x2B: "KeyExchange",
    0x2C: "KeyExchangeReply",
    0x2D: "Chat",
    0x2E: "AddForward",
    0x2F: "AddForwardAck",
    0x30: "Packet2Data",
    0x31: "Packet2Ack",
    0x35: "IAmNameServer",
    0x36: "Voice",
    0x37: "MulticastDelivery",
    0x38: "CreatePlayerVerify",
}


def command_name(command: int) -> str:
    """CamelCase name of a DP4 command (docs/protocols.md 1.3), ``Unknown0xNN`` otherwise."""
    return _COMMAND_NAMES.get(command, f"Unknown0x{command:02X}")


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


# --- SOCKADDR_IN and the SP header (docs/protocols.md 1.2) ---------------------------------------


@dataclass(frozen=True)
class SockAddr:
    """A Winsock SOCKADDR_IN as DirectPlay sends it: 16 bytes.

    ``family`` is little-endian (2 = AF_INET), ``port`` and ``address`` are big-endian; the
    last 8 bytes (``sin_zero``) are zero. Address 0.0.0.0 means "the packet's source IP".
    """

    family: int
    port: int
    address: str  # dotted quad


def parse_sockaddr(data: bytes | bytearray | memoryview) -> SockAddr:
    """Decode a 16-byte SOCKADDR_IN (the first 16 bytes of ``data``).

    Raises:
        DPlayError: ``dplay_truncated`` (< 16 bytes) or ``dplay_bad_sockaddr`` (family not
            AF_INET, or non-zero ``sin_zero``).
    """
    buf = as_bytes(data)
    need(buf, SOCKADDR_LEN, "SOCKADDR_IN")
    family = int.from_bytes(buf[0:2], "little")
    if family != AF_INET_WIRE:
        raise DPlayError("dplay_bad_sockaddr", f"address family {family}, expected AF_INET (2)")
    if buf[8:16] != _ZERO8:
        raise DPlayError("dplay_bad_sockaddr", "sin_zero is not zero")
    port = int.from_bytes(buf[2:4], "big")
    return SockAddr(family, port, str(ipaddress.IPv4Address(buf[4:8])))


def build_sockaddr(addr: SockAddr) -> bytes:
    """Encode a SOCKADDR_IN (16 bytes).

    Raises:
        ValueError: port or family out of range, or not an IPv4 address.
    """
    if not 0 <= addr.family <= 0xFFFF or not 0 <= addr.port <= 0xFFFF:
        raise ValueError(f"family {addr.family} or port {addr.port} out of range")
    return (
        addr.family.to_bytes(2, "little")
        + addr.port.to_bytes(2, "big")
        + ipaddress.IPv4Address(addr.address).packed
        + _ZERO8
    )


@dataclass(frozen=True)
class SPHeader:
    """The 20-byte Winsock SP header: ``u32 LE = token << 20 | size`` and the sender's address.

    ``size`` is the whole message including these 20 bytes ([MC-DPL4CS] 2.2.6). Builders
    recompute it from the real length; only ``token`` and ``sockaddr`` are taken from here.
    """

    size: int
    token: int
    sockaddr: SockAddr


def _parse_sp_header(data: bytes) -> SPHeader:
    need(data, SP_HEADER_LEN, "SP header")
    mixed = _U32.unpack_from(data)[0]
    token = mixed >> TOKEN_SHIFT
    if token not in TOKENS:
        raise DPlayError("dplay_bad_token", f"token 0x{token:03x}, expected 0xfab/0xcab/0xbab")
    return SPHeader(mixed & SIZE_MASK, token, parse_sockaddr(data[4:SP_HEADER_LEN]))


def _build_sp_header(size: int, token: int, sockaddr: SockAddr) -> bytes:
    if token not in TOKENS:
        raise ValueError(f"token 0x{token:x} is not 0xFAB, 0xCAB or 0xBAB")
    if size > SIZE_MASK:
        raise ValueError(f"a {size}-byte message does not fit the 20-bit size field")
    return _U32.pack(token << TOKEN_SHIFT | size) + build_sockaddr(sockaddr)


def parse_winsock_sp_data(sp_data: bytes | bytearray | memoryview) -> tuple[SockAddr, SockAddr]:
    """The Winsock SP's 32-byte player SP data: (stream/TCP address, datagram/UDP address).

    Found in DPLAYI_PACKEDPLAYER and IAMNAMESERVER (docs/protocols.md 1.8).

    Raises:
        DPlayError: ``dplay_bad_size`` (not 32 bytes) or ``dplay_bad_sockaddr``.
    """
    buf = as_bytes(sp_data)
    if len(buf) != 2 * SOCKADDR_LEN:
        raise DPlayError("dplay_bad_size", f"Winsock SP data is 32 bytes, got {len(buf)}")
    return parse_sockaddr(buf[:SOCKADDR_LEN]), parse_sockaddr(buf[SOCKADDR_LEN:])


def build_winsock_sp_data(stream: SockAddr, datagram: SockAddr) -> bytes:
    """Encode the Winsock SP's player SP data (two SOCKADDR_IN, TCP first)."""
    return build_sockaddr(stream) + build_sockaddr(datagram)


def rewrite_sockaddr(payload: bytes | bytearray | memoryview, address: str) -> bytes:
    """Replace ``sin_addr`` (bytes 8..12) of a message's SP header with ``address``.

    Receivers swap a 0.0.0.0 address for the packet's source IP (docs/protocols.md 1.2), so a
    relay that re-sends a message from its own socket writes the real sender's IP here.
    Works for ``DP4`` and ``DP4_PLAYER`` payloads; nothing else changes.

    Raises:
        DPlayError: the payload has no valid SP header (``dplay_truncated``,
            ``dplay_bad_token``, ``dplay_bad_sockaddr``).
        ValueError: ``address`` is not an IPv4 address.
    """
    data = as_bytes(payload)
    _parse_sp_header(data)
    return data[:8] + ipaddress.IPv4Address(address).packed + data[12:]


def peek_dp4(payload: bytes | bytearray | memoryview) -> tuple[str, int | None]:
    """(SOCKADDR address, command or None if cut off) of a ``DP4`` payload; nothing checked.

    ``sin_addr`` is read whatever the family and ``sin_zero`` say: a host answering an
    EnumSessions connects to it (docs/protocols.md 1.2, 7), so a relay judges that address even in
    a malformed header. 0.0.0.0 means "the packet's source".

    Raises:
        DPlayError: ``dplay_truncated`` (shorter than the SP header and ``play``).
    """
    buf = as_bytes(payload)
    need(buf, _SIGNATURE_END, "DP4 header")
    command = _U16.unpack_from(buf, _SIGNATURE_END)[0] if len(buf) >= _SIGNATURE_END + 2 else None
    return str(ipaddress.IPv4Address(buf[8:12])), command


def split_dp4_stream(buf: bytes | bytearray | memoryview) -> tuple[list[bytes], bytes]:
    """Cut a DP4 TCP byte stream into whole messages using each SP header's size field.

    Returns the complete messages and the unconsumed remainder (a partial message, or
    fewer than 4 bytes). The 20-bit size field bounds a message to ``MAX_STREAM_MESSAGE``
    (1 MiB - 1), so the remainder can never be asked to grow past that.

    Raises:
        DPlayError: ``dplay_bad_token`` (the stream is not DP4, or lost sync) or
            ``dplay_bad_size`` (a size below the 20-byte SP header).
    """
    data = as_bytes(buf)
    messages: list[bytes] = []
    pos = 0
    while len(data) - pos >= _U32.size:
        mixed = _U32.unpack_from(data, pos)[0]
        token = mixed >> TOKEN_SHIFT
        size = mixed & SIZE_MASK
        if token not in TOKENS:
            raise DPlayError("dplay_bad_token", f"token 0x{token:03x} at stream offset {pos}")
        # 20, not 28: a player-to-player message is the SP header plus data, no 'play'.
        if size < SP_HEADER_LEN:
            raise DPlayError("dplay_bad_size", f"size {size} at stream offset {pos}")
        if pos + size > len(data):
            break
        messages.append(data[pos : pos + size])
        pos += size
    return messages, data[pos:]


# --- DP4 records ------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class PacketFragment:
    """PACKET (0x15) / PACKET2_DATA (0x30) fragment of a large message (docs/protocols.md 1.7).

    ``data`` is read at its fixed position (48 bytes after ``play``, absolute 68 with an SP
    header), as Wireshark does; ``packet_offset`` is kept as sent and only checked not to
    point past the message (its base, ``play`` or byte 0, is not settled: 48 or 68).
    ``data_size`` is the DataSize field; the parser guarantees ``len(data) == data_size``.
    """

    command: int
    message_guid: UUID
    packet_index: int
    data_size: int
    offset: int
    total_packets: int
    message_size: int
    packet_offset: int
    data: bytes


@dataclass(frozen=True)
class DP4Message:
    """One DirectPlay 4 message.

    Attributes:
        header: the SP header; None for DP4 over IPX (``DP4_BARE``).
        command: DP4 command ID (``DP4Command``); 0x0A for a player-to-player message; 0xFF
            for a reliable-protocol frame.
        version: 0x01..0x0E; 0 for a player-to-player message or a reliable-protocol frame
            (they have no version field).
        body: the bytes after ``play`` + command + version (after the SP header for a
            player-to-player message, after ``play`` + 0xFF for a reliable-protocol frame),
            kept raw whatever the command.
        parsed: the decoded body for EnumSessions, EnumSessionsReply, Packet and Packet2Data;
            None for every other command (kept raw, never an error).
        signature: False for a player-to-player message (``DP4_PLAYER``: SP header then data,
            no ``play``); those have ``command`` 0x0A PLAYERMESSAGE and ``version`` 0.
        reliable: ``play`` then 0xFF: a frame of DirectPlay's reliable protocol (Rule 7).
    """

    header: SPHeader | None
    command: int
    version: int
    body: bytes
    parsed: EnumSessions | EnumSessionsReply | PacketFragment | None
    signature: bool = True
    reliable: bool = False

    @property
    def command_name(self) -> str:
        """CamelCase command name from docs/protocols.md 1.3, ``Reliable``, or ``Unknown0xNN``."""
        return RELIABLE_NAME if self.reliable else command_name(self.command)


# DPSP_MSG_ENUMSESSIONS: ApplicationGuid, PasswordOffset, Flags (docs/protocols.md 1.4).
_ENUM_SESSIONS: Final = struct.Struct("<16sII")
ENUM_SESSIONS_PASSWORD_OFFSET: Final = MESSAGE_HEADER_LEN + _ENUM_SESSIONS.size  # 32
# DPSESSIONDESC2 (docs/protocols.md 1.6): dwSize, dwFlags, guidInstance, guidApplication,
# dwMaxPlayers, dwCurrentPlayers, lpszSessionName, lpszPassword, dwReserved1..2, dwUser1..4.
_SESSION_DESC: Final = struct.Struct("<II16s16sIIIIII4I")
SESSION_DESC_LEN: Final = _SESSION_DESC.size  # 80
ENUM_SESSIONS_REPLY_NAME_OFFSET: Final = MESSAGE_HEADER_LEN + SESSION_DESC_LEN + 4  # 92
# PACKET / PACKET2_DATA: GuidMessage, PacketIndex, DataSize, Offset, TotalPackets,
# MessageSize, PacketOffset (docs/protocols.md 1.7, [MC-DPL4CS] 2.2.41).
_PACKET: Final = struct.Struct("<16sIIIIII")
PACKET_DATA_OFFSET: Final = MESSAGE_HEADER_LEN + _PACKET.size  # 48 from 'play'
PACKET_COMMANDS: Final = frozenset({DP4Command.PACKET, DP4Command.PACKET2_DATA})


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


def _parse_enum_sessions(msg: bytes) -> EnumSessions:
    """``msg`` starts at ``play``; offsets count from there."""
    need(msg, ENUM_SESSIONS_PASSWORD_OFFSET, "EnumSessions")
    guid, password_offset, flags = _ENUM_SESSIONS.unpack_from(msg, MESSAGE_HEADER_LEN)
    password = None
    if password_offset:
        check_offset(password_offset, ENUM_SESSIONS_PASSWORD_OFFSET, len(msg), "PasswordOffset")
        password, _ = read_nul_string(msg, password_offset, "password")
    return EnumSessions(guid_from_wire(guid), flags, password)


def _parse_enum_sessions_reply(msg: bytes) -> EnumSessionsReply:
    need(msg, ENUM_SESSIONS_REPLY_NAME_OFFSET, "EnumSessionsReply")
    desc = parse_session_desc(msg[MESSAGE_HEADER_LEN : MESSAGE_HEADER_LEN + SESSION_DESC_LEN])
    name_offset = _U32.unpack_from(msg, MESSAGE_HEADER_LEN + SESSION_DESC_LEN)[0]
    name = None
    if name_offset:
        check_offset(name_offset, ENUM_SESSIONS_REPLY_NAME_OFFSET, len(msg), "NameOffset")
        # The message's own size bounds the name: a missing NUL is tolerated (Rule 5).
        name, _ = read_nul_string(msg, name_offset, "session name", terminated=False)
    return EnumSessionsReply(desc, name)


def _parse_packet(msg: bytes, command: int) -> PacketFragment:
    need(msg, PACKET_DATA_OFFSET, "Packet")
    guid, index, data_size, offset, total, message_size, packet_offset = _PACKET.unpack_from(
        msg, MESSAGE_HEADER_LEN
    )
    check_span(PACKET_DATA_OFFSET, data_size, len(msg), "PacketData (DataSize)")
    if packet_offset > len(msg):
        raise DPlayError(
            "dplay_bad_offset", f"PacketOffset {packet_offset} past the {len(msg)}-byte message"
        )
    data = msg[PACKET_DATA_OFFSET : PACKET_DATA_OFFSET + data_size]
    return PacketFragment(
        command,
        guid_from_wire(guid),
        index,
        data_size,
        offset,
        total,
        message_size,
        packet_offset,
        data,
    )


def _parse_body(
    msg: bytes, command: int
) -> EnumSessions | EnumSessionsReply | PacketFragment | None:
    if command == DP4Command.ENUMSESSIONS:
        return _parse_enum_sessions(msg)
    if command == DP4Command.ENUMSESSIONSREPLY:
        return _parse_enum_sessions_reply(msg)
    if command in PACKET_COMMANDS:
        return _parse_packet(msg, command)
    return None  # kept raw: unknown command ids are never fatal (docs/architecture.md rule 3)


def _parse_play(msg: bytes, header: SPHeader | None) -> DP4Message:
    """Decode a message that starts at ``play``."""
    if msg[: len(SIGNATURE)] != SIGNATURE[: len(msg)]:
        raise DPlayError("dplay_bad_signature", f"expected 'play', got {msg[:4].hex()}")
    if len(msg) > len(SIGNATURE) and msg[len(SIGNATURE)] == RELIABLE_MARK:
        # Rule 7: the reliable protocol's frame, not a DPSP message; no version to check.
        body = msg[len(SIGNATURE) + 1 :]
        return DP4Message(header, RELIABLE_MARK, 0, body, None, reliable=True)
    need(msg, MESSAGE_HEADER_LEN, "DirectPlay message header")
    _, command, version = _MESSAGE_HEADER.unpack_from(msg)
    if not VERSION_MIN <= version <= VERSION_MAX:
        raise DPlayError("dplay_bad_version", f"version 0x{version:x} outside 0x01..0x0e")
    parsed = _parse_body(msg, command)
    return DP4Message(header, command, version, msg[MESSAGE_HEADER_LEN:], parsed)


def parse_dp4(payload: bytes | bytearray | memoryview, *, bare: bool = False) -> DP4Message:
    """Decode a DirectPlay 4 message.

    Args:
        payload: one whole message: a UDP payload, one ``split_dp4_stream`` message, or
            (``bare=True``) the data of an IPX packet, which starts with ``play``.
        bare: no SP header (DP4 over IPX, docs/protocols.md 1.9, or a reassembled message).

    ``play`` followed by 0xFF is a reliable-protocol frame (``reliable=True``, Rule 7).

    Raises:
        DPlayError: ``dplay_truncated``, ``dplay_bad_token``, ``dplay_bad_sockaddr``,
            ``dplay_bad_size`` (size field != payload length), ``dplay_bad_signature``,
            ``dplay_bad_version``, or a body error (``dplay_bad_offset``,
            ``dplay_bad_string``, ``dplay_bad_size``) for the commands that are decoded.
    """
    data = as_bytes(payload)
    if bare:
        return _parse_play(data, None)
    header = _parse_sp_header(data)
    if header.size != len(data):
        raise DPlayError("dplay_bad_size", f"SP size {header.size}, message is {len(data)}")
    return _parse_play(data[SP_HEADER_LEN:], header)


def parse_dp4_player(payload: bytes | bytearray | memoryview) -> DP4Message:
    """Decode a player-to-player message: SP header then data, no ``play`` (docs/protocols.md 1.2).

    Returns a ``DP4Message`` with ``signature=False``, command 0x0A, version 0 and the data
    after the SP header as ``body``.

    Raises:
        DPlayError: ``dplay_truncated``, ``dplay_bad_token``, ``dplay_bad_sockaddr``,
            ``dplay_bad_size``, or ``dplay_bad_signature`` when it does carry ``play``.
    """
    data = as_bytes(payload)
    header = _parse_sp_header(data)
    if header.size != len(data):
        raise DPlayError("dplay_bad_size", f"SP size {header.size}, message is {len(data)}")
    if data[SP_HEADER_LEN:_SIGNATURE_END] == SIGNATURE:
        raise DPlayError("dplay_bad_signature", "a 'play' message is not a player message")
    return DP4Message(header, DP4Command.PLAYERMESSAGE, 0, data[SP_HEADER_LEN:], None, False)


def _frame_dp4(command: int, version: int, body: bytes, header: bytes | None) -> bytes:
    """'play' header + body, preceded by an SP header template whose size gets filled in."""
    if not VERSION_MIN <= version <= VERSION_MAX:
        raise ValueError(f"version 0x{version:x} outside 0x01..0x0e")
    if command & 0xFF == RELIABLE_MARK:  # would read back as a reliable-protocol frame
        raise ValueError(f"command 0x{command:x}: a low byte 0xFF marks the reliable protocol")
    message = pack(_MESSAGE_HEADER, SIGNATURE, command, version) + body
    if header is None:
        return message
    return _fill_size(header, message)


def _fill_size(header: bytes, rest: bytes) -> bytes:
    size = len(header) + len(rest)
    if size > SIZE_MASK:
        raise ValueError(f"a {size}-byte message does not fit the 20-bit size field")
    mixed = _U32.unpack_from(header)[0] & ~SIZE_MASK | size
    return _U32.pack(mixed) + header[4:] + rest


def _header_template(header: SPHeader | None) -> bytes | None:
    return None if header is None else _build_sp_header(0, header.token, header.sockaddr)


def build_dp4(
    command: int, version: int, body: bytes | bytearray | memoryview, *, header: SPHeader | None
) -> bytes:
    """Encode a DP4 message from its parts; the SP size field is computed from the length.

    Args:
        command: DP4 command ID.
        version: 0x09..0x0E.
        body: everything after ``play`` + command + version.
        header: token and SOCKADDR for the SP header (its ``size`` is ignored), or None for
            the bare IPX form.

    Raises:
        ValueError: bad version, token or address, or too long for the 20-bit size.
    """
    return _frame_dp4(command, version, bytes(body), _header_template(header))


def build_dp4_player(header: SPHeader, data: bytes | bytearray | memoryview) -> bytes:
    """Encode a player-to-player message: SP header (size computed) then ``data``.

    Raises:
        ValueError: bad token or address, too long, or ``data`` starts with ``play``.
    """
    raw = bytes(data)
    if raw.startswith(SIGNATURE):
        raise ValueError("player data starting with 'play' would decode as a system message")
    return _fill_size(_build_sp_header(0, header.token, header.sockaddr), raw)


def build_dp4_message(msg: DP4Message) -> bytes:
    """Re-encode a parsed ``DP4Message`` from its raw ``body`` (``parsed`` is not consulted).

    Raises:
        ValueError: as ``build_dp4`` / ``build_dp4_player``; a reliable-protocol frame whose
            command is not 0xFF or whose version is not 0.
    """
    if msg.reliable:
        if (msg.command, msg.version, msg.signature) != (RELIABLE_MARK, 0, True):
            raise ValueError("a reliable-protocol frame has command 0xFF, version 0, 'play'")
        frame = SIGNATURE + bytes([RELIABLE_MARK]) + bytes(msg.body)
        template = _header_template(msg.header)
        return frame if template is None else _fill_size(template, frame)
    if not msg.signature:
        if msg.header is None:
            raise ValueError("a player-to-player message needs its SP header")
        return build_dp4_player(msg.header, msg.body)
    return build_dp4(msg.command, msg.version, msg.body, header=msg.header)


def _wrap(
    command: int,
    body: bytes,
    *,
    version: int,
    sockaddr: SockAddr | None,
    bare: bool,
    token: int,
) -> bytes:
    if bare:
        if sockaddr is not None:
            raise ValueError("a bare (IPX) message carries no SOCKADDR")
        return _frame_dp4(command, version, body, None)
    addr = sockaddr if sockaddr is not None else SockAddr(AF_INET_WIRE, 0, "0.0.0.0")
    return _frame_dp4(command, version, body, _build_sp_header(0, token, addr))


def build_enum_sessions(
    msg: EnumSessions,
    *,
    version: int = VERSION_DX9,
    sockaddr: SockAddr | None = None,
    bare: bool = False,
    token: int = TOKEN_REMOTE,
) -> bytes:
    """Encode DPSP_MSG_ENUMSESSIONS (52 bytes without a password, docs/protocols.md 1.4).

    Args:
        msg: the request.
        version: DP4 version field.
        sockaddr: where replies go (the sender's TCP listener; 0.0.0.0 = packet source).
            Defaults to AF_INET, port 0, 0.0.0.0. Must be None when ``bare``.
        bare: the IPX form, without SP header.
        token: SP header token.

    Raises:
        ValueError: a field does not fit, or the password contains NUL.
    """
    password = encode_string(msg.password)
    offset = ENUM_SESSIONS_PASSWORD_OFFSET if msg.password is not None else 0
    body = pack(_ENUM_SESSIONS, guid_to_wire(msg.application_guid), offset, msg.flags)
    return _wrap(
        DP4Command.ENUMSESSIONS,
        body + password,
        version=version,
        sockaddr=sockaddr,
        bare=bare,
        token=token,
    )


def build_enum_sessions_reply(
    msg: EnumSessionsReply,
    *,
    version: int = VERSION_DX9,
    sockaddr: SockAddr | None = None,
    bare: bool = False,
    token: int = TOKEN_REMOTE,
) -> bytes:
    """Encode DPSP_MSG_ENUMSESSIONSREPLY (docs/protocols.md 1.5); NameOffset 92 or 0.

    Raises:
        ValueError: a field does not fit, or the name contains NUL.
    """
    name = encode_string(msg.name)
    offset = ENUM_SESSIONS_REPLY_NAME_OFFSET if msg.name is not None else 0
    body = build_session_desc(msg.desc) + _U32.pack(offset) + name
    return _wrap(
        DP4Command.ENUMSESSIONSREPLY,
        body,
        version=version,
        sockaddr=sockaddr,
        bare=bare,
        token=token,
    )


def build_packet_fragment(
    frag: PacketFragment,
    *,
    version: int = VERSION_DX9,
    sockaddr: SockAddr | None = None,
    bare: bool = False,
    token: int = TOKEN_REMOTE,
) -> bytes:
    """Encode PACKET (0x15) or PACKET2_DATA (0x30) from ``frag.command``.

    Raises:
        ValueError: command not 0x15/0x30, ``data_size != len(data)``, or a field too big.
    """
    if frag.command not in PACKET_COMMANDS:
        raise ValueError(f"command 0x{frag.command:02x} is not PACKET or PACKET2_DATA")
    if frag.data_size != len(frag.data):
        raise ValueError(f"data_size {frag.data_size} but {len(frag.data)} bytes of data")
    body = pack(
        _PACKET,
        guid_to_wire(frag.message_guid),
        frag.packet_index,
        frag.data_size,
        frag.offset,
        frag.total_packets,
        frag.message_size,
        frag.packet_offset,
    )
    return _wrap(
        frag.command,
        body + bytes(frag.data),
        version=version,
        sockaddr=sockaddr,
        bare=bare,
        token=token,
    )


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
        if data[SP_HEADER_LEN:_SIGNATURE_END] == SIGNATURE:
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
