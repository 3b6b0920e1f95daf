"""DirectPlay 4 messages: one ``DP4Message`` from its bytes, and back.

Sources: docs/protocols.md 1.2-1.9 ([MC-DPL4CS]). A message is the SP header
(``wire/dplay_header.py``; absent over IPX), ``play``, a command id and a version, then a body
kept raw whatever the command. The bodies of EnumSessions and EnumSessionsReply
(``wire/dplay_sessions.py``) and of PACKET / PACKET2_DATA fragments are decoded too.

The codec's contract is in ``wire/directplay.py``, which re-exports everything here.
"""

import struct
from dataclasses import dataclass
from typing import Final, TypedDict, Unpack
from uuid import UUID

from ipxbridge.wire.dplay_fields import as_bytes, check_span, need, pack
from ipxbridge.wire.dplay_header import (
    AF_INET_WIRE,
    MESSAGE_HEADER_LEN,
    RELIABLE_MARK,
    RELIABLE_NAME,
    SIGNATURE,
    SIGNATURE_END,
    SIZE_MASK,
    SP_HEADER_LEN,
    TOKEN_REMOTE,
    VERSION_DX9,
    VERSION_MAX,
    VERSION_MIN,
    DP4Command,
    SockAddr,
    SPHeader,
    build_sp_header,
    command_name,
    parse_sp_header,
)
from ipxbridge.wire.dplay_sessions import (
    EnumSessions,
    EnumSessionsReply,
    build_enum_sessions_body,
    build_enum_sessions_reply_body,
    parse_enum_sessions_body,
    parse_enum_sessions_reply_body,
)
from ipxbridge.wire.errors import DPlayError
from ipxbridge.wire.guid import guid_from_wire, guid_to_wire

_U32: Final = struct.Struct("<I")
_MESSAGE_HEADER: Final = struct.Struct("<4sHH")  # 'play', command, version


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
        reliable: ``play`` then 0xFF: a frame of DirectPlay's reliable protocol
            (wire/directplay.py Rule 7).
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


# PACKET / PACKET2_DATA: GuidMessage, PacketIndex, DataSize, Offset, TotalPackets,
# MessageSize, PacketOffset (docs/protocols.md 1.7, [MC-DPL4CS] 2.2.41).
_PACKET: Final = struct.Struct("<16sIIIIII")
PACKET_DATA_OFFSET: Final = MESSAGE_HEADER_LEN + _PACKET.size  # 48 from 'play'
PACKET_COMMANDS: Final = frozenset({DP4Command.PACKET, DP4Command.PACKET2_DATA})


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
        return parse_enum_sessions_body(msg)
    if command == DP4Command.ENUMSESSIONSREPLY:
        return parse_enum_sessions_reply_body(msg)
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
    header = parse_sp_header(data)
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
    header = parse_sp_header(data)
    if header.size != len(data):
        raise DPlayError("dplay_bad_size", f"SP size {header.size}, message is {len(data)}")
    if data[SP_HEADER_LEN:SIGNATURE_END] == SIGNATURE:
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
    return None if header is None else build_sp_header(0, header.token, header.sockaddr)


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
    return _fill_size(build_sp_header(0, header.token, header.sockaddr), raw)


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


class Framing(TypedDict, total=False):
    """How the builders below put a message on the wire; ``_wrap`` holds the defaults.

    Attributes:
        version: the DP4 version field (``VERSION_DX9``).
        sockaddr: the SP header's SOCKADDR, where replies go (the sender's TCP listener;
            0.0.0.0 = packet source). Defaults to AF_INET, port 0, 0.0.0.0. Must be None
            when ``bare``.
        bare: the IPX form, without SP header (docs/protocols.md 1.9).
        token: the SP header's token (``TOKEN_REMOTE``).
    """

    version: int
    sockaddr: SockAddr | None
    bare: bool
    token: int


def _wrap(
    command: int,
    body: bytes,
    *,
    version: int = VERSION_DX9,
    sockaddr: SockAddr | None = None,
    bare: bool = False,
    token: int = TOKEN_REMOTE,
) -> bytes:
    """``body`` framed as the message ``command`` (``Framing``)."""
    if bare:
        if sockaddr is not None:
            raise ValueError("a bare (IPX) message carries no SOCKADDR")
        return _frame_dp4(command, version, body, None)
    addr = sockaddr if sockaddr is not None else SockAddr(AF_INET_WIRE, 0, "0.0.0.0")
    return _frame_dp4(command, version, body, build_sp_header(0, token, addr))


def build_enum_sessions(msg: EnumSessions, **framing: Unpack[Framing]) -> bytes:
    """Encode DPSP_MSG_ENUMSESSIONS (52 bytes without a password, docs/protocols.md 1.4).

    Raises:
        ValueError: a field does not fit, the password contains NUL, or a ``Framing`` that
            cannot be.
    """
    return _wrap(DP4Command.ENUMSESSIONS, build_enum_sessions_body(msg), **framing)


def build_enum_sessions_reply(msg: EnumSessionsReply, **framing: Unpack[Framing]) -> bytes:
    """Encode DPSP_MSG_ENUMSESSIONSREPLY (docs/protocols.md 1.5); NameOffset 92 or 0.

    Raises:
        ValueError: a field does not fit, the name contains NUL, or a ``Framing`` that
            cannot be.
    """
    return _wrap(DP4Command.ENUMSESSIONSREPLY, build_enum_sessions_reply_body(msg), **framing)


def build_packet_fragment(frag: PacketFragment, **framing: Unpack[Framing]) -> bytes:
    """Encode PACKET (0x15) or PACKET2_DATA (0x30) from ``frag.command``.

    Raises:
        ValueError: command not 0x15/0x30, ``data_size != len(data)``, a field too big, or
            a ``Framing`` that cannot be.
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
    return _wrap(frag.command, body + bytes(frag.data), **framing)
