"""Byte tables for the IPX codec and the DOSBox control packets (docs/protocols.md 3 and 4)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ipxbridge.wire import ipx
from ipxbridge.wire.errors import WireError


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


# docs/protocols.md 4.4: IPXTEST.COM broadcast captured from DOSBox 0.74 (UDP length 59 = 51 + 8).
DOSBOX_BROADCAST = (
    hx("FFFF 0033 00 04 | 00000000 FFFFFFFFFFFF 4545 | 00000000 02A531F6587D 4545")
    + b"IPXTEST 1 from DOSBox"
)


def test_parse_real_dosbox_broadcast() -> None:
    header, payload = ipx.parse_packet(DOSBOX_BROADCAST)
    assert header.checksum == 0xFFFF
    assert header.length == 51
    assert header.hops == 0
    assert header.packet_type == 4
    assert header.dst_node == ipx.BROADCAST_NODE
    assert header.dst_socket == 0x4545
    assert header.src_node == hx("02A531F6587D")
    assert header.is_broadcast
    assert bytes(payload) == b"IPXTEST 1 from DOSBox"
    assert isinstance(payload, memoryview)


def test_build_is_inverse_of_parse() -> None:
    header, payload = ipx.parse_packet(DOSBOX_BROADCAST)
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
    assert rebuilt == DOSBOX_BROADCAST


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (b"\xff" * 29, "truncated"),
        (b"\x00\x00" + DOSBOX_BROADCAST[2:], "bad_checksum"),
        # ipxbox's keepalive has checksum and length 0 (docs/protocols.md 4.6)
        (
            hx("0000 0000 00 00 | 00000000 FFFFFFFFFFFF 0002 | 00000000 02FFFFFF0000 0000"),
            "bad_checksum",
        ),
        (DOSBOX_BROADCAST[:-1], "bad_length"),
        (DOSBOX_BROADCAST + b"x", "bad_length"),
        (DOSBOX_BROADCAST[:2] + b"\x00\x00" + DOSBOX_BROADCAST[4:], "bad_length"),
        (DOSBOX_BROADCAST[:2] + b"\xff\xff" + DOSBOX_BROADCAST[4:], "bad_length"),
    ],
)
def test_every_drop_reason(data: bytes, reason: str) -> None:
    with pytest.raises(WireError) as info:
        ipx.parse_header(data)
    assert info.value.reason == reason


def test_hop_15_is_still_valid() -> None:
    data = DOSBOX_BROADCAST[:4] + b"\x0f" + DOSBOX_BROADCAST[5:]
    assert ipx.parse_header(data).hops == 15


def test_largest_udp_datagram_accepted_and_one_more_refused() -> None:
    payload = bytes(ipx.MAX_DATAGRAM - ipx.HEADER_LEN)
    data = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=1,
        src_node=b"\x01" * 6,
        src_socket=1,
        payload=payload,
    )
    assert len(data) == 65_507
    assert ipx.parse_header(data).length == 65_507
    with pytest.raises(ValueError, match="exceeds"):
        ipx.build_packet(
            dst_node=ipx.BROADCAST_NODE,
            dst_socket=1,
            src_node=b"\x01" * 6,
            src_socket=1,
            payload=payload + b"x",
        )


def test_registration_bytes() -> None:
    # docs/protocols.md 4.2: FFFF 001E 00 xx | 0 node0 0002 | 0 node0 0002
    assert ipx.build_registration() == hx(
        "FFFF 001E 00 00 | 00000000 000000000000 0002 | 00000000 000000000000 0002"
    )
    assert ipx.parse_header(ipx.build_registration()).is_registration


@pytest.mark.parametrize("ptype", [0x00, 0x02, 0xFF, 0x55, 0x7F])
def test_registration_ignores_packet_type(ptype: int) -> None:
    data = bytearray(ipx.build_registration())
    data[5] = ptype
    assert ipx.parse_header(bytes(data)).is_registration


def test_registration_reply_carries_client_ip_and_port() -> None:
    node = ipx.dosbox_node("10.31.0.12", 0xB021)
    assert node == hx("0A1F000C B021")
    reply = ipx.build_registration_reply(node, ipx.dosbox_node("10.31.0.1", 213))
    assert reply == hx("FFFF 001E 00 00 | 00000000 0A1F000CB021 0002 | 00000001 0A1F000100D5 0002")


def test_ping_and_reply_bytes() -> None:
    own = hx("0A1F000B1234")
    assert ipx.build_ping(own) == hx(
        "FFFF 001E 00 00 | 00000000 FFFFFFFFFFFF 0002 | 00000000 0A1F000B1234 0002"
    )
    pinger = hx("0A1F000C5678")
    reply = ipx.build_ping_reply(pinger, own)
    assert reply == hx("FFFF 001E 00 00 | 00000000 0A1F000C5678 0002 | 00000000 0A1F000B1234 0002")
    assert ipx.parse_header(reply).is_echo


def test_shutdown_packet_matches_vanilla_utilities() -> None:
    data = ipx.build_shutdown(hx("0A1F000C5678"))
    assert data == hx("FFFF 001E 00 FF | 00000000 0A1F000C5678 0056 | 00000000 000000000000 0056")
    assert ipx.parse_header(data).is_shutdown


def test_rfc1234_node_is_two_zero_bytes_then_ipv4() -> None:
    assert ipx.rfc1234_node("192.0.2.7") == hx("0000 C0000207")


def test_with_hops_changes_only_byte_4() -> None:
    out = ipx.with_hops(DOSBOX_BROADCAST, 3)
    assert out[4] == 3
    assert out[:4] == DOSBOX_BROADCAST[:4]
    assert out[5:] == DOSBOX_BROADCAST[5:]


def test_coalesced_flag() -> None:
    data = ipx.build_packet(
        dst_node=b"\x01" * 6,
        dst_socket=0,
        src_node=b"\x02" * 6,
        src_socket=0,
        packet_type=2,
        payload=DOSBOX_BROADCAST,
    )
    assert ipx.parse_header(data).is_coalesced


@pytest.mark.parametrize("hops", [0, 15, 16, 0x5A, 0xFF])
def test_hop_byte_is_decoded_not_judged(hops: int) -> None:
    # DOSBox leaves in this byte whatever the DOS program put there (docs/protocols.md 4.1);
    # the hop limit is the switch's routing rule, not a wire-format error.
    data = DOSBOX_BROADCAST[:4] + bytes([hops]) + DOSBOX_BROADCAST[5:]
    assert ipx.parse_header(data).hops == hops


@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_wire_error(data: bytes) -> None:
    try:
        header = ipx.parse_header(data)
    except WireError as exc:
        assert exc.reason in {"truncated", "bad_checksum", "bad_length"}
    else:
        assert header.length == len(data)


@given(
    st.binary(min_size=6, max_size=6),
    st.binary(min_size=6, max_size=6),
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
    st.integers(0, 15),
    st.integers(0, 255),
    st.binary(max_size=1500),
)
def test_round_trip(
    dnode: bytes, snode: bytes, dsock: int, ssock: int, hops: int, ptype: int, payload: bytes
) -> None:
    data = ipx.build_packet(
        dst_node=dnode,
        dst_socket=dsock,
        src_node=snode,
        src_socket=ssock,
        hops=hops,
        packet_type=ptype,
        payload=payload,
    )
    header, view = ipx.parse_packet(data)
    assert (header.dst_node, header.src_node, header.dst_socket, header.src_socket) == (
        dnode,
        snode,
        dsock,
        ssock,
    )
    assert (header.hops, header.packet_type, bytes(view)) == (hops, ptype, payload)
