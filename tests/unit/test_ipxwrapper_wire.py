"""Byte tables and properties for IPXWrapper's UDP encapsulation (docs/protocols.md section 6)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.wire import ipx
from ipxbridge.wire import ipxwrapper as iw
from ipxbridge.wire.errors import WIRE_REASONS, WireError
from ipxbridge.wire.ipxwrapper import (
    CoalescedError,
    IpxWrapperError,
    IpxWrapperMagic,
    IpxWrapperPacket,
)


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


# docs/protocols.md 6, ``struct ipx_packet``: ptype | dst net node sock | src net node sock | size.
# A DirectPlay EnumSessions-style broadcast to socket 0xA57F carrying "play" (4 data bytes).
BROADCAST = hx("04 | 00000000 FFFFFFFFFFFF A57F | 0A000005 0A0000050001 4001 | 0004 | 706C6179")
# The same packet as a standard IPX packet (docs/protocols.md 3.1): checksum FFFF, length 34,
# transport control 0, then type and the two addresses in Novell's order.
BROADCAST_AS_IPX = hx(
    "FFFF 0022 00 04 | 00000000 FFFFFFFFFFFF A57F | 0A000005 0A0000050001 4001 | 706C6179"
)
# A header-only unicast (size 0) from socket 0x4545.
EMPTY_UNICAST = hx("00 | 00000001 020304050607 4545 | 00000001 0A0B0C0D0E0F 4545 | 0000")


def inner(payload: bytes, src_socket: int = 0x4545, packet_type: int = 0) -> bytes:
    return ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=0x4545,
        src_node=hx("020304050607"),
        src_socket=src_socket,
        packet_type=packet_type,
        payload=payload,
    )


def test_constants() -> None:
    assert iw.IPXWRAPPER_UDP_PORT == 54792
    assert iw.IPXWRAPPER_HEADER_LEN == 27
    assert iw.COALESCED_MAX_SIZE == 1384
    assert iw.COALESCED_MAX_PACKETS == 46  # 30 bytes at least each
    assert iw.MAX_DATA + ipx.HEADER_LEN == ipx.MAX_DATAGRAM
    # the drops metric exports every reason this codec can give
    assert set(iw.IPXWRAPPER_REASONS) <= set(WIRE_REASONS)
    assert set(iw.COALESCED_REASONS) <= set(WIRE_REASONS)
    assert all(r.startswith("batch_") for r in iw.COALESCED_REASONS)


def test_parse_broadcast_byte_table() -> None:
    packet = iw.parse_ipxwrapper(BROADCAST)
    assert packet.packet_type == 4
    assert packet.dst_net == hx("00000000")
    assert packet.dst_node == ipx.BROADCAST_NODE
    assert packet.dst_socket == ipx.SOCKET_DPLAY_DISCOVERY
    assert packet.src_net == hx("0A000005")
    assert packet.src_node == hx("0A0000050001")
    assert packet.src_socket == 0x4001
    assert bytes(packet.data) == b"play"
    assert isinstance(packet.data, memoryview)
    assert packet.is_broadcast
    assert packet.magic is None
    assert not packet.is_coalesced
    assert not packet.is_spx_lookup


def test_parse_header_only() -> None:
    packet = iw.parse_ipxwrapper(EMPTY_UNICAST)
    assert len(EMPTY_UNICAST) == 27
    assert packet == IpxWrapperPacket(
        0,
        hx("00000001"),
        hx("020304050607"),
        0x4545,
        hx("00000001"),
        hx("0A0B0C0D0E0F"),
        0x4545,
        b"",
    )
    assert not packet.is_broadcast


@pytest.mark.parametrize("datagram", [BROADCAST, EMPTY_UNICAST])
def test_build_is_inverse_of_parse(datagram: bytes) -> None:
    assert iw.build_ipxwrapper(iw.parse_ipxwrapper(datagram)) == datagram


def test_parse_accepts_memoryview() -> None:
    assert iw.parse_ipxwrapper(memoryview(BROADCAST)) == iw.parse_ipxwrapper(BROADCAST)


@pytest.mark.parametrize(
    ("datagram", "reason"),
    [
        (b"", "truncated"),
        (BROADCAST[:1], "truncated"),
        (BROADCAST[:26], "truncated"),
        # size says 4, three data bytes follow: short
        (BROADCAST[:-1], "bad_length"),
        # size says 4, five follow: trailing bytes are an error (router.c drops them too)
        (BROADCAST + b"\x00", "bad_length"),
        # size 0 with data behind it
        (EMPTY_UNICAST + b"x", "bad_length"),
        # header only, size lying upward
        (EMPTY_UNICAST[:-2] + hx("0001"), "bad_length"),
        (EMPTY_UNICAST[:-2] + hx("FFFF"), "bad_length"),
    ],
)
def test_drop_reasons(datagram: bytes, reason: str) -> None:
    with pytest.raises(IpxWrapperError) as caught:
        iw.parse_ipxwrapper(datagram)
    assert caught.value.reason == reason
    assert isinstance(caught.value, WireError)


def test_data_too_big_for_ipx_is_bad_length() -> None:
    size = iw.MAX_DATA + 1
    datagram = EMPTY_UNICAST[:-2] + size.to_bytes(2, "big") + bytes(size)
    with pytest.raises(IpxWrapperError) as caught:
        iw.parse_ipxwrapper(datagram)
    assert caught.value.reason == "bad_length"
    largest = EMPTY_UNICAST[:-2] + iw.MAX_DATA.to_bytes(2, "big") + bytes(iw.MAX_DATA)
    ipx.parse_header(iw.ipxwrapper_to_ipx(iw.parse_ipxwrapper(largest)))


@pytest.mark.parametrize(
    "change",
    [
        {"dst_net": b"\x00" * 3},
        {"src_node": b"\x00" * 7},
        {"packet_type": 256},
        {"src_socket": -1},
        {"dst_socket": 0x10000},
        {"data": bytes(iw.MAX_DATA + 1)},
    ],
)
def test_builders_refuse_misuse(change: dict[str, object]) -> None:
    fields = {
        "packet_type": 0,
        "dst_net": bytes(4),
        "dst_node": bytes(6),
        "dst_socket": 1,
        "src_net": bytes(4),
        "src_node": bytes(6),
        "src_socket": 1,
        "data": b"",
    }
    packet = IpxWrapperPacket(**(fields | change))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"bytes|byte") as caught:
        iw.build_ipxwrapper(packet)
    assert not isinstance(caught.value, WireError)
    with pytest.raises(ValueError, match=r"bytes|byte"):
        iw.ipxwrapper_to_ipx(packet)


# --- conversion to and from a standard IPX packet ------------------------------------------


def test_to_ipx_byte_table() -> None:
    assert iw.ipxwrapper_to_ipx(iw.parse_ipxwrapper(BROADCAST)) == BROADCAST_AS_IPX


def test_to_ipx_checked_by_the_ipx_codec() -> None:
    packet = iw.parse_ipxwrapper(BROADCAST)
    header = ipx.parse_header(iw.ipxwrapper_to_ipx(packet))
    assert header.checksum == ipx.CHECKSUM_NONE
    assert header.length == ipx.HEADER_LEN + len(packet.data)
    assert header.hops == 0
    assert header.packet_type == packet.packet_type
    assert (header.dst_net, header.dst_node, header.dst_socket) == (
        packet.dst_net,
        packet.dst_node,
        packet.dst_socket,
    )
    assert (header.src_net, header.src_node, header.src_socket) == (
        packet.src_net,
        packet.src_node,
        packet.src_socket,
    )


def test_from_ipx_byte_table_drops_the_hop_count() -> None:
    with_hops = ipx.with_hops(BROADCAST_AS_IPX, 7)
    packet = iw.ipx_to_ipxwrapper(with_hops)
    assert iw.build_ipxwrapper(packet) == BROADCAST
    # back to IPX, the count starts again at 0: IPXWrapper does not carry it
    assert ipx.parse_header(iw.ipxwrapper_to_ipx(packet)).hops == 0


@pytest.mark.parametrize(
    ("datagram", "reason"),
    [
        (BROADCAST_AS_IPX[:29], "truncated"),
        (hx("0000") + BROADCAST_AS_IPX[2:], "bad_checksum"),
        (BROADCAST_AS_IPX + b"\x00", "bad_length"),
    ],
)
def test_from_ipx_rejects_what_the_ipx_codec_rejects(datagram: bytes, reason: str) -> None:
    with pytest.raises(WireError) as caught:
        iw.ipx_to_ipxwrapper(datagram)
    assert caught.value.reason == reason


# --- magic packets -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ptype", "src_socket", "magic"),
    [
        (1, 0, IpxWrapperMagic.SPX_LOOKUP),
        (2, 0, IpxWrapperMagic.COALESCED),
        (3, 0, None),  # unknown type from socket 0: an ordinary packet
        (0, 0, None),
        (1, 0x4545, None),  # magic types from a real socket are ordinary packets
        (2, 0x0001, None),
    ],
)
def test_magic_detection(ptype: int, src_socket: int, magic: IpxWrapperMagic | None) -> None:
    datagram = (
        bytes((ptype,))
        + hx("00000000 FFFFFFFFFFFF 0000 00000000 0A0B0C0D0E0F")
        + src_socket.to_bytes(2, "big")
        + hx("0000")
    )
    packet = iw.parse_ipxwrapper(datagram)
    assert packet.magic is magic
    assert packet.is_coalesced == (magic is IpxWrapperMagic.COALESCED)
    assert packet.is_spx_lookup == (magic is IpxWrapperMagic.SPX_LOOKUP)


def test_coalesced_agrees_with_the_ipx_codec() -> None:
    batch = inner(b"a") + inner(b"")
    datagram = hx("02 | 00000000 FFFFFFFFFFFF 0000 | 00000000 0A0B0C0D0E0F 0000") + len(
        batch
    ).to_bytes(2, "big")
    packet = iw.parse_ipxwrapper(datagram + batch)
    assert packet.is_coalesced
    # forwarded unchanged to an IPX port, it is still a batch there
    assert ipx.parse_header(iw.ipxwrapper_to_ipx(packet)).is_coalesced
    assert iw.unpack_coalesced(packet.data) == [inner(b"a"), inner(b"")]


# --- coalesced batches ---------------------------------------------------------------------

# Two inner IPX packets written out by hand: 31 bytes ("!") and 30 bytes (header only).
INNER_A = hx("FFFF 001F 00 04 | 00000000 FFFFFFFFFFFF 4545 | 00000000 020304050607 4545 | 21")
INNER_B = hx("FFFF 001E 00 00 | 00000001 0A0B0C0D0E0F 869C | 00000000 020304050607 4002")


def test_unpack_byte_table() -> None:
    assert iw.unpack_coalesced(INNER_A + INNER_B) == [INNER_A, INNER_B]
    assert iw.unpack_coalesced(memoryview(INNER_B + INNER_A)) == [INNER_B, INNER_A]
    for packet in iw.unpack_coalesced(INNER_A + INNER_B):
        ipx.parse_header(packet)  # each one is a well-formed IPX packet


def test_unpack_empty_data_is_an_empty_batch() -> None:
    assert iw.unpack_coalesced(b"") == []


def test_unpack_up_to_the_bound() -> None:
    one = inner(bytes(1384 - 30))
    assert iw.unpack_coalesced(one) == [one]
    many = inner(b"") * (1384 // 30)
    assert len(iw.unpack_coalesced(many)) == 46


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        # trailing partial header
        (INNER_A + INNER_B[:29], "batch_truncated"),
        (INNER_A + INNER_B[:1], "batch_truncated"),
        (INNER_A[:10], "batch_truncated"),
        # trailing partial packet: the header is whole, the data is not
        (INNER_A[:30], "batch_truncated"),
        (INNER_B + INNER_A[:-1], "batch_truncated"),
        # lengths below 30, zero included: never a packet, and would loop forever
        (hx("FFFF 0000") + INNER_B[4:], "batch_bad_length"),
        (hx("FFFF 001D") + INNER_B[4:], "batch_bad_length"),
        (INNER_A + hx("FFFF 0000") + INNER_B[4:], "batch_bad_length"),
        # inner packets carry no checksum (RFC 1234 reserved packets)
        (INNER_A + hx("0000") + INNER_B[2:], "batch_bad_checksum"),
        # bigger than IPXWrapper ever batches
        (inner(bytes(1384 - 30 + 1)), "batch_too_large"),
        (inner(b"") * 47, "batch_too_large"),
    ],
)
def test_unpack_errors(data: bytes, reason: str) -> None:
    with pytest.raises(CoalescedError) as caught:
        iw.unpack_coalesced(data)
    assert caught.value.reason == reason
    assert isinstance(caught.value, WireError)


@pytest.mark.parametrize("ptype", [1, 2])
def test_unpack_refuses_nested_magic(ptype: int) -> None:
    nested = inner(INNER_A, src_socket=0, packet_type=ptype)
    with pytest.raises(CoalescedError) as caught:
        iw.unpack_coalesced(INNER_B + nested)
    assert caught.value.reason == "batch_nested"


def test_unpack_keeps_ordinary_socket_zero_packets() -> None:
    # type 0 from socket 0 is not magic: it is passed on like any other packet
    plain = inner(b"x", src_socket=0, packet_type=0)
    assert iw.unpack_coalesced(plain + INNER_B) == [plain, INNER_B]


# --- properties ----------------------------------------------------------------------------

FAST = settings(max_examples=300, deadline=None)
nets = st.binary(min_size=4, max_size=4)
nodes = st.binary(min_size=6, max_size=6)
u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
packets = st.builds(
    IpxWrapperPacket, u8, nets, nodes, u16, nets, nodes, u16, st.binary(max_size=64)
)


@FAST
@given(st.binary(max_size=96))
def test_parse_is_total(data: bytes) -> None:
    try:
        packet = iw.parse_ipxwrapper(data)
    except IpxWrapperError as exc:
        assert exc.reason in iw.IPXWRAPPER_REASONS
    else:
        assert iw.build_ipxwrapper(packet) == data


@FAST
@given(packets, st.binary(max_size=4), st.integers(0, 40))
def test_parse_is_total_on_near_misses(packet: IpxWrapperPacket, tail: bytes, cut: int) -> None:
    good = iw.build_ipxwrapper(packet)
    for data in (good + tail, good[: max(0, len(good) - cut)]):
        try:
            iw.parse_ipxwrapper(data)
        except IpxWrapperError as exc:
            assert exc.reason in iw.IPXWRAPPER_REASONS


@FAST
@given(packets)
def test_round_trips(packet: IpxWrapperPacket) -> None:
    datagram = iw.build_ipxwrapper(packet)
    assert len(datagram) == 27 + len(packet.data)
    assert iw.parse_ipxwrapper(datagram) == packet
    as_ipx = iw.ipxwrapper_to_ipx(packet)
    header = ipx.parse_header(as_ipx)
    assert header.length == len(as_ipx) == 30 + len(packet.data)
    assert header.hops == 0
    assert iw.ipx_to_ipxwrapper(as_ipx) == packet


@FAST
@given(
    st.binary(max_size=160)
    | st.lists(st.binary(max_size=40)).map(lambda ps: b"".join(inner(p) for p in ps))
)
def test_unpack_is_total(data: bytes) -> None:
    try:
        packets_out = iw.unpack_coalesced(data)
    except CoalescedError as exc:
        assert exc.reason in iw.COALESCED_REASONS
    else:
        assert len(packets_out) <= iw.COALESCED_MAX_PACKETS
        assert b"".join(packets_out) == data
        for packet in packets_out:
            assert not ipx.parse_header(packet).is_coalesced
