"""The fast path's counters as the bridge reports them: parsed from ``nft -j``, kept monotonic
across table replacements (each install zeroes them), exported with closed reasons."""

import json
import subprocess

import pytest
from prometheus_client import generate_latest

from ipxbridge.io.nftables import FASTPATH_DROP_REASONS, KernelFanout, parse_counters
from ipxbridge.obs.metrics import BridgeSnapshot, RelaySnapshot, make_registry


def listing(marked: int, copies: int, uninspected: int, handle: int = 1) -> str:
    def rule(chain: str, comment: str, packets: int) -> dict[str, object]:
        verdict = {"dup": {"addr": "10.0.0.255", "dev": "x"}} if ">" in comment else {"drop": None}
        expr = [{"counter": {"packets": packets, "bytes": packets * 100}}, verdict]
        return {"rule": {"family": "ip", "table": "ipxbridge", "chain": chain,
                         "comment": comment, "expr": expr}}  # fmt: skip

    items = [
        {"metainfo": {"json_schema_version": 1}},
        {"table": {"family": "ip", "name": "ipxbridge", "handle": handle}},
        rule("fanout", "marked", marked),
        {"rule": {"chain": "fanout", "expr": [{"counter": {"packets": 999, "bytes": 1}}]}},
        rule("in_0", "lanA>lanB", copies),
        rule("in_0", "uninspected", uninspected),
        rule("in_1", "lanB>lanA", 0),
        rule("in_1", "uninspected", 1),
        rule("fanout", "source_invalid", 2),  # any other commented drop: under its comment
        {"rule": {"chain": "fanout", "comment": "x", "expr": [{"counter": {"packets": 5}}]}},
    ]
    return json.dumps({"nftables": items})


def test_parse_counters_keys_commented_rules_by_chain() -> None:
    raw = parse_counters(listing(5, 7, 3))
    assert raw == {
        ("drop", "fanout", "marked"): 5,
        ("copy", "in_0", "lanA>lanB"): 7,
        ("drop", "in_0", "uninspected"): 3,
        ("copy", "in_1", "lanB>lanA"): 0,
        ("drop", "in_1", "uninspected"): 1,
        ("drop", "fanout", "source_invalid"): 2,
    }  # a counter that neither copies nor drops (no verdict) is not in the books
    assert parse_counters("not json") is None
    assert parse_counters('{"other": []}') is None


def test_counts_never_go_back_when_the_table_is_replaced() -> None:
    fanout = KernelFanout((47624,))
    fanout.fold(parse_counters(listing(10, 20, 30)) or {}, 1)
    fanout.fold(parse_counters(listing(15, 25, 40)) or {}, 1)
    first = fanout.counts()
    assert first.dropped == {"marked": 15, "uninspected": 41, "source_invalid": 2}
    assert first.copies == {"lanB": 25, "lanA": 0}
    # A replace zeroes the kernel's counters (a new table handle): afterwards all is new.
    fanout.fold(parse_counters(listing(2, 3, 4, handle=2)) or {}, 2)
    after = fanout.counts()
    assert after.dropped == {"marked": 17, "uninspected": 46, "source_invalid": 4}
    assert after.copies == {"lanB": 28, "lanA": 0}


def test_install_folds_the_old_tables_counters_in_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """install() reads before it replaces, and the new table starts from 0."""
    calls: list[list[str]] = []
    readings = iter([listing(100, 200, 300), listing(1, 2, 3)])

    def fake_run(argv: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        out = next(readings) if "list" in argv else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    fanout = KernelFanout((47624,))
    assert fanout.install(())
    assert [a for a in calls if "list" in a] == []  # nothing to read before the first install
    assert fanout.install(())  # reads the first table (100/200/300), then replaces it
    assert fanout.read().dropped == {"marked": 101, "uninspected": 301 + 4, "source_invalid": 4}


def test_fastpath_drops_are_exported_with_closed_reasons_only_on_the_fast_path() -> None:
    fast = RelaySnapshot(enabled=True, fastpath_dropped={"marked": 3, "uninspected": 4})
    text = generate_latest(make_registry(lambda: BridgeSnapshot(relay=fast))).decode()
    for reason, n in (("marked", 3), ("uninspected", 4)):
        assert f'ipxbridge_fastpath_dropped_packets_total{{reason="{reason}"}} {n}.0' in text
    assert set(FASTPATH_DROP_REASONS) == {"marked", "uninspected"}
    python = RelaySnapshot(enabled=True)  # the Python path: no such drops exist
    assert (
        "ipxbridge_fastpath_dropped_packets_total{"
        not in generate_latest(make_registry(lambda: BridgeSnapshot(relay=python))).decode()
    )
