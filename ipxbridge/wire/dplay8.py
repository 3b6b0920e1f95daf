"""DirectPlay 8 enumeration messages and reliable-protocol frames.

Sources: docs/protocols.md 2 ([MC-DPLHP] 2.2 EnumQuery / EnumResponse, [MC-DPL8R] 2.2 frames,
[MS-DPDX]), docs/protocols.md 9 (Wireshark's ``dpnet`` dissector).

Contract:

* Rule 1. A payload whose first byte is 0 is an enumeration packet: ``00 02`` EnumQuery,
  ``00 03`` EnumResponse. A non-zero first byte is a reliable-protocol frame: bit 0x01 a
  DFRAME (data), otherwise 0x80 (CFRAME) optionally with 0x08 (POLL); a CFRAME with any other
  bit set is ignored by DirectPlay, so it is ``dplay_bad_value`` here.
* Rule 2. EnumResponse offsets count from byte 4, the byte after the echoed cookie
  (docs/protocols.md 2.3). A data field with size 0 is absent whatever its offset says; a sized
  field must start in the variable part (offset >= 88) and end inside the buffer. The one
  exception: ReplyOffset 0 means "no reply data" whatever ResponseSize says (docs/protocols.md
  2.3 defines 0 that way), so it is not an error.
* Rule 3. Malformed input raises ``DPlayError`` (reasons in ``wire.errors``), nothing else.
  Builders raise ``ValueError`` for records that cannot be encoded or contradict themselves.
* Rule 4. ``DP8Frame`` is every reliable-protocol frame: the 16-byte CONNECT / CONNECTED /
  CONNECTED_SIGNED / HARD_DISCONNECT layout (docs/protocols.md 2.4), a SACK (``sack`` set) or a
  DFRAME (``data`` set). Signatures of signed sessions are not decoded: they stay in
  ``trailer`` (CFRAMEs) or in the DFRAME payload.
* Rule 5. The session name has a byte count, so a name without its terminating NUL is
  accepted (an embedded NUL is not).
"""

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final
from uuid import UUID

from ipxbridge.wire.dplay_fields import (
    as_bytes,
    check_offset,
    check_span,
    counted_string,
    encode_string,
    need,
    pack,
    read_uint,
)
from ipxbridge.wire.errors import DPlayError
from ipxbridge.wire.guid import GUID_LEN, guid_from_wire, guid_to_wire

DP8_ENUM_PORT: Final = 6073  # [MC-DPLHP] 2.1: DPNSVR, IANA "directplay8"
# [MC-DPLHP] 1.9: with no port given, DirectPlay 8 takes the first free one in 2302-2400;
# hosts answer an enumeration from it (docs/protocols.md 2.1).
DP8_GAME_PORTS: Final = range(2302, 2401)


def is_dp8_port(port: int) -> bool:
    """Whether a UDP port is one DirectPlay 8 speaks on: DPNSVR or a default game port."""
    return port == DP8_ENUM_PORT or port in DP8_GAME_PORTS


# --- enumeration ([MC-DPLHP] 2.2; docs/protocols.md 2.2 and 2.3) ---------------------------------

DP8_LEAD_ENUM: Final = 0x00  # lead byte 0: session/enumeration packet
DP8_ENUM_QUERY: Final = 0x02
DP8_ENUM_RESPONSE: Final = 0x03
DP8_QUERY_WITH_GUID: Final = 0x01  # only the named application answers
DP8_QUERY_ANY: Final = 0x02  # no GUID: every host answers
_QUERY_HEAD: Final = struct.Struct("<BBHB")  # lead, command, cookie, query type
DP8_QUERY_MIN: Final = _QUERY_HEAD.size  # 5
DP8_QUERY_GUID_MIN: Final = DP8_QUERY_MIN + GUID_LEN  # 21
# lead, command, cookie; ReplyOffset, ResponseSize, ApplicationDescSize, Flags, MaxPlayers,
# CurrentPlayers; (offset, size) for SessionName, Password, ReservedData,
# ApplicationReservedData; ApplicationInstanceGUID, ApplicationGUID.
_RESPONSE: Final = struct.Struct("<BBH6I8I16s16s")
DP8_RESPONSE_LEN: Final = _RESPONSE.size  # 92
DP8_OFFSET_BASE: Final = 4  # EnumResponse offsets count from the byte after the cookie
DP8_RESPONSE_DATA_OFFSET: Final = DP8_RESPONSE_LEN - DP8_OFFSET_BASE  # 88
DP8_APP_DESC_SIZE: Final = 0x50  # sizeof(DPN_APPLICATION_DESC) on 32-bit (unverified)

# DPN_APPLICATION_DESC flags (docs/protocols.md 2.3).
DP8_SESSION_CLIENT_SERVER: Final = 0x001
DP8_SESSION_MIGRATE_HOST: Final = 0x004
DP8_SESSION_NODPNSVR: Final = 0x040
DP8_SESSION_REQUIRE_PASSWORD: Final = 0x080
DP8_SESSION_NOENUMS: Final = 0x100


@dataclass(frozen=True)
class DP8EnumQuery:
    """EnumQuery: type 1 names an application GUID, type 2 (GUID None) asks every host."""

    cookie: int
    query_type: int
    application_guid: UUID | None
    app_data: bytes


@dataclass(frozen=True)
class DP8EnumResponse:
    """EnumResponse. An empty ``bytes`` field (or ``session_name`` None) was not sent."""

    cookie: int
    flags: int
    max_players: int
    current_players: int
    session_name: str | None
    password: bytes
    reserved_data: bytes
    app_reserved_data: bytes
    instance_guid: UUID
    application_guid: UUID
    reply_data: bytes
    app_desc_size: int = DP8_APP_DESC_SIZE

    @property
    def password_required(self) -> bool:
        """DPNSESSION_REQUIREPASSWORD (0x80)."""
        return bool(self.flags & DP8_SESSION_REQUIRE_PASSWORD)


def parse_dp8_enum_query(payload: bytes | bytearray | memoryview) -> DP8EnumQuery:
    """Decode an EnumQuery; the application data is whatever follows the header or GUID.

    Raises:
        DPlayError: ``dplay_truncated`` (< 5 bytes, or < 21 for type 1) or
            ``dplay_bad_value`` (not ``00 02``, or a query type other than 1 or 2).
    """
    buf = as_bytes(payload)
    need(buf, DP8_QUERY_MIN, "DP8 EnumQuery")
    lead, command, cookie, query_type = _QUERY_HEAD.unpack_from(buf)
    if (lead, command) != (DP8_LEAD_ENUM, DP8_ENUM_QUERY):
        raise DPlayError("dplay_bad_value", f"not an EnumQuery: {buf[:2].hex()}")
    if query_type == DP8_QUERY_ANY:
        return DP8EnumQuery(cookie, query_type, None, buf[DP8_QUERY_MIN:])
    if query_type != DP8_QUERY_WITH_GUID:
        raise DPlayError("dplay_bad_value", f"EnumQuery type {query_type}, expected 1 or 2")
    need(buf, DP8_QUERY_GUID_MIN, "DP8 EnumQuery with GUID")
    guid = guid_from_wire(buf[DP8_QUERY_MIN:DP8_QUERY_GUID_MIN])
    return DP8EnumQuery(cookie, query_type, guid, buf[DP8_QUERY_GUID_MIN:])


def build_dp8_enum_query(
    query: DP8EnumQuery | None = None,
    *,
    cookie: int = 0,
    application_guid: UUID | None = None,
    app_data: bytes = b"",
) -> bytes:
    """Encode an EnumQuery from a record, or from keyword fields.

    With keywords, the query type follows ``application_guid``: 1 with a GUID, 2 without.

    Raises:
        ValueError: both forms given, query type and GUID disagree, or the cookie is not u16.
    """
    if query is None:
        query_type = DP8_QUERY_ANY if application_guid is None else DP8_QUERY_WITH_GUID
        query = DP8EnumQuery(cookie, query_type, application_guid, app_data)
    elif cookie or application_guid is not None or app_data:
        raise ValueError("give either a DP8EnumQuery or keyword fields, not both")
    if query.query_type not in (DP8_QUERY_WITH_GUID, DP8_QUERY_ANY):
        raise ValueError(f"query type {query.query_type} is not 1 or 2")
    if (query.query_type == DP8_QUERY_WITH_GUID) != (query.application_guid is not None):
        raise ValueError("query type 1 carries a GUID, type 2 does not")
    head = pack(_QUERY_HEAD, DP8_LEAD_ENUM, DP8_ENUM_QUERY, query.cookie, query.query_type)
    guid = b"" if query.application_guid is None else guid_to_wire(query.application_guid)
    return head + guid + bytes(query.app_data)


def _response_field(
    rel: bytes, offset: int, size: int, what: str, *, zero_offset_absent: bool = False
) -> bytes:
    """A data field of an EnumResponse; ``rel`` is the message from byte 4 on."""
    if not size or (zero_offset_absent and not offset):
        return b""
    check_offset(offset, DP8_RESPONSE_DATA_OFFSET, len(rel), f"{what} offset (from byte 4)")
    check_span(offset, size, len(rel), what)
    return rel[offset : offset + size]


def parse_dp8_enum_response(payload: bytes | bytearray | memoryview) -> DP8EnumResponse:
    """Decode an EnumResponse (offsets from byte 4; see Rule 2).

    ReplyOffset 0 is "no reply data" even with a non-zero ResponseSize, and a session name
    without its NUL is accepted (Rules 2 and 5).

    Raises:
        DPlayError: ``dplay_truncated`` (< 92 bytes), ``dplay_bad_value`` (not ``00 03``),
            ``dplay_bad_offset`` or ``dplay_bad_string`` (the session name).
    """
    buf = as_bytes(payload)
    need(buf, DP8_RESPONSE_LEN, "DP8 EnumResponse")
    (lead, command, cookie, reply_offset, reply_size, desc_size, flags, max_players,
     current_players, name_offset, name_size, pw_offset, pw_size, res_offset, res_size,
     app_offset, app_size, instance, app_guid) = _RESPONSE.unpack_from(buf)  # fmt: skip
    if (lead, command) != (DP8_LEAD_ENUM, DP8_ENUM_RESPONSE):
        raise DPlayError("dplay_bad_value", f"not an EnumResponse: {buf[:2].hex()}")
    rel = buf[DP8_OFFSET_BASE:]
    name = _response_field(rel, name_offset, name_size, "SessionName")
    return DP8EnumResponse(
        cookie=cookie,
        flags=flags,
        max_players=max_players,
        current_players=current_players,
        session_name=counted_string(name, "SessionName", terminated=False),
        password=_response_field(rel, pw_offset, pw_size, "Password"),
        reserved_data=_response_field(rel, res_offset, res_size, "ReservedData"),
        app_reserved_data=_response_field(rel, app_offset, app_size, "ApplicationReservedData"),
        instance_guid=guid_from_wire(instance),
        application_guid=guid_from_wire(app_guid),
        # docs/protocols.md 2.3: "ReplyOffset (0 = no reply data)", whatever ResponseSize says.
        reply_data=_response_field(
            rel, reply_offset, reply_size, "ReplyData", zero_offset_absent=True
        ),
        app_desc_size=desc_size,
    )


def build_dp8_enum_response(resp: DP8EnumResponse) -> bytes:
    """Encode an EnumResponse in the canonical layout.

    The data follows the fixed part in the order session name, password, reserved data,
    application reserved data, reply data (offset 88 from byte 4 for the first);
    absent fields are offset 0, size 0.

    Raises:
        ValueError: a field does not fit, or the session name contains NUL.
    """
    blobs = (
        encode_string(resp.session_name),
        bytes(resp.password),
        bytes(resp.reserved_data),
        bytes(resp.app_reserved_data),
        bytes(resp.reply_data),
    )
    spans: list[tuple[int, int]] = []
    offset = DP8_RESPONSE_DATA_OFFSET
    for blob in blobs:
        spans.append((offset if blob else 0, len(blob)))
        offset += len(blob)
    name, password, reserved, app_reserved, reply = spans
    head = pack(
        _RESPONSE,
        DP8_LEAD_ENUM,
        DP8_ENUM_RESPONSE,
        resp.cookie,
        *reply,
        resp.app_desc_size,
        resp.flags,
        resp.max_players,
        resp.current_players,
        *name,
        *password,
        *reserved,
        *app_reserved,
        guid_to_wire(resp.instance_guid),
        guid_to_wire(resp.application_guid),
    )
    return head + b"".join(blobs)


# --- reliable-protocol frames ([MC-DPL8R] 2.2; docs/protocols.md 2.4) ----------------------------

DP8_DATA: Final = 0x01  # PACKET_COMMAND_DATA: a DFRAME
DP8_POLL: Final = 0x08  # PACKET_COMMAND_POLL
DP8_CFRAME: Final = 0x80  # PACKET_COMMAND_CFRAME: a control frame
# DFRAME bControl bits; the last four say which 32-bit masks follow the 4-byte header.
DP8_CONTROL_RETRY: Final = 0x01
DP8_CONTROL_KEEPALIVE: Final = 0x02  # keep-alive (protocol 1.5+), correlate before
DP8_CONTROL_COALESCE: Final = 0x04
DP8_CONTROL_END_STREAM: Final = 0x08
DP8_CONTROL_MASK_BITS: Final = (0x10, 0x20, 0x40, 0x80)  # SACK1, SACK2, SEND1, SEND2
# SACK CFRAME bFlags bits.
DP8_SACK_RESPONSE: Final = 0x01  # bRetry is valid
DP8_SACK_MASK_BITS: Final = (0x02, 0x04, 0x08, 0x10)  # SACK1, SACK2, SEND1, SEND2


class DP8ExtOpcode(IntEnum):
    """CFRAME bExtOpCode ([MC-DPL8R] 2.2.1)."""

    CONNECT = 0x01
    CONNECTED = 0x02  # = CONNECT_ACCEPT
    CONNECTED_SIGNED = 0x03
    HARD_DISCONNECT = 0x04
    SACK = 0x06


DP8_CONNECT_OPCODES: Final = frozenset({0x01, 0x02, 0x03, 0x04})
# bCommand, bExtOpCode, bMsgID, bRspID, dwCurrentProtocolVersion, dwSessID, tTimestamp.
_CFRAME: Final = struct.Struct("<BBBBIII")
DP8_CFRAME_LEN: Final = _CFRAME.size  # 16
# bCommand, bExtOpCode, bFlags, bRetry, bNSeq, bNRcv, wPadding, tTimestamp.
_SACK: Final = struct.Struct("<BBBBBBHI")
DP8_SACK_LEN: Final = _SACK.size  # 12
_DFRAME: Final = struct.Struct("<BBBB")  # bCommand, bControl, bSeq, bNRcv
_U32: Final = struct.Struct("<I")
DP8_DFRAME_LEN: Final = _DFRAME.size  # 4

Masks = tuple[int | None, int | None, int | None, int | None]


@dataclass(frozen=True)
class DP8Sack:
    """The fields particular to a SACK CFRAME. A mask is None when its flag bit is clear."""

    flags: int
    retry: int
    next_send: int
    next_receive: int
    sack_mask1: int | None = None
    sack_mask2: int | None = None
    send_mask1: int | None = None
    send_mask2: int | None = None
    padding: int = 0


@dataclass(frozen=True)
class DP8DataFrame:
    """The fields particular to a DFRAME. A mask is None when its bControl bit is clear."""

    control: int
    seq: int
    next_receive: int
    sack_mask1: int | None
    sack_mask2: int | None
    send_mask1: int | None
    send_mask2: int | None
    payload: bytes

    @property
    def keepalive_session_id(self) -> int | None:
        """The dwSessID a keep-alive carries (KEEPALIVE bit, 4-byte payload), else None."""
        if self.control & DP8_CONTROL_KEEPALIVE and len(self.payload) == 4:
            return int.from_bytes(self.payload, "little")
        return None


@dataclass(frozen=True)
class DP8Frame:
    """One reliable-protocol frame ([MC-DPL8R] 2.2).

    * CONNECT / CONNECTED / CONNECTED_SIGNED / HARD_DISCONNECT: the 16-byte CFRAME of
      docs/protocols.md 2.4; any further bytes (signed variants) are in ``trailer``.
    * SACK (``ext_opcode`` 6): ``timestamp`` is its tTimestamp and its own fields are in
      ``sack``; ``msg_id``, ``rsp_id``, ``protocol_version`` and ``session_id`` are 0 (a SACK
      has none); bytes after the masks (a signature) are in ``trailer``.
    * DFRAME (``command & 0x01``): the fields are in ``data``; ``ext_opcode`` and the CFRAME
      fields are 0 except ``session_id``, which is a keep-alive's dwSessID (else 0).
    """

    command: int
    ext_opcode: int
    msg_id: int
    rsp_id: int
    protocol_version: int
    session_id: int
    timestamp: int
    trailer: bytes = b""
    sack: DP8Sack | None = None
    data: DP8DataFrame | None = None

    @property
    def is_dframe(self) -> bool:
        """A data frame (``data`` holds its fields)."""
        return self.data is not None


_FRAME_NAMES: Final[dict[int, str]] = {
    DP8ExtOpcode.CONNECT: "Connect",
    DP8ExtOpcode.CONNECTED: "Connected",
    DP8ExtOpcode.CONNECTED_SIGNED: "ConnectedSigned",
    DP8ExtOpcode.HARD_DISCONNECT: "HardDisconnect",
    DP8ExtOpcode.SACK: "Sack",
}


def dp8_frame_name(frame: DP8Frame) -> str:
    """CamelCase name of a frame: the CFRAME opcode, ``KeepAlive`` or ``Data`` for a DFRAME.

    Bounded: every frame ``parse_dp8_frame`` returns gets one of these seven names; only a
    hand-built frame with another opcode gets ``Unknown0xNN``.
    """
    if frame.data is not None:
        return "KeepAlive" if frame.data.keepalive_session_id is not None else "Data"
    return _FRAME_NAMES.get(frame.ext_opcode, f"Unknown0x{frame.ext_opcode:02X}")


def _read_masks(buf: bytes, pos: int, bits: int, flags: tuple[int, ...]) -> tuple[Masks, int]:
    values: list[int | None] = []
    for bit in flags:
        value = None
        if bits & bit:
            value, pos = read_uint(buf, pos, 4, f"mask 0x{bit:02x}")
        values.append(value)
    return (values[0], values[1], values[2], values[3]), pos


def _pack_masks(bits: int, flags: tuple[int, ...], values: Masks) -> bytes:
    out = b""
    for bit, value in zip(flags, values, strict=True):
        if bool(bits & bit) != (value is not None):
            raise ValueError(f"mask flag 0x{bit:02x} and its value disagree")
        if value is not None:
            out += pack(_U32, value)
    return out


def _parse_dframe(buf: bytes) -> DP8Frame:
    need(buf, DP8_DFRAME_LEN, "DP8 DFRAME")
    command, control, seq, next_receive = _DFRAME.unpack_from(buf)
    masks, pos = _read_masks(buf, DP8_DFRAME_LEN, control, DP8_CONTROL_MASK_BITS)
    data = DP8DataFrame(control, seq, next_receive, *masks, payload=buf[pos:])
    return DP8Frame(command, 0, 0, 0, 0, data.keepalive_session_id or 0, 0, data=data)


def _parse_sack(buf: bytes) -> DP8Frame:
    need(buf, DP8_SACK_LEN, "DP8 SACK")
    command, opcode, flags, retry, next_send, next_receive, padding, timestamp = _SACK.unpack_from(
        buf
    )
    (mask1, mask2, send1, send2), pos = _read_masks(buf, DP8_SACK_LEN, flags, DP8_SACK_MASK_BITS)
    sack = DP8Sack(flags, retry, next_send, next_receive, mask1, mask2, send1, send2, padding)
    return DP8Frame(command, opcode, 0, 0, 0, 0, timestamp, trailer=buf[pos:], sack=sack)


def parse_dp8_frame(payload: bytes | bytearray | memoryview) -> DP8Frame:
    """Decode a reliable-protocol frame: connect-family CFRAME, SACK or DFRAME.

    Raises:
        DPlayError: ``dplay_truncated`` (the frame or a flagged mask is cut off) or
            ``dplay_bad_value`` (first byte neither a DFRAME nor a clean 0x80/0x88 CFRAME,
            or an unknown CFRAME opcode).
    """
    buf = as_bytes(payload)
    need(buf, 1, "DP8 frame")
    command = buf[0]
    if command & DP8_DATA:
        return _parse_dframe(buf)
    if not command & DP8_CFRAME or command & ~(DP8_CFRAME | DP8_POLL):
        raise DPlayError("dplay_bad_value", f"frame command byte 0x{command:02x}")
    need(buf, 2, "DP8 CFRAME")
    opcode = buf[1]
    if opcode == DP8ExtOpcode.SACK:
        return _parse_sack(buf)
    if opcode not in DP8_CONNECT_OPCODES:
        raise DPlayError("dplay_bad_value", f"CFRAME opcode 0x{opcode:02x}")
    need(buf, DP8_CFRAME_LEN, "DP8 CFRAME")
    command, opcode, msg_id, rsp_id, version, session_id, timestamp = _CFRAME.unpack_from(buf)
    return DP8Frame(
        command,
        opcode,
        msg_id,
        rsp_id,
        version,
        session_id,
        timestamp,
        trailer=buf[DP8_CFRAME_LEN:],
    )


def _build_dframe(frame: DP8Frame, data: DP8DataFrame) -> bytes:
    if not frame.command & DP8_DATA or frame.sack is not None or frame.trailer:
        raise ValueError("a DFRAME has command bit 0x01, no sack and no trailer")
    cframe_fields = (frame.ext_opcode, frame.msg_id, frame.rsp_id, frame.protocol_version)
    if cframe_fields != (0, 0, 0, 0) or frame.timestamp:
        raise ValueError("a DFRAME has no CFRAME fields")
    if frame.session_id != (data.keepalive_session_id or 0):
        raise ValueError("a DFRAME's session_id is its keep-alive dwSessID, or 0")
    masks = (data.sack_mask1, data.sack_mask2, data.send_mask1, data.send_mask2)
    head = pack(_DFRAME, frame.command, data.control, data.seq, data.next_receive)
    return head + _pack_masks(data.control, DP8_CONTROL_MASK_BITS, masks) + bytes(data.payload)


def _build_sack(frame: DP8Frame, sack: DP8Sack) -> bytes:
    if frame.ext_opcode != DP8ExtOpcode.SACK:
        raise ValueError("a frame with SACK fields has opcode 6")
    if (frame.msg_id, frame.rsp_id, frame.protocol_version, frame.session_id) != (0, 0, 0, 0):
        raise ValueError("a SACK has no msg_id, rsp_id, protocol_version or session_id")
    head = pack(
        _SACK,
        frame.command,
        frame.ext_opcode,
        sack.flags,
        sack.retry,
        sack.next_send,
        sack.next_receive,
        sack.padding,
        frame.timestamp,
    )
    masks = (sack.sack_mask1, sack.sack_mask2, sack.send_mask1, sack.send_mask2)
    return head + _pack_masks(sack.flags, DP8_SACK_MASK_BITS, masks) + bytes(frame.trailer)


def build_dp8_frame(frame: DP8Frame) -> bytes:
    """Encode a reliable-protocol frame (the inverse of ``parse_dp8_frame``).

    Raises:
        ValueError: command byte, opcode and sub-records contradict each other (see
            ``DP8Frame``), or a field does not fit.
    """
    if frame.data is not None:
        return _build_dframe(frame, frame.data)
    if not frame.command & DP8_CFRAME or frame.command & ~(DP8_CFRAME | DP8_POLL):
        raise ValueError(f"CFRAME command 0x{frame.command:02x} is not 0x80 or 0x88")
    if frame.sack is not None:
        return _build_sack(frame, frame.sack)
    if frame.ext_opcode not in DP8_CONNECT_OPCODES:
        raise ValueError(f"opcode 0x{frame.ext_opcode:02x} is SACK without fields, or unknown")
    head = pack(
        _CFRAME,
        frame.command,
        frame.ext_opcode,
        frame.msg_id,
        frame.rsp_id,
        frame.protocol_version,
        frame.session_id,
        frame.timestamp,
    )
    return head + bytes(frame.trailer)
