"""Fuzz targets: one per decoder, plus the stateful parts that eat remote input.

Each target is a property over one input of arbitrary bytes. It returns normally when the
code under test behaved (a result, or the typed error of its closed reason set) and raises
``AssertionError`` or the unexpected exception otherwise. ``fuzz.py`` runs a target under
atheris for long runs (docs/reliability.md R1); ``tests/unit/test_fuzz_targets.py`` runs every
target on its seeds and a few thousand deterministic mutations in CI, so none can rot.

Targets:

* ``ipx``: the IPX header codec and the ``decode`` CLI's view of a UDP 213 datagram.
* ``dp4``: DirectPlay 4 messages with and without SP header, player messages, DPSESSIONDESC2,
  the Winsock SP data, TCP stream framing.
* ``dp8``: DirectPlay 8 connection frames, EnumQuery and EnumResponse.
* ``players``: DPLAYI_PACKEDPLAYER and DPLAYI_SUPERPACKEDPLAYER.
* ``dplay``: the classifier and ``parse_dplay`` in both port contexts (DP4 tested first).
* ``pcap``: ``ipxbridge decode --pcap`` on an arbitrary file.
* ``reassembly``: a stream of PACKET2_DATA fragments from four sources against small budgets.
* ``inspect``: the inspector (classify, reassemble, game list) on a stream of payloads.
* ``switch``: the IPX switch on a stream of datagrams from clients, a peer and strangers,
  coalesced IPXWrapper batches among them.
* ``relay``: the broadcast relay's ``RelayPolicy.decide`` on a stream of datagrams, in both
  source modes (``preserve`` and ``rewrite``, which edits DirectPlay 4 SOCKADDRs).
* ``websocket``: a browser player's bytes: the opening handshake, then client frames fed to
  ``FrameReader`` in pieces of every size (the listener's two parsers of remote input).

Stream targets read their input as records (``Records``); the fuzzer learns the layout.
"""

import dataclasses
import json
import random
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from ipaddress import IPv4Network
from typing import Final, TypeVar
from uuid import UUID

from ipxbridge.commands import decode
from ipxbridge.games import builtin_games
from ipxbridge.policy.dplay_inspect import Inspector
from ipxbridge.policy.reassembly import REASSEMBLY_REASONS, Reassembler, ReassemblyLimits
from ipxbridge.policy.relay import (
    LIMITED_BROADCAST,
    RELAY_DROP_REASONS,
    Egress,
    RelayPolicy,
    RelaySettings,
    SourceMode,
)
from ipxbridge.policy.sessions import SessionTable
from ipxbridge.policy.switch import (
    POLICY_DROP_REASONS,
    Address,
    Decision,
    IpxSwitch,
    Outcome,
    Port,
    SwitchSettings,
)
from ipxbridge.wire import directplay as dp
from ipxbridge.wire import ethernet, ipx, ipxwrapper
from ipxbridge.wire import websocket as ws
from ipxbridge.wire.dplay8 import is_dp8_port
from ipxbridge.wire.errors import WIRE_REASONS, WireError
from ipxbridge.wire.ipx import keyed_nodes
from ipxbridge.wire.pcap import PCAP_REASONS, PcapError
from tests.unit.vectors import VECTORS_INTERFACES, VECTORS_PCAP, load_vectors

T = TypeVar("T")

GAMES: Final = builtin_games()


def attempt(parse: Callable[[bytes], T], data: bytes) -> T | None:
    """``parse(data)``, or None for a DPlayError of the closed reason set."""
    try:
        return parse(data)
    except dp.DPlayError as exc:
        assert exc.reason in dp.DPLAY_REASONS, exc.reason
        return None


class Records:
    """Reads a fuzz input as a sequence of small records; short reads give zeros."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def more(self) -> bool:
        return self.at < len(self.data)

    def take(self, n: int) -> bytes:
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk.ljust(n, b"\0")

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "little")

    def blob(self, limit: int) -> bytes:
        size = self.u16() % (limit + 1)
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk


def record(*fields: bytes) -> bytes:
    """Seed helper: concatenate record fields."""
    return b"".join(fields)


def blob(data: bytes) -> bytes:
    """Seed helper: a ``Records.blob`` field."""
    return struct.pack("<H", len(data)) + data


# --- decoders ---------------------------------------------------------------------------------


def check_ipx(data: bytes) -> None:
    try:
        header, payload = ipx.parse_packet(data)
    except WireError as exc:
        assert exc.reason in WIRE_REASONS, exc.reason
    else:
        rebuilt = ipx.build_packet(
            dst_net=header.dst_net,
            dst_node=header.dst_node,
            dst_socket=header.dst_socket,
            src_net=header.src_net,
            src_node=header.src_node,
            src_socket=header.src_socket,
            packet_type=header.packet_type,
            hops=header.hops,
            payload=payload,
        )
        assert rebuilt == data
        assert decode.looks_like_ipx(data)
    out = decode.decode_ipx(data, GAMES)
    json.dumps(out)
    assert out["ok"] or out["error"] in WIRE_REASONS, out


def check_ethernet(data: bytes) -> None:
    """A frame off an AF_PACKET socket: one error of the closed set, or an IPX packet that
    fits its framing and builds back into a frame that parses the same."""
    try:
        frame = ethernet.parse_frame(data)
    except ethernet.EthernetError as exc:
        assert exc.reason in ethernet.ETHERNET_REASONS, exc.reason
        return
    packet = bytes(frame.packet)
    assert ipx.HEADER_LEN <= len(packet) <= ethernet.max_ipx_len(frame.framing)
    again = ethernet.parse_frame(
        ethernet.build_frame(frame.dst_mac, frame.src_mac, frame.framing, packet)
    )
    assert (again.dst_mac, again.src_mac, again.framing) == (
        frame.dst_mac,
        frame.src_mac,
        frame.framing,
    )
    assert bytes(again.packet) == packet


def check_ipxwrapper(data: bytes) -> None:
    """A datagram on UDP 54792: one error of the closed set, or a packet that builds back
    byte for byte, converts to an IPX packet our IPX codec accepts, and, if coalesced,
    splits into IPX packets or fails with a closed reason."""
    try:
        packet = ipxwrapper.parse_ipxwrapper(data)
    except ipxwrapper.IpxWrapperError as exc:
        assert exc.reason in WIRE_REASONS, exc.reason
        return
    assert ipxwrapper.build_ipxwrapper(packet) == data
    header, _payload = ipx.parse_packet(ipxwrapper.ipxwrapper_to_ipx(packet))
    assert (header.src_node, header.src_socket) == (packet.src_node, packet.src_socket)
    if packet.is_coalesced:
        try:
            inner = ipxwrapper.unpack_coalesced(packet.data)
        except ipxwrapper.CoalescedError as exc:
            assert exc.reason in ipxwrapper.COALESCED_REASONS, exc.reason
            assert exc.reason in WIRE_REASONS, exc.reason
        else:
            assert b"".join(inner) == bytes(packet.data)
            assert len(inner) <= ipxwrapper.COALESCED_MAX_PACKETS
            for one in inner:
                assert not ipx.parse_header(one).is_coalesced


def check_dp4(data: bytes) -> None:
    attempt(dp.parse_session_desc, data)
    attempt(dp.parse_winsock_sp_data, data)
    split = attempt(dp.split_dp4_stream, data)
    if split is not None:
        messages, rest = split
        assert b"".join(messages) + rest == data
    for msg in (
        attempt(dp.parse_dp4, data),
        attempt(lambda d: dp.parse_dp4(d, bare=True), data),
        attempt(dp.parse_dp4_player, data),
    ):
        if msg is not None:
            assert dp.build_dp4_message(msg) == data


def check_dp8(data: bytes) -> None:
    frame = attempt(dp.parse_dp8_frame, data)
    if frame is not None:
        assert dp.build_dp8_frame(frame) == data
    query = attempt(dp.parse_dp8_enum_query, data)
    if query is not None:
        assert dp.build_dp8_enum_query(query) == data
    response = attempt(dp.parse_dp8_enum_response, data)
    if response is not None:
        # Padding and the order of the variable parts are the sender's: a fixed point only.
        assert dp.parse_dp8_enum_response(dp.build_dp8_enum_response(response)) == response


def check_players(data: bytes) -> None:
    player = attempt(dp.parse_packed_player, data)
    if player is not None:
        assert data.startswith(dp.build_packed_player(player))
    spp = attempt(dp.parse_super_packed_player, data)
    if spp is not None:
        found, used = spp
        assert dp.build_super_packed_player(found) == data[:used]


def check_dplay(data: bytes) -> None:
    for dp8_context in (False, True):
        kind = dp.classify(data, dp8_context=dp8_context)
        assert kind is dp.classify(memoryview(data), dp8_context=dp8_context)
        msg = attempt(partial(dp.parse_dplay, dp8_context=dp8_context), data)
        if kind is dp.DPlayKind.NONE:
            assert msg is None
        if isinstance(msg, dp.DP4Message | dp.DP8Frame | dp.DP8EnumQuery):
            assert dp.build_dplay(msg) == data
        if msg is not None:
            json.dumps(decode.dplay_json(msg, GAMES))
    for item in decode.decode_hex(data.hex(" "), GAMES):
        json.dumps(item)


def check_pcap(data: bytes) -> None:
    try:
        frames = decode.decode_pcap(data, GAMES)
    except PcapError as exc:
        assert exc.reason in PCAP_REASONS, exc.reason
        return
    json.dumps(frames)
    for frame in frames:
        assert isinstance(frame["frame"], int)
        assert frame["ok"] or frame["error"], frame


# --- stateful targets -------------------------------------------------------------------------

SOURCES: Final = ("a", "b", "c", "d")
GUIDS: Final = tuple(UUID(int=i + 1) for i in range(4))
SMALL: Final = ReassemblyLimits(
    max_message_size=1024,
    max_fragments=16,
    max_messages_per_source=3,
    source_budget=1536,
    global_budget=4096,
    expiry=15.0,
)


def fragments(data: bytes) -> Iterator[tuple[str, dp.PacketFragment, float]]:
    """Records: source, guid, index, total, size, offset, time step, data."""
    r = Records(data)
    now = 0.0
    while r.more():
        source = SOURCES[r.u8() % len(SOURCES)]
        guid = GUIDS[r.u8() % len(GUIDS)]
        index, total, size, offset = r.u8(), r.u8(), r.u16(), r.u16()
        now += r.u8() / 8  # up to ~32 s per step: crosses the 15 s expiry
        body = r.blob(512)
        frag = dp.PacketFragment(0x30, guid, index, len(body), offset, total, size, 0, body)
        yield source, frag, now


def check_reassembly(data: bytes) -> None:
    r = Reassembler(SMALL)
    for source, frag, now in fragments(data):
        result = r.add(source, frag, now)
        assert result.message is None or result.refused is None
        if result.refused is not None:
            assert result.refused in REASSEMBLY_REASONS, result.refused
        if result.message is not None:
            assert len(result.message) == frag.message_size
        # Rule 1 of reassembly.py: held bytes within budget after every fragment.
        assert 0 <= r.held <= SMALL.global_budget
        assert len(r) <= len(SOURCES) * SMALL.max_messages_per_source
        if now > 60:
            r.expire(now)
    r.expire(1e9)
    assert (r.held, len(r)) == (0, 0)


def check_inspect(data: bytes) -> None:
    """Records: transport, source, time step, payload. Rule 1 of dplay_inspect.py: never raises."""
    table = SessionTable(GAMES, expiry=60.0, max_sessions=8)
    inspector = Inspector(table, Reassembler(SMALL))
    r = Records(data)
    now = 0.0
    while r.more():
        mode = r.u8()
        transport = ("ipx", "udp", "tcp")[mode % 3]
        source = SOURCES[(mode >> 2) % len(SOURCES)]
        now += r.u8() / 4
        payload = r.blob(2048)
        inspector.inspect(
            payload,
            transport=transport,
            host=f"{source}:1",
            source=source,
            now=now,
            dp8_context=bool(mode & 0x80),
        )
        assert set(inspector.errors) <= {*dp.DPLAY_REASONS, *REASSEMBLY_REASONS}
        assert len(table) <= table.max_sessions
        assert inspector.reassembler.held <= SMALL.global_budget
        if mode & 0x40:
            inspector.tick(now)
    inspector.tick(now + 1e6)
    assert len(table) == 0
    assert inspector.reassembler.held == 0


SERVER: Final[Address] = ("192.0.2.1", 213)
PEER: Final[Address] = ("198.51.100.7", 213)
CLIENTS: Final[tuple[Address, ...]] = (("10.0.0.10", 5000), ("10.0.0.11", 5001))
NEWCOMER: Final[Address] = ("10.0.0.20", 5002)  # may register (clients_allow)
STRANGER: Final[Address] = ("203.0.113.9", 6000)  # may not
ADDRESSES: Final = (*CLIENTS, PEER, STRANGER, NEWCOMER)
SWITCH_SETTINGS: Final = SwitchSettings(
    max_clients=3,
    max_learned_nodes=8,
    dedup_max_entries=64,
    clients_allow=(IPv4Network("10.0.0.0/24"),),
    # Small limits, so that a few fuzzed datagrams reach them (rule 2)
    unverified_address_bytes_per_second=200.0,
    unverified_address_byte_burst=600,
    unverified_total_bytes_per_second=300.0,
    unverified_total_byte_burst=900,
)
DROP_REASONS: Final = frozenset({*WIRE_REASONS, *POLICY_DROP_REASONS})
NODE_FOR: Final = keyed_nodes(bytes(range(32)))  # the clients' nodes, the same every run


def datagrams(data: bytes) -> Iterator[tuple[Address, bytes, float]]:
    """Records: mode, time step, datagram. Mode bit 7 repairs checksum and length, so the
    fuzzer reaches the switching rules without first having to learn the IPX framing."""
    r = Records(data)
    now = 0.0
    while r.more():
        mode = r.u8()
        now += r.u8() / 4
        packet = bytearray(r.blob(1500))  # a batch over IPXWrapper's 1384 bytes too
        if mode & 0x80 and len(packet) >= ipx.HEADER_LEN:
            packet[0:4] = b"\xff\xff" + len(packet).to_bytes(2, "big")
        yield ADDRESSES[mode % len(ADDRESSES)], bytes(packet), now


@dataclass
class UnprovenBooks:
    """Bytes toward addresses that never proved they receive there (switch rule 2).

    The reflection bound as a token bucket full at 0 s implies it: by time ``now`` the
    bridge has sent one IPv4 address at most its burst plus its rate times ``now``, and all
    such addresses together at most the total's burst plus its rate times ``now``, whatever
    was sent to it, by whom, from how many spoofed ports.
    """

    sent: Counter[str] = dataclasses.field(default_factory=Counter)
    total: int = 0
    proven: set[Address] = dataclasses.field(default_factory=set)

    def check(self, switch: IpxSwitch, out: list[tuple[bytes, Port]], now: float) -> None:
        """Book ``out`` and check the bounds of ``switch.settings`` at ``now``."""
        cfg = switch.settings
        self.proven |= {a for a, c in switch.clients.items() if c.verified}
        for packet, to in out:
            if isinstance(to, tuple) and to not in self.proven and to not in switch.peers:
                self.sent[to[0]] += len(packet)
                self.total += len(packet)
                per_address = (
                    cfg.unverified_address_byte_burst
                    + cfg.unverified_address_bytes_per_second * now
                )
                total = (
                    cfg.unverified_total_byte_burst + cfg.unverified_total_bytes_per_second * now
                )
                assert self.sent[to[0]] <= per_address, (to, self.sent[to[0]], now)
                assert self.total <= total, (self.total, now)


def check_switch(data: bytes) -> None:
    """The switch never raises, gives every datagram exactly one known outcome, relays only
    to its own ports and never back to the ingress, changes nothing but the hop count,
    sends replies only to the sender (no reflection: docs/reliability.md R7, R8), and sends
    addresses that have not proved they receive no more than the reflection limit (R26). A
    coalesced batch is never forwarded as one: each of its packets gets a decision of its
    own, held to the same properties (policy/switch.py rule 1)."""
    switch = IpxSwitch(
        SWITCH_SETTINGS, (PEER,), lambda _a: ipx.dosbox_node(*SERVER), node_for=NODE_FOR
    )
    books = UnprovenBooks()
    for client in CLIENTS:
        registration = ipx.build_registration()
        books.check(switch, list(switch.handle(registration, client, 0.0).replies), 0.0)
    for src, packet, now in datagrams(data):
        before = {*switch.clients, *switch.peers}
        decision = switch.handle(packet, src, now)
        books.check(switch, emitted(decision), now)
        if src == STRANGER:
            assert decision.outcome is Outcome.DROPPED
        # A packet of a batch may go to a client the batch itself registered.
        ports = before | {*switch.clients, *switch.peers}
        check_decision(decision, packet, src, switch, ports)
        assert len(switch.clients) <= SWITCH_SETTINGS.max_clients
        assert switch.learned_nodes <= SWITCH_SETTINGS.max_learned_nodes
        ticked = switch.tick(now)
        for _ping, port in ticked:
            assert port in switch.clients
        books.check(switch, ticked, now)


def emitted(decision: Decision) -> list[tuple[bytes, Port]]:
    """Everything a decision sends: replies, copies, and those of a batch's packets."""
    out: list[tuple[bytes, Port]] = list(decision.replies)
    if decision.packet is not None:
        out += [(decision.packet, to) for to in decision.targets]
    for _inner, one in decision.inner:
        out += emitted(one)
    return out


def check_decision(
    decision: Decision,
    packet: bytes,
    src: Address,
    switch: IpxSwitch,
    ports: set[Address],
    *,
    in_batch: bool = False,
) -> None:
    """The properties of ``check_switch`` for one decision (and the packets of a batch)."""
    assert decision.outcome in Outcome
    if decision.outcome is Outcome.DROPPED:
        assert decision.detail in DROP_REASONS, decision.detail
        assert decision.packet is None
    for _reply, to in decision.replies:
        assert to == src
    if (decision.outcome, decision.detail) == (Outcome.CONTROL, "batch"):
        assert not in_batch  # a packet of a batch is never a batch
        assert ipx.parse_header(packet).is_coalesced
        assert decision.packet is None
        assert len(decision.inner) <= ipxwrapper.COALESCED_MAX_PACKETS
        assert b"".join(inner for inner, _ in decision.inner) == packet[ipx.HEADER_LEN :]
        for inner, one in decision.inner:
            check_decision(one, inner, src, switch, ports, in_batch=True)
    else:
        assert not decision.inner
    if decision.outcome is Outcome.FORWARDED:
        assert decision.packet is not None
        assert decision.targets
        assert src not in decision.targets
        assert set(decision.targets) <= ports
        header = ipx.parse_header(packet)
        assert not header.is_coalesced  # unpacked where it entered
        out = ipx.parse_header(decision.packet)
        assert decision.packet[5:] == packet[5:]
        # Hop byte: a peer's count + 1; a client's taken as 0 (docs/protocols.md 4.1).
        if src in switch.peers:
            assert out.hops == header.hops + 1
        else:
            assert out.hops == 1
        if decision.detail == "flooded":  # unknown unicast: never to a DOSBox client
            assert set(decision.targets) <= set(switch.peers)


RELAY_PLAN: Final = (
    Egress(2, "lanA", "lan", "10.0.1.1", "10.0.1.255", networks=("10.0.1.0/24",)),
    Egress(3, "lanB", "lan", "10.0.2.1", "10.0.2.255", networks=("10.0.2.0/24",)),
    Egress(4, "wg0", "p2p", "10.98.0.1", "", ("10.98.0.2", "10.98.0.3")),
)
RELAY_OWN: Final = frozenset(e.address for e in RELAY_PLAN)
RELAY_BCAST: Final = {2: frozenset({"10.0.1.255"}), 3: frozenset({"10.0.2.255"})}
RELAY_INGRESS: Final = (2, 3, 4, 9)  # 9: an interface that is not selected
RELAY_DST: Final = (LIMITED_BROADCAST, "10.0.1.255", "10.0.2.255", "10.98.0.1", "10.0.1.7")
RELAY_SRC: Final[tuple[Address, ...]] = (
    ("10.0.1.50", 2300),
    ("10.98.0.2", 5000),
    ("10.0.2.1", 47624),  # the bridge's own address: its own copy coming back
)


def relay_datagrams(data: bytes) -> Iterator[tuple[int, str, Address, int, int, int, float, bytes]]:
    """Records: mode, TTL, TOS, port, time step, payload. Mode picks ingress, destination and
    source from small sets, so the fuzzer spends its time on the payload and the loop filter."""
    r = Records(data)
    now = 0.0
    while r.more():
        mode, ttl, tos, port = r.u8(), r.u8(), r.u8(), r.u16()
        now += r.u8() / 8
        ingress = RELAY_INGRESS[mode % len(RELAY_INGRESS)]
        dst = RELAY_DST[(mode >> 2) % len(RELAY_DST)]
        src = RELAY_SRC[(mode >> 5) % len(RELAY_SRC)]
        yield ingress, dst, src, port, ttl, tos, now, r.blob(1500)


def check_relay(data: bytes) -> None:
    """In both source modes, ``decide`` never raises (policy/relay.py rule 7) and gives one
    decision per datagram: a reason of the closed set and no copies, or copies out of every
    other interface only, TTL - 1, the payload unchanged except, in rewrite mode, the DP4
    SOCKADDR's address, which then names the player."""
    for mode in SourceMode:
        policy = RelayPolicy(RelaySettings(mode, dedup_max_entries=64))
        policy.set_plan(RELAY_PLAN, RELAY_OWN, RELAY_BCAST)
        targets = {e.index: {e.broadcast} if e.role == "lan" else set(e.peers) for e in RELAY_PLAN}
        for ingress, dst, src, port, ttl, tos, now, payload in relay_datagrams(data):
            d = policy.decide(
                payload,
                src=src,
                dst_ip=dst,
                dst_port=port,
                ingress=ingress,
                ttl=ttl,
                now=now,
                tos=tos,
            )
            if d.kind is not None:  # handed to the inspector in place of its own classify
                assert d.kind is dp.classify(payload, dp8_context=is_dp8_port(port)), d.kind
            if d.drop_reason is not None:
                assert d.drop_reason in RELAY_DROP_REASONS, d.drop_reason
                assert not d.copies
                continue
            assert d.copies
            assert mode is SourceMode.REWRITE or not d.sockaddr_rewritten
            for copy in d.copies:
                assert copy.egress.index != ingress
                assert copy.dst in targets[copy.egress.index]
                assert copy.ttl == ttl - 1
                if d.sockaddr_rewritten:
                    assert copy.payload[:8] + copy.payload[12:] == payload[:8] + payload[12:]
                    assert copy.payload[8:12] == socket_bytes(src[0])
                else:
                    assert copy.payload == payload
            if now > 30:
                policy.purge(now)


def socket_bytes(address: str) -> bytes:
    return bytes(int(part) for part in address.split("."))


# --- seeds ------------------------------------------------------------------------------------


def vector_seeds() -> list[bytes]:
    """The shared vectors, plus the IPX payloads of the two IPX vectors."""
    vectors = load_vectors()
    found = [v.data for v in vectors.values()]
    return [*found, vectors["c"].data[30:], vectors["c2"].data[30:]]


def pcap_seeds() -> list[bytes]:
    whole = VECTORS_PCAP.read_bytes()
    pcapng = VECTORS_INTERFACES.read_bytes()  # four interfaces, three link types
    return [whole, whole[:24], whole[:100], pcapng, pcapng[:300]]


def fragment_seeds() -> list[bytes]:
    """An 8-fragment message from source 0, and a first fragment claiming too much."""
    message = bytes(range(256)) * 2
    parts = [
        record(b"\0\0", bytes((i, 8)), struct.pack("<HH", 512, i * 64), b"\x08", blob(chunk))
        for i, chunk in enumerate(message[j : j + 64] for j in range(0, 512, 64))
    ]
    claim = record(b"\1\1\0\x10", struct.pack("<HH", 0xFFFF, 0), b"\0", blob(b"x" * 32))
    return [b"".join(parts), claim]


def payload_seeds() -> list[bytes]:
    """Each vector as one inspector record, in every transport; and the 'Armada LAN' reply
    cut into three PACKET2_DATA fragments over IPX, so reassembly feeds the game list."""
    out = [
        b"".join(record(bytes((mode,)), b"\x04", blob(data)) for mode in (0, 1, 0x82))
        for data in vector_seeds()
    ]
    reply = dp.parse_dp4(load_vectors()["b"].data)
    message = dp.build_dp4_message(dataclasses.replace(reply, header=None))
    pieces = [message[i : i + 40] for i in range(0, len(message), 40)]
    frags = [
        dp.build_packet_fragment(
            dp.PacketFragment(
                0x30, GUIDS[0], i, len(piece), 40 * i, len(pieces), len(message), 0, piece
            ),
            bare=True,
        )
        for i, piece in enumerate(pieces)
    ]
    out.append(b"".join(record(b"\0", b"\x04", blob(f)) for f in frags))
    return out


def datagram_seeds() -> list[bytes]:
    """Broadcasts, unicasts and pings from the clients and the peer; registrations by a
    stranger (refused) and a newcomer; the vectors' IPX packets."""
    a, b = (NODE_FOR(c) for c in CLIENTS)
    far = ipx.rfc1234_node("172.16.0.5")
    packets = [
        (
            0,
            ipx.build_packet(
                dst_node=ipx.BROADCAST_NODE,
                dst_socket=0x4000,
                src_node=a,
                src_socket=0x4000,
                payload=b"hello",
            ),
        ),
        (1, ipx.build_packet(dst_node=a, dst_socket=0x4000, src_node=b, src_socket=0x4001)),
        (
            2,
            ipx.build_packet(
                dst_node=b,
                dst_socket=0x4000,
                src_node=far,
                src_socket=0x4000,
                hops=3,
                payload=b"from afar",
            ),
        ),
        (0, ipx.build_ping(a)),
        (3, ipx.build_registration()),
        (4, ipx.build_registration()),
    ]
    vectors = load_vectors()
    packets += [(2, vectors["c"].data), (0, vectors["c2"].data)]
    # Coalesced batches (docs/protocols.md 6): from a client (a broadcast, a unicast, a filtered
    # socket, a spoofed source, the same broadcast again), and from the peer.
    inner = [
        ipx.build_packet(
            dst_node=ipx.BROADCAST_NODE, dst_socket=0x4545, src_node=a, src_socket=0x4545
        ),
        ipx.build_packet(dst_node=b, dst_socket=0x4545, src_node=a, src_socket=0x4545),
        ipx.build_packet(dst_node=b, dst_socket=0x0452, src_node=a, src_socket=0x0452),
        ipx.build_packet(dst_node=b, dst_socket=0x4545, src_node=far, src_socket=0x4545),
    ]
    packets += [(0, coalesced(a, [*inner, inner[0]])), (2, coalesced(far, [inner[3]]))]
    return [b"".join(record(bytes((mode,)), b"\x02", blob(p)) for mode, p in packets)]


def coalesced(src_node: bytes, inner: list[bytes]) -> bytes:
    """A batch as IPXWrapper sends it: source socket 0, type 2, the packets as its data."""
    return ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=0,
        src_node=src_node,
        src_socket=0,
        packet_type=ipx.PACKET_TYPE_COALESCED,
        payload=b"".join(inner),
    )


def relay_seeds() -> list[bytes]:
    """A DP4 EnumSessions with SOCKADDR 0.0.0.0 (rewritten), with family 6 and with non-zero
    sin_zero (dropped as bad_sockaddr), naming an address (untouched); the vectors; a loop copy
    (same bytes, lower TTL), unicast, TTL 1 and an own packet."""
    enum = dp.build_enum_sessions(
        dp.EnumSessions(GUIDS[0], 0x81, None), sockaddr=dp.SockAddr(2, 2300, "0.0.0.0")
    )
    payloads = [
        enum,
        enum[:4] + b"\x06\x00" + enum[6:],
        enum[:19] + b"\x01" + enum[20:],
        enum[:8] + bytes((10, 0, 1, 50)) + enum[12:],
        *vector_seeds(),
    ]

    def rec(mode: int, ttl: int, payload: bytes, port: int = 47624) -> bytes:
        return record(bytes((mode, ttl, 0)), struct.pack("<H", port), b"\x01", blob(payload))

    stream = [rec(0, 64, p) for p in payloads]  # lanA, limited broadcast, the player
    stream += [
        rec(1, 63, enum),  # the copy back on lanB one hop later: a loop copy
        rec(0 | 4 << 2, 64, b"x"),  # unicast
        rec(0, 1, b"y"),  # TTL 1
        rec(2 | 3 << 2 | 1 << 5, 64, payloads[0], 6073),  # from the WireGuard peer
        rec(0 | 2 << 5, 64, b"z"),  # the bridge's own address
    ]
    return [b"".join(stream), *(rec(0, 64, p) for p in payloads[:4])]


def ipx_packet_seeds() -> list[bytes]:
    """The IPX vectors' packets that our IPX codec accepts."""
    out = []
    for data in vector_seeds():
        try:
            ipx.parse_packet(data)
        except WireError:
            continue
        out.append(data)
    assert out, "no IPX packet among the vectors"
    return out


def ethernet_seeds() -> list[bytes]:
    """Each IPX vector in each of the four framings, broadcast from a station's MAC."""
    station = bytes.fromhex("02004c4f4f50")
    return [
        ethernet.build_frame(ethernet.BROADCAST_MAC, station, framing, packet)
        for packet in ipx_packet_seeds()
        for framing in ethernet.Framing
        if framing is not ethernet.Framing.RAW_8023 or packet[:2] == b"\xff\xff"
    ]


def ipxwrapper_seeds() -> list[bytes]:
    """Each IPX vector as IPXWrapper sends it, and all of them coalesced into one datagram."""
    packets = ipx_packet_seeds()
    singles = [ipxwrapper.build_ipxwrapper(ipxwrapper.ipx_to_ipxwrapper(p)) for p in packets]
    first = ipxwrapper.ipx_to_ipxwrapper(packets[0])
    batch = b""
    for packet in packets:  # whole packets only, within IPXWrapper's 1384 bytes
        if len(batch) + len(packet) <= ipxwrapper.COALESCED_MAX_SIZE:
            batch += packet
    coalesced = dataclasses.replace(
        first, packet_type=int(ipxwrapper.IpxWrapperMagic.COALESCED), src_socket=0, data=batch
    )
    return [*singles, ipxwrapper.build_ipxwrapper(coalesced)]


@dataclass(frozen=True, slots=True)
class Target:
    check: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]


def check_websocket(data: bytes) -> None:
    """Handshake: a ``Handshake`` or a ``WebSocketError`` with an HTTP status. Frames: whole
    messages no longer than ``MAX_MESSAGE`` whatever the cut, or a ``WebSocketError`` with a
    close code of RFC 6455 §7.4.1; the same bytes give the same messages however they are
    split."""
    try:
        ws.parse_handshake(data[: ws.MAX_HANDSHAKE])
    except ws.WebSocketError as exc:
        assert exc.code in (400, 426), exc.code
    whole = _read_frames(data, len(data) or 1)
    for cut in (1, 3, 7, 64):
        assert _read_frames(data, cut) == whole, cut


def _read_frames(data: bytes, cut: int) -> list[tuple[int, bytes]] | int:
    """The messages of ``data`` fed ``cut`` bytes at a time, or the close code it ends with."""
    reader = ws.FrameReader(max_message=4096)
    out: list[tuple[int, bytes]] = []
    try:
        for at in range(0, len(data), cut):
            out += reader.feed(data[at : at + cut])
    except ws.WebSocketError as exc:
        assert exc.code in (ws.CLOSE_PROTOCOL_ERROR, ws.CLOSE_TOO_BIG), exc.code
        return exc.code
    for opcode, payload in out:
        assert opcode in (ws.OP_TEXT, ws.OP_BINARY, ws.OP_CLOSE, ws.OP_PING, ws.OP_PONG)
        assert len(payload) <= 4096
    return out


def client_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """A masked client frame (RFC 6455 §5.2, §5.3), the mask fixed so seeds are stable."""
    mask = b"\x37\xfa\x21\x3d"
    size = len(payload)
    first = (0x80 if fin else 0) | opcode
    if size < 126:
        head = bytes((first, 0x80 | size))
    elif size < 1 << 16:
        head = bytes((first, 0x80 | 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((first, 0x80 | 127)) + size.to_bytes(8, "big")
    return head + mask + ws.unmask(mask, payload)


def websocket_seeds() -> list[bytes]:
    """A browser's handshake; a registration, a fragmented message with a ping inside it, a
    text frame, a long frame and a close."""
    handshake = (
        b"GET /ipx/default HTTP/1.1\r\nHost: 10.0.0.1:1900\r\nConnection: Upgrade\r\n"
        b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://jsdos.localhost\r\n"
        b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
    )
    frames = b"".join(
        (
            client_frame(ws.OP_BINARY, ipx.build_registration()),
            client_frame(ws.OP_BINARY, b"first half ", fin=False),
            client_frame(ws.OP_PING, b"are you there"),
            client_frame(ws.OP_CONTINUATION, b"second half"),
            client_frame(ws.OP_TEXT, b"hello"),
            client_frame(ws.OP_BINARY, bytes(300)),
            client_frame(ws.OP_CLOSE, b"\x03\xe8"),
        )
    )
    return [handshake, frames]


TARGETS: Final[dict[str, Target]] = {
    "ipx": Target(check_ipx, vector_seeds),
    "dp4": Target(check_dp4, vector_seeds),
    "dp8": Target(check_dp8, vector_seeds),
    "players": Target(check_players, vector_seeds),
    "dplay": Target(check_dplay, vector_seeds),
    "pcap": Target(check_pcap, pcap_seeds),
    "reassembly": Target(check_reassembly, fragment_seeds),
    "inspect": Target(check_inspect, payload_seeds),
    "switch": Target(check_switch, datagram_seeds),
    "relay": Target(check_relay, relay_seeds),
    "ethernet": Target(check_ethernet, ethernet_seeds),
    "ipxwrapper": Target(check_ipxwrapper, ipxwrapper_seeds),
    "websocket": Target(check_websocket, websocket_seeds),
}


def mutations(seeds: list[bytes], count: int, seed: int = 1234) -> Iterator[bytes]:
    """The seeds, then ``count`` deterministic mutations of them (byte flips, 32-bit values,
    0xFF/0xFE fills as docs/reliability.md 2 advises, truncations, insertions)."""
    rng = random.Random(seed)
    yield from seeds
    for _ in range(count):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            where = rng.randrange(len(data) + 1)
            roll = rng.random()
            if roll < 0.35 and data:
                data[min(where, len(data) - 1)] = rng.randrange(256)
            elif roll < 0.6:
                data[where : where + 4] = rng.randrange(1 << 32).to_bytes(4, "little")
            elif roll < 0.7:
                data[where : where + 4] = bytes([rng.choice((0xFF, 0xFE))]) * 4
            elif roll < 0.85:
                del data[where:]
            else:
                data[where:where] = rng.randbytes(rng.randint(1, 8))
        yield bytes(data)
