"""Every fuzz target (tests/fuzz/targets.py) on its seeds plus deterministic mutations.

The long runs use atheris (tests/fuzz/fuzz.py, docs/reliability.md R1); this keeps the targets
honest in CI, and the planted-bug tests show that each kind of property can fail.
"""

import struct
from collections.abc import Callable
from dataclasses import replace

import pytest

from ipxbridge.policy import relay as relay_mod
from ipxbridge.policy import switch as switch_mod
from ipxbridge.policy.budget import ReflectionLimit
from ipxbridge.policy.port_table import PortTable
from ipxbridge.policy.reassembly import Reassembler, ReassemblyLimits
from ipxbridge.wire import directplay as dp
from ipxbridge.wire import ipx
from tests.fuzz import targets
from tests.fuzz.targets import TARGETS, mutations
from tests.unit.vectors import load_vectors

MUTATIONS = 1500


@pytest.mark.parametrize("name", list(TARGETS))
def test_target_holds_on_seeds_and_mutations(name: str) -> None:
    target = TARGETS[name]
    seeds = target.seeds()
    assert seeds, "a target without seeds would only ever see random bytes"
    for data in mutations(seeds, MUTATIONS):
        target.check(data)


def test_mutations_are_deterministic_and_varied() -> None:
    seeds = TARGETS["dp4"].seeds()
    first = list(mutations(seeds, 200))
    assert first == list(mutations(seeds, 200))
    assert len(set(first)) > 150


def test_an_unexpected_exception_escapes(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_data: object) -> None:
        raise IndexError("planted")

    monkeypatch.setattr(dp, "parse_session_desc", broken)
    with pytest.raises(IndexError):
        targets.check_dp4(TARGETS["dp4"].seeds()[0])


def test_a_reason_outside_the_closed_set_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_data: object) -> None:
        raise dp.DPlayError("made_up", "planted")  # type: ignore[arg-type]

    monkeypatch.setattr(dp, "parse_dp8_frame", broken)
    with pytest.raises(AssertionError, match="made_up"):
        targets.check_dp8(b"\x00")


def test_a_round_trip_mismatch_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    original = dp.build_dp4_message
    monkeypatch.setattr(dp, "build_dp4_message", lambda msg: original(msg) + b"\0")
    reply = load_vectors()["b"].data
    with pytest.raises(AssertionError):
        targets.check_dp4(reply)


@pytest.mark.patches_code
def test_switch_property_catches_a_reflection_to_the_ingress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(PortTable, "all_but", lambda self, *_args: self.ports)
    with pytest.raises(AssertionError):
        targets.check_switch(TARGETS["switch"].seeds()[0])


@pytest.mark.patches_code
def test_switch_property_catches_a_batch_forwarded_as_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old way re-planted: a batch switched as one packet, its inner packets unchecked."""

    def as_one(
        self: switch_mod.IpxSwitch, data: bytes, switch_one: Callable[..., switch_mod.Decision]
    ) -> switch_mod.Decision:
        return switch_one(ipx.parse_header(data), data)

    monkeypatch.setattr(switch_mod.IpxSwitch, "_batch", as_one)
    with pytest.raises(AssertionError):
        targets.check_switch(TARGETS["switch"].seeds()[0])


@pytest.mark.patches_code
def test_switch_property_catches_amplification_toward_an_unproven_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A limit that never says no: the clients that never proved themselves are sent
    # broadcasts past the bytes per second allowed toward their address.
    monkeypatch.setattr(ReflectionLimit, "check", lambda *_args: None)
    # The peer broadcasts three 530-byte packets at once: the two silent clients would get
    # 1,590 bytes each, past the 600-byte burst their address may get.
    broadcast = ipx.build_packet(
        dst_node=ipx.BROADCAST_NODE,
        dst_socket=0x4545,
        src_node=bytes.fromhex("00000a0b0c0d"),
        src_socket=0x4545,
        payload=b"x" * 500,
    )
    peer = targets.ADDRESSES.index(targets.PEER)
    flood = b"".join(
        targets.record(bytes((peer, 0)), targets.blob(broadcast[:30] + bytes([n]) + broadcast[31:]))
        for n in range(3)
    )
    with pytest.raises(AssertionError):
        targets.check_switch(flood)
    monkeypatch.undo()
    targets.check_switch(flood)  # the real limit holds the copies past the burst


def test_reassembly_property_catches_a_budget_overrun(monkeypatch: pytest.MonkeyPatch) -> None:
    def unbudgeted(limits: ReassemblyLimits) -> Reassembler:
        return Reassembler(replace(limits, global_budget=1 << 20, source_budget=1 << 20))

    monkeypatch.setattr(targets, "Reassembler", unbudgeted)
    # First fragments of 3 messages from each of 4 sources, 500 bytes each: 6,000 > 4,096.
    flood = b"".join(
        targets.record(
            bytes((source, guid, 0, 2)),
            struct.pack("<HH", 1000, 0),
            b"\0",
            targets.blob(b"x" * 500),
        )
        for source in range(4)
        for guid in range(3)
    )
    with pytest.raises(AssertionError):
        targets.check_reassembly(flood)
    monkeypatch.undo()
    targets.check_reassembly(flood)  # the real reassembler refuses what does not fit


@pytest.mark.patches_code
def test_relay_property_catches_an_exception_out_of_decide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An old bug re-planted: rewrite mode without its guard lets DPlayError out."""

    class UnrelatedError(Exception):
        pass

    # the except clause in decide() no longer matches
    monkeypatch.setattr(relay_mod, "DPlayError", UnrelatedError)
    with pytest.raises(dp.DPlayError, match="dplay_bad_sockaddr"):
        targets.check_relay(TARGETS["relay"].seeds()[0])


@pytest.mark.patches_code
def test_relay_property_catches_a_rewrite_that_changes_more_than_the_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = dp.rewrite_sockaddr
    monkeypatch.setattr(
        relay_mod, "rewrite_sockaddr", lambda payload, address: original(payload, address) + b"\0"
    )
    with pytest.raises(AssertionError):
        targets.check_relay(TARGETS["relay"].seeds()[0])
