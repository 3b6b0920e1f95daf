"""Rule 8 under attack: a recorded beacon cannot silence a segment (policy/bridges.py).

One run of ``bench/threats.py --only rule8 --json``, the same harness the threat table uses
(docs/benchmarks.md), measures each case; each test below judges one by R25's pass figure
(docs/reliability.md). Its set-up: bridges b1 and b2 (the key ``ipx.bridge_key_file`` shared
unless the case says not) on site A's segment, or b2 moved to a second segment; b3 peered
with both, its DOSBox-protocol client broadcasting 10 times a second; a native station on
H's segment counts what arrives. Bridge ids are random: L is whichever has the lower id (the
one H leaves b3's packets to), and the attack is aimed at it, on its wire:

* **replayed later**: L switched off; once H has forgotten it (BEACON_TTL), every kind of
  its recorded beacon is replayed every 2 s. The replay is refused (the sequence is
  remembered beyond the record's expiry: ``beacon_replay``).
* **another segment**: L's beacons forwarded, as they come, onto H's segment (fresh, signed:
  the key proves who, not where; without a key, the tag L declared to its peers does the
  same). H refuses them (``beacon_unbound``): L's beacon echoes the tags of the bridges L
  hears, not H's.
* **failover**: L killed, its peer link down, or its port on the segment down while b3's
  client broadcasts; H sends what L no longer does after the delivery watch's 0.2 s
  (``ipxbridge_ipx_delegated_total{outcome="missing"}``) while it still believes L is there.

Nothing here sends a packet: the script and these tests share its measurements.
"""

import json
from typing import Any

import pytest

from scripts.harness import namespaces, run_bench
from tests.integration.conftest import require


@pytest.fixture(scope="module")
def rule8() -> dict[str, Any]:
    """``attacks.rule8.values`` of one full-form run (80 broadcasts a case)."""
    require("ip", "bridge")
    before = namespaces()
    code, out = run_bench("threats.py", "--only", "rule8", "--json", timeout=300)
    assert code == 0, out
    data: dict[str, Any] = json.JSONDecoder().raw_decode(out[out.index("{") :])[0]
    mine = data["namespaces"].rstrip("*")  # another run may be under way beside this one
    left = [n for n in namespaces() - before if n.startswith(mine)]
    assert not left, f"namespaces left behind: {left}"
    assert data["features"]["bridge_key"], "no ipx.bridge_key_file in this tree"
    got = data["attacks"]["rule8"]
    assert "error" not in got["values"], got["rows"]
    return dict(got["values"])


@pytest.mark.netns
@pytest.mark.parametrize(
    "case",
    [
        "replayed_later",
        "another_segment",
        "another_segment_no_key",
        "low_dies",
        "low_loses_peer_link",
        "low_loses_its_port",
    ],
)
def test_a_recorded_beacon_cannot_silence_a_segment(rule8: dict[str, Any], case: str) -> None:
    v = rule8[case]
    text = json.dumps(v)
    assert v["sent"] == 80, text
    # A failover has cost one broadcast once in 16 runs (the peer link cut; the cause was not
    # found: docs/reliability.md R25), so it may cost one; an attack may cost none.
    failover = case.startswith("low_")
    assert v["delivered"] >= (v["sent"] - 1 if failover else 0.99 * v["sent"]), text
    assert v["copies"] <= 1.05, text  # served once, not by both bridges
    if case == "replayed_later":
        assert v["replayed"] >= 1, text  # the attack was made
        assert v["dropped"].get("beacon_replay", 0) >= 1, text
    elif case.startswith("another_segment"):
        assert v["forwarded"] >= 1, text
        assert v["dropped"].get("beacon_unbound", 0) >= 1, text
    else:  # H's own copies, after the watch's window, while it believed L was there
        assert v["sent_late_by_h"] >= 1, text
