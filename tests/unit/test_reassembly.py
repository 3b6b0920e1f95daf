"""Bounded reassembly (docs/reliability.md R4): budgets hold under a flood; real messages
complete."""

import uuid

import psutil
from hypothesis import given, settings
from hypothesis import strategies as st

from ipxbridge.policy.reassembly import Reassembler, ReassemblyLimits
from ipxbridge.wire.directplay import PacketFragment

GUID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def frag(
    index: int, total: int, data: bytes, offset: int, size: int, guid: uuid.UUID = GUID
) -> PacketFragment:
    return PacketFragment(
        command=0x30,
        message_guid=guid,
        packet_index=index,
        data_size=len(data),
        offset=offset,
        total_packets=total,
        message_size=size,
        packet_offset=68,
        data=data,
    )


def split(message: bytes, parts: int, guid: uuid.UUID = GUID) -> list[PacketFragment]:
    step = -(-len(message) // parts)
    return [
        frag(i, parts, message[i * step : (i + 1) * step], i * step, len(message), guid)
        for i in range(parts)
    ]


def test_eight_fragments_complete_in_any_order() -> None:
    r = Reassembler()
    message = b"play" + bytes(range(256)) * 4
    pieces = split(message, 8)
    results = [r.add("peer", f, 0.0) for f in reversed(pieces)]
    assert [x.message for x in results[:-1]] == [None] * 7
    assert results[-1].message == message
    assert r.held == 0
    assert len(r) == 0


def test_duplicate_fragment_is_not_held_twice() -> None:
    r = Reassembler()
    pieces = split(b"x" * 1000, 4)
    r.add("p", pieces[0], 0.0)
    r.add("p", pieces[0], 0.1)
    assert r.held == len(pieces[0].data)


def test_claims_beyond_limits_are_refused_without_holding_anything() -> None:
    r = Reassembler()
    huge = frag(0, 2, b"abc", 0, 0xFFFFFFFF)
    assert r.add("p", huge, 0.0).refused == "reassembly_too_large"
    many = frag(0, 0xFFFFFFFF, b"abc", 0, 100)
    assert r.add("p", many, 0.0).refused == "reassembly_too_large"
    assert r.held == 0


def test_fragments_that_contradict_their_claims() -> None:
    r = Reassembler()
    assert r.add("p", frag(5, 4, b"ab", 0, 10), 0.0).refused == "reassembly_bad_fragment"
    assert r.add("p", frag(0, 4, b"ab", 9, 10), 0.0).refused == "reassembly_bad_fragment"
    assert r.add("p", frag(0, 0, b"", 0, 0), 0.0).refused == "reassembly_bad_fragment"
    bad_size = PacketFragment(0x30, GUID, 0, 99, 0, 2, 10, 68, b"ab")
    assert r.add("p", bad_size, 0.0).refused == "reassembly_bad_fragment"
    r.add("p", frag(0, 4, b"ab", 0, 10), 0.0)
    assert r.add("p", frag(1, 3, b"cd", 2, 10), 0.0).refused == "reassembly_inconsistent"


def test_expiry_after_fifteen_seconds() -> None:
    r = Reassembler()
    r.add("p", split(b"y" * 100, 2)[0], 0.0)
    assert r.expire(15.0) == 0
    assert r.expire(15.1) == 1
    assert r.held == 0


def test_stale_entry_is_not_extended_by_a_late_fragment() -> None:
    r = Reassembler()
    a, b = split(b"z" * 100, 2)
    r.add("p", a, 0.0)
    assert r.add("p", b, 20.0).message is None  # the first half was already stale
    assert r.held == len(b.data)


def test_flood_of_first_fragments_stays_within_budget_and_legit_message_completes() -> None:
    limits = ReassemblyLimits()
    r = Reassembler(limits)
    proc = psutil.Process()
    rss_before = proc.memory_info().rss
    refused = 0
    for i in range(100_000):
        source = f"spoof-{i % 1000}"
        claim = (60_000, 64 << 20, 0xFFFFFFFF)[i % 3]
        f = frag(0, 128, b"\xfe" * 64, 0, claim, uuid.UUID(int=i))
        res = r.add(source, f, i * 1e-4)
        refused += res.refused is not None
        assert r.held <= limits.global_budget
    assert refused > 0
    # A verified peer's real 8-fragment message still completes after the flood expires.
    r.expire(100.0)
    message = b"play" + b"m" * 4000
    results = [r.add("legit", f, 100.0) for f in split(message, 8, uuid.uuid4())]
    assert results[-1].message == message
    assert proc.memory_info().rss - rss_before < 64 << 20


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(0, 9),
            st.integers(1, 10),
            st.integers(0, 200),
            st.integers(0, 300),
            st.binary(max_size=64),
        ),
        max_size=200,
    )
)
def test_budget_invariant_holds_for_any_sequence(
    ops: list[tuple[int, int, int, int, int, bytes]],
) -> None:
    limits = ReassemblyLimits(
        max_message_size=256,
        max_fragments=10,
        max_messages_per_source=2,
        source_budget=300,
        global_budget=500,
    )
    r = Reassembler(limits)
    for t, (src, index, total, offset, size, data) in enumerate(ops):
        r.add(src, frag(index, total, data, offset, size, uuid.UUID(int=src % 2)), t * 0.5)
        assert 0 <= r.held <= limits.global_budget
        r.expire(t * 0.5)
