"""pcapng in ``ipxbridge decode --pcap``: every interface, link type and
timestamp resolution, both byte orders, and damaged files as one clear reason.

Two kinds of input. The vectors ``dplay_vectors.pcapng`` and ``dplay_interfaces.pcapng``
were written by Wireshark's tools (editcap, text2pcap, dumpcap, mergecap; see
``tests/unit/vectors``). The small files built here with ``struct`` follow the pcapng
specification (draft-ietf-opsawg-pcapng, sections 3 and 4) for what the tools do not write:
big-endian sections, Simple and obsolete Packet Blocks, chosen timestamp resolutions,
hostile blocks; ``tests/integration/test_pcapng.py`` has tshark read the same builders.
"""

import json
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Final

import pytest

from ipxbridge.commands.decode import decode_pcap
from ipxbridge.games import game_table
from ipxbridge.io.capture import read_capture
from ipxbridge.wire.pcap import PCAP_REASONS, Frame, PcapError
from tests.fuzz.targets import mutations
from tests.unit.vectors import VECTORS_INTERFACES, VECTORS_PCAP, VECTORS_PCAPNG, load_vectors

GAMES: Final = game_table()

# --- pcapng blocks, per the specification ----------------------------------------------------

SHB: Final = 0x0A0D0D0A
IDB: Final = 0x00000001
OPB: Final = 0x00000002  # obsolete Packet Block
SPB: Final = 0x00000003
EPB: Final = 0x00000006
OPT_IF_NAME: Final = 2
OPT_IF_TSRESOL: Final = 9
OPT_IF_TSOFFSET: Final = 14
ETHERNET, RAW, SLL, SLL2 = 1, 101, 113, 276


def pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def block(e: str, kind: int, body: bytes) -> bytes:
    """Type, total length, body padded to 32 bits, total length again."""
    total = 12 + len(pad(body))
    return struct.pack(e + "II", kind, total) + pad(body) + struct.pack(e + "I", total)


def option(e: str, code: int, value: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(value)) + pad(value)


def shb(e: str, major: int = 1) -> bytes:
    return block(e, SHB, struct.pack(e + "IHHq", 0x1A2B3C4D, major, 0, -1))


def idb(e: str, link_type: int, *options: bytes, snaplen: int = 0) -> bytes:
    opts = b"".join(options) + (option(e, 0, b"") if options else b"")
    return block(e, IDB, struct.pack(e + "HHI", link_type, 0, snaplen) + opts)


def epb(e: str, interface: int, ticks: int, data: bytes) -> bytes:
    head = struct.pack(
        e + "IIIII", interface, ticks >> 32, ticks & 0xFFFFFFFF, len(data), len(data)
    )
    return block(e, EPB, head + pad(data))


def spb(e: str, data: bytes) -> bytes:
    return block(e, SPB, struct.pack(e + "I", len(data)) + pad(data))


def opb(e: str, interface: int, ticks: int, data: bytes) -> bytes:
    head = struct.pack(
        e + "HHIIII", interface, 0, ticks >> 32, ticks & 0xFFFFFFFF, len(data), len(data)
    )
    return block(e, OPB, head + pad(data))


# --- frames ----------------------------------------------------------------------------------

SRC, DST = "10.0.0.1", "10.0.0.2"


def ipv4_udp(payload: bytes, sport: int = 50000, dport: int = 213) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    addrs = bytes([10, 0, 0, 1, 10, 0, 0, 2])
    return struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0) + addrs + udp


def framed(link_type: int, ip: bytes) -> bytes:
    """``ip`` behind the link-layer header of ``link_type`` (ethertype IPv4)."""
    if link_type == ETHERNET:
        return b"\xff" * 6 + b"\x02" * 6 + b"\x08\x00" + ip
    if link_type == SLL:  # packet type, ARPHRD, address length, address[8], protocol
        return struct.pack("!HHH8sH", 1, 1, 6, b"\x02" * 6, 0x0800) + ip
    if link_type == SLL2:  # protocol, reserved, ifindex, ARPHRD, type, length, address[8]
        return struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, 1, 6, b"\x02" * 6) + ip
    return ip


def ipx_packet() -> bytes:
    return load_vectors()["c"].data


def packets(data: bytes) -> list[Frame]:
    return list(read_capture(data))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ipxbridge", "decode", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- files the tools wrote -------------------------------------------------------------------


def test_editcap_pcapng_decodes_to_the_same_messages_as_the_pcap() -> None:
    assert VECTORS_PCAPNG.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    expected = decode_pcap(VECTORS_PCAP.read_bytes(), GAMES)
    assert len(expected) == 15
    assert decode_pcap(VECTORS_PCAPNG.read_bytes(), GAMES) == expected


def test_cli_reads_pcapng_like_pcap() -> None:
    pcap = run_cli("--pcap", str(VECTORS_PCAP), "--json")
    pcapng = run_cli("--pcap", str(VECTORS_PCAPNG), "--json")
    assert pcapng.returncode == pcap.returncode == 0, pcapng.stderr
    assert json.loads(pcapng.stdout) == json.loads(pcap.stdout)


def test_four_interfaces_of_three_link_types_every_packet_decodes() -> None:
    """Ethernet (µs), raw IP, and dumpcap's lo + any (Ethernet, Linux cooked; ns)."""
    items = decode_pcap(VECTORS_INTERFACES.read_bytes(), GAMES)
    assert len(items) == 21
    assert all(i["ok"] for i in items), [i for i in items if not i["ok"]]
    assert items[:15] == decode_pcap(VECTORS_PCAP.read_bytes(), GAMES)
    raw_ip = items[15:17]
    assert [i["src"] for i in raw_ip] == ["192.0.2.10:50000"] * 2
    assert [i["directplay"]["command_name"] for i in raw_ip] == [
        "EnumSessions",
        "EnumSessionsReply",
    ]
    live = items[17:]  # the same two datagrams on lo, then on any
    assert [i["src"] for i in live] == ["127.0.0.1:50213"] * 4
    assert [i["ipx"]["length"] for i in live] == [62, 82, 62, 82]
    frames = packets(VECTORS_INTERFACES.read_bytes())
    assert [f.timestamp for f in frames[:2]] == [1_700_000_000.0, 1_700_000_001.0]
    stamp = frames[17].timestamp
    assert stamp == frames[19].timestamp  # one datagram, seen on two interfaces
    assert stamp is not None
    assert round(stamp * 1e6) % 1_000_000 != 0  # nanoseconds, not read as microseconds


def test_library_warnings_do_not_escape() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(packets(VECTORS_INTERFACES.read_bytes())) == 21


# --- what the tools do not write -------------------------------------------------------------


@pytest.mark.parametrize("e", ["<", ">"], ids=["little-endian", "big-endian"])
def test_every_link_type_in_one_section(e: str) -> None:
    ip = ipv4_udp(ipx_packet())
    kinds = [ETHERNET, SLL, SLL2, RAW]
    data = shb(e) + b"".join(idb(e, k) for k in kinds)
    data += b"".join(epb(e, n, 1_000_000 + n, framed(k, ip)) for n, k in enumerate(kinds))
    frames = packets(data)
    assert len(frames) == 4
    for frame in frames:
        assert frame.error is None, frame
        assert (frame.transport, frame.src, frame.dst, frame.sport, frame.dport) == (
            "udp",
            SRC,
            DST,
            50000,
            213,
        )
        assert frame.payload == ipx_packet()
    assert [f.timestamp for f in frames] == pytest.approx([1.0, 1.000001, 1.000002, 1.000003])


def test_sections_switch_byte_order_and_number_their_interfaces_afresh() -> None:
    ip = ipv4_udp(ipx_packet())
    first = shb("<") + idb("<", RAW) + epb("<", 0, 0, framed(RAW, ip))
    second = shb(">") + idb(">", ETHERNET) + epb(">", 0, 0, framed(ETHERNET, ip))
    frames = packets(first + second)
    assert [(f.error, f.payload) for f in frames] == [(None, ipx_packet())] * 2


def test_timestamp_resolution_and_offset_are_per_interface() -> None:
    e = "<"
    ticks = 1_700_000_000_123_456_789
    data = shb(e)
    data += idb(e, RAW)  # no if_tsresol: microseconds
    data += idb(e, RAW, option(e, OPT_IF_TSRESOL, b"\x09"))  # 10^-9
    data += idb(e, RAW, option(e, OPT_IF_TSRESOL, b"\x8a"))  # 2^-10
    data += idb(e, RAW, option(e, OPT_IF_TSOFFSET, struct.pack(e + "q", 100)))
    ip = ipv4_udp(b"x")
    data += b"".join(epb(e, n, ticks if n == 1 else 1024 * 5 + 512, ip) for n in range(4))
    stamps = [f.timestamp for f in packets(data)]
    assert stamps == pytest.approx(
        [(1024 * 5 + 512) / 1e6, ticks / 1e9, 5.5, 100 + (1024 * 5 + 512) / 1e6]
    )


def test_simple_and_obsolete_packet_blocks() -> None:
    e = ">"
    ip = framed(ETHERNET, ipv4_udp(ipx_packet()))
    data = shb(e) + idb(e, ETHERNET) + spb(e, ip) + opb(e, 0, 2_000_000, ip)
    simple, obsolete = packets(data)
    assert (simple.error, simple.payload, simple.timestamp) == (None, ipx_packet(), None)
    assert (obsolete.error, obsolete.payload, obsolete.timestamp) == (None, ipx_packet(), 2.0)


def test_a_packet_on_an_undescribed_interface_is_one_bad_record() -> None:
    e = "<"
    ip = ipv4_udp(b"x")
    data = shb(e) + idb(e, RAW) + epb(e, 5, 0, ip) + epb(e, 0, 0, ip)
    bad, good = packets(data)
    assert bad.error == "no interface description for interface 5"
    assert (bad.number, good.number, good.error) == (1, 2, None)


def assorted_pcapng() -> bytes:
    """Every kind of block and option above in one file: tshark reads it in the integration
    tier (``tests/integration/test_pcapng.py``) and must agree with us on every packet."""
    ip = ipv4_udp(ipx_packet())
    e = "<"
    data = shb(e) + idb(e, ETHERNET) + idb(e, SLL)
    data += idb(e, SLL2, option(e, OPT_IF_TSRESOL, b"\x09"))
    offset = option(e, OPT_IF_TSOFFSET, struct.pack(e + "q", 100))
    data += idb(e, RAW, option(e, OPT_IF_TSRESOL, b"\x8a"), offset)
    kinds = [ETHERNET, SLL, SLL2, RAW]
    data += b"".join(
        epb(e, n, 1_700_000_000_123_456 + n, framed(k, ip)) for n, k in enumerate(kinds)
    )
    e = ">"
    data += shb(e) + idb(e, ETHERNET) + spb(e, framed(ETHERNET, ip))
    return data + opb(e, 0, 2_000_000, framed(ETHERNET, ip))


def test_assorted_blocks_in_one_file() -> None:
    frames = packets(assorted_pcapng())
    assert [(f.error, f.payload) for f in frames] == [(None, ipx_packet())] * 6
    assert [f.timestamp for f in frames] == pytest.approx(
        [
            1_700_000_000.123456,
            1_700_000_000.123457,
            1_700_000_000_123_458 / 1e9,
            100 + 1_700_000_000_123_459 / 1024,
            None,
            2.0,
        ]
    )


# --- damaged files ---------------------------------------------------------------------------


def block_ends(data: bytes) -> list[int]:
    """Where each block of a little-endian pcapng file ends."""
    ends, at = [], 0
    while at < len(data):
        at += struct.unpack_from("<I", data, at + 4)[0]
        ends.append(at)
    return ends


def test_truncated_before_the_first_packet_is_one_reason() -> None:
    data = VECTORS_PCAPNG.read_bytes()
    shb_end, idb_end, first_packet_end = block_ends(data)[:3]
    # inside the section header, inside the interface description, and the two places where
    # the library stops without a word: right after a block type, right before the trailer
    for cut in (12, shb_end + 10, shb_end + 4, idb_end - 4, first_packet_end - 1):
        with pytest.raises(PcapError) as info:
            packets(data[:cut])
        assert info.value.reason == "truncated", cut
        assert "truncated pcapng file: block at byte" in str(info.value)


def test_truncated_after_packets_keeps_them_and_ends_with_one_bad_record() -> None:
    data = VECTORS_PCAPNG.read_bytes()
    ends = block_ends(data)
    for cut in (len(data) - 5, ends[-2] + 4):  # inside the last block; after its type only
        frames = packets(data[:cut])
        assert [f.error for f in frames] == [None] * 14 + ["truncated record"], cut


def test_cli_truncated_pcapng_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    data = VECTORS_PCAPNG.read_bytes()
    shb_end = block_ends(data)[0]
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(data[: shb_end + 10])
    res = run_cli("--pcap", str(cut))
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr == (
        f"ipxbridge: {cut}: truncated pcapng file: block at byte {shb_end} ends early\n"
    )
    whole_then_cut = tmp_path / "tail.pcapng"
    whole_then_cut.write_bytes(data[:-5])
    res = run_cli("--pcap", str(whole_then_cut))
    assert res.returncode == 1  # 14 packets decoded, one bad record
    assert res.stdout.splitlines()[-1] == "#15 None :0 -> :0: ERROR undecodable_frame " + (
        "(truncated record)"
    )
    assert "Traceback" not in res.stdout + res.stderr


def test_every_prefix_is_frames_or_a_closed_reason() -> None:
    data = VECTORS_PCAPNG.read_bytes()
    ends = block_ends(data)
    packet_ends = ends[2:]  # section header, interface description, then 15 packets
    assert len(packet_ends) == 15
    for cut in range(4):
        with pytest.raises(PcapError, match="too short"):
            packets(data[:cut])
    for cut in range(4, len(data) + 1):
        try:
            frames = packets(data[:cut])
        except PcapError as exc:
            assert exc.reason == "truncated", (cut, exc)
            assert cut < packet_ends[0], cut
            continue
        whole = sum(end <= cut for end in packet_ends)
        assert [f.error for f in frames] == [None] * whole + (
            [] if cut in ends else ["truncated record"]
        ), cut


ONE_PACKET: Final = epb("<", 0, 0, ipv4_udp(b"x"))


@pytest.mark.parametrize(
    ("damaged", "reason", "text"),
    [
        # the library raises UnicodeDecodeError on a name that is not UTF-8...
        (idb("<", RAW, option("<", OPT_IF_NAME, b"\xff\xfe")), "malformed", "UnicodeDecodeError"),
        # ...and TypeError from its own check of a repeated single-valued option
        (
            idb(
                "<", RAW, option("<", OPT_IF_TSRESOL, b"\x06"), option("<", OPT_IF_TSRESOL, b"\x06")
            ),
            "malformed",
            "TypeError",
        ),
        # lengths that disagree
        (idb("<", RAW)[:-4] + struct.pack("<I", 99), "malformed", "CorruptedFile"),
        (shb(">")[:8] + b"\x00" * 20, "bad_magic", "bad byte-order magic"),
        (shb("<", major=2), "unsupported", "pcapng version 2.0 is not supported"),
    ],
    ids=["if_name-not-utf8", "repeated-if_tsresol", "length-mismatch", "byte-order", "version-2"],
)
def test_library_failures_become_a_reason_or_a_bad_record(
    damaged: bytes, reason: str, text: str
) -> None:
    first = damaged if damaged[:4] == b"\x0a\x0d\x0d\x0a" else shb("<") + damaged + ONE_PACKET
    with pytest.raises(PcapError) as info:
        packets(first)
    assert info.value.reason == reason
    assert text in str(info.value)
    # after a packet, the same damage ends the file with one bad record
    good, bad = packets(shb("<") + idb("<", RAW) + ONE_PACKET + damaged + ONE_PACKET)
    assert good.error is None
    assert bad.error is not None
    assert text in bad.error


def test_mutated_pcapng_gives_frames_or_a_closed_reason() -> None:
    seeds = [VECTORS_PCAPNG.read_bytes(), VECTORS_INTERFACES.read_bytes()]
    seeds.append(shb(">") + idb(">", SLL2) + spb(">", framed(SLL2, ipv4_udp(ipx_packet()))))
    reasons = set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the library's warnings stay inside the adapter
        for data in mutations(seeds, 2000):
            try:
                items = decode_pcap(data, GAMES)
            except PcapError as exc:
                assert exc.reason in PCAP_REASONS
                assert "\n" not in str(exc)
                reasons.add(exc.reason)
                continue
            json.dumps(items)
            assert all(item["ok"] or item["error"] for item in items)
    assert {"truncated", "malformed", "bad_magic"} <= reasons
