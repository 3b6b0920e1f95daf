"""DirectPlay 4's envelope: the Winsock SP header, the ``play`` header and its commands.

Sources: docs/protocols.md 1.1-1.3 ([MC-DPL4CS] 2.2.6, the DPSP_MSG_HEADER) and 1.8 (the
Winsock SP's player SP data). Over UDP and TCP every DP4 message starts with the 20-byte SP
header (size and token in one little-endian u32, then the sender's SOCKADDR_IN); a system
message then has ``play``, a command id and a version. Over IPX the SP header is absent.

The codec's contract (errors, offsets, strings, the reliable protocol, versions) is in
``wire/directplay.py``, which re-exports everything here.
"""

import ipaddress
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from ipxbridge.wire.dplay8 import DP8_ENUM_QUERY, DP8_LEAD_ENUM
from ipxbridge.wire.dplay_fields import as_bytes, need
from ipxbridge.wire.errors import DPlayError

# --- ports (docs/protocols.md 1.1 and 2.1) ------------------------------------------------------

DP4_ENUM_PORT: Final = 47624  # [MC-DPL4CS] 2.1: EnumSessions broadcast, also a TCP listener

# --- DPSP_MSG_HEADER (docs/protocols.md 1.2, [MC-DPL4CS] 2.2.6) ---------------------------------

SP_HEADER_LEN: Final = 20  # size|token (4) + SOCKADDR_IN (16); absent over IPX
MESSAGE_HEADER_LEN: Final = 8  # 'play' + command (u16 LE) + version (u16 LE)
DP4_HEADER_LEN: Final = SP_HEADER_LEN + MESSAGE_HEADER_LEN  # 28
SIGNATURE: Final = b"play"  # u32 LE 0x79616C70
SIGNATURE_END: Final = SP_HEADER_LEN + len(SIGNATURE)  # 'play' sits at bytes 20..24
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
# 0x07, DX5a = 0x08 (wire/directplay.py Rule 8): all of 0x01..0x0E is accepted; 0 and above
# 0x0E are not.
VERSION_MIN: Final = 0x01
VERSION_MAX: Final = 0x0E
VERSION_DX3: Final = 0x01
VERSION_DX5: Final = 0x07
VERSION_DX5A: Final = 0x08
VERSION_DX9: Final = 0x0E  # what Windows and the [MC-DPL4CS] 4.1 sample send
# DirectPlay's reliable protocol puts 0xFF where a DPSP message has its command
# (wire/directplay.py Rule 7).
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
        bytes(payload[SIGNATURE_OFFSET:SIGNATURE_END]) == SIGNATURE
        or bytes(payload[:2]) == DP8_QUERY_LEAD
    )


def dp4_command_of(payload: bytes | bytearray | memoryview, *, bare: bool) -> int | None:
    """The command id of a message ``classify`` called DP4 (``bare``: DP4_BARE, no SP header).

    None for DirectPlay's reliable protocol, whose 0xFF sits where the command is
    (wire/directplay.py Rule 7).
    Reads two bytes, nothing else is checked (a cheap count of what is not decoded in full).
    """
    at = len(SIGNATURE) if bare else SIGNATURE_END
    field = bytes(payload[at : at + 2])
    if field[:1] == bytes((RELIABLE_MARK,)):
        return None
    return int.from_bytes(field, "little")


_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
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


def parse_sp_header(data: bytes) -> SPHeader:
    """The SP header at the start of ``data``: size field, token and SOCKADDR_IN.

    Raises:
        DPlayError: ``dplay_truncated``, ``dplay_bad_token`` or ``dplay_bad_sockaddr``.
    """
    need(data, SP_HEADER_LEN, "SP header")
    mixed = _U32.unpack_from(data)[0]
    token = mixed >> TOKEN_SHIFT
    if token not in TOKENS:
        raise DPlayError("dplay_bad_token", f"token 0x{token:03x}, expected 0xfab/0xcab/0xbab")
    return SPHeader(mixed & SIZE_MASK, token, parse_sockaddr(data[4:SP_HEADER_LEN]))


def build_sp_header(size: int, token: int, sockaddr: SockAddr) -> bytes:
    """Encode an SP header (20 bytes).

    Raises:
        ValueError: a token other than the three, or a size over the 20-bit field.
    """
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
    parse_sp_header(data)
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
    need(buf, SIGNATURE_END, "DP4 header")
    command = _U16.unpack_from(buf, SIGNATURE_END)[0] if len(buf) >= SIGNATURE_END + 2 else None
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
