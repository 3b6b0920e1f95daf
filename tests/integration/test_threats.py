"""Interface ports under attack: the short form of ``bench/threats.py``, held to R19-R24.

One run of ``bench/threats.py --quick --json`` (its own namespaces: two ipxbridges on one
Linux bridge with ethernet + ipxwrapper on ``lan0`` and peered over a link of their own, a
native Ethernet II station, an IPXWrapper host, quiet stations, remote DOSBox-protocol clients
that never answer pings, an attacker with a raw AF_PACKET socket, a plain UDP socket and a raw
IP socket) measures every attack once; each test below judges one of them by the pass figure
of R19-R24 (and R7 for the rejoin), docs/reliability.md §4.2. The script
and these tests share the measurements: nothing here sends a packet.

The figures each test reads are in the script's JSON (``attacks.NAME.values``); the failure
message carries the rows of the threat table, what was measured in words, and the figures.
"""

import json
from typing import Any

import pytest

from scripts.harness import namespaces, run_bench
from tests.integration.conftest import require

Values = dict[str, Any]


@pytest.fixture(scope="module")
def threats() -> dict[str, Any]:
    """The short form's JSON, from one run for the whole module."""
    require("ip", "bridge")
    before = namespaces()
    code, out = run_bench("threats.py", "--quick", "--json", timeout=150)
    assert code == 0, out
    data: dict[str, Any] = json.JSONDecoder().raw_decode(out[out.index("{") :])[0]
    mine = data["namespaces"].rstrip("*")  # another run may be under way beside this one
    left = [n for n in namespaces() - before if n.startswith(mine)]
    assert not left, f"namespaces left behind: {left}"
    return data


def attack(threats: dict[str, Any], name: str) -> tuple[Values, str]:
    """(figures, the table's rows as text) of one attack; an attack that failed to run fails."""
    got = threats["attacks"][name]
    rows = "\n".join(f"{r['attack']}: {r['measured']} [{r['verdict']}]" for r in got["rows"])
    rows += "\nfigures: " + json.dumps(got["values"])[:3000]
    assert "error" not in got["values"], rows
    return got["values"], rows


@pytest.mark.netns
def test_r19_loops_across_kinds_one_copy_per_kind_and_no_storm(threats: dict[str, Any]) -> None:
    v, rows = attack(threats, "loop")
    # An IPXWrapper host's broadcasts: at most one copy per framing/kind, each reaching the
    # native station once.
    assert v["host_worst_per_kind"] <= 1, rows
    assert v["host_at_n1"] >= 0.95 * v["host_broadcasts"], rows
    assert v["host_at_n1_twice"] == 0, rows
    # One datagram from the subnet, alone and with the attacker's own frame settling the
    # race: one copy per kind, and nothing left in the last second (no growth).
    for name in ("single", "single_and_frame"):
        assert v[f"{name}_worst_per_kind"] <= 1, rows
        assert v[f"{name}_last_second"] == 0, rows


@pytest.mark.netns
def test_r20_no_frame_carries_a_source_mac_the_bridge_does_not_own(
    threats: dict[str, Any],
) -> None:
    v, rows = attack(threats, "source_mac")
    assert v["foreign_frames"] == 0, rows
    assert v["victim_delivery"] >= 0.95, rows  # the station's own traffic unaffected


@pytest.mark.netns
def test_r21_forged_beacons_never_silence_a_segment_with_or_without_a_key(
    threats: dict[str, Any],
) -> None:
    v, rows = attack(threats, "beacon_forged")
    assert threats["features"]["bridge_key"], "no ipx.bridge_key_file in this tree\n" + rows
    for name in ("silence/no_key", "silence/key"):
        got = v[name]
        assert got["n1"] >= 0.95, rows  # the native station
        assert got["w1"] >= 0.95, rows  # the IPXWrapper host
    key = v["silence/key"]
    assert max(key["copies_n1"], key["copies_w1"]) <= 1.05, rows


@pytest.mark.netns
def test_r21_forged_beacons_cause_no_duplicate_with_a_key(threats: dict[str, Any]) -> None:
    v, rows = attack(threats, "beacon_duplicate")
    assert threats["features"]["bridge_key"], "no ipx.bridge_key_file in this tree\n" + rows
    for name in ("duplicate/no_key", "duplicate/key"):
        assert min(v[name]["n1"], v[name]["w1"]) >= 0.95, rows  # never silence either
    key = v["duplicate/key"]
    assert max(key["copies_n1"], key["copies_w1"]) <= 1.05, rows


@pytest.mark.netns
def test_r21_unique_id_beacons_leave_table_memory_and_replies_bounded(
    threats: dict[str, Any],
) -> None:
    v, rows = attack(threats, "beacon_flood")
    assert v["bridges_table"] <= 16, rows
    assert v["rss_growth_mb"] <= 10, rows  # memory flat (R3's bound)
    assert v["reply_packets_per_beacon"] <= 1.0, rows  # replies never amplify
    assert v["reply_bytes_per_byte"] <= 1.0, rows


@pytest.mark.netns
def test_r22_bad_batches_are_dropped_counted_by_reason_without_tracebacks(
    threats: dict[str, Any],
) -> None:
    v, rows = attack(threats, "batch_malformed")
    assert v["tracebacks"] == 0, rows
    assert v["counted"] >= v["sent"], rows  # every bad datagram under a batch_* reason
    assert v["copies"] == 0, rows  # and nothing of it sent on
    assert v["log_bytes"] <= 20_000, rows  # rate-limited, not a line per datagram


@pytest.mark.netns
def test_r22_batches_to_filtered_sockets_are_filtered(threats: dict[str, Any]) -> None:
    v, rows = attack(threats, "batch_filter")
    assert v["leaked"] == 0, rows


@pytest.mark.netns
def test_malformed_frames_are_counted_without_tracebacks(threats: dict[str, Any]) -> None:
    """The table's passing row, kept as a control: it passes before the changes too."""
    v, rows = attack(threats, "malformed")
    assert v["tracebacks"] == 0, rows
    assert v["received"] == v["outcomes"], rows


@pytest.mark.netns
def test_r23_no_reflection_toward_hosts_nobody_heard(threats: dict[str, Any]) -> None:
    v, rows = attack(threats, "reflector")
    for name in ("unicast to node 00 00 + its IPv4", "a batch toward its IPv4"):
        assert v[name]["to_ip"] == 0, rows  # nothing to an address not heard on the port
        assert v[name]["ratio"] <= 1.0, rows
    assert v["a batch toward its MAC"]["ratio"] <= 1.0, rows  # bytes out <= bytes in


@pytest.mark.netns
def test_r23_r24_frames_the_switch_drops_teach_the_framing_learner_nothing(
    threats: dict[str, Any],
) -> None:
    v, rows = attack(threats, "framings")
    assert set(v["framings_after"]) <= set(v["framings_before"]), rows
    assert v["worst_per_framing"] <= 1, rows
    assert v["in_station_framing"] == v["unicasts"], rows


@pytest.mark.netns
def test_r24_a_quiet_proven_station_survives_a_mac_flood_and_evictions_are_counted(
    threats: dict[str, Any],
) -> None:
    v, rows = attack(threats, "mac_flood")
    assert v["unicasts"] == v["sent"], rows
    assert v["broadcasts"] == v["sent"], rows
    assert v["evictions_total"] > 0, rows
    assert v["stations"] <= 4096, rows


@pytest.mark.netns
def test_a_rejoin_reflects_nothing_and_registrations_stay_within_the_address_rate(
    threats: dict[str, Any],
) -> None:
    v, rows = attack(threats, "rejoin")
    assert v["rejoin_baf"] <= 1.0, rows  # keyed nodes: the spoofer cannot rejoin at all
    assert 0 < v["registration_out"] <= v["registration_bound"], rows


@pytest.mark.netns
def test_seventeen_players_behind_one_address_are_not_locked_out(
    threats: dict[str, Any],
) -> None:
    v, rows = attack(threats, "rejoin")
    assert v["nat_17th"], rows
