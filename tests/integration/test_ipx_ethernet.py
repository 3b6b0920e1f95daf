"""Native Ethernet IPX ports end to end: scapy builds, tshark decodes, DOSBox talks.

Topology (namespaces this file creates, addresses private to them):

* ``b``: the bridge. ``seg0`` (10.81.0.1/24) is its Ethernet IPX port; ``cl0`` (10.82.0.1/24)
  faces the DOSBox-protocol side.
* ``s``: native stations behind ``st0`` (10.81.0.2/24), the other end of seg0's veth. One
  AF_PACKET socket sends for several stations, each with its own source MAC, as stations on
  one hub would; the bridge, promiscuous, hears them all.
* ``c``: a synthetic DOSBox-protocol client (``harness.Client``) or a real DOSBox 0.74 on
  ``cc0`` (10.82.0.2/24).

Oracles: every frame sent toward the bridge is built by scapy, from an IPX layer written here
after docs/protocols.md 3.1 (scapy 2.8 has no IPX layer), never by ipxbridge's own codec; what the
bridge puts on the segment is captured with dumpcap on the station side and decoded by tshark.
"""

import json
import re
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scapy.fields import ByteField, MACField, ShortField, XIntField, XShortField
from scapy.layers.l2 import LLC, SNAP, STP, Dot3, Ether
from scapy.packet import NoPayload, Packet, Padding, Raw

from scripts.harness import (
    ANNOUNCE_SOCKET,
    BridgeProcess,
    Client,
    DosBox,
    Netns,
    bridge_get,
    inside,
    sh,
)
from tests.integration.conftest import require

BRIDGE_SEG = "10.81.0.1"
BRIDGE_CL = "10.82.0.1"
CLIENT_IP = "10.82.0.2"
SERVER = (BRIDGE_CL, 213)

ETH_P_ALL = 0x0003  # linux/if_ether.h
PACKET_OUTGOING = 4  # linux/if_packet.h: a frame this host sent, seen by its own socket
BROADCAST = b"\xff" * 6
DATA_SOCKET = 0x4545
ECHO_SOCKET = 0x0002  # DOSBox ping (docs/protocols.md 3.1, 4.5)
BEACON_SOCKET = 0x9B1B  # ipxbridge's beacon between bridges on one segment (switch rule 8)
IPX_HEADER = 30
MIN_FRAME = 60  # the 64-byte Ethernet minimum less the FCS: a NIC pads shorter frames

# The four framings, named as ipx.interfaces[].framing spells them, with the bytes each puts
# between the Ethernet header and the IPX packet (802.2 LLC: 3, SNAP: LLC 3 + SNAP 5).
FRAMINGS = ("ethernet_ii", "802.3", "802.2", "snap")
ENCAPSULATION = {"ethernet_ii": 0, "802.3": 0, "802.2": 3, "snap": 8}
# One native station per framing (locally administered unicast MACs).
STATIONS = {framing: bytes([0x02, 0, 0, 0x81, 0, i + 1]) for i, framing in enumerate(FRAMINGS)}

pytestmark = pytest.mark.netns


# --- scapy: the independent builder ---------------------------------------------------------


class ScapyIpx(Packet):
    """The 30-byte IPX header, big-endian (docs/protocols.md 3.1), as a scapy layer."""

    name = "IPX"
    fields_desc = [  # noqa: RUF012 - scapy's own class attribute
        XShortField("checksum", 0xFFFF),
        ShortField("length", None),  # whole packet, header included; filled in by post_build
        ByteField("hops", 0),
        ByteField("ptype", 4),
        XIntField("dst_net", 0),
        MACField("dst_node", "ff:ff:ff:ff:ff:ff"),
        XShortField("dst_socket", DATA_SOCKET),
        XIntField("src_net", 0),
        MACField("src_node", "00:00:00:00:00:00"),
        XShortField("src_socket", DATA_SOCKET),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.length is None:
            size = len(pkt) + len(pay)
            pkt = pkt[:2] + size.to_bytes(2, "big") + pkt[4:]
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        # The Length field bounds the data; what follows is Ethernet padding.
        body = max(0, int(self.length or 0) - IPX_HEADER)
        return s[:body], s[body:]


def mac_text(mac: bytes) -> str:
    return mac.hex(":")


def ipx_layer(
    *,
    dst: bytes,
    src: bytes,
    payload: bytes,
    sock: int = DATA_SOCKET,
    ptype: int = 4,
    length: int | None = None,
) -> Packet:
    header = ScapyIpx(
        dst_node=mac_text(dst),
        src_node=mac_text(src),
        dst_socket=sock,
        src_socket=sock,
        ptype=ptype,
        length=length,
    )
    return header / Raw(payload) if payload else header


def scapy_frame(framing: str, dst: bytes, src: bytes, upper: Packet) -> bytes:
    """``upper`` in one of the four framings, built by scapy (802.3 length included)."""
    d, s = mac_text(dst), mac_text(src)
    frame: Packet
    if framing == "ethernet_ii":
        frame = Ether(dst=d, src=s, type=0x8137) / upper
    elif framing == "802.3":
        frame = Dot3(dst=d, src=s) / upper  # raw: the IPX checksum FF FF follows the length
    elif framing == "802.2":
        frame = Dot3(dst=d, src=s) / LLC(dsap=0xE0, ssap=0xE0, ctrl=3) / upper
    else:
        frame = (
            Dot3(dst=d, src=s)
            / LLC(dsap=0xAA, ssap=0xAA, ctrl=3)
            / SNAP(OUI=0, code=0x8137)
            / upper
        )
    return bytes(frame).ljust(MIN_FRAME, b"\x00")  # a NIC pads to the minimum; not in the length


def scapy_ipx(frame: bytes) -> tuple[str, ScapyIpx] | None:
    """(framing, IPX header with its data) as scapy dissects a frame; None if it is not IPX."""
    eth = Ether(frame)
    if not eth.haslayer(Dot3):
        if eth.type != 0x8137:
            return None
        return "ethernet_ii", ScapyIpx(bytes(eth.payload))
    data = bytes(eth[Dot3].payload)[: eth[Dot3].len]
    if data[:2] == b"\xff\xff":
        return "802.3", ScapyIpx(data)
    if data[:3] == b"\xe0\xe0\x03":
        return "802.2", ScapyIpx(data[3:])
    if data[:8] == b"\xaa\xaa\x03\x00\x00\x00\x81\x37":
        return "snap", ScapyIpx(data[8:])
    return None


def data_of(ipx: ScapyIpx) -> bytes:
    """The IPX data, without the Ethernet padding scapy keeps as a Padding layer after it."""
    layer = ipx.payload
    if isinstance(layer, Padding | NoPayload):
        return b""
    return bytes(layer.load)


def node(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


# --- the segment: stations, capture, tshark ---------------------------------------------------


class Station:
    """An AF_PACKET socket on the station side of the segment (sends for any station MAC)."""

    def __init__(self, ns: str, ifname: str) -> None:
        with inside(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((ifname, ETH_P_ALL))
        self.mac: bytes = self.sock.getsockname()[4]

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def frames(self, timeout: float) -> Iterator[tuple[bytes, bytes, str, ScapyIpx]]:
        """(destination MAC, source MAC, framing, IPX) of each IPX frame within ``timeout``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                frame, addr = self.sock.recvfrom(65535)
            except TimeoutError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue  # one of ours
            decoded = scapy_ipx(frame)
            if decoded is not None:
                yield frame[:6], frame[6:12], decoded[0], decoded[1]

    def close(self) -> None:
        self.sock.close()


class Capture:
    """dumpcap on one interface inside a namespace (promiscuous), written as pcapng."""

    def __init__(self, net: Netns, ns: str, ifname: str, out: Path) -> None:
        self.out = out
        self._err = out.with_suffix(".err")
        with self._err.open("w") as stderr:
            self.proc = subprocess.Popen(
                net.exec_args(ns, "dumpcap", "-q", "-i", ifname, "-w", str(out)),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        deadline = time.monotonic() + 20
        # "File:" appears once the interface is open and the file exists (test_pcapng.py).
        while "File: " not in self._err.read_text():
            assert self.proc.poll() is None, self._err.read_text()
            assert time.monotonic() < deadline, f"dumpcap did not start: {self._err.read_text()}"
            time.sleep(0.05)

    def stop(self) -> Path:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # dumpcap writes what it has and exits
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        assert self.out.exists(), self._err.read_text()
        return self.out


TSHARK_FIELDS = (
    "frame.len", "eth.dst", "eth.src", "eth.type", "eth.len", "llc.dsap", "llc.ssap",
    "llc.control", "llc.oui", "llc.type", "ipx.checksum", "ipx.len", "ipx.hops",
    "ipx.packet_type", "ipx.dst.node", "ipx.dst.socket", "ipx.src.node", "ipx.src.socket",
    "data.data",
)  # fmt: skip


@dataclass(frozen=True)
class Decoded:
    """One captured frame as tshark decodes it (``framing`` None: not IPX)."""

    framing: str | None
    frame_len: int
    dst_mac: str
    src_mac: str
    eth_type: str
    eth_len: int | None
    checksum: int | None
    length: int | None
    hops: int | None
    dst_node: str
    dst_socket: int | None
    src_node: str
    src_socket: int | None
    data: bytes

    def key(self) -> tuple[object, ...]:
        """What the frame means: framing, MACs, and the IPX packet it carries."""
        return (
            self.framing,
            self.dst_mac,
            self.src_mac,
            self.dst_node,
            self.dst_socket,
            self.src_node,
            self.src_socket,
            self.hops,
            self.data,
        )


def _int(text: str) -> int | None:
    return int(text, 0) if text else None


def _framing(f: dict[str, str]) -> str | None:
    if not f["ipx.len"]:
        return None
    if _int(f["eth.type"]) == 0x8137:
        return "ethernet_ii"
    llc = (_int(f["llc.dsap"]), _int(f["llc.ssap"]), _int(f["llc.control"]))
    if llc == (0xE0, 0xE0, 3):
        return "802.2"
    if llc == (0xAA, 0xAA, 3) and _int(f["llc.oui"]) == 0 and _int(f["llc.type"]) == 0x8137:
        return "snap"
    if llc == (None, None, None) and f["eth.len"]:
        return "802.3"
    return f"unexpected framing {f}"


def tshark_frames(pcap: Path) -> list[Decoded]:
    """Every frame of ``pcap`` as tshark 4.0 decodes it."""
    args = [
        "tshark",
        "-n",
        "-r",
        str(pcap),
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=f",
    ]
    for name in TSHARK_FIELDS:
        args += ["-e", name]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    frames = []
    for line in out.splitlines():
        f = dict(zip(TSHARK_FIELDS, line.split("|"), strict=True))
        frames.append(
            Decoded(
                framing=_framing(f),
                frame_len=int(f["frame.len"]),
                dst_mac=f["eth.dst"],
                src_mac=f["eth.src"],
                eth_type=f["eth.type"],
                eth_len=_int(f["eth.len"]),
                checksum=_int(f["ipx.checksum"]),
                length=_int(f["ipx.len"]),
                hops=_int(f["ipx.hops"]),
                dst_node=f["ipx.dst.node"],
                dst_socket=_int(f["ipx.dst.socket"]),
                src_node=f["ipx.src.node"],
                src_socket=_int(f["ipx.src.socket"]),
                data=bytes.fromhex(f["data.data"].replace(":", "")),
            )
        )
    return frames


def meant(
    framing: str,
    dst: bytes,
    src: bytes,
    payload: bytes,
    *,
    via: bytes,
    hops: int = 1,
    sock: int = DATA_SOCKET,
) -> tuple[object, ...]:
    """The key of a frame carrying this IPX packet from node ``src`` to ``dst`` (MAC = node),
    put on the wire by ``via``: the bridge's own MAC for every frame it sends."""
    return (framing, mac_text(dst), mac_text(via), mac_text(dst), sock, mac_text(src), sock,
            hops, payload)  # fmt: skip


def iface_mac(ns: str, ifname: str) -> bytes:
    """The MAC address of an interface in a namespace."""
    text = sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{ifname}/address").stdout
    return node(text.strip())


def check_well_formed(frame: Decoded) -> None:
    """What tshark says about a frame's lengths: whole IPX packet, correct 802.3 length."""
    assert frame.checksum == 0xFFFF, frame
    assert frame.length == IPX_HEADER + len(frame.data), frame  # never truncated
    assert frame.frame_len >= MIN_FRAME, frame  # padded like a NIC would
    assert frame.framing is not None
    if frame.framing == "ethernet_ii":
        assert frame.eth_len is None, frame
    else:
        assert frame.eth_len == ENCAPSULATION[frame.framing] + frame.length, frame


def bridge_frames(frames: list[Decoded], stations: set[str]) -> tuple[list[Decoded], list[Decoded]]:
    """The IPX frames the bridge put on the segment: (data frames, beacons).

    Frames from the stations' MACs are the test's own; IPv6 and ARP come from the kernels of
    the two namespaces, not from the bridge. Everything else must be IPX, and a beacon must
    be a well-formed one.
    """
    data: list[Decoded] = []
    beacons: list[Decoded] = []
    for frame in frames:
        if frame.src_mac in stations or _int(frame.eth_type) in {0x86DD, 0x0806}:
            continue
        assert frame.framing is not None, f"the bridge sent a frame that is not IPX: {frame}"
        check_well_formed(frame)
        if frame.dst_socket == ANNOUNCE_SOCKET:
            continue  # a stand-in client's first packet (harness.Client.announce)
        if frame.dst_socket == BEACON_SOCKET and frame.src_socket == BEACON_SOCKET:
            assert frame.dst_mac == mac_text(BROADCAST), frame
            beacons.append(frame)
            continue
        data.append(frame)
    return data, beacons


# --- the bridge and its books -----------------------------------------------------------------


def topology(net: Netns, *, mtu: int | None = None) -> tuple[str, str, str]:
    b, s, c = net.add("b"), net.add("s"), net.add("c")
    net.link(b, "seg0", f"{BRIDGE_SEG}/24", s, "st0", "10.81.0.2/24")
    net.link(b, "cl0", f"{BRIDGE_CL}/24", c, "cc0", f"{CLIENT_IP}/24")
    if mtu is not None:
        sh("ip", "-n", b, "link", "set", "seg0", "mtu", str(mtu))
        sh("ip", "-n", s, "link", "set", "st0", "mtu", str(mtu))
    return b, s, c


def start_bridge(net: Netns, b: str, workdir: Path, *args: str) -> BridgeProcess:
    bridge = BridgeProcess(net, b, *(args or ("--ipx-iface", "seg0:ethernet")), log_dir=workdir)
    bridge.wait_for(r"IPX interface ports: .*seg0", 15)
    return bridge


def client_datagram(client: Client, sock: int = DATA_SOCKET) -> ScapyIpx:
    """The next datagram for ``sock`` as scapy reads it (the bridge's keepalives skipped)."""
    while True:
        data, _ = client.sock.recvfrom(70_000)
        got = ScapyIpx(data)
        if got.dst_socket == sock:
            assert got.length == len(data)
            return got


def client_send(client: Client, dst: bytes, payload: bytes, sock: int = DATA_SOCKET) -> None:
    client.sock.sendto(bytes(ipx_layer(dst=dst, src=client.node, payload=payload, sock=sock)),
                       client.server)  # fmt: skip


@dataclass
class Books:
    """The per-port books of /metrics."""

    received: dict[tuple[str, str], float]
    outcomes: dict[tuple[str, str, str, str], float]
    copies_dropped: dict[tuple[str, str, str], float]

    def balance(self) -> None:
        """Per port: received = forwarded + control + sum of dropped."""
        for port, received in self.received.items():
            outcomes = sum(n for key, n in self.outcomes.items() if key[:2] == port)
            assert received == outcomes, (port, received, self.outcomes)

    def dropped(self, kind: str, interface: str) -> dict[str, float]:
        return {
            key[3]: n
            for key, n in self.outcomes.items()
            if key[:3] == (kind, interface, "dropped") and n
        }


def books(b: str) -> Books:
    received: dict[tuple[str, str], float] = {}
    outcomes: dict[tuple[str, str, str, str], float] = {}
    copies: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(bridge_get(b, "/metrics")):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "ipxbridge_ipx_port_received_packets_total":
                received[labels["kind"], labels["interface"]] = sample.value
            elif sample.name == "ipxbridge_ipx_port_packets_total":
                key = (labels["kind"], labels["interface"], labels["outcome"], labels["reason"])
                outcomes[key] = sample.value
            elif sample.name == "ipxbridge_ipx_port_dropped_copies_total" and sample.value:
                # every port exports every reason from 0: keep the ones that happened
                copies[labels["kind"], labels["interface"], labels["reason"]] = sample.value
    return Books(received, outcomes, copies)


def books_when(b: str, port: tuple[str, str], received: int, timeout: float = 5.0) -> Books:
    """The books once ``port`` has received ``received`` packets (it reads asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        now = books(b)
        if now.received.get(port, 0) >= received or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def stop_clean(bridge: BridgeProcess) -> str:
    assert bridge.stop() == 0
    log = bridge.log()
    assert "Traceback" not in log, log
    counts = bridge.summary()
    assert counts["received"] == counts["forwarded"] + counts["control"] + counts["dropped"]
    return log


# --- 1. four framings in, four framings out ---------------------------------------------------


def test_four_framings_built_by_scapy_reach_dosbox_and_tshark_decodes_what_the_bridge_emits(
    net: Netns, workdir: Path
) -> None:
    require("dumpcap", "tshark")
    b, s, c = topology(net)
    bridge = start_bridge(net, b, workdir)
    capture = None
    try:
        capture = Capture(net, s, "st0", workdir / "st0.pcapng")
        # The client only listens until it sends below (docs/protocols.md 4.4, "Silent after
        # registration"): the stations' broadcasts reach it all the same.
        client = Client(c, SERVER)
        station = Station(s, "st0")
        # Native -> DOSBox: one station per framing, each broadcasting in its own. The auto
        # learner takes each station's framing from this first frame.
        for framing, mac in STATIONS.items():
            payload = f"broadcast in {framing}".encode()
            ipx = ipx_layer(dst=BROADCAST, src=mac, payload=payload)
            station.send(scapy_frame(framing, BROADCAST, mac, ipx))
            got = client_datagram(client)
            assert got.src_node == mac_text(mac), framing
            assert got.dst_node == mac_text(BROADCAST)
            assert (got.src_socket, got.dst_socket, got.ptype) == (DATA_SOCKET, DATA_SOCKET, 4)
            assert got.hops == 1  # native stacks send 0; one trip through the bridge
            assert got.checksum == 0xFFFF
            assert data_of(got) == payload, framing  # the 60-byte padding is not data
        # DOSBox -> native: a broadcast goes out once in every framing a station speaks, a
        # unicast in the framing of the station it is for.
        client_send(client, BROADCAST, b"to every framing")
        expected: Counter[tuple[object, ...]] = Counter()
        # Every frame comes from the bridge's own MAC, never from the client's node.
        via = iface_mac(b, "seg0")
        for framing in FRAMINGS:
            expected[meant(framing, BROADCAST, client.node, b"to every framing", via=via)] += 1
        for framing, mac in STATIONS.items():
            payload = f"to the {framing} station".encode()
            client_send(client, mac, payload)
            expected[meant(framing, mac, client.node, payload, via=via)] += 1
        # The station side sees them (scapy's reading), then the capture is stopped.
        seen: Counter[tuple[object, ...]] = Counter()
        for dst_mac, src_mac, framing, ipx in station.frames(timeout=5):
            if ipx.dst_socket == DATA_SOCKET:
                key = meant(
                    framing, dst_mac, node(ipx.src_node), data_of(ipx), via=src_mac, hops=ipx.hops
                )
                seen[key] += 1
                if seen == expected:
                    break
        assert seen == expected
        # /api/clients lists each native station with its interface and learned framing.
        listed = {
            c["node"]: (c["interface"], c["framing"])
            for c in json.loads(bridge_get(b, "/api/clients"))
            if c["kind"] == "ethernet"
        }
        assert listed == {mac_text(m): ("seg0", f) for f, m in STATIONS.items()}, listed
        time.sleep(0.5)  # a duplicate the bridge should not have sent would show up by now
        station.close()
        pcap = capture.stop()
    finally:
        if capture is not None:
            capture.stop()
        stop_clean(bridge)
    frames = tshark_frames(pcap)
    stations = {mac_text(m) for m in STATIONS.values()}
    # tshark reads scapy's frames as the IPX packets meant (the builder is right)...
    sent = [f for f in frames if f.src_mac in stations]
    assert sorted((f.framing, f.src_node, f.data) for f in sent) == sorted(
        (fr, mac_text(m), f"broadcast in {fr}".encode()) for fr, m in STATIONS.items()
    )
    for frame in sent:
        check_well_formed(frame)
        assert frame.hops == 0
    # ... and every frame the bridge emitted as the packet that was meant, exactly once.
    emitted, _ = bridge_frames(frames, stations)
    assert Counter(f.key() for f in emitted) == expected, emitted


def test_fixed_framing_from_the_yaml_is_used_whatever_the_stations_speak(
    net: Netns, workdir: Path
) -> None:
    require("dumpcap", "tshark")
    b, s, c = topology(net)
    config = workdir / "ipxbridge.yaml"
    config.write_text(
        "ipx:\n  interfaces:\n    - name: seg0\n      kinds: [ethernet]\n      framing: '802.3'\n"
    )
    bridge = start_bridge(net, b, workdir, "--config", str(config))
    capture = None
    try:
        capture = Capture(net, s, "st0", workdir / "st0.pcapng")
        client = Client(c, SERVER)
        client.announce()
        station = Station(s, "st0")
        speakers = {"ethernet_ii": STATIONS["ethernet_ii"], "snap": STATIONS["snap"]}
        for framing, mac in speakers.items():  # heard in any framing, answered in raw 802.3
            payload = f"hello in {framing}".encode()
            station.send(
                scapy_frame(
                    framing, BROADCAST, mac, ipx_layer(dst=BROADCAST, src=mac, payload=payload)
                )
            )
            assert data_of(client_datagram(client)) == payload
        client_send(client, BROADCAST, b"once, in raw 802.3")
        via = iface_mac(b, "seg0")
        expected = Counter([meant("802.3", BROADCAST, client.node, b"once, in raw 802.3", via=via)])
        for framing, mac in speakers.items():
            payload = f"to {framing}, in raw 802.3".encode()
            client_send(client, mac, payload)
            expected[meant("802.3", mac, client.node, payload, via=via)] += 1
        seen: Counter[tuple[object, ...]] = Counter()
        for dst_mac, src_mac, framing, ipx in station.frames(timeout=5):
            if ipx.dst_socket == DATA_SOCKET:
                got = data_of(ipx)
                src = node(ipx.src_node)
                seen[meant(framing, dst_mac, src, got, via=src_mac, hops=ipx.hops)] += 1
                if seen == expected:
                    break
        assert seen == expected
        time.sleep(0.5)
        station.close()
        pcap = capture.stop()
    finally:
        if capture is not None:
            capture.stop()
        stop_clean(bridge)
    emitted, beacons = bridge_frames(tshark_frames(pcap), {mac_text(m) for m in STATIONS.values()})
    assert Counter(f.key() for f in emitted) == expected, emitted
    # The bridge's beacons (rule 8, every 5 s: maybe none in this short capture) too.
    assert {f.framing for f in beacons} <= {"802.3"}, beacons


def test_a_station_reaches_a_remote_node_at_the_bridges_mac_or_at_the_node(
    net: Netns, workdir: Path
) -> None:
    """The bridge speaks on the segment only from its own MAC; a station answers a remote
    node as through an IPX router, at the frame's source (the bridge's MAC), or at the node
    as a MAC, which a LAN switch floods to the bridge's promiscuous port. Both arrive."""
    b, s, c = topology(net)
    bridge = start_bridge(net, b, workdir)
    try:
        client = Client(c, SERVER)
        client.announce()  # a game's first broadcast: its keyed node verifies it
        station = Station(s, "st0")
        mac = STATIONS["ethernet_ii"]
        hello = ipx_layer(dst=BROADCAST, src=mac, payload=b"station here")
        station.send(scapy_frame("ethernet_ii", BROADCAST, mac, hello))
        assert data_of(client_datagram(client)) == b"station here"
        # A remote client whose node is the station's own MAC, or another station's, still
        # reaches the segment only from the bridge's MAC.
        client_send(client, BROADCAST, b"who is there")
        bridge_mac = iface_mac(b, "seg0")
        heard = [
            (src_mac, node(ipx.src_node))
            for _, src_mac, _, ipx in station.frames(timeout=3)
            if data_of(ipx) == b"who is there"
        ]
        assert heard == [(bridge_mac, client.node)], heard
        answers = ((bridge_mac, b"to the immediate address"), (client.node, b"to the node"))
        for to, payload in answers:
            reply = ipx_layer(dst=client.node, src=mac, payload=payload)
            station.send(scapy_frame("ethernet_ii", to, mac, reply))
            assert data_of(client_datagram(client)) == payload
        station.close()
    finally:
        stop_clean(bridge)


# --- 2. a real DOSBox and a native station --------------------------------------------------


# A native station whose MAC reads as an IPv4 address and port when DOSBox prints it: ipxnet
# ping decodes the responder's node as IPv4 + port (docs/protocols.md 4.5).
NATIVE_MAC = bytes.fromhex("0a3d0b161234")
NATIVE_AS_DOSBOX_PRINTS_IT = "Response from 10.61.11.22, port 4660"


def ping_frame(framing: str, src: bytes) -> bytes:
    """A ping as ``ipxnet ping`` sends it: type 0, socket 2 to the broadcast node (4.5)."""
    ipx = ipx_layer(dst=BROADCAST, src=src, payload=b"", sock=ECHO_SOCKET, ptype=0)
    return scapy_frame(framing, BROADCAST, src, ipx)


def ping_reply_frame(framing: str, src: bytes, pinger: bytes, to: bytes) -> bytes:
    """The unicast answer a DOSBox client gives a ping (docs/protocols.md 4.5), as a frame to the
    MAC ``to``: the immediate address the ping came from, as an IPX stack answers."""
    ipx = ipx_layer(dst=pinger, src=src, payload=b"", sock=ECHO_SOCKET, ptype=0)
    return scapy_frame(framing, to, src, ipx)


@pytest.mark.dosbox
def test_real_dosbox_and_a_native_station_ping_each_other_through_the_bridge(
    net: Netns, workdir: Path
) -> None:
    b, s, c = topology(net)
    sh("ip", "-n", s, "link", "set", "st0", "address", mac_text(NATIVE_MAC))
    framing = "802.2"  # the NetWare 3.12+ default frame type
    bridge = start_bridge(net, b, workdir)
    dosbox = None
    try:
        station = Station(s, "st0")
        assert station.mac == NATIVE_MAC
        # The station announces itself first, so the bridge knows its node and framing.
        hello = ipx_layer(dst=BROADCAST, src=NATIVE_MAC, payload=b"native station here")
        station.send(scapy_frame(framing, BROADCAST, NATIVE_MAC, hello))
        dosbox = DosBox(
            net,
            c,
            workdir / "dosbox",
            [f"ipxnet connect {BRIDGE_CL} 213 > C:\\CONN.TXT", "ipxnet ping > C:\\PING.TXT"],
            exit_when_done=False,  # stays at the prompt, where DOSBox answers pings
        )
        found = bridge.wait_for(rf"client {CLIENT_IP}:\d+ registered as node ([0-9a-f:]+)", 20)
        dosbox_node = node(found.group(1))  # keyed: ipxnet ping's own broadcast proves it
        # DOSBox -> native (broadcast) and native -> DOSBox (unicast): the station answers
        # the ping of ipxnet ping the way a DOSBox client does (docs/protocols.md 4.5).
        answered: list[tuple[bytes, str, bytes]] = []
        deadline = time.monotonic() + 20
        while NATIVE_AS_DOSBOX_PRINTS_IT not in dosbox.read("PING.TXT"):
            assert time.monotonic() < deadline, (dosbox.read("PING.TXT"), answered)
            for dst_mac, src_mac, got_framing, ipx in station.frames(timeout=0.2):
                if ipx.dst_socket == ECHO_SOCKET and ipx.dst_node == mac_text(BROADCAST):
                    pinger = node(ipx.src_node)
                    answered.append((dst_mac, got_framing, pinger))
                    station.send(ping_reply_frame(got_framing, NATIVE_MAC, pinger, src_mac))
        # DOSBox's ping reached the station as a broadcast frame in the station's framing.
        assert answered[0] == (BROADCAST, framing, dosbox_node), answered
        assert "connected to server" in dosbox.read("CONN.TXT")
        # Native -> DOSBox (broadcast) and DOSBox -> native (unicast): DOSBox answers the
        # station's ping; the answer comes back as a frame addressed to the station's MAC.
        station.send(ping_frame(framing, NATIVE_MAC))
        replies: list[tuple[bytes, str, ScapyIpx]] = []
        deadline = time.monotonic() + 5
        while not replies and time.monotonic() < deadline:
            for dst_mac, _, got_framing, ipx in station.frames(timeout=0.5):
                if ipx.dst_socket == ECHO_SOCKET and node(ipx.src_node) == dosbox_node:
                    replies.append((dst_mac, got_framing, ipx))
                    break
        assert replies, "DOSBox did not answer the native station's ping"
        dst_mac, got_framing, reply = replies[0]
        assert (dst_mac, got_framing) == (NATIVE_MAC, framing)
        assert node(reply.dst_node) == NATIVE_MAC
        assert (reply.src_socket, reply.hops, data_of(reply)) == (ECHO_SOCKET, 1, b"")
        station.close()
    finally:
        if dosbox is not None:
            dosbox.kill()
        stop_clean(bridge)


# --- 3. promiscuous mode while the port is open -----------------------------------------------


IFF_PROMISC = 0x100  # linux/if.h


def promiscuity(ns: str, ifname: str) -> tuple[bool, int]:
    """(IFF_PROMISC in the device flags, the kernel's promiscuity count) of an interface.

    Promiscuous mode taken by a socket (PACKET_ADD_MEMBERSHIP, as tcpdump does too) raises
    the count that ``ip -d link`` prints and sets IFF_PROMISC in the device's flags, which
    sysfs shows; the ``<...>`` flag list of ``ip link`` shows PROMISC only when a user set it
    with ``ip link set IF promisc on`` (the kernel reports its gflags there).
    """
    out = sh("ip", "-d", "-n", ns, "link", "show", ifname).stdout
    count = re.search(r"promiscuity (\d+)", out)
    assert count, out
    flags = sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{ifname}/flags").stdout
    return bool(int(flags, 16) & IFF_PROMISC), int(count.group(1))


def wait_promiscuity(ns: str, ifname: str, want: tuple[bool, int], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while (now := promiscuity(ns, ifname)) != want:
        assert time.monotonic() < deadline, now
        time.sleep(0.05)


def test_the_interface_is_promiscuous_only_while_the_bridge_runs(net: Netns, workdir: Path) -> None:
    b, _, _ = topology(net)
    assert promiscuity(b, "seg0") == (False, 0)
    bridge = start_bridge(net, b, workdir)
    assert promiscuity(b, "seg0") == (True, 1)
    stop_clean(bridge)  # SIGTERM: the port closes its socket
    wait_promiscuity(b, "seg0", (False, 0))
    # SIGKILL: nothing of ipxbridge runs, the kernel drops the membership with the socket.
    bridge = start_bridge(net, b, workdir)
    assert promiscuity(b, "seg0") == (True, 1)
    bridge.proc.kill()
    bridge.proc.wait(10)
    bridge.stop()
    wait_promiscuity(b, "seg0", (False, 0))


# --- 4. hostile frames and frames too large ---------------------------------------------------


def hostile_frames(mac: bytes) -> list[tuple[str, bytes, str | None]]:
    """(what, frame, drop reason; None: filtered in the kernel, never read), built by scapy."""
    good = ipx_layer(dst=BROADCAST, src=mac, payload=b"x" * 20)
    whole = bytes(good)
    eth2 = Ether(dst=mac_text(BROADCAST), src=mac_text(mac), type=0x8137)
    d, s = mac_text(BROADCAST), mac_text(mac)
    return [
        ("Ethernet II header only", bytes(eth2), "eth_truncated"),
        (
            "Ethernet II runt: 20 of 30 IPX header bytes",
            bytes(eth2 / Raw(whole[:20])),
            "eth_truncated",
        ),
        (
            "802.2 runt padded to 60: 802.3 length covers 20 bytes of IPX header",
            (bytes(Dot3(dst=d, src=s) / LLC(dsap=0xE0, ssap=0xE0, ctrl=3) / Raw(whole[:20]))).ljust(
                MIN_FRAME, b"\x00"
            ),
            "eth_truncated",
        ),
        (
            "IPX Length 20, below the header",
            scapy_frame(
                "ethernet_ii",
                BROADCAST,
                mac,
                ipx_layer(dst=BROADCAST, src=mac, payload=b"y" * 20, length=20),
            ),
            "eth_bad_ipx_length",
        ),
        (
            "IPX Length 400 in a 60-byte raw 802.3 frame",
            scapy_frame(
                "802.3",
                BROADCAST,
                mac,
                ipx_layer(dst=BROADCAST, src=mac, payload=b"z" * 10, length=400),
            ),
            "eth_bad_ipx_length",
        ),
        (
            "802.3 length 1000, frame carries 46",
            bytes(Dot3(dst=d, src=s, len=1000) / LLC(dsap=0xE0, ssap=0xE0, ctrl=3) / good).ljust(
                MIN_FRAME, b"\x00"
            ),
            "eth_bad_8023_length",
        ),
        (
            "raw 802.3 length 1500 on a short frame",
            bytes(Dot3(dst=d, src=s, len=1500) / good),
            "eth_bad_8023_length",
        ),
        (
            "STP BPDU (LLC 42 42 03)",
            bytes(
                Dot3(dst="01:80:c2:00:00:00", src=mac_text(mac))
                / LLC(dsap=0x42, ssap=0x42, ctrl=3)
                / STP()
            ).ljust(MIN_FRAME, b"\x00"),
            "eth_not_ipx",
        ),
        (
            "NetBIOS (LLC F0 F0 03)",
            bytes(
                Dot3(dst=d, src=s)
                / LLC(dsap=0xF0, ssap=0xF0, ctrl=3)
                / Raw(b"\x2c\x00\xff\xef" + b"NETBIOS NAME")
            ).ljust(MIN_FRAME, b"\x00"),
            "eth_not_ipx",
        ),
        (
            "SNAP carrying IPv4",
            bytes(
                Dot3(dst=d, src=s)
                / LLC(dsap=0xAA, ssap=0xAA, ctrl=3)
                / SNAP(OUI=0, code=0x0800)
                / Raw(whole)
            ),
            "eth_not_ipx",
        ),
        (
            "SNAP with AppleTalk's OUI and IPX's type",
            bytes(
                Dot3(dst=d, src=s)
                / LLC(dsap=0xAA, ssap=0xAA, ctrl=3)
                / SNAP(OUI=0x080007, code=0x8137)
                / Raw(whole)
            ),
            "eth_not_ipx",
        ),
        (
            "802.3 length 0",
            bytes(Dot3(dst=d, src=s, len=0)).ljust(MIN_FRAME, b"\x00"),
            "eth_not_ipx",
        ),
        # Another EtherType never reaches Python: the socket's BPF filter takes only 0x8137
        # and 802.3 lengths, so these are neither received nor dropped on the port's books.
        (
            "EtherType 0x88B5 (local experimental)",
            bytes(Ether(dst=d, src=s, type=0x88B5) / good),
            None,
        ),
        ("length/type 1501 (undefined)", bytes(Ether(dst=d, src=s, type=1501) / good), None),
    ]


def test_hostile_frames_are_dropped_and_counted_by_reason_and_the_port_still_forwards(
    net: Netns, workdir: Path
) -> None:
    b, s, c = topology(net)
    bridge = start_bridge(net, b, workdir)
    port = ("ethernet", "seg0")
    try:
        client = Client(c, SERVER)
        client.announce()
        station = Station(s, "st0")
        mac = STATIONS["802.2"]
        hostile = hostile_frames(mac)
        for what, frame, _ in hostile:
            assert len(frame) >= 14, what
            station.send(frame)
        good = ipx_layer(dst=BROADCAST, src=mac, payload=b"still forwarding")
        station.send(scapy_frame("802.2", BROADCAST, mac, good))
        assert data_of(client_datagram(client)) == b"still forwarding"
        counted = Counter(reason for _, _, reason in hostile if reason is not None)
        total = sum(counted.values()) + 1
        now = books_when(b, port, total)
        assert now.received[port] == total, now  # the filtered EtherTypes were never read
        assert now.dropped(*port) == counted, now.dropped(*port)
        assert now.outcomes[(*port, "forwarded", "")] == 1
        now.balance()
        station.close()
    finally:
        stop_clean(bridge)


def test_a_packet_too_large_for_the_framing_at_the_mtu_is_dropped_and_counted_never_truncated(
    net: Netns, workdir: Path
) -> None:
    require("dumpcap", "tshark")
    mtu = 576  # Ethernet II and raw 802.3 carry 576 bytes of IPX, 802.2 573, SNAP 568
    b, s, c = topology(net, mtu=mtu)
    bridge = start_bridge(net, b, workdir)
    capture = None
    try:
        client = Client(c, SERVER)
        client.announce()
        station = Station(s, "st0")
        eth2, snap = STATIONS["ethernet_ii"], STATIONS["snap"]
        for framing, mac in (("ethernet_ii", eth2), ("snap", snap)):
            hello = ipx_layer(dst=BROADCAST, src=mac, payload=f"{framing} here".encode())
            station.send(scapy_frame(framing, BROADCAST, mac, hello))
            client_datagram(client)
        capture = Capture(net, s, "st0", workdir / "mtu.pcapng")

        def body(size: int, tag: bytes) -> bytes:
            return (tag * size)[: size - IPX_HEADER]

        fits_eth2 = body(572, b"A")  # Ethernet II: sent; SNAP: too large
        too_large = body(1000, b"B")  # neither
        exactly = body(mtu, b"C")  # Ethernet II's limit, to the byte
        one_over = body(mtu + 1, b"D")
        client_send(client, BROADCAST, fits_eth2)
        client_send(client, BROADCAST, too_large)
        client_send(client, snap, fits_eth2)
        client_send(client, eth2, exactly)
        client_send(client, eth2, one_over)
        client_send(client, BROADCAST, b"marker")
        dropped_copies = 1 + 2 + 1 + 1
        via = iface_mac(b, "seg0")
        expected = Counter(
            [
                meant("ethernet_ii", BROADCAST, client.node, fits_eth2, via=via),
                meant("ethernet_ii", eth2, client.node, exactly, via=via),
                meant("ethernet_ii", BROADCAST, client.node, b"marker", via=via),
                meant("snap", BROADCAST, client.node, b"marker", via=via),
            ]
        )
        markers = 0
        for _, _, _, ipx in station.frames(timeout=5):
            markers += data_of(ipx) == b"marker"
            if markers == 2:
                break
        assert markers == 2
        time.sleep(0.5)
        station.close()
        pcap = capture.stop()
        now = books(b)
        assert now.copies_dropped == {("ethernet", "seg0", "frame_too_large"): dropped_copies}, now
        # its announcement and the six sent here, though copies were dropped
        assert now.outcomes[("dosbox", "tunnel", "forwarded", "")] == 7, now
        now.balance()
    finally:
        if capture is not None:
            capture.stop()
        stop_clean(bridge)
    emitted, _ = bridge_frames(tshark_frames(pcap), {mac_text(m) for m in STATIONS.values()})
    assert Counter(f.key() for f in emitted) == expected, [(f.framing, f.length) for f in emitted]
    assert max(f.frame_len for f in emitted) == 14 + mtu  # the whole packet, not a byte less
