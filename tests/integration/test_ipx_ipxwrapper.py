"""IPXWrapper's UDP and RFC 1234 segments as ports of the IPX switch, end to end.

Stand-ins, each written from docs/protocols.md and behaving like the real thing:

* an IPXWrapper station in its default mode (``ipxwrapper_station.py``, docs/protocols.md 6) at
  the far end of a userspace WireGuard link (wireguard-go);
* DOSBox-protocol clients (``harness.Client``, docs/protocols.md 4), one of them a DirectPlay host
  behind IPXWrapper's DOSBox mode (registers with type 2, never answers pings, docs/protocols.md 6);
* an RFC 1234 host: a plain UDP socket on port 213, node ``00 00`` + its IPv4 (docs/protocols.md 5).

Topology (namespaces made and removed per test; addresses private to them):

* ``br``: the bridge. ``cl0`` 10.60.0.1/24 to ``cl`` (the DOSBox clients, 10.60.0.2).
* ``st``: the IPXWrapper station. Underlay veth 10.97.0.1 (br) / 10.97.0.2 (st); WireGuard
  10.98.0.1/24 (br) and 10.98.0.2/24 (st). The bridge's peer entry for the station is
  AllowedIPs 10.98.0.2/32 (where ipxbridge reads its p2p peer from); the station's entry for
  the bridge is the whole VPN subnet 10.98.0.0/24, as a road-warrior client's entry for its hub
  is, so its subnet broadcast to 10.98.0.255 is carried to the bridge. The tunnel addresses are
  /24 because IPXWrapper accepts a packet only from inside its interface's subnet: with a /32
  it would drop everything the bridge sends.
* ``rh``: the RFC 1234 host, ``lan0`` 10.70.0.1/24 (br) to 10.70.0.2/24.
"""

import contextlib
import ipaddress
import json
import re
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from ipxbridge.wire import directplay as dp
from ipxbridge.wire import ipx
from scripts.harness import (
    BridgeProcess,
    Client,
    Netns,
    bridge_get,
    inside,
)
from tests.integration import wg
from tests.integration.conftest import require
from tests.integration.ipxwrapper_station import (
    SUBNET_DROP,
    IpxWrapperStation,
    encode,
)

DISCOVERY: Final = 0xA57F  # DirectPlay's IPX enumeration socket (docs/protocols.md 1.9)
DP_SOCKET: Final = 0x0400  # IPXWrapper's first automatic socket (1024): the SP's main socket
HOST_SOCKET: Final = 0x4002  # the DOSBox-side host's game socket
GAME: Final = 0x4545  # a game's data socket
ARMADA: Final = uuid.UUID("76F93801-9340-11D2-AE34-00600895C779")
STATION_NODE: Final = bytes.fromhex("02ac0a620002")  # locally administered
IP_PKTINFO: Final = 8  # linux/in.h (Python 3.11 has no socket.IP_PKTINFO)
RFC1234_PORT: Final = 213

# The 30-byte Novell header (docs/protocols.md 3.1), packed here independently of wire/ipx.py.
IPX_HEADER: Final = struct.Struct("!HHBB4s6sH4s6sH")


def ipx30(
    dst_node: bytes,
    dst_socket: int,
    src_node: bytes,
    src_socket: int,
    data: bytes,
    *,
    ptype: int = 0,
    dst_net: bytes = bytes(4),
    src_net: bytes = bytes(4),
) -> bytes:
    """A standard IPX packet: checksum 0xFFFF, Length = 30 + data, hop count 0 (3.1)."""
    head = IPX_HEADER.pack(
        0xFFFF,
        IPX_HEADER.size + len(data),
        0,
        ptype,
        dst_net,
        dst_node,
        dst_socket,
        src_net,
        src_node,
        src_socket,
    )
    return head + data


@dataclass(frozen=True)
class Ipx30:
    """A standard IPX packet as the RFC 1234 host decoded it, and how it arrived."""

    hops: int
    ptype: int
    dst_net: bytes
    dst_node: bytes
    dst_socket: int
    src_net: bytes
    src_node: bytes
    src_socket: int
    data: bytes
    raw: bytes
    source: tuple[str, int]
    dst_ip: str  # the datagram's IP destination (IP_PKTINFO): subnet broadcast or ours


class Rfc1234Host:
    """An RFC 1234 host: IPX packets as UDP payload, port 213 at both ends (docs/protocols.md 5).

    Its node is ``00 00`` followed by its IPv4 address; it broadcasts to the subnet broadcast.
    It ignores a datagram whose IPX checksum is not 0xFFFF (as the RFC says) or whose Length
    disagrees with the datagram, and sets aside its own broadcasts the kernel loops back.
    """

    def __init__(self, ns: str, interface: str) -> None:
        self.interface = ipaddress.IPv4Interface(interface)
        self.ip = str(self.interface.ip)
        self.node = b"\x00\x00" + socket.inet_aton(self.ip)
        with inside(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        self.sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        self.sock.bind(("0.0.0.0", RFC1234_PORT))
        self.sock.settimeout(0.2)
        self.inbox: list[Ipx30] = []

    def packet(self, dst_node: bytes, dst_socket: int, data: bytes) -> bytes:
        return ipx30(dst_node, dst_socket, self.node, dst_socket, data)

    def broadcast(self, dst_socket: int, data: bytes) -> None:
        target = (str(self.interface.network.broadcast_address), RFC1234_PORT)
        self.sock.sendto(self.packet(ipx.BROADCAST_NODE, dst_socket, data), target)

    def _read(self) -> None:
        try:
            raw, ancillary, _, source = self.sock.recvmsg(70_000, socket.CMSG_SPACE(12))
        except TimeoutError:
            return
        dst_ip = ""
        for level, kind, blob in ancillary:
            if level == socket.IPPROTO_IP and kind == IP_PKTINFO:
                dst_ip = socket.inet_ntoa(blob[8:12])  # struct in_pktinfo: ipi_addr
        if source[0] == self.ip or len(raw) < IPX_HEADER.size:
            return
        checksum, length, hops, ptype, dnet, dnode, dsock, snet, snode, ssock = (
            IPX_HEADER.unpack_from(raw)
        )
        if checksum != 0xFFFF or length != len(raw):
            return
        data = raw[IPX_HEADER.size :]
        packet = Ipx30(
            hops, ptype, dnet, dnode, dsock, snet, snode, ssock, data, raw, source, dst_ip
        )
        self.inbox.append(packet)

    def receive(self, dst_socket: int, timeout: float = 3.0) -> Ipx30:
        deadline = time.monotonic() + timeout
        while True:
            for i, packet in enumerate(self.inbox):
                if packet.dst_socket == dst_socket:
                    return self.inbox.pop(i)
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing for socket 0x{dst_socket:04x} at the RFC 1234 host")
            self._read()

    def drain(self, seconds: float) -> list[Ipx30]:
        """Everything that arrives within ``seconds`` (beacons included)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._read()
        out, self.inbox = self.inbox, []
        return out


class DosboxHost:
    """A DirectPlay host behind IPXWrapper's DOSBox mode (docs/protocols.md 6 and 1.9).

    Registers with packet type 2, never answers a ping, says nothing until an EnumSessions
    arrives on the discovery socket, and answers it with a bare EnumSessionsReply from its game
    socket to the enumerating address.
    """

    def __init__(self, ns: str, server: tuple[str, int]) -> None:
        with inside(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.settimeout(1.0)
        self.server = server
        registration = bytearray(ipx.build_registration())
        registration[5] = 2  # IPXWrapper registers with type 2 (docs/protocols.md 6)
        self.sock.sendto(bytes(registration), server)
        self.node = ipx.parse_header(self.sock.recvfrom(2048)[0]).dst_node

    def answer_enumeration(self, name: str, timeout: float) -> ipx.IpxHeader:
        """Wait for an EnumSessions and answer it; returns the request's header."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data, _ = self.sock.recvfrom(70_000)
            except TimeoutError:
                continue
            header, payload = ipx.parse_packet(data)
            if header.is_echo or header.dst_socket != DISCOVERY:
                continue  # IPXWrapper never answers pings
            request = dp.parse_dp4(bytes(payload), bare=True)
            assert request.command == dp.DP4Command.ENUMSESSIONS
            desc = dp.SessionDesc(
                flags=0,
                instance_guid=uuid.uuid4(),
                application_guid=ARMADA,
                max_players=8,
                current_players=2,
                user=(0, 0, 0, 0),
            )
            body = dp.build_enum_sessions_reply(dp.EnumSessionsReply(desc, name), bare=True)
            reply = ipx.build_packet(
                dst_net=header.src_net,
                dst_node=header.src_node,
                dst_socket=header.src_socket,
                src_node=self.node,
                src_socket=HOST_SOCKET,
                payload=body,
            )
            self.sock.sendto(reply, self.server)
            return header
        raise TimeoutError("no EnumSessions reached the DOSBox-side host")


class Site:
    """The namespaces of the module docstring and a bridge with the chosen interface ports."""

    def __init__(self, net: Netns) -> None:
        self.net = net
        self.ends: list[wg.WgEnd] = []  # started: stopped by ``close`` whatever happens
        self.bridge: BridgeProcess | None = None
        self.wg_name = ""

    def build(self, workdir: Path, *, wireguard: bool, rfc1234: bool, env: dict[str, str]) -> None:
        net = self.net
        self.br, self.cl = net.add("br"), net.add("cl")
        net.link(self.br, "cl0", "10.60.0.1/24", self.cl, "eth0", "10.60.0.2/24")
        args: list[str] = []
        if wireguard:
            self.st = net.add("st")
            net.link(self.br, "und0", "10.97.0.1/24", self.st, "und0", "10.97.0.2/24")
            tag = net.prefix[-5:]
            # Interface names are unique across namespaces: the UAPI sockets are shared.
            br_end = wg.WgEnd(self.br, f"wxb{tag}", "10.98.0.1", "10.97.0.1", 51820)
            st_end = wg.WgEnd(self.st, f"wxs{tag}", "10.98.0.2", "10.97.0.2", 51821)
            for end in (br_end, st_end):
                end.private, end.public = wg.genkey()
                self.ends.append(end)
                wg.start(net, end)
            wg.configure(net, br_end, st_end, "10.98.0.2/32")
            wg.configure(net, st_end, br_end, "10.98.0.0/24")
            self.wg_name = br_end.ifname
            args += ["--ipx-iface", f"{self.wg_name}:ipxwrapper"]
        if rfc1234:
            self.rh = net.add("rh")
            net.link(self.br, "lan0", "10.70.0.1/24", self.rh, "eth0", "10.70.0.2/24")
            args += ["--ipx-iface", "lan0:rfc1234"]
        self.bridge = bridge = BridgeProcess(net, self.br, *args, log_dir=workdir, env=env)
        if wireguard:
            # The p2p peer comes from WireGuard (the /32 of the station's AllowedIPs).
            bridge.wait_for(rf"{self.wg_name}/ipxwrapper \(p2p, peers 10\.98\.0\.2\)", 10)
        if rfc1234:
            bridge.wait_for(r"lan0/rfc1234 \(lan, broadcast 10\.70\.0\.255 from 10\.70\.0\.1\)", 10)

    def station(self) -> IpxWrapperStation:
        return IpxWrapperStation(self.st, "10.98.0.2/24", STATION_NODE)

    def client(self) -> Client:
        client = Client(self.cl, ("10.60.0.1", RFC1234_PORT))
        client.announce()  # its game, before it listens: its keyed node verifies it
        return client

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return parse_metrics(bridge_get(self.br, "/metrics"))

    def close(self) -> int:
        code = self.bridge.stop() if self.bridge is not None else -1
        for end in self.ends:
            wg.stop(self.net, end)  # SIGTERM: wireguard-go removes its UAPI socket
            with contextlib.suppress(FileNotFoundError):
                Path(f"/tmp/{end.ifname}.key").unlink()  # written by wg.configure
        return code


@contextlib.contextmanager
def site(
    net: Netns,
    workdir: Path,
    *,
    wireguard: bool,
    rfc1234: bool,
    env: dict[str, str] | None = None,
) -> Iterator[Site]:
    if wireguard:
        require("wireguard-go", "wg")
    s = Site(net)
    try:
        s.build(workdir, wireguard=wireguard, rfc1234=rfc1234, env=env or {})
        yield s
    except BaseException:
        s.close()
        raise
    assert s.close() == 0
    assert s.bridge is not None
    log = s.bridge.log()
    assert "Traceback" not in log, log
    counts = s.bridge.summary()
    assert counts["received"] == counts["forwarded"] + counts["control"] + counts["dropped"]


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text exposition: (name, labels) -> value."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if match is None or line.startswith("#"):
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        out[(match.group(1), labels)] = float(match.group(3))
    return out


def port_count(
    metrics: dict[tuple[str, frozenset[tuple[str, str]]], float],
    kind: str,
    interface: str,
    outcome: str,
    reason: str = "",
) -> float:
    labels = {"kind": kind, "interface": interface, "outcome": outcome, "reason": reason}
    return metrics.get(("ipxbridge_ipx_port_packets_total", frozenset(labels.items())), 0.0)


def api(ns: str, path: str) -> Any:
    return json.loads(bridge_get(ns, path))


# --- IPXWrapper over WireGuard ------------------------------------------------------------


@pytest.mark.netns
def test_ipxwrapper_station_over_wireguard_and_dosbox_client_see_each_other(
    net: Netns, workdir: Path
) -> None:
    with site(net, workdir, wireguard=True, rfc1234=False) as s:
        station = s.station()
        station.bind(GAME)
        client = s.client()

        # The station's broadcast goes to its subnet broadcast, through the tunnel.
        assert station.send(ipx.BROADCAST_NODE, GAME, GAME, b"hello from IPXWrapper") == (
            "10.98.0.255",
            54792,
        )
        header, payload = client.receive(GAME)
        assert payload == b"hello from IPXWrapper"
        assert (header.src_net, header.src_node, header.src_socket) == (
            bytes(4),
            STATION_NODE,
            GAME,
        )
        assert header.dst_node == ipx.BROADCAST_NODE
        assert header.hops == 1  # no hop field in IPXWrapper's header: counted from 0

        # The client's broadcast reaches the station as a unicast copy to its tunnel address
        # (p2p port), from the bridge's own address on the WireGuard interface: the station's
        # subnet check passes for real.
        client.send(ipx.BROADCAST_NODE, b"hello from DOSBox")
        got = station.receive(GAME)
        assert got.data == b"hello from DOSBox"
        assert got.source == ("10.98.0.1", 54792)
        assert got.on == "shared"  # sent to port 54792: where IPXWrapper hears broadcasts
        assert (got.src_node, got.src_socket, got.dst_node) == (
            client.node,
            GAME,
            ipx.BROADCAST_NODE,
        )

        # Unicast to the station: to the private port the bridge learned it from.
        client.send(STATION_NODE, b"just for you")
        got = station.receive(GAME)
        assert (got.data, got.dst_node, got.src_node) == (
            b"just for you",
            STATION_NODE,
            client.node,
        )
        assert got.source == ("10.98.0.1", 54792)
        assert got.on == "private"

        # Unicast back: the station cached where the client's packets came from.
        assert station.send(client.node, GAME, GAME, b"and back") == ("10.98.0.1", 54792)
        header, payload = client.receive(GAME)
        assert (payload, header.dst_node, header.src_node) == (
            b"and back",
            client.node,
            STATION_NODE,
        )

        # The station's subnet check is real: a well-formed packet from outside its subnet
        # (the bridge's underlay address) is dropped, as IPXWrapper drops it.
        with inside(s.br):
            stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with stranger:
            stranger.bind(("10.97.0.1", 0))
            datagram = encode(
                0, bytes(4), ipx.BROADCAST_NODE, GAME, bytes(4), client.node, GAME, b"x"
            )
            stranger.sendto(datagram, ("10.97.0.2", 54792))
            station.poll(0.5)
            assert station.dropped == [(SUBNET_DROP, ("10.97.0.1", stranger.getsockname()[1]))]
        assert station.pings_ignored == 0  # the bridge sends no keepalive pings to segments

        stations = [c for c in api(s.br, "/api/clients") if c["kind"] == "ipxwrapper"]
        assert stations == [
            {
                "kind": "ipxwrapper",
                "interface": s.wg_name,
                "node": STATION_NODE.hex(":"),
                "idle_seconds": stations[0]["idle_seconds"],
                "address": f"10.98.0.2:{station.private_port}",
            }
        ]
        metrics = s.metrics()
        assert port_count(metrics, "ipxwrapper", s.wg_name, "forwarded") == 2
        assert port_count(metrics, "dosbox", "tunnel", "forwarded") == 3  # with its announcement
        station.close()


@pytest.mark.netns
def test_dp4_enum_sessions_from_ipxwrapper_station_lists_the_session(
    net: Netns, workdir: Path
) -> None:
    """IPXWrapper's DirectPlay SP enumerates; a host on the DOSBox side answers (1.9, 6).

    That host has sent nothing since it registered (a listener, docs/protocols.md 4.4): the
    enumeration reaches it all the same, within the reflection limit (docs/ipx.md,
    "Verification"). Its answer carries its keyed node, which verifies it.
    """
    with site(net, workdir, wireguard=True, rfc1234=False) as s:
        station = s.station()
        station.bind(DP_SOCKET)
        host = DosboxHost(s.cl, ("10.60.0.1", RFC1234_PORT))
        assert api(s.br, "/api/sessions") == []

        # IPX_EnumSessions: DirectPlay's message minus its 20-byte SP header, broadcast to
        # node FF..FF, socket 0xA57F, from the SP's main socket.
        enum = dp.build_enum_sessions(dp.EnumSessions(ARMADA, 0x41, None), bare=True)
        assert enum[:4] == b"play"
        assert station.send(ipx.BROADCAST_NODE, DISCOVERY, DP_SOCKET, enum) == (
            "10.98.0.255",
            54792,
        )
        request = host.answer_enumeration("Wrapped over WireGuard", timeout=5)
        assert (request.src_node, request.src_socket) == (STATION_NODE, DP_SOCKET)

        got = station.receive(DP_SOCKET, timeout=5)
        assert got.source == ("10.98.0.1", 54792)
        assert (got.src_node, got.src_socket) == (host.node, HOST_SOCKET)
        reply = dp.parse_dp4(got.data, bare=True)
        assert reply.command == dp.DP4Command.ENUMSESSIONSREPLY

        deadline = time.monotonic() + 5
        while not (sessions := api(s.br, "/api/sessions")):
            assert time.monotonic() < deadline, "the session was not listed"
            time.sleep(0.2)
        (session,) = sessions
        assert session["session_name"] == "Wrapped over WireGuard"
        assert session["game"] == "Star Trek: Armada"
        assert session["players"] == 2
        assert session["transport"] == "ipx"
        assert session["host"] == f"00000000.{host.node.hex()}:{HOST_SOCKET:04x}"
        metrics = s.metrics()
        enum_sessions = frozenset({("command", "EnumSessions"), ("version", "4")})
        assert metrics[("ipxbridge_directplay_messages_total", enum_sessions)] == 1
        assert station.dropped == []
        station.close()


# --- RFC 1234 segment ---------------------------------------------------------------------


@pytest.mark.netns
def test_rfc1234_segment_exchanges_with_a_dosbox_client(net: Netns, workdir: Path) -> None:
    with site(net, workdir, wireguard=False, rfc1234=True) as s:
        host = Rfc1234Host(s.rh, "10.70.0.2/24")
        client = s.client()

        # A unicast to 00 00 + IPv4 (RFC 1234's host number) goes nowhere while that host
        # has not been heard on the port: anyone may register and name any host number, and
        # the bridge must not send to an address a stranger chose. The copy is counted.
        client.send(host.node, b"direct, never heard of you")
        with pytest.raises(TimeoutError):
            host.receive(GAME, timeout=1.0)
        unproven = (
            "ipxbridge_ipx_port_dropped_copies_total",
            frozenset({("kind", "rfc1234"), ("interface", "lan0"), ("reason", "unproven_host")}),
        )
        assert s.metrics()[unproven] == 1

        host.broadcast(GAME, b"hello from RFC 1234")
        header, payload = client.receive(GAME)
        assert payload == b"hello from RFC 1234"
        assert (header.src_node, header.dst_node, header.hops) == (
            host.node,
            ipx.BROADCAST_NODE,
            1,
        )

        client.send(ipx.BROADCAST_NODE, b"hello from DOSBox")
        got = host.receive(GAME)
        assert got.data == b"hello from DOSBox"
        assert (got.dst_ip, got.source) == ("10.70.0.255", ("10.70.0.1", RFC1234_PORT))
        assert (got.src_node, got.dst_node, got.hops) == (client.node, ipx.BROADCAST_NODE, 1)

        # Heard now: a unicast goes straight to the address it was heard from.
        client.send(host.node, b"direct, now heard")
        got = host.receive(GAME)
        assert (got.data, got.dst_ip) == (b"direct, now heard", "10.70.0.2")
        assert got.source == ("10.70.0.1", RFC1234_PORT)
        assert (got.dst_node, got.src_node, got.hops) == (host.node, client.node, 1)

        # Every broadcast the bridge put on the segment (the client's, and its beacons,
        # including the one it sent as the port opened, before the host listened) also came
        # back to its own socket: each one is counted as own_packet and nothing else. The
        # port's copies are those broadcasts and the one unicast to the host.
        bcast = ("10.70.0.255", ("10.70.0.1", RFC1234_PORT))
        seen_by_host = 1 + sum((p.dst_ip, p.source) == bcast for p in host.inbox)
        host.inbox.clear()
        copies = frozenset({("path", "ipx"), ("kind", "rfc1234"), ("interface", "lan0")})
        deadline = time.monotonic() + 10
        while True:
            seen_by_host += sum((p.dst_ip, p.source) == bcast for p in host.drain(0.3))
            metrics = s.metrics()
            own = port_count(metrics, "rfc1234", "lan0", "dropped", "own_packet")
            put_on_segment = metrics[("ipxbridge_sent_copies_total", copies)] - 1
            if own == put_on_segment or time.monotonic() > deadline:
                break
        assert own == put_on_segment
        assert 1 <= seen_by_host <= own
        assert port_count(metrics, "rfc1234", "lan0", "forwarded") == 1  # the host's broadcast
        received = metrics[
            (
                "ipxbridge_ipx_port_received_packets_total",
                frozenset({("kind", "rfc1234"), ("interface", "lan0")}),
            )
        ]
        assert received == 1 + own
        client.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            client.receive(GAME)  # its own broadcast never came back to it

        (listed,) = [c for c in api(s.br, "/api/clients") if c["kind"] == "rfc1234"]
        assert (listed["interface"], listed["node"], listed["address"]) == (
            "lan0",
            host.node.hex(":"),
            f"10.70.0.2:{RFC1234_PORT}",
        )


# --- IPXWrapper coalesced batches ---------------------------------------------------------


def coalesced(dst_node: bytes, src_node: bytes, inner: list[bytes]) -> bytes:
    """A batch as IPXWrapper's ``coalesce.c`` builds it (docs/protocols.md 6).

    Outer IPX header: checksum 0xFFFF, hop count 0, packet type 2, destination network and
    node of the batched packets with socket 0, the sender's own network and node with source
    socket 0; the data is the complete IPX packets, one after the other.
    """
    return ipx30(dst_node, 0, src_node, 0, b"".join(inner), ptype=2)


@pytest.mark.netns
def test_coalesced_batch_reaches_every_port_as_its_packets(net: Netns, workdir: Path) -> None:
    """A batch from a DOSBox-mode IPXWrapper client is unpacked where it enters the bridge
    (policy/switch.py rule 1): the IPXWrapper station and the RFC 1234 host get its packets
    one by one, plain, a hop counted, as lone packets; one to a filtered socket or with
    another node as its source goes nowhere, and a malformed batch is dropped and counted."""
    with site(net, workdir, wireguard=True, rfc1234=True) as s:
        station = s.station()
        station.bind(GAME)
        host = Rfc1234Host(s.rh, "10.70.0.2/24")
        client = s.client()

        # A batch of broadcasts (IPXWrapper batches per destination: all to FF..FF, 0x4545).
        inner = [
            ipx30(ipx.BROADCAST_NODE, GAME, client.node, GAME, f"batched {i} ".encode() * i)
            for i in range(1, 4)
        ]
        client.sock.sendto(coalesced(ipx.BROADCAST_NODE, client.node, inner), client.server)

        for packet in inner:
            got = station.receive(GAME)  # each one as a lone packet, in order
            assert (got.data, got.ptype) == (packet[30:], 0)
            assert (got.src_node, got.src_socket, got.dst_node) == (
                client.node,
                GAME,
                ipx.BROADCAST_NODE,
            )
            assert (got.source, got.on) == (("10.98.0.1", 54792), "shared")
        for packet in inner:
            heard = host.receive(GAME)
            assert heard.raw == packet[:4] + b"\x01" + packet[5:]  # one hop, nothing else
            assert (heard.dst_ip, heard.source) == ("10.70.0.255", ("10.70.0.1", RFC1234_PORT))

        # The station speaks; the bridge learns it. A batch for it: the packets that pass
        # the checks arrive on the private port, and nowhere else.
        station.send(ipx.BROADCAST_NODE, GAME, GAME, b"learn me")
        assert client.receive(GAME)[1] == b"learn me"
        heard = host.receive(GAME)
        assert (heard.data, heard.src_node, heard.dst_ip) == (
            b"learn me",
            STATION_NODE,
            "10.70.0.255",
        )
        sap = 0x0452  # in the default socket filter
        inner = [
            ipx30(STATION_NODE, GAME, client.node, GAME, b"for the station only"),
            ipx30(STATION_NODE, sap, client.node, sap, b"a SAP packet"),
            ipx30(STATION_NODE, GAME, STATION_NODE, GAME, b"as the station itself"),
            ipx30(STATION_NODE, GAME, client.node, GAME, b"and this one too"),
        ]
        client.sock.sendto(coalesced(STATION_NODE, client.node, inner), client.server)
        for data in (b"for the station only", b"and this one too"):
            got = station.receive(GAME)
            assert (got.data, got.dst_node, got.on) == (data, STATION_NODE, "private")
        assert [p for p in host.drain(0.5) if p.dst_socket == GAME] == []

        # A batch whose second packet has a checksum: dropped whole, counted by reason.
        bad = bytearray(ipx30(ipx.BROADCAST_NODE, GAME, client.node, GAME, b"bad"))
        bad[0:2] = b"\x00\x00"
        good = ipx30(ipx.BROADCAST_NODE, GAME, client.node, GAME, b"not alone")
        client.sock.sendto(
            coalesced(ipx.BROADCAST_NODE, client.node, [good, bytes(bad)]), client.server
        )
        deadline = time.monotonic() + 5
        while True:
            metrics = s.metrics()
            batch_drops = port_count(metrics, "dosbox", "tunnel", "dropped", "batch_bad_checksum")
            if batch_drops or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert batch_drops == 1
        station.poll(0.5)
        assert [p.data for p in station.inbox] == []
        assert (station.magic, station.dropped) == ([], [])  # no batch ever reached it

        assert port_count(metrics, "dosbox", "tunnel", "control", "batch") == 2
        # the announcement first
        assert port_count(metrics, "dosbox", "tunnel", "forwarded") == 1 + 3 + 2
        assert port_count(metrics, "dosbox", "tunnel", "dropped", "filtered_socket") == 1
        assert port_count(metrics, "dosbox", "tunnel", "dropped", "spoofed_source") == 1
        station.close()


@pytest.mark.netns
def test_ipxwrapper_unicasts_between_two_sites_carry_the_receivers_network(
    net: Netns, workdir: Path
) -> None:
    """IPXWrapper delivers a unicast only if its destination (network, node) is its own
    exactly; FFFFFFFF is refused (docs/protocols.md 6, "Native mode, addresses"; the
    stand-in checks as router.c does). Two sites, a bridge at each, RFC 1234 peers; an
    IPXWrapper PC at each site on network 00000001, IPXWrapper's default. B's game listens on
    a socket it never sent from (each program sends from its own socket), so bridge B has
    heard B's node but not that socket: the unicast goes to B's subnet broadcast, and must
    carry B's network."""
    net1 = b"\x00\x00\x00\x01"
    sa, sb, pa, pb = net.add("sa"), net.add("sb"), net.add("pa"), net.add("pb")
    net.link(sa, "wan", "10.93.0.1/24", sb, "wan", "10.93.0.2/24")
    net.link(sa, "lan", "10.91.1.1/24", pa, "eth0", "10.91.1.2/24")
    net.link(sb, "lan", "10.92.1.1/24", pb, "eth0", "10.92.1.2/24")
    iface = ("--ipx-iface", "lan:ipxwrapper")
    bridge_a = BridgeProcess(net, sa, "--peer", "10.93.0.2", *iface, log_dir=workdir)
    bridge_b = BridgeProcess(net, sb, "--peer", "10.93.0.1", *iface, log_dir=workdir)
    node_a, node_b = bytes.fromhex("02000000000a"), bytes.fromhex("02000000000b")
    station_a = IpxWrapperStation(pa, "10.91.1.2/24", node_a, network=net1)
    station_b = IpxWrapperStation(pb, "10.92.1.2/24", node_b, network=net1)
    try:
        for bridge in (bridge_a, bridge_b):
            bridge.wait_for(r"lan/ipxwrapper \(lan, broadcast 10\.9[12]\.1\.255", 10)
        lobby, game = 0x5001, 0x5000
        station_a.bind(lobby)
        station_b.bind(game)
        # B's lobby tool says it is there, from its own socket; A learns B's node from it.
        station_b.send(ipx.BROADCAST_NODE, lobby, lobby, b"B is here")
        assert station_a.receive(lobby, timeout=5).src_node == node_b
        for n in range(10):
            station_a.send(node_b, game, lobby, b"unicast %d" % n, dst_net=net1)
        got = [station_b.receive(game, timeout=5) for _ in range(10)]
        assert [p.data for p in got] == [b"unicast %d" % n for n in range(10)]
        assert {(p.dst_net, p.dst_node) for p in got} == {(net1, node_b)}
        assert SUBNET_DROP not in [why for why, _ in station_b.dropped]
    finally:
        station_a.close()
        station_b.close()
        assert bridge_a.stop() == 0
        assert bridge_b.stop() == 0
