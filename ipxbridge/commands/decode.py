"""``ipxbridge decode``: hex strings and capture files decoded offline to JSON-able dicts.

Every frame becomes one object with the keys ``ok``, ``error``, ``ipx`` and ``directplay``
(fixed names; more keys are additions). Nothing here raises for bad input:
a frame that does not decode has ``ok: false`` and the reason in ``error``. A captured frame
that is neither UDP nor TCP (ICMP, ARP, ...) is no failure: it is ``ok`` with what it
carries in ``skipped``, left out of the text listing and counted in its last line.
"""

import argparse
import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

from ipxbridge.commands.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    SubParsers,
    add_command,
    report,
)
from ipxbridge.games import game_table
from ipxbridge.policy.sessions import (
    dp4_lobby,
    dp8_lobby,
    lobby_json,
    players_text,
    status_text,
    user_hex,
)
from ipxbridge.wire.directplay import (
    DP4Message,
    DP8EnumQuery,
    DP8Frame,
    DPlayError,
    DPlayMessage,
    EnumSessions,
    EnumSessionsReply,
    PacketFragment,
    dp8_frame_name,
    format_guid,
    parse_dplay,
    split_dp4_stream,
)
from ipxbridge.wire.dplay8 import is_dp8_port
from ipxbridge.wire.errors import WireError
from ipxbridge.wire.ipx import HEADER_LEN, IPX_UDP_PORT, IpxHeader, parse_header
from ipxbridge.wire.pcap import Frame, PcapError

Json = dict[str, Any]

EXAMPLES = (
    (
        "ipxbridge decode --hex 'ffff 001e 0004 00000000 ffffffffffff 4002 00000000 "
        "020000000001 4002'",
        "one frame given as hex: an IPX packet (UDP 213 payload) or a DirectPlay message",
    ),
    (
        "ipxbridge decode --pcap lan-party.pcapng",
        "each UDP and TCP frame of a capture, one line each; others (ICMP, ARP) counted last",
    ),
    (
        "ipxbridge decode --pcap lan-party.pcap --json",
        "the same as JSON: one object per frame with ok, error, ipx and directplay",
    ),
)


def ipx_json(h: IpxHeader) -> Json:
    """The IPX header as JSON."""
    return {
        "checksum": h.checksum,
        "length": h.length,
        "hops": h.hops,
        "packet_type": h.packet_type,
        "dst_net": h.dst_net.hex(),
        "dst_node": h.dst_node.hex(":"),
        "dst_socket": h.dst_socket,
        "src_net": h.src_net.hex(),
        "src_node": h.src_node.hex(":"),
        "src_socket": h.src_socket,
    }


def dplay_json(msg: DPlayMessage, games: Mapping[UUID, str]) -> Json:
    """A decoded DirectPlay message as JSON (fixed keys first)."""
    out: Json = {
        "version": 4,
        "command": 0,
        "command_name": "",
        "game_guid": None,
        "game": None,
        "session_name": None,
        "current_players": None,
        "max_players": None,
        "flags": None,
    }
    guid: UUID | None = None
    if isinstance(msg, DP4Message):
        out.update(
            command=msg.command,
            command_name=msg.command_name,
            dialect_version=msg.version,
            sp_header=msg.header is not None,
        )
        if msg.reliable:  # 'play' + 0xFF: the reliable protocol, which has no version
            out.update(dialect_version=None, reliable_protocol=True)
        if msg.header is not None:
            out["sockaddr"] = f"{msg.header.sockaddr.address}:{msg.header.sockaddr.port}"
            out["token"] = f"0x{msg.header.token:03x}"
        parsed = msg.parsed
        if isinstance(parsed, EnumSessions):
            guid = parsed.application_guid
            out.update(flags=parsed.flags, password=parsed.password)
        elif isinstance(parsed, EnumSessionsReply):
            d = parsed.desc
            guid = d.application_guid
            out.update(
                session_name=parsed.name,
                current_players=d.current_players,
                **lobby_json(dp4_lobby(d)),  # max_players decoded (docs/protocols.md 1.6.1)
                max_players_wire=d.max_players,
                flags=d.flags,
                instance_guid=format_guid(d.instance_guid),
                user=[f"0x{u:08x}" for u in d.user],
                user_bytes=user_hex(d.user),  # raw, in wire order
            )
        elif isinstance(parsed, PacketFragment):
            out.update(
                message_guid=format_guid(parsed.message_guid),
                packet_index=parsed.packet_index,
                total_packets=parsed.total_packets,
                message_size=parsed.message_size,
                data_size=parsed.data_size,
            )
    elif isinstance(msg, DP8Frame):
        out.update(
            version=8,
            command=msg.command,
            command_name=dp8_frame_name(msg),
            session_id=f"0x{msg.session_id:08x}",
        )
    else:  # a DirectPlay 8 enumeration: the query, or a host's response
        guid = msg.application_guid
        out["version"] = 8
        if isinstance(msg, DP8EnumQuery):
            out.update(command=0x02, command_name="EnumQuery", query_type=msg.query_type)
            out["cookie"] = msg.cookie
        else:
            out.update(
                command=0x03,
                command_name="EnumResponse",
                session_name=msg.session_name,
                current_players=msg.current_players,
                **lobby_json(dp8_lobby(msg)),  # max_players null: MaxPlayers 0, no limit
                max_players_wire=msg.max_players,
                flags=msg.flags,
                cookie=msg.cookie,
                instance_guid=format_guid(msg.instance_guid),
            )
    if guid is not None:
        out["game_guid"] = format_guid(guid)
        out["game"] = games.get(guid)
    return out


def _undecoded(reason: str, detail: str) -> Json:
    """What could not be decoded, and why (the codec's reason and detail)."""
    return {"ok": False, "error": reason, "detail": detail, "ipx": None, "directplay": None}


def _dplay(payload: bytes, games: Mapping[UUID, str], *, dp8_context: bool) -> Json:
    try:
        msg = parse_dplay(payload, dp8_context=dp8_context)
    except DPlayError as exc:
        return _undecoded(exc.reason, exc.detail)
    return {"ok": True, "error": None, "ipx": None, "directplay": dplay_json(msg, games)}


def decode_ipx(data: bytes, games: Mapping[UUID, str]) -> Json:
    """An IPX packet (UDP 213 payload) and, when its data is DirectPlay, that too."""
    try:
        header = parse_header(data)
    except WireError as exc:
        return _undecoded(exc.reason, exc.detail)
    out: Json = {"ok": True, "error": None, "ipx": ipx_json(header), "directplay": None}
    payload = data[HEADER_LEN:]
    if payload:
        inner = _dplay(payload, games, dp8_context=False)
        if inner["ok"]:
            out["directplay"] = inner["directplay"]
        elif inner["error"] != "not_dplay":
            out.update(ok=False, error=inner["error"], detail=inner.get("detail"))
    return out


def looks_like_ipx(data: bytes) -> bool:
    """Checksum 0xFFFF and a Length field of at least a header: an IPX packet.

    The Length need not equal the size: one that does not is the IPX error ``bad_length``,
    reported with both numbers. Read as DirectPlay instead, such a packet passed for a
    DirectPlay 8 DFRAME (0xFF sets the data bit), which no game sends with every command
    and control bit set.
    """
    return (
        len(data) >= HEADER_LEN
        and data[:2] == b"\xff\xff"
        and int.from_bytes(data[2:4], "big") >= HEADER_LEN
    )


def decode_hex(text: str, games: Mapping[UUID, str]) -> list[Json]:
    """Decode one frame given as hex (spaces, colons and newlines allowed)."""
    cleaned = "".join(text.replace(":", " ").split())
    try:
        data = bytes.fromhex(cleaned)
    except ValueError:
        return [_undecoded("bad_hex", "not a hexadecimal string")]
    if looks_like_ipx(data):
        return [{"frame": 1, **decode_ipx(data, games)}]
    return [{"frame": 1, **_dplay(data, games, dp8_context=True)}]


def decode_frame(frame: Frame, games: Mapping[UUID, str]) -> list[Json]:
    """One captured packet (a TCP segment may hold several DirectPlay messages)."""
    base: Json = {
        "frame": frame.number,
        "transport": frame.transport,
        "src": f"{frame.src}:{frame.sport}",
        "dst": f"{frame.dst}:{frame.dport}",
    }
    if frame.other is not None:  # not ours to decode, and nothing wrong with it
        return [
            {
                **base,
                "ok": True,
                "error": None,
                "skipped": frame.other,
                "ipx": None,
                "directplay": None,
            }
        ]
    if frame.error is not None:
        return [
            {
                **base,
                "ok": False,
                "error": "undecodable_frame",
                "detail": frame.error,
                "ipx": None,
                "directplay": None,
            }
        ]
    ports = (frame.sport, frame.dport)
    if frame.transport == "udp" and IPX_UDP_PORT in ports:
        return [{**base, **decode_ipx(frame.payload, games)}]
    if frame.transport == "tcp":
        if not frame.payload:  # handshake, ACK or FIN: nothing to decode, nothing wrong
            return [
                {
                    **base,
                    "ok": True,
                    "error": None,
                    "note": "no payload",
                    "ipx": None,
                    "directplay": None,
                }
            ]
        try:
            messages, rest = split_dp4_stream(frame.payload)
        except DPlayError as exc:
            return [{**base, "ok": False, "error": exc.reason, "ipx": None, "directplay": None}]
        out = [{**base, **_dplay(m, games, dp8_context=False)} for m in messages]
        if rest:
            out.append(
                {
                    **base,
                    "ok": False,
                    "error": "dplay_truncated",
                    "detail": f"{len(rest)} bytes of an incomplete message",
                    "ipx": None,
                    "directplay": None,
                }
            )
        return out
    dp8 = any(is_dp8_port(p) for p in ports)
    return [{**base, **_dplay(frame.payload, games, dp8_context=dp8)}]


def decode_pcap(data: bytes, games: Mapping[UUID, str]) -> list[Json]:
    """Every packet of a capture file: classic pcap or pcapng (any mix of interfaces).

    Raises:
        PcapError: the file itself is unreadable (``reason`` in ``wire.pcap.PCAP_REASONS``).
    """
    from ipxbridge.io.capture import read_capture  # noqa: PLC0415 - python-pcapng: light --help

    out: list[Json] = []
    for frame in read_capture(data):
        out.extend(decode_frame(frame, games))
    return out


def skipped_line(items: list[Json]) -> str | None:
    """The listing's last line when frames were skipped: how many, and what they carried."""
    kinds = Counter(str(i["skipped"]) for i in items if i.get("skipped"))
    if not kinds:
        return None
    total = sum(kinds.values())
    what = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
    noun = "frame that is" if total == 1 else "frames that are"
    return f"skipped {total} {noun} not UDP or TCP: {what}"


def summary_line(item: Json) -> str:
    """One human-readable line per decoded frame."""
    head = f"#{item.get('frame', '?')}"
    if "src" in item:
        head += f" {item.get('transport')} {item['src']} -> {item['dst']}"
    if not item["ok"]:
        detail = item.get("detail")
        return f"{head}: ERROR {item['error']}" + (f" ({detail})" if detail else "")
    parts = []
    if item["ipx"]:
        i = item["ipx"]
        parts.append(
            f"IPX {i['src_net']}.{i['src_node']}:{i['src_socket']:04x} -> "
            f"{i['dst_net']}.{i['dst_node']}:{i['dst_socket']:04x} hops={i['hops']} "
            f"len={i['length']}"
        )
    dp = item["directplay"]
    if dp:
        text = f"DirectPlay {dp['version']} {dp['command_name']}"
        if dp.get("game_guid"):
            text += f" game={dp['game'] or dp['game_guid']}"
        if dp.get("session_name") is not None:
            text += f" session={dp['session_name']!r}"
        if dp.get("current_players") is not None:
            text += f" players={players_text(dp['current_players'], dp.get('max_players'))}"
        if "open" in dp:
            text += f" status={status_text(dp)}"
        if dp.get("map") is not None:
            text += f" map={dp['map']!r}"
        parts.append(text)
    return f"{head}: " + ("; ".join(parts) or item.get("note", "not IPX or DirectPlay"))


def add_parser(sub: SubParsers) -> None:
    """Register ``decode``."""
    parser = add_command(
        sub, "decode", run, summary="decode IPX / DirectPlay frames offline", examples=EXAMPLES
    )
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--hex", metavar="HEX", help="one frame as hex (spaces allowed)")
    src.add_argument("--pcap", type=Path, metavar="FILE", help="a capture file: pcap or pcapng")
    parser.add_argument("--json", action="store_true", help="JSON list, one object per frame")


def run(args: argparse.Namespace) -> int:
    """Decode, print (one line per frame, or JSON); exit 1 if a frame did not decode.

    Frames that are neither UDP nor TCP are not failures: the text listing counts them in
    its last line instead of a line each, the JSON keeps them with their ``skipped`` key.
    """
    games = game_table()
    if args.hex is not None:
        items = decode_hex(args.hex, games)
    else:
        try:
            items = decode_pcap(args.pcap.read_bytes(), games)
        except OSError as exc:
            report([f"{args.pcap}: cannot read: {exc.strerror}"])
            return EXIT_USAGE
        except PcapError as exc:
            report([f"{args.pcap}: {exc}"])
            return EXIT_USAGE
    if args.json:
        print(json.dumps(items, indent=1))
    else:
        for item in items:
            if not item.get("skipped"):
                print(summary_line(item))
        skipped = skipped_line(items)
        if skipped is not None:
            print(skipped)
    return EXIT_OK if all(i["ok"] for i in items) else EXIT_FAILURE
