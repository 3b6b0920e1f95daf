"""Coalesced IPXWrapper batches are packets (policy/switch.py rule 1).

A batch is unpacked where it enters the switch, from a DOSBox-protocol client, an RFC 1234
peer or a segment, and each packet in it is switched as a lone packet from that port would
be. The batches here are written with ``struct`` from docs/protocols.md 6, not with the bridge's
codec: an outer IPX header with source socket 0 and packet type 2 whose data is complete IPX
packets (30-byte header, checksum 0xFFFF, Length = header + data) one after the other, at
most 1384 bytes of them. The books are checked through ``IpxEndpoint`` on real loopback
sockets.
"""

import asyncio
import logging
import socket
import struct
from collections.abc import Callable
from ipaddress import IPv4Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.io.ipx_endpoint import IpxEndpoint, open_udp_socket
from ipxbridge.obs.counters import IpxCounters
from ipxbridge.obs.metrics import IPX_DROP_REASONS
from ipxbridge.policy.switch import (
    POLICY_DROP_REASONS,
    Address,
    Decision,
    IpxSwitch,
    Outcome,
    PortKind,
    Segment,
    SwitchSettings,
)
from ipxbridge.wire.errors import WIRE_REASONS
from tests.unit.test_switch import NODE_FOR, SERVER_NODE, node, register, verify

# docs/protocols.md 3.1: checksum, length, transport control, type, dst net/node/socket,
# src net/node/socket; big-endian.
HEADER = struct.Struct("!HHBB4s6sH4s6sH")
BROADCAST = b"\xff" * 6
NET = bytes(4)
GAME = 0x4545

A: Address = ("10.0.0.11", 40001)
B: Address = ("10.0.0.12", 40002)
C: Address = ("10.0.0.13", 40003)
PEER: Address = ("192.0.2.50", 213)
HOST: Address = ("10.70.0.2", 213)  # an RFC 1234 host on a segment's subnet
ETH0 = Segment("eth0", PortKind.ETHERNET)
WRAP = Segment("wg0", PortKind.IPXWRAPPER)
RFC = Segment("lan0", PortKind.RFC1234)
NATIVE = bytes.fromhex("00a0c9123456")  # a station on eth0
FAR = bytes.fromhex("00a0c9abcdef")  # a station behind the peer


def raw(
    dst: bytes,
    src: bytes,
    payload: bytes = b"",
    *,
    sock: int = GAME,
    src_sock: int | None = None,
    ptype: int = 0,
    hops: int = 0,
    checksum: int = 0xFFFF,
    length: int | None = None,
) -> bytes:
    """An IPX packet, header packed by hand."""
    size = HEADER.size + len(payload) if length is None else length
    src_socket = sock if src_sock is None else src_sock
    head = HEADER.pack(checksum, size, hops, ptype, NET, dst, sock, NET, src, src_socket)
    return head + payload


def batch(src: bytes, inner: list[bytes], dst: bytes = BROADCAST) -> bytes:
    """A coalesced batch as IPXWrapper sends it (docs/protocols.md 6): source socket 0, type 2."""
    return raw(dst, src, b"".join(inner), sock=0, ptype=2)


def switch(**kw: object) -> IpxSwitch:
    """Verified clients A and B, a peer, and three segments."""
    sw = IpxSwitch(
        SwitchSettings(**kw),  # type: ignore[arg-type]
        (PEER,),
        lambda _addr: SERVER_NODE,
        segments=(ETH0, WRAP, RFC),
        bridge_id=bytes.fromhex("020000000005"),
        node_for=NODE_FOR,
    )
    sw.udp_segment_for = lambda ip: RFC if ip.startswith("10.70.0.") else None
    for addr in (A, B):
        register(sw, addr)
        verify(sw, addr)
    return sw


def outcomes(decision: Decision) -> list[tuple[Outcome, str]]:
    return [(d.outcome, d.detail) for _, d in decision.inner]


def assert_batch(decision: Decision, inner: list[bytes]) -> None:
    """The datagram itself is control/batch; its packets are the ones sent, in order."""
    assert (decision.outcome, decision.detail) == (Outcome.CONTROL, "batch")
    assert (decision.packet, decision.targets, decision.replies) == (None, (), ())
    assert [p for p, _ in decision.inner] == inner


# --- a good batch from each kind of port ---------------------------------------------------


def test_a_client_batch_forwards_each_packet_as_a_lone_packet() -> None:
    sw = switch()
    inner = [raw(BROADCAST, node(A), b"one", hops=9), raw(node(B), node(A), b"two")]
    d = sw.handle(batch(node(A), inner), A, 1.0)
    assert_batch(d, inner)
    (_, first), (_, second) = d.inner
    assert (first.outcome, first.detail) == (Outcome.FORWARDED, "broadcast")
    assert set(first.targets) == {B, PEER, ETH0, WRAP, RFC}
    # each leaves as a plain packet: a client's hop byte counts from 0 (rule 6)
    assert first.packet == inner[0][:4] + b"\x01" + inner[0][5:]
    assert (second.outcome, second.detail, second.targets) == (Outcome.FORWARDED, "unicast", (B,))
    assert second.packet == inner[1][:4] + b"\x01" + inner[1][5:]
    assert first.header is not None  # inspected as a lone packet would be


def test_the_outer_header_of_a_client_batch_is_not_what_is_checked() -> None:
    # IPXWrapper's outer header carries the sender's node; one with a zero (or any) node is
    # unpacked the same, since the packets inside are what is switched.
    for outer_src in (bytes(6), node(A), node(B)):
        sw = switch()
        inner = [raw(BROADCAST, node(A), b"x")]
        assert outcomes(sw.handle(batch(outer_src, inner), A, 1.0)) == [
            (Outcome.FORWARDED, "broadcast")
        ]


def test_a_peer_batch_keeps_the_hop_count_of_each_packet() -> None:
    sw = switch()
    inner = [raw(BROADCAST, FAR, b"far", hops=3), raw(BROADCAST, FAR, b"old", hops=15)]
    d = sw.handle(batch(FAR, inner), PEER, 1.0)
    assert_batch(d, inner)
    assert outcomes(d) == [(Outcome.FORWARDED, "broadcast"), (Outcome.DROPPED, "hop_limit")]
    packet = d.inner[0][1].packet
    assert packet is not None
    assert packet[4] == 4
    assert PEER not in d.inner[0][1].targets
    # the node behind the peer was learned from the packet inside
    d = sw.handle(raw(FAR, node(A), b"reply"), A, 2.0)
    assert (d.outcome, d.targets) == (Outcome.FORWARDED, (PEER,))


def test_a_peer_batch_carrying_a_local_node_is_a_loop() -> None:
    sw = switch()
    d = sw.handle(batch(FAR, [raw(BROADCAST, node(A), b"came round")]), PEER, 1.0)
    assert outcomes(d) == [(Outcome.DROPPED, "loop")]


@pytest.mark.parametrize("segment", [ETH0, WRAP])
def test_a_segment_batch_forwards_each_packet(segment: Segment) -> None:
    sw = switch()
    inner = [raw(BROADCAST, NATIVE, b"lan"), raw(node(A), NATIVE, b"to A")]
    d = sw.handle_segment(segment, batch(NATIVE, inner), 1.0)
    assert_batch(d, inner)
    assert outcomes(d) == [(Outcome.FORWARDED, "broadcast"), (Outcome.FORWARDED, "unicast")]
    assert segment not in d.inner[0][1].targets
    assert d.inner[1][1].targets == (A,)
    # learned behind the segment, from the packet inside
    d = sw.handle(raw(NATIVE, node(B), b"back"), B, 2.0)
    assert d.targets == (segment,)


def test_a_batch_from_an_rfc1234_host_on_a_segment() -> None:
    sw = switch()
    host_node = b"\x00\x00" + socket.inet_aton(HOST[0])
    inner = [raw(BROADCAST, host_node, b"from the subnet")]
    d = sw.handle(batch(host_node, inner), HOST, 1.0)
    assert outcomes(d) == [(Outcome.FORWARDED, "broadcast")]
    assert RFC not in d.inner[0][1].targets


def test_the_biggest_batch_holds_46_packets() -> None:
    sw = switch()
    inner = [raw(BROADCAST, node(A), src_sock=0x4000 + i) for i in range(46)]
    assert len(b"".join(inner)) == 1380
    d = sw.handle(batch(node(A), inner), A, 1.0)
    assert len(d.inner) == 46
    assert {o for o, _ in outcomes(d)} == {Outcome.FORWARDED}


def test_an_empty_batch_is_a_batch_of_nothing() -> None:
    d = switch().handle(batch(node(A), []), A, 1.0)
    assert_batch(d, [])


# --- malformed batches: dropped whole, with the reason ------------------------------------

GOOD = raw(BROADCAST, FAR, b"good")
MALFORMED = {
    "batch_truncated": [GOOD, GOOD[:29]],  # ends inside a header
    "batch_truncated ": [GOOD, raw(BROADCAST, FAR, b"x", length=40)],  # past the end
    "batch_bad_length": [GOOD, raw(BROADCAST, FAR, length=29)],
    "batch_bad_length ": [raw(BROADCAST, FAR, length=0)],
    "batch_bad_checksum": [GOOD, raw(BROADCAST, FAR, b"x", checksum=0)],
    "batch_nested": [GOOD, batch(FAR, [GOOD])],
    "batch_nested ": [GOOD, raw(BROADCAST, FAR, sock=2, src_sock=0, ptype=1)],  # SPX lookup
    "batch_too_large": [GOOD, raw(BROADCAST, FAR, bytes(1384 - 34 - 30 + 1))],
}


@pytest.mark.parametrize("reason", list(MALFORMED))
@pytest.mark.parametrize("ingress", ["client", "peer", "segment"])
def test_a_malformed_batch_is_dropped_with_its_reason(reason: str, ingress: str) -> None:
    sw = switch()
    datagram = batch(FAR, MALFORMED[reason])
    if ingress == "segment":
        d = sw.handle_segment(WRAP, datagram, 1.0)
    else:
        d = sw.handle(datagram, A if ingress == "client" else PEER, 1.0)
    assert (d.outcome, d.detail) == (Outcome.DROPPED, reason.strip())
    assert (d.packet, d.targets, d.replies, d.inner) == (None, (), (), ())
    # Nothing of it was switched: the good packet at its head, from another port, is new.
    assert sw.handle_segment(ETH0, GOOD, 1.1).outcome is Outcome.FORWARDED


def test_the_batch_reasons_are_in_the_closed_sets() -> None:
    reasons = {r.strip() for r in MALFORMED}
    assert reasons <= set(WIRE_REASONS)
    assert reasons <= IPX_DROP_REASONS  # exported from the start, at 0
    assert not reasons & set(POLICY_DROP_REASONS)


# --- each packet gets every check a lone packet gets -----------------------------------------


def test_packets_to_filtered_sockets_are_filtered() -> None:
    sw = switch()
    inner = [raw(BROADCAST, node(A), sock=s) for s in (0x451, 0x452, 0x453)]
    inner.append(raw(BROADCAST, node(A), b"game"))
    d = sw.handle(batch(node(A), inner), A, 1.0)
    assert outcomes(d) == [(Outcome.DROPPED, "filtered_socket")] * 3 + [
        (Outcome.FORWARDED, "broadcast")
    ]
    # the same from a segment and from a peer
    for decision in (
        sw.handle_segment(ETH0, batch(NATIVE, [raw(BROADCAST, NATIVE, sock=0x452)]), 2.0),
        sw.handle(batch(FAR, [raw(BROADCAST, FAR, sock=0x453)]), PEER, 2.0),
    ):
        assert outcomes(decision) == [(Outcome.DROPPED, "filtered_socket")]


def test_a_client_batch_must_carry_the_client_node() -> None:
    sw = switch()
    spoofed = [
        raw(BROADCAST, node(B), b"as B"),
        raw(BROADCAST, NATIVE, b"as a station"),
        raw(BROADCAST, bytes(6), b"as nobody"),
    ]
    d = sw.handle(batch(node(A), [*spoofed, raw(BROADCAST, node(A), b"as A")]), A, 1.0)
    assert outcomes(d) == [(Outcome.DROPPED, "spoofed_source")] * 3 + [
        (Outcome.FORWARDED, "broadcast")
    ]


def test_duplicates_inside_and_across_batches_are_dropped() -> None:
    sw = switch()
    one = raw(BROADCAST, FAR, b"once", hops=1)
    further = one[:4] + b"\x02" + one[5:]  # the same packet, one hop on: a loop copy
    d = sw.handle(batch(FAR, [one, further]), PEER, 1.0)
    assert outcomes(d) == [(Outcome.FORWARDED, "broadcast"), (Outcome.DROPPED, "duplicate")]
    # the same packet through another port, in a batch and alone
    d = sw.handle_segment(ETH0, batch(FAR, [one]), 1.1)
    assert outcomes(d) == [(Outcome.DROPPED, "duplicate")]
    assert sw.handle_segment(WRAP, one, 1.2).detail == "duplicate"
    # and a lone packet first, then its copy in a batch from another port
    lone = raw(BROADCAST, NATIVE, b"first alone")
    assert sw.handle_segment(ETH0, lone, 2.0).outcome is Outcome.FORWARDED
    assert outcomes(sw.handle(batch(NATIVE, [lone]), PEER, 2.1)) == [(Outcome.DROPPED, "duplicate")]


def test_the_reflection_limit_is_spent_per_packet() -> None:
    # C has not proved it receives: its address may get 600 bytes (less its 30-byte reply,
    # and copies leave 60 for a probe and a reply): four 151-byte packets, then nothing.
    sw = switch(unverified_address_bytes_per_second=0.0, unverified_address_byte_burst=700)
    register(sw, C)
    inner = [raw(BROADCAST, node(A), bytes((i,)) * 121) for i in range(6)]
    d = sw.handle(batch(node(A), inner), A, 1.0)
    assert [C in one.targets for _, one in d.inner] == [True] * 4 + [False] * 2
    assert [one.held for _, one in d.inner] == [0] * 4 + [1] * 2
    assert {o for o, _ in outcomes(d)} == {Outcome.FORWARDED}  # B and the rest still get it


def test_a_batch_from_a_stranger_is_refused_whole() -> None:
    sw = switch(clients_allow=(IPv4Network("10.0.0.0/24"),))
    d = sw.handle(batch(bytes(6), [GOOD] * 3), ("203.0.113.9", 5000), 1.0)
    assert (d.outcome, d.detail, d.inner) == (Outcome.DROPPED, "not_allowed", ())
    d = sw.handle(batch(bytes(6), [GOOD] * 3), ("10.0.0.99", 0), 1.0)
    assert (d.outcome, d.detail, d.inner) == (Outcome.DROPPED, "source_port_zero", ())
    # an address that may register but has not: each packet is judged as a lone one
    d = sw.handle(batch(bytes(6), [GOOD] * 3), ("10.0.0.99", 5000), 1.0)
    assert outcomes(d) == [(Outcome.DROPPED, "unregistered")] * 3


# --- the property: a batch is its packets, sent alone --------------------------------------


def kinds() -> list[Callable[[int], bytes]]:
    """Packets a client may put in a batch: each tagged so the fuzzer can repeat one."""
    return [
        lambda t: raw(BROADCAST, node(A), bytes((t,))),
        lambda t: raw(node(B), node(A), bytes((t,))),
        lambda t: raw(node(C), node(A), bytes((t,))),
        lambda t: raw(NATIVE, node(A), bytes((t,))),
        lambda t: raw(BROADCAST, node(B), bytes((t,))),  # spoofed
        lambda t: raw(BROADCAST, node(A), bytes((t,)), sock=0x452),  # filtered
        lambda t: raw(BROADCAST, node(A), bytes((t,)), sock=2, src_sock=2),  # broadcast ping
        lambda t: raw(SERVER_NODE, node(A), bytes((t,))),  # to the bridge
        lambda t: raw(bytes(6), bytes(6), sock=2, src_sock=2),  # a registration
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(kinds()) - 1), st.integers(0, 3)), max_size=44),
    st.sampled_from(["client", "peer", "segment"]),
)
def test_a_batch_decides_as_its_packets_sent_one_by_one(
    picks: list[tuple[int, int]], ingress: str
) -> None:
    made = kinds()
    inner = [made[k](tag) for k, tag in picks]
    together, alone = switch(), switch()
    for sw in (together, alone):
        register(sw, C)  # unverified: its budget is spent as the packets go by
    if ingress == "segment":
        d = together.handle_segment(ETH0, batch(NATIVE, inner), 1.0)
        lone = [alone.handle_segment(ETH0, p, 1.0) for p in inner]
    else:
        src = A if ingress == "client" else PEER
        d = together.handle(batch(node(A), inner), src, 1.0)
        lone = [alone.handle(p, src, 1.0) for p in inner]
    assert_batch(d, inner)
    assert [one for _, one in d.inner] == lone
    assert together.learned_segment_nodes() == alone.learned_segment_nodes()


# --- the books, through IpxEndpoint on real sockets ------------------------------------------


def test_books_balance_over_good_and_bad_batches(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ipxbridge")
    flood = 300

    async def main() -> tuple[IpxCounters, list[bytes]]:
        loop = asyncio.get_running_loop()
        sw = IpxSwitch(SwitchSettings(), (), lambda _addr: SERVER_NODE, segments=(ETH0,))
        counters = IpxCounters()
        endpoint = IpxEndpoint(loop, open_udp_socket("127.0.0.1", 0), sw, counters)
        endpoint.start()
        server = endpoint.address
        a, b, stranger = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3))
        try:
            for s in (a, b, stranger):
                s.bind(("127.0.0.1", 0))
                s.setblocking(False)

            async def receive(s: socket.socket) -> bytes:
                return await asyncio.wait_for(loop.sock_recv(s, 2048), 5)

            nodes = {}
            for s in (a, b):  # register, then answer the probe's nonce: verified
                s.sendto(raw(bytes(6), bytes(6), sock=2), server)
                nodes[s] = (await receive(s))[10:16]
                nonce = sw.clients[s.getsockname()].nonce
                s.sendto(raw(nonce, nodes[s], sock=2), server)
            a_node, b_node = nodes[a], nodes[b]
            inner = [
                raw(BROADCAST, a_node, b"game"),
                raw(b_node, a_node, b"to b"),
                raw(BROADCAST, a_node, sock=0x452),  # filtered
                raw(BROADCAST, b_node, b"spoofed"),
            ]
            a.sendto(batch(a_node, inner), server)
            got = [await receive(b), await receive(b)]
            # Bad batches from a stranger: each one counted, none logged one by one.
            for i in range(flood):
                bad = [GOOD, raw(BROADCAST, NATIVE, bytes((i & 0xFF,)), checksum=i)]
                stranger.sendto(batch(NATIVE, bad), server)
            # a's broadcast ping, read after them (one socket, one queue): its answer says
            # the bridge has read them all
            a.sendto(raw(BROADCAST, a_node, sock=2), server)
            assert (await receive(a))[30:] == b""
            # A batch from a segment: a broadcast, and its loop copy one hop on.
            lan = raw(BROADCAST, NATIVE, b"lan")
            endpoint.ingest(ETH0, batch(NATIVE, [lan, lan[:4] + b"\x01" + lan[5:]]))
            return counters, got
        finally:
            endpoint.close()
            for s in (a, b, stranger):
                s.close()

    counters, got = asyncio.run(main())
    # b got the two packets for it as plain packets (type 0, one hop), never as a batch
    assert [(p[30:], p[4], p[5]) for p in got] == [(b"game", 1, 0), (b"to b", 1, 0)]
    # Received: 2 registrations and 2 probe answers; the batch and its 4 packets; the bad
    # batches, one datagram each; the ping; the segment's batch and its 2 packets.
    assert counters.received == 4 + 5 + flood + 1 + 3
    assert counters.received == counters.forwarded + counters.control + counters.dropped_total
    assert (counters.forwarded, counters.control) == (2 + 1 + 1, 4 + 2)
    assert counters.dropped == {
        "filtered_socket": 1,
        "spoofed_source": 1,
        "batch_bad_checksum": flood,
        "duplicate": 1,
    }
    for port, received in counters.port_received.items():
        outcomes = sum(n for key, n in counters.port_outcomes.items() if key[:2] == port)
        assert received == outcomes, (port, counters.port_outcomes)
    assert counters.port_received == {
        ("dosbox", "tunnel"): 4 + 5 + flood + 1,
        ("ethernet", "eth0"): 3,
    }
    assert counters.port_outcomes[("dosbox", "tunnel", "control", "batch")] == 1
    assert counters.port_outcomes[("ethernet", "eth0", "control", "batch")] == 1
    assert counters.received_bytes > 0
    assert "Traceback" not in caplog.text
    assert len(caplog.records) < flood // 4  # rate-limited: never a line per datagram
