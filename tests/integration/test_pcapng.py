"""pcapng as Wireshark's own tools write it, read by ``ipxbridge decode --pcap``.

The files come from the real tools, never from our code: ``editcap -F pcapng`` converts the
shipped classic capture, ``text2pcap`` wraps the DirectPlay vectors in Ethernet or raw-IP
packets, ``dumpcap`` captures on ``lo`` and ``any`` at once inside a namespace (two
interfaces, Ethernet and Linux cooked, in one file), and ``mergecap -F pcapng`` puts
interfaces of different link types and timestamp resolutions into one file. tshark is the
oracle for what each packet is: its interface, link type, addresses, ports and timestamp.

``make_interfaces_pcapng`` is also how ``tests/unit/vectors/dplay_interfaces.pcapng`` was
made, so the unit tier can read such a file where the tools are missing; the test here
re-makes it and checks both decode alike.
"""

import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import pytest

from ipxbridge.commands.decode import decode_pcap
from ipxbridge.games import game_table
from ipxbridge.io.capture import read_capture
from scripts.harness import Netns, inside
from tests.integration.conftest import require
from tests.unit.test_pcap import assorted_pcapng
from tests.unit.vectors import VECTORS_INTERFACES, VECTORS_PCAP, VECTORS_PCAPNG, load_vectors

GAMES: Final = game_table()
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_LINUX_SLL2: Final = 276
SENDER_PORT: Final = 50213  # fixed, so a re-made capture decodes exactly like the vector


def tool(*args: str) -> None:
    res = subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, f"{' '.join(args)}: {res.stderr}"


def hexdump(payloads: list[bytes]) -> str:
    """text2pcap's input: offset, then hex bytes; the offset going back to 0 starts a packet."""
    lines = []
    for payload in payloads:
        lines += [f"{i:04x}  " + payload[i : i + 16].hex(" ") for i in range(0, len(payload), 16)]
        lines.append("")
    return "\n".join(lines)


def text2pcap(
    out: Path, payloads: list[bytes], *, link: str, addrs: str, ports: str, fmt: str = "pcapng"
) -> Path:
    """UDP/IPv4 packets carrying ``payloads``; ``link`` is ``ethernet`` or ``raw``."""
    source = out.with_suffix(".txt")
    source.write_text(hexdump(payloads))
    framing = ["-e", "0x800"] if link == "ethernet" else ["-l", str(LINKTYPE_RAW)]
    tool("text2pcap", "-q", "-F", fmt, *framing, "-4", addrs, "-u", ports, str(source), str(out))
    return out


def dumpcap_lo_and_any(net: Netns, out: Path, payloads: list[bytes]) -> Path:
    """A live capture on ``lo`` (Ethernet) and ``any`` (Linux cooked) in a fresh namespace.

    Every datagram sent to 127.0.0.1:213 shows on both interfaces; dumpcap stops after
    two packets per datagram. A receiver is bound so that no ICMP error joins them.
    """
    ns = net.add("cap")
    err = out.with_suffix(".err")
    count = 2 * len(payloads)
    cmd = net.exec_args(
        ns, "dumpcap", "-q", "-f", "udp port 213", "-i", "lo", "-i", "any", "-c", str(count),
        "-w", str(out),
    )  # fmt: skip
    with err.open("w") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 20
        # "Capturing on" is printed before the interfaces are opened; "File:" only once
        # every interface is open with its filter set and the output file exists.
        while "File: " not in err.read_text():
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, f"dumpcap did not start: {err.read_text()}"
            time.sleep(0.05)
        with inside(ns):
            receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with receiver, sender:
            receiver.bind(("127.0.0.1", 213))
            sender.bind(("127.0.0.1", SENDER_PORT))
            for payload in payloads:
                sender.sendto(payload, ("127.0.0.1", 213))
            assert proc.wait(20) == 0, err.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
    return out


def make_interfaces_pcapng(net: Netns, workdir: Path) -> Path:
    """One pcapng with four interfaces: Ethernet (µs), raw IP, and dumpcap's lo and any (ns).

    The shipped conversation (editcap), DirectPlay 4 enumerations over raw IP (text2pcap),
    and both IPX vectors captured live on two interfaces (dumpcap), concatenated by
    mergecap in that order.
    """
    vec = load_vectors()
    conversation = workdir / "conversation.pcapng"
    tool("editcap", "-F", "pcapng", str(VECTORS_PCAP), str(conversation))
    raw = text2pcap(
        workdir / "raw.pcapng",
        [vec["a"].data, vec["b"].data],
        link="raw",
        addrs="192.0.2.10,192.0.2.20",
        ports="50000,47624",
    )
    live = dumpcap_lo_and_any(net, workdir / "live.pcapng", [vec["c"].data, vec["c2"].data])
    out = workdir / "interfaces.pcapng"
    tool("mergecap", "-a", "-F", "pcapng", "-w", str(out), str(conversation), str(raw), str(live))
    return out


def tshark_packets(path: Path) -> list[dict[str, str]]:
    fields = [
        "frame.interface_id", "frame.encap_type", "frame.time_epoch", "ip.src", "ip.dst",
        "udp.srcport", "udp.dstport", "tcp.srcport", "tcp.dstport",
    ]  # fmt: skip
    args = ["tshark", "-n", "-r", str(path), "-T", "fields", "-E", "separator=|"]
    for field in fields:
        args += ["-e", field]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return [dict(zip(fields, line.split("|"), strict=True)) for line in res.stdout.splitlines()]


def check_against_tshark(path: Path) -> list[dict[str, str]]:
    """Every packet: our addresses, ports and timestamp are tshark's."""
    theirs = tshark_packets(path)
    ours = list(read_capture(path.read_bytes()))
    assert len(ours) == len(theirs)
    for frame, row in zip(ours, theirs, strict=True):
        assert frame.error is None, (frame, row)
        proto = frame.transport
        assert proto is not None
        assert (frame.src, frame.dst) == (row["ip.src"], row["ip.dst"]), row
        assert (str(frame.sport), str(frame.dport)) == (
            row[f"{proto}.srcport"],
            row[f"{proto}.dstport"],
        ), row
        if frame.timestamp is None:  # a Simple Packet Block has none
            assert row["frame.time_epoch"] == "", row
        else:
            assert frame.timestamp == pytest.approx(float(row["frame.time_epoch"]), abs=1e-6)
    return theirs


@pytest.fixture
def tools() -> None:
    require("editcap", "mergecap", "text2pcap", "tshark")


@pytest.mark.usefixtures("tools")
def test_editcap_pcapng_of_the_shipped_capture_decodes_like_the_pcap(tmp_path: Path) -> None:
    converted = tmp_path / "dplay_vectors.pcapng"
    tool("editcap", "-F", "pcapng", str(VECTORS_PCAP), str(converted))
    assert converted.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"  # really pcapng
    expected = decode_pcap(VECTORS_PCAP.read_bytes(), GAMES)
    assert len(expected) == 15
    assert decode_pcap(converted.read_bytes(), GAMES) == expected
    res = subprocess.run(
        [sys.executable, "-m", "ipxbridge", "decode", "--pcap", str(converted), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == json.loads(json.dumps(expected))
    # the shipped pcapng vector is the same conversion
    assert decode_pcap(VECTORS_PCAPNG.read_bytes(), GAMES) == expected
    check_against_tshark(converted)


@pytest.mark.usefixtures("tools")
def test_mergecap_ethernet_and_raw_ip_interfaces_every_packet_decodes(tmp_path: Path) -> None:
    vec = load_vectors()
    eth = text2pcap(
        tmp_path / "eth.pcapng",
        [vec["c"].data, vec["c2"].data],
        link="ethernet",
        addrs="192.0.2.10,192.0.2.255",
        ports="213,213",
    )
    raw_pcap = text2pcap(
        tmp_path / "raw.pcap",
        [vec["d"].data, vec["d3"].data],
        link="raw",
        addrs="192.0.2.20,192.0.2.10",
        ports="6073,50001",
        fmt="pcap",
    )
    raw_ns = tmp_path / "raw-ns.pcap"
    tool("editcap", "-F", "nsecpcap", str(raw_pcap), str(raw_ns))  # a second resolution
    merged = tmp_path / "merged.pcapng"
    tool("mergecap", "-a", "-F", "pcapng", "-w", str(merged), str(eth), str(raw_ns))
    rows = check_against_tshark(merged)
    assert [r["frame.interface_id"] for r in rows] == ["0", "0", "1", "1"]
    assert rows[0]["frame.encap_type"] != rows[2]["frame.encap_type"]  # Ethernet, raw IP
    items = decode_pcap(merged.read_bytes(), GAMES)
    assert [i["ok"] for i in items] == [True] * 4, items
    assert [i["directplay"]["command_name"] for i in items] == [
        "EnumSessions",
        "EnumSessions",
        "EnumQuery",
        "EnumResponse",
    ]
    assert [bool(i["ipx"]) for i in items] == [True, True, False, False]


@pytest.mark.usefixtures("tools")
def test_tshark_reads_the_hand_built_blocks_as_we_do(tmp_path: Path) -> None:
    """The unit tier's struct-built pcapng (both byte orders, four link types, Simple and
    obsolete Packet Blocks, if_tsresol and if_tsoffset) is what tshark says it is."""
    path = tmp_path / "assorted.pcapng"
    path.write_bytes(assorted_pcapng())
    rows = check_against_tshark(path)
    assert len(rows) == 6
    assert len({r["frame.encap_type"] for r in rows}) == 4


@pytest.mark.netns
def test_dumpcap_on_lo_and_any_gives_two_link_types_and_every_packet_decodes(
    net: Netns, tmp_path: Path
) -> None:
    require("dumpcap", "tshark")
    vec = load_vectors()
    live = dumpcap_lo_and_any(net, tmp_path / "live.pcapng", [vec["c"].data, vec["c2"].data])
    rows = check_against_tshark(live)
    assert len(rows) == 4
    assert {r["frame.interface_id"] for r in rows} == {"0", "1"}
    assert len({r["frame.encap_type"] for r in rows}) == 2  # Ethernet and Linux cooked
    items = decode_pcap(live.read_bytes(), GAMES)
    assert all(i["ok"] for i in items), items
    assert sorted(i["ipx"]["length"] for i in items) == [62, 62, 82, 82]
    assert all(i["src"] == f"127.0.0.1:{SENDER_PORT}" for i in items)


@pytest.mark.netns
def test_the_shipped_interfaces_vector_is_what_the_tools_make(net: Netns, tmp_path: Path) -> None:
    require("dumpcap", "editcap", "mergecap", "text2pcap", "tshark")
    made = make_interfaces_pcapng(net, tmp_path)
    rows = check_against_tshark(made)
    assert len({r["frame.encap_type"] for r in rows}) == 3  # Ethernet, raw IP, Linux cooked
    assert len({r["frame.interface_id"] for r in rows}) == 4
    check_against_tshark(VECTORS_INTERFACES)
    assert decode_pcap(made.read_bytes(), GAMES) == decode_pcap(
        VECTORS_INTERFACES.read_bytes(), GAMES
    )
