"""tshark 4.0 as an independent decoder of the DirectPlay codec (docs/protocols.md 9).

Two checks:

* messages encoded by our builders, written into a pcap built with plain ``struct``
  (Ethernet/IPv4/UDP or TCP; UDP 47624 for DP4, 6073 and 2302 for DP8, UDP 213 carrying IPX
  with bare DP4, decoded through ``tests/unit/vectors/dplay_over_ipx.lua``), must decode in
  tshark to the fields our parser reports;
* the shipped ``dplay_vectors.pcap`` is read by both tshark and our decoder and every field
  tshark shows must agree.

Where tshark is not a trustworthy oracle (docs/protocols.md 9, 4.4) the comparison is adapted:
``dplay`` GUIDs and the DP8 *query* GUID print in raw byte order (``UUID(bytes=wire)``);
offsets are shown by ``dplay`` but not followed, so the unit tests check offsets; a bare
(IPX) message shows the synthetic SP header the Lua shim prepends (size + 20, token 0xFAB,
0.0.0.0:0).
"""

import ipaddress
import struct
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from ipxbridge.wire import directplay as dp
from ipxbridge.wire import ipx
from ipxbridge.wire.directplay import (
    DP4Message,
    DP8DataFrame,
    DP8EnumQuery,
    DP8EnumResponse,
    DP8Frame,
    DP8Sack,
    DPlayMessage,
    EnumSessions,
    EnumSessionsReply,
    PackedPlayer,
    PacketFragment,
    SessionDesc,
    SockAddr,
    SPHeader,
    SuperPackedPlayer,
)
from ipxbridge.wire.dplay_fields import read_nul_string
from tests.integration.conftest import require
from tests.unit.vectors import LUA_SHIM, VECTORS_PCAP

DP8_PORTS: Final = frozenset({dp.DP8_ENUM_PORT, 2302})
CLIENT: Final = "192.0.2.10"  # documentation addresses (RFC 5737), nothing is sent
HOST: Final = "192.0.2.20"
TA: Final = uuid.UUID("99797420-F5F5-11CF-9827-00A0241496C8")  # Total Annihilation
ARMADA: Final = uuid.UUID("76F93801-9340-11D2-AE34-00600895C779")

# --- pcap writing and reading with struct --------------------------------------------------


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass(frozen=True)
class Packet:
    """One frame to write: transport, addresses, ports and the transport payload."""

    proto: str  # "udp" | "tcp"
    src: str
    sport: int
    dst: str
    dport: int
    payload: bytes


def frame_bytes(pkt: Packet, ident: int) -> bytes:
    if pkt.proto == "udp":
        l4 = struct.pack("!HHHH", pkt.sport, pkt.dport, 8 + len(pkt.payload), 0) + pkt.payload
        proto = 17
    else:  # PSH|ACK, data offset 5 words; tshark does not verify the TCP checksum
        l4 = struct.pack("!HHIIBBHHH", pkt.sport, pkt.dport, 1000, 1, 5 << 4, 0x18, 0xFFFF, 0, 0)
        l4 += pkt.payload
        proto = 6
    src, dst = ipaddress.IPv4Address(pkt.src).packed, ipaddress.IPv4Address(pkt.dst).packed
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident, 0x4000, 64, proto, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    ether = b"\xff" * 6 if pkt.dst.endswith(".255") else b"\x02\x00\x00\x00\x00\x02"
    return ether + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + ip + l4


def write_pcap(path: Path, packets: list[Packet]) -> None:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]  # LINKTYPE_ETHERNET
    for i, pkt in enumerate(packets):
        data = frame_bytes(pkt, i + 1)
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(data), len(data)) + data)
    path.write_bytes(b"".join(out))


def read_pcap(path: Path) -> list[Packet | None]:
    """Ethernet/IPv4 UDP and TCP frames of a classic pcap; None for anything else."""
    raw = path.read_bytes()
    magic, _, _, _, _, _, linktype = struct.unpack_from("<IHHiIII", raw)
    assert (magic, linktype) == (0xA1B2C3D4, 1)
    pos = 24
    frames: list[Packet | None] = []
    while pos < len(raw):
        _, _, caplen, _ = struct.unpack_from("<IIII", raw, pos)
        data = raw[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if data[12:14] != b"\x08\x00":
            frames.append(None)
            continue
        ihl = (data[14] & 0x0F) * 4
        total = int.from_bytes(data[16:18], "big")
        proto = data[23]
        src, dst = (str(ipaddress.IPv4Address(data[26 + 4 * i : 30 + 4 * i])) for i in (0, 1))
        l4 = data[14 + ihl : 14 + total]
        sport, dport = struct.unpack_from("!HH", l4)
        if proto == 17:
            frames.append(Packet("udp", src, sport, dst, dport, l4[8:]))
        elif proto == 6:
            frames.append(Packet("tcp", src, sport, dst, dport, l4[(l4[12] >> 4) * 4 :]))
        else:
            frames.append(None)
    return frames


# --- our decoder, rendered the way tshark prints the fields --------------------------------


def raw_guid(guid: uuid.UUID) -> str:
    """How ``dplay`` (and the DP8 query) print a GUID: its wire bytes in order."""
    return str(uuid.UUID(bytes=dp.guid_to_wire(guid)))


def le(value: int) -> str:
    """An FT_BYTES field holding a little-endian u32 (IDs, user fields)."""
    return value.to_bytes(4, "little").hex()


def h32(value: int) -> str:
    return f"0x{value:08x}"


Fields = dict[str, str]


def add(out: Fields, key: str, value: str) -> None:
    """Multiple occurrences are joined with ';' (tshark ``-E aggregator=;``)."""
    out[key] = f"{out[key]};{value}" if key in out else value


def render_header(header: SPHeader | None, length: int) -> Fields:
    if header is None:  # the Lua shim's synthetic header (docs/protocols.md 9, 4.3)
        header = SPHeader(length + dp.SP_HEADER_LEN, dp.TOKEN_REMOTE, SockAddr(2, 0, "0.0.0.0"))
    return {
        "dplay.size": str(header.size),
        "dplay.token": h32(header.token),
        "dplay.saddr.af": f"0x{header.sockaddr.family:04x}",
        "dplay.saddr.port": str(header.sockaddr.port),
        "dplay.saddr.ip": header.sockaddr.address,
        "dplay.saddr.padding": "00" * 8,
    }


def render_desc(out: Fields, desc: SessionDesc) -> None:
    out.update(
        {
            "dplay.sess_desc.length": "80",
            "dplay.flags": h32(desc.flags),
            "dplay.instance.guid": raw_guid(desc.instance_guid),
            "dplay.game.guid": raw_guid(desc.application_guid),
            "dplay.sess_desc.max_players": str(desc.max_players),
            "dplay.sess_desc.curr_players": str(desc.current_players),
        }
    )
    for i, user in enumerate(desc.user, 1):
        out[f"dplay.sess_desc.user_{i}"] = le(user)


def render_packed(out: Fields, p: PackedPlayer) -> None:
    short = dp.build_packed_player(p)
    lengths = [int.from_bytes(short[i : i + 4], "little") for i in range(12, 32, 4)]
    out.update(
        {
            "dplay.pp.size": str(len(short)),
            "dplay.pp.flags": h32(p.flags),
            "dplay.pp.id": le(p.player_id),
            "dplay.pp.short_name_len": h32(lengths[0]),
            "dplay.pp.long_name_len": h32(lengths[1]),
            "dplay.pp.sp_data_size": h32(lengths[2]),
            "dplay.pp.player_data_size": h32(lengths[3]),
            "dplay.pp.player_count": h32(lengths[4]),
            "dplay.pp.sysplayer_id": le(p.system_player_id),
            "dplay.pp.fixed_size": "48",
            "dplay.pp.dialect": h32(p.player_version),
            "dplay.pp.unknown_1": le(p.parent_id),  # Wireshark's name for ParentID
            "dplay.pp.sp_data": p.sp_data.hex(),
        }
    )
    if p.short_name is not None:
        out["dplay.pp.short_name"] = p.short_name
    if p.long_name is not None:
        out["dplay.pp.long_name"] = p.long_name
    if p.player_data:
        out["dplay.pp.player_data"] = p.player_data.hex()
    for player_id in p.player_ids:
        add(out, "dplay.pp.player_id", le(player_id))


def render_player_message(out: Fields, body: bytes) -> None:
    """CreatePlayer-style body (Wireshark's dissect_player_message): IDs, offsets, player."""
    id_to, player_id, group_id, create_offset, password_offset = struct.unpack_from("<5I", body)
    out.update(
        {
            "dplay.multi.id_to": le(id_to),
            "dplay.multi.player_id": le(player_id),
            "dplay.multi.group_id": le(group_id),
            "dplay.multi.create_offset": str(create_offset),
            "dplay.multi.password_offset": str(password_offset),
        }
    )
    render_packed(out, dp.parse_packed_player(body[20:]))


def render_spp(out: Fields, p: SuperPackedPlayer) -> None:
    add(out, "dplay.spp.size", "16")
    add(out, "dplay.spp.flags", h32(p.flags))
    add(out, "dplay.spp.id", le(p.player_id))
    add(out, "dplay.spp.pim", h32(p.info_mask))
    if p.flags & dp.PLAYER_SYSTEM:
        add(out, "dplay.spp.dialect", h32(p.version_or_system_player_id))
    else:
        add(out, "dplay.spp.sysplayer_id", le(p.version_or_system_player_id))
    if p.short_name is not None:
        add(out, "dplay.spp.short_name", p.short_name)
    if p.long_name is not None:
        add(out, "dplay.spp.long_name", p.long_name)
    if p.player_data is not None:
        add(out, "dplay.spp.pd_length", h32(len(p.player_data)))
        if p.player_data:
            add(out, "dplay.spp.player_data", p.player_data.hex())
    if p.sp_data is not None:
        add(out, "dplay.spp.sp_data_length", h32(len(p.sp_data)))
        if p.sp_data:
            add(out, "dplay.spp.sp_data", p.sp_data.hex())
    if p.player_ids is not None:
        add(out, "dplay.spp.player_count", h32(len(p.player_ids)))
        for player_id in p.player_ids:
            add(out, "dplay.spp.player_id", le(player_id))
    if p.parent_id is not None:
        add(out, "dplay.spp.parent_id", le(p.parent_id))
    if p.shortcut_ids is not None:
        add(out, "dplay.spp.shortcut_count", h32(len(p.shortcut_ids)))
        for shortcut in p.shortcut_ids:
            add(out, "dplay.spp.shortcut_id", le(shortcut))


def render_dp4(msg: DP4Message, length: int) -> Fields:
    out = render_header(msg.header, length)
    if not msg.signature:
        out["dplay.player_msg"] = msg.body.hex()
        return out
    out.update({"dplay.command": f"0x{msg.command:04x}", "dplay.dialect.version": "0x000e"})
    out["dplay.dialect.version"] = f"0x{msg.version:04x}"
    parsed = msg.parsed
    if isinstance(parsed, EnumSessions):
        out["dplay.type02.game.guid"] = raw_guid(parsed.application_guid)
        out["dplay.type02.password_offset"] = "32" if parsed.password is not None else "0"
        out["dplay.type02.flags"] = h32(parsed.flags)
        if parsed.password is not None:
            out["dplay.type02.password"] = parsed.password
    elif isinstance(parsed, EnumSessionsReply):
        render_desc(out, parsed.desc)
        out["dplay.type_01.name_offs"] = "92" if parsed.name is not None else "0"
        if parsed.name is not None:
            out["dplay.type_01.game_name"] = parsed.name
    elif isinstance(parsed, PacketFragment) and parsed.command == dp.DP4Command.PACKET:
        out.update(
            {
                "dplay.message.guid": raw_guid(parsed.message_guid),
                "dplay.type_15.packet_idx": str(parsed.packet_index),
                "dplay.type_15.data_size": str(parsed.data_size),
                "dplay.type_15.offset": str(parsed.offset),
                "dplay.type_15.total_packets": str(parsed.total_packets),
                "dplay.type_15.message.size": str(parsed.message_size),
                "dplay.type_15.packet_offset": str(parsed.packet_offset),
            }
        )
        inner = dp.parse_dp4(parsed.data, bare=True)
        out.update(
            {
                "dplay.dplay_str_2": "play",
                "dplay.command_2": f"0x{inner.command:04x}",
                "dplay.dialect.version_2": f"0x{inner.version:04x}",
            }
        )
        if inner.command == dp.DP4Command.CREATEPLAYER:
            render_player_message(out, inner.body)
    elif msg.command == dp.DP4Command.CREATEPLAYER:
        render_player_message(out, msg.body)
    elif msg.command == dp.DP4Command.SUPERENUMPLAYERSREPLY:
        render_super_enum_players_reply(out, msg.body)
    return out


def render_super_enum_players_reply(out: Fields, body: bytes) -> None:
    players, groups, packed, shortcuts, desc_off, name_off, pass_off = struct.unpack_from(
        "<7I", body
    )
    out.update(
        {
            "dplay.type_29.player_count": str(players),
            "dplay.type_29.group_count": str(groups),
            "dplay.type_29.packed_offset": str(packed),
            "dplay.type_29.shortcut_count": str(shortcuts),
            "dplay.type_29.desc_offset": str(desc_off),
            "dplay.type_29.name_offset": str(name_off),
            "dplay.type_29.pass_offset": str(pass_off),
        }
    )
    message = b"play" + bytes(4) + body  # offsets count from 'play'
    render_desc(out, dp.parse_session_desc(message[desc_off:]))
    out["dplay.type_29.game_name"], _ = read_nul_string(message, name_off, "game name")
    pos = packed
    for _ in range(players + groups + shortcuts):
        record, used = dp.parse_super_packed_player(message[pos:])
        render_spp(out, record)
        pos += used


def render_dp8(msg: DPlayMessage) -> Fields:
    if isinstance(msg, DP8EnumQuery):
        out = {
            "dpnet.lead": "0",
            "dpnet.command": "0x02",
            "dpnet.payload": f"0x{msg.cookie:04x}",
            "dpnet.type": str(msg.query_type),
        }
        if msg.application_guid is not None:
            out["dpnet.application"] = raw_guid(msg.application_guid)  # ENC_BIG_ENDIAN here
        if msg.app_data:
            out["dpnet.data"] = msg.app_data.hex()
        return out
    if isinstance(msg, DP8EnumResponse):
        return render_response(msg)
    assert isinstance(msg, DP8Frame)
    return render_frame(msg)


def render_response(msg: DP8EnumResponse) -> Fields:
    raw = dp.build_dp8_enum_response(msg)
    offsets = struct.unpack_from("<6I8I", raw, 4)
    out = {
        "dpnet.lead": "0",
        "dpnet.command": "0x03",
        "dpnet.payload": f"0x{msg.cookie:04x}",
        "dpnet.reply_offset": str(offsets[0]),
        "dpnet.response_size": str(offsets[1]),
        "dpnet.desc_size": str(msg.app_desc_size),
        "dpnet.desc_flags": f"0x{msg.flags:04x}",
        "dpnet.max_players": str(msg.max_players),
        "dpnet.current_players": str(msg.current_players),
        "dpnet.session_offset": str(offsets[6]),
        "dpnet.session_size": str(offsets[7]),
        "dpnet.password_offset": str(offsets[8]),
        "dpnet.password_size": str(offsets[9]),
        "dpnet.reserved_offset": str(offsets[10]),
        "dpnet.reserved_size": str(offsets[11]),
        "dpnet.application_offset": str(offsets[12]),
        "dpnet.application_size": str(offsets[13]),
        "dpnet.instance": str(msg.instance_guid),  # ENC_LITTLE_ENDIAN: the Windows form
        "dpnet.application": str(msg.application_guid),
    }
    if msg.session_name is not None:
        out["dpnet.session_name"] = msg.session_name  # read via SessionNameOffset + 4
    if msg.app_reserved_data:
        out["dpnet.application_data"] = msg.app_reserved_data.hex()
    return out


def render_frame(frame: DP8Frame) -> Fields:
    out = {"dpnet.command": f"0x{frame.command:02x}"}
    if frame.data is not None:
        return out  # Wireshark 4.0 decodes only the command byte of a DFRAME
    out["dpnet.cframe.control"] = f"0x{frame.ext_opcode:02x}"
    if frame.sack is not None:
        sack = frame.sack
        out.update(
            {
                "dpnet.cframe.flags": f"0x{sack.flags:02x}",
                "dpnet.cframe.retry": f"0x{sack.retry:02x}",
                "dpnet.cframe.nseq": f"0x{sack.next_send:02x}",
                "dpnet.cframe.nrcv": f"0x{sack.next_receive:02x}",
                "dpnet.cframe.padding": str(sack.padding),
                "dpnet.cframe.timestamp": str(frame.timestamp),
            }
        )
        masks = {
            "dpnet.cframe.sack.mask1": sack.sack_mask1,
            "dpnet.cframe.sack.mask2": sack.sack_mask2,
            "dpnet.cframe.send.mask1": sack.send_mask1,
            "dpnet.cframe.send.mask2": sack.send_mask2,
        }
        out.update({k: h32(v) for k, v in masks.items() if v is not None})
        return out
    out.update(
        {
            "dpnet.cframe.msg_id": f"0x{frame.msg_id:02x}",
            "dpnet.cframe.rsp_id": f"0x{frame.rsp_id:02x}",
            "dpnet.cframe.protocol": h32(frame.protocol_version),
            "dpnet.cframe.session": h32(frame.session_id),
            "dpnet.cframe.timestamp": str(frame.timestamp),
        }
    )
    trailer = frame.trailer
    if frame.ext_opcode == dp.DP8ExtOpcode.CONNECTED_SIGNED:
        out["dpnet.cframe.signature"] = "0x" + trailer[0:8].hex()
        out["dpnet.cframe.sender_secret"] = "0x" + trailer[8:16].hex()
        out["dpnet.cframe.receiver_secret"] = "0x" + trailer[16:24].hex()
        out["dpnet.cframe.sign_opt"] = h32(int.from_bytes(trailer[24:28], "little"))
        out["dpnet.cframe.echo_time"] = h32(int.from_bytes(trailer[28:32], "little"))
    elif frame.ext_opcode == dp.DP8ExtOpcode.HARD_DISCONNECT and trailer:
        out["dpnet.cframe.signature"] = "0x" + trailer[0:8].hex()
    return out


def render(pkt: Packet) -> list[Fields]:
    """Our decoder's view of one frame: one dict per DirectPlay message it carries."""
    if pkt.proto == "udp" and len(pkt.payload) >= ipx.HEADER_LEN and 213 in (pkt.sport, pkt.dport):
        _, data = ipx.parse_packet(pkt.payload)
        msg = dp.parse_dplay(data)
        assert isinstance(msg, DP4Message)
        return [render_dp4(msg, len(data))]
    if pkt.proto == "tcp":
        messages, rest = dp.split_dp4_stream(pkt.payload)
        assert rest == b""
        return [render_dp4(dp.parse_dp4(m), len(m)) for m in messages]
    if not pkt.payload:
        return []
    msg = dp.parse_dplay(pkt.payload, dp8_context=bool(DP8_PORTS & {pkt.sport, pkt.dport}))
    if isinstance(msg, DP4Message):
        return [render_dp4(msg, len(pkt.payload))]
    return [render_dp8(msg)]


# --- running tshark -------------------------------------------------------------------------


def tshark_fields(pcap: Path, fields: list[str]) -> list[Fields]:
    args = [
        "tshark", "-n", "-r", str(pcap),
        "--enable-heuristic", "dplay_udp", "--enable-heuristic", "dplay_tcp",
        "-d", "udp.port==2302,dpnet",
        "-X", f"lua_script:{LUA_SHIM}",
        "-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=;",
    ]  # fmt: skip
    for field in fields:
        args += ["-e", field]
    res = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    rows = []
    for line in res.stdout.splitlines():
        values = line.split("|")
        assert len(values) == len(fields), line
        # a zero-length field is present but prints as "<MISSING>"
        row = {f: v for f, v in zip(fields, values, strict=True) if v}
        rows.append({f: "" if v == "<MISSING>" else v for f, v in row.items()})
    return rows


def compare(pcap: Path, packets: Sequence[Packet | None]) -> int:
    """Every frame: the fields tshark prints == the fields our decoder renders."""
    expected = [render(p) if p is not None else [] for p in packets]
    fields = sorted({k for frame in expected for msg in frame for k in msg})
    got = tshark_fields(pcap, fields)
    assert len(got) == len(packets)
    checked = 0
    for number, (ours, theirs) in enumerate(zip(expected, got, strict=True), 1):
        merged: Fields = {}
        for msg in ours:
            for key, value in msg.items():
                add(merged, key, value)
        assert theirs == merged, f"frame {number}"
        checked += len(merged)
    return checked


# --- the messages our builders produce ------------------------------------------------------

SP_DATA: Final = dp.build_winsock_sp_data(
    SockAddr(2, 2300, "0.0.0.0"), SockAddr(2, 2350, "0.0.0.0")
)
CLIENT_TCP: Final = SockAddr(2, 2300, "0.0.0.0")


def create_player(player: PackedPlayer) -> bytes:
    """DPSP_MSG_CREATEPLAYER body: IDTo, PlayerID, GroupID, CreateOffset 28, PasswordOffset."""
    return struct.pack("<5I", 0, player.player_id, 0, 28, 0) + dp.build_packed_player(player)


def super_enum_players_reply(
    desc: SessionDesc, name: str, players: list[SuperPackedPlayer]
) -> bytes:
    """SUPERENUMPLAYERSREPLY body (0x29): counts and offsets (from 'play'), desc, name, players."""
    name_bytes = (name + "\x00").encode("utf-16-le")
    desc_offset = 8 + 28
    name_offset = desc_offset + 80
    packed_offset = name_offset + len(name_bytes)
    head = struct.pack("<7I", len(players), 0, packed_offset, 0, desc_offset, name_offset, 0)
    body = head + dp.build_session_desc(desc) + name_bytes
    return body + b"".join(dp.build_super_packed_player(p) for p in players)


def built_packets() -> tuple[list[Packet], list[object]]:
    """Frames encoded by our builders, and the records each was built from."""
    enum = EnumSessions(TA, dp.ENUM_SESSIONS_AVAILABLE | dp.ENUM_SESSIONS_PASSWORD, "Secret")
    desc = SessionDesc(
        flags=dp.SESSION_KEEPALIVE | dp.SESSION_MIGRATE_HOST | dp.SESSION_CLIENT_SERVER,
        instance_guid=uuid.UUID("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0"),
        application_guid=TA,
        max_players=16,
        current_players=3,
        user=(1, 0x22, 0x333, 0x4444),
    )
    reply = EnumSessionsReply(desc, "Bridge Test")
    group = PackedPlayer(
        dp.PLAYER_IN_GROUP, 0x0197FDA9, "Red team", None, b"", b"\x10\x20", 0x0197FDA8, 0x0E, 0,
        (0x0197FDAD, 0x0197FDAE),
    )  # fmt: skip
    kirk = PackedPlayer(
        dp.PLAYER_SYSTEM | dp.PLAYER_NAME_SERVER, 0x0197FDA8, "Kirk", "James T. Kirk", SP_DATA,
        b"", 0x0197FDA8, 0x0E, 0, (),
    )  # fmt: skip
    inner = dp.build_dp4(dp.DP4Command.CREATEPLAYER, 0x0E, create_player(kirk), header=None)
    size = len(inner)
    fragment = PacketFragment(0x15, uuid.UUID(int=0xABC), 0, size, 0, 1, size, 48, inner)
    spp = [
        SuperPackedPlayer(
            dp.PLAYER_SYSTEM | dp.PLAYER_NAME_SERVER, 0x0197FDA8,
            dp.SPP_SHORT_NAME | dp.SPP_LONG_NAME | 1 << dp.SPP_SP_LENGTH_SHIFT,
            0x0E, "Host", "The host", None, SP_DATA, None, None, None,
        ),
        SuperPackedPlayer(
            dp.PLAYER_IN_GROUP, 0x0197FDAD,
            dp.SPP_SHORT_NAME | 2 << dp.SPP_PLAYER_DATA_SHIFT | 1 << dp.SPP_PLAYER_COUNT_SHIFT
            | dp.SPP_PARENT_ID | 3 << dp.SPP_SHORTCUT_COUNT_SHIFT,
            0x0197FDA8, "Bones", None, b"\x01\x02\x03", None, (5, 6), 7, (8,),
        ),
    ]  # fmt: skip
    query1 = DP8EnumQuery(0x1234, 1, ARMADA, b"hello")
    query2 = DP8EnumQuery(0xBEEF, 2, None, b"")
    response = DP8EnumResponse(
        cookie=0x1234,
        flags=dp.DP8_SESSION_REQUIRE_PASSWORD | dp.DP8_SESSION_MIGRATE_HOST,
        max_players=8,
        current_players=5,
        session_name="Armada II LAN",
        password=b"pw",
        reserved_data=b"\x00" * 4,
        app_reserved_data=b"app-data",
        instance_guid=uuid.UUID("FEDCBA98-7654-4321-8FED-CBA987654321"),
        application_guid=ARMADA,
        reply_data=b"reply",
    )
    session = 0x79C9AEC6
    frames = [
        DP8Frame(0x88, 1, 0, 0, 0x00010006, session, 0x2367369D),
        DP8Frame(0x88, 3, 0, 1, 0x00010006, session, 1234, trailer=bytes(range(1, 33))),
        DP8Frame(0x80, 4, 2, 0, 0x00010006, session, 99, trailer=bytes(range(8))),
        DP8Frame(0x80, 6, 0, 0, 0, 0, 4242, sack=DP8Sack(0x1B, 1, 2, 3, 0xF0, None, 0x0F, 0x1)),
        DP8Frame(
            0x3F, 0, 0, 0, 0, session, 0,
            data=DP8DataFrame(2, 0, 0, None, None, None, None, session.to_bytes(4, "little")),
        ),
    ]  # fmt: skip
    # Wireshark's player-message heuristic checks bytes 12..20 *inclusive* for zero, so the
    # first data byte must be 0 for tshark to recognise the frame (idFrom 0x0197FD00 here).
    player_msg = dp.build_dp4_player(SPHeader(0, dp.TOKEN_REMOTE, SockAddr(2, 2350, "0.0.0.0")),
                                     b"\x00\xfd\x97\x01\xad\xfd\x97\x01game data")  # fmt: skip
    ipx_enum = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE, dst_socket=ipx.SOCKET_DPLAY_DISCOVERY,
        src_node=bytes.fromhex("c0000202 0a40"), src_socket=0x4008,
        payload=dp.build_enum_sessions(enum, bare=True),
    )  # fmt: skip
    ipx_reply = ipx.build_packet(
        dst_node=bytes.fromhex("c000020a4008"), dst_socket=0x4008,
        src_node=bytes.fromhex("c00002144002"), src_socket=0x4002, packet_type=4,
        payload=dp.build_enum_sessions_reply(reply, bare=True),
    )  # fmt: skip
    big = dp.build_enum_sessions_reply(EnumSessionsReply(desc, "x" * 199), sockaddr=CLIENT_TCP)
    assert len(big) == 512  # starts 00 02: the DP4-before-DP8 trap (docs/protocols.md 2.5)

    def udp(sport: int, dport: int, payload: bytes, dst: str = HOST) -> Packet:
        return Packet("udp", CLIENT, sport, dst, dport, payload)

    packets = [
        udp(50001, dp.DP4_ENUM_PORT, dp.build_enum_sessions(enum, sockaddr=CLIENT_TCP),
            "255.255.255.255"),
        Packet("tcp", HOST, 49152, CLIENT, 2300,
               dp.build_enum_sessions_reply(reply, sockaddr=SockAddr(2, 2301, "0.0.0.0"))),
        udp(2350, 2351, dp.build_packet_fragment(fragment, sockaddr=SockAddr(2, 2350, "0.0.0.0"))),
        udp(2350, 2351, dp.build_dp4(dp.DP4Command.CREATEPLAYER, 0x0B, create_player(group),
                                     header=SPHeader(0, dp.TOKEN_REMOTE, CLIENT_TCP))),
        Packet("tcp", HOST, 2300, CLIENT, 2301, dp.build_dp4(
            dp.DP4Command.SUPERENUMPLAYERSREPLY, 0x0E,
            super_enum_players_reply(desc, "Bridge Test", spp),
            header=SPHeader(0, dp.TOKEN_REMOTE, SockAddr(2, 2300, "192.0.2.20")))),
        udp(2350, 2351, player_msg),
        udp(55000, dp.DP8_ENUM_PORT, dp.build_dp8_enum_query(query1), "255.255.255.255"),
        udp(55000, dp.DP8_ENUM_PORT, dp.build_dp8_enum_query(query2), "255.255.255.255"),
        Packet("udp", HOST, 2302, CLIENT, 55000, dp.build_dp8_enum_response(response)),
        *(udp(55000, 2302, dp.build_dp8_frame(f)) for f in frames),
        udp(213, 213, ipx_enum, "192.0.2.255"),
        Packet("udp", HOST, 213, CLIENT, 213, ipx_reply),
        udp(50001, dp.DP4_ENUM_PORT, big),
    ]  # fmt: skip
    records: list[object] = [
        enum, reply, fragment, None, None, None, query1, query2, response, *frames, enum, reply,
        None,
    ]  # fmt: skip
    return packets, records


# --- the tests -------------------------------------------------------------------------------


@pytest.fixture
def tshark() -> None:
    require("tshark")


@pytest.mark.usefixtures("tshark")
def test_tshark_decodes_what_our_builders_encode(tmp_path: Path) -> None:
    packets, records = built_packets()
    # our own decoder gives back what was encoded
    for pkt, record in zip(packets, records, strict=True):
        if record is None:
            continue
        data = pkt.payload
        if 213 in (pkt.sport, pkt.dport):
            data = bytes(ipx.parse_packet(data)[1])
        msg = dp.parse_dplay(data, dp8_context=bool(DP8_PORTS & {pkt.sport, pkt.dport}))
        assert (msg.parsed if isinstance(msg, DP4Message) else msg) == record
    pcap = tmp_path / "built.pcap"
    write_pcap(pcap, packets)
    checked = compare(pcap, packets)
    assert checked > 150  # the comparison really covered the fields


@pytest.mark.usefixtures("tshark")
def test_shipped_capture_agrees_with_tshark() -> None:
    packets = read_pcap(VECTORS_PCAP)
    assert len(packets) == 15
    checked = compare(VECTORS_PCAP, packets)
    assert checked > 100


@pytest.mark.usefixtures("tshark")
def test_protocol_column_names_every_built_frame(tmp_path: Path) -> None:
    """tshark's own classification agrees with ours, including the 512-byte DP4 message."""
    packets, _ = built_packets()
    pcap = tmp_path / "built.pcap"
    write_pcap(pcap, packets)
    got = [row.get("_ws.col.Protocol", "") for row in tshark_fields(pcap, ["_ws.col.Protocol"])]
    ours = []
    for pkt in packets:
        data = pkt.payload
        if 213 in (pkt.sport, pkt.dport):
            data = bytes(ipx.parse_packet(data)[1])
        kind = dp.classify(data, dp8_context=bool(DP8_PORTS & {pkt.sport, pkt.dport}))
        ours.append("DPNET" if kind.value.startswith("dp8") else "DPLAY")
    assert got == ours
