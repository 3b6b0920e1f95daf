"""The Prometheus rules, scrape config and Grafana dashboard shipped under deploy/.

promtool checks and unit-tests the alert rules and checks the example config. The
dashboard is checked against the main grafana/dashboard-linter rules, re-implemented here
because the Go linter is not packaged. Every panel query is also parsed by promtool. Every
metric name used must be one the bridge exports, and every family the bridge's registry
exports (ipxbridge/obs/metrics.py) must be charted by a panel or excluded, with a reason, in
the generator's ``NOT_CHARTED``.

promtool comes from Debian's ``prometheus`` package. Without it these tests skip locally but
fail under CI=true, because CI must run them.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from ipxbridge.obs.metrics import BridgeSnapshot, make_registry

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
ALERTS = PROM_DIR / "alerts.yml"
ALERTS_TEST = PROM_DIR / "alerts_test.yml"
PROM_CONFIG = PROM_DIR / "prometheus.yml"
GENERATOR = GRAFANA_DIR / "generate_dashboard.py"
DASHBOARD = GRAFANA_DIR / "ipxbridge.json"

DASHBOARD_UID = "ipxbridge"
RUNBOOK_BASE = "https://github.com/ipxbridge/ipxbridge/blob/main/docs/metrics.md#"
DASHBOARD_URL_BASE = f"https://grafana.example.com/d/{DASHBOARD_UID}/"
JOB_MATCHER = 'job=~"ipxbridge.*"'

EXPECTED_ALERTS = {
    "IpxbridgeDown": "critical",
    "IpxbridgeInterfaceDown": "warning",
    "IpxbridgeHighDropRatio": "warning",
    "IpxbridgeKernelDrops": "warning",
    "IpxbridgeSlowForwarding": "warning",
    "IpxbridgeRestarting": "warning",
    "IpxbridgeSendErrors": "warning",
    "IpxbridgeConfigReloadFailed": "warning",
    "IpxbridgeUnverifiedLimitReached": "warning",
}
# Alerts whose labels carry `interface` must name it in their description; ratio alerts
# must print the ratio as a percentage.
INTERFACE_ALERTS = {"IpxbridgeInterfaceDown", "IpxbridgeSendErrors"}
RATIO_ALERTS = {"IpxbridgeHighDropRatio"}


def exported_families() -> dict[str, tuple[str, ...]]:
    """{family: its sample names} for every family the bridge's own registry exports.

    Read from the registry (``make_registry``), not a list kept here, so a family added to
    ipxbridge/obs/metrics.py is checked as soon as it exists.
    """
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    found: dict[str, tuple[str, ...]] = {}
    for family in make_registry(BridgeSnapshot).collect():
        found[family.name] = tuple(family.name + s for s in suffixes.get(family.type, ("",)))
    return found


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_dashboard", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


FAMILIES = exported_families()
IPXBRIDGE_METRICS = frozenset(
    name for family, names in FAMILIES.items() if family.startswith("ipxbridge_") for name in names
)
PROCESS_METRICS = frozenset(
    name for family, names in FAMILIES.items() if family.startswith("process_") for name in names
)

# Units the dashboard may use (all valid for dashboard-linter's panel-units-rule).
ALLOWED_UNITS = frozenset(
    {"pps", "Bps", "s", "percentunit", "short", "bytes", "cps", "none", "dateTimeFromNow"}
)
LINTED_PANEL_TYPES = frozenset({"stat", "singlestat", "graph", "table", "timeseries", "gauge"})

# PromQL words that are not metric names (aggregators, operators, modifiers).
PROMQL_KEYWORDS = frozenset(
    {
        "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk",
        "quantile", "count_values", "group", "by", "without", "on", "ignoring",
        "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan",
    }
)  # fmt: skip
IDENT = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SELECTOR_RE = re.compile(rf"({IDENT})\s*\{{([^}}]*)\}}")
RATE_CALL_RE = re.compile(r"\b(?:rate|irate|increase)\(")
RATE_WITH_INTERVAL_RE = re.compile(
    rf"\b(?:rate|irate|increase)\(\s*{IDENT}\s*\{{[^}}]*\}}\[\$__rate_interval\]\)"
)

Json = dict[str, Any]


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool not found (Debian package 'prometheus')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI must run the Prometheus rule and config checks")
        pytest.skip(f"{message} (with CI=true this fails instead)")
    return path


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"rc={result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def load_alert_rules() -> list[Json]:
    data = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    groups: list[Json] = data["groups"]
    assert [g["name"] for g in groups] == ["ipxbridge"]
    rules: list[Json] = groups[0]["rules"]
    return rules


def load_dashboard() -> Json:
    dashboard: Json = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return dashboard


def panels(dashboard: Json) -> list[Json]:
    """All panels, including any nested in collapsed rows."""
    found: list[Json] = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def targets(dashboard: Json) -> list[tuple[str, Json]]:
    return [(p["title"], t) for p in panels(dashboard) for t in p.get("targets", [])]


def variable(dashboard: Json, name: str) -> Json:
    matches = [v for v in dashboard["templating"]["list"] if v["name"] == name]
    assert len(matches) == 1, f"expected one template variable named {name!r}"
    found: Json = matches[0]
    return found


def label_values_selector(query: str) -> str:
    match = re.fullmatch(rf"label_values\((.+),\s*({IDENT})\)", query)
    assert match, f"not a label_values(<selector>, <label>) query: {query}"
    return match.group(1)


def panel_exprs(dashboard: Json) -> list[str]:
    """The PromQL of every panel target and annotation."""
    exprs = [t["expr"] for _, t in targets(dashboard)]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    return exprs


def variable_query(var: Json) -> str:
    query = var["query"]
    return str(query["query"] if isinstance(query, dict) else query)


def variable_selectors(dashboard: Json) -> list[str]:
    """The series selectors inside the label_values() queries of the query variables."""
    return [
        label_values_selector(variable_query(v))
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    ]


def as_plain_promql(expr: str) -> str:
    """Substitute Grafana's variables so promtool can parse the expression."""
    for name, value in (
        ("$__rate_interval", "5m"),
        ("$__interval", "1m"),
        ("$job", ".*"),
        ("$instance", ".*"),
    ):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def bare_selectors(expr: str) -> list[str]:
    """Metric names used without a {...} matcher block (so without job/instance matchers)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(rf"{IDENT}\s*\{{[^}}]*\}}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(rf"{IDENT}\s*\(", "(", text)
    text = re.sub(r"\b\d[\w.+-]*", " ", text)
    names = re.findall(IDENT, text)
    return [n for n in names if n.lower() not in PROMQL_KEYWORDS]


# --- Prometheus: promtool ------------------------------------------------------------------


def test_promtool_check_rules(promtool: str) -> None:
    result = run([promtool, "check", "rules", ALERTS.name], cwd=PROM_DIR)
    assert result.returncode == 0, output(result)
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in result.stdout, output(result)


def test_promtool_test_rules(promtool: str) -> None:
    result = run([promtool, "test", "rules", ALERTS_TEST.name], cwd=PROM_DIR)
    assert result.returncode == 0, output(result)
    assert "SUCCESS" in result.stdout, output(result)


def test_promtool_check_config(promtool: str) -> None:
    result = run([promtool, "check", "config", PROM_CONFIG.name], cwd=PROM_DIR)
    assert result.returncode == 0, output(result)
    assert "SUCCESS: 1 rule files found" in result.stdout, output(result)
    config = yaml.safe_load(PROM_CONFIG.read_text(encoding="utf-8"))
    assert config["rule_files"] == [ALERTS.name]
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "ipxbridge"
    assert job["scrape_interval"] == "15s"
    assert job["static_configs"] == [{"targets": ["127.0.0.1:9213"]}]


# --- Prometheus: the alert-rule checklist --------------------------------------------------


def test_alert_names_and_severities() -> None:
    rules = load_alert_rules()
    assert all("alert" in r for r in rules), "only alerting rules belong in alerts.yml"
    assert {r["alert"]: r["labels"]["severity"] for r in rules} == EXPECTED_ALERTS


@pytest.mark.parametrize("name", sorted(EXPECTED_ALERTS))
def test_alert_rule_checklist(name: str) -> None:
    (rule,) = [r for r in load_alert_rules() if r["alert"] == name]
    assert re.fullmatch(r"[1-9]\d*[smh]", rule.get("for", "")), "every rule needs a for:"
    annotations: dict[str, str] = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url", "dashboard_url"}
    assert annotations["summary"].strip()
    assert "{{ $labels.instance }}" in annotations["description"]
    if name in INTERFACE_ALERTS:
        assert "{{ $labels.interface }}" in annotations["description"]
    if name in RATIO_ALERTS:
        assert "{{ $value | humanizePercentage }}" in annotations["description"]
    assert annotations["runbook_url"] == RUNBOOK_BASE + name.lower()
    assert annotations["dashboard_url"].startswith(DASHBOARD_URL_BASE)
    assert load_dashboard()["uid"] == DASHBOARD_UID

    expr: str = rule["expr"]
    selectors = SELECTOR_RE.findall(expr)
    assert selectors, expr
    for metric, matchers in selectors:
        assert JOB_MATCHER in matchers, f"{metric} in {name} lacks {JOB_MATCHER}"
    assert bare_selectors(expr) == [], f"selector without matchers in {name}"
    assert set(re.findall(r"\[(\w+)\]", expr)) <= {"5m", "15m"}
    for call in re.findall(r"\brate\([^\[]*\[(\w+)\]", expr):
        assert call == "5m", f"rate() windows are [5m] in {name}"


def test_every_alert_has_firing_and_quiet_unit_tests() -> None:
    tests = yaml.safe_load(ALERTS_TEST.read_text(encoding="utf-8"))
    assert tests["rule_files"] == [ALERTS.name]
    firing: set[str] = set()
    quiet: set[str] = set()
    for group in tests["tests"]:
        for case in group.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
            for alert in case.get("exp_alerts") or []:
                assert set(alert["exp_annotations"]) == {
                    "summary",
                    "description",
                    "runbook_url",
                    "dashboard_url",
                }, "exp_alerts must pin every annotation exactly"
                assert "severity" in alert["exp_labels"]
    assert firing == set(EXPECTED_ALERTS), "every alert needs a firing test case"
    assert quiet == set(EXPECTED_ALERTS), "every alert needs a not-firing test case"


# --- Grafana: the generator ----------------------------------------------------------------


def test_dashboard_json_is_generated() -> None:
    result = run([sys.executable, str(GENERATOR), "--check"], cwd=ROOT)
    assert result.returncode == 0, output(result)


def test_generator_check_mode_detects_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "ipxbridge.json"
    stale.write_text(DASHBOARD.read_text(encoding="utf-8").replace('"30s"', '"1m"'))
    cmd = [sys.executable, str(GENERATOR), "--check", "--output", str(stale)]
    result = run(cmd, cwd=ROOT)
    assert result.returncode == 1, output(result)
    assert "stale" in result.stderr
    result = run([sys.executable, str(GENERATOR), "--output", str(stale)], cwd=ROOT)
    assert result.returncode == 0, output(result)
    assert stale.read_bytes() == DASHBOARD.read_bytes()


# --- Grafana: dashboard-linter rules -------------------------------------------------------


def test_dashboard_metadata() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] == DASHBOARD_UID
    assert dashboard["title"] == "ipxbridge"
    assert dashboard["tags"]
    assert dashboard["schemaVersion"] == 39
    assert dashboard["editable"] is False
    assert dashboard["id"] is None


def test_template_datasource_rule() -> None:
    dashboard = load_dashboard()
    datasources = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert len(datasources) == 1
    (ds,) = datasources
    assert ds["name"] == "datasource"
    assert ds["label"] == "Data source"
    assert ds["query"] == "prometheus"


@pytest.mark.parametrize("name", ["job", "instance"])
def test_template_job_instance_rules(name: str) -> None:
    var = variable(load_dashboard(), name)
    assert var["type"] == "query"
    assert var["datasource"]["uid"] in {"$datasource", "${datasource}"}
    assert var["label"] == name.title()
    assert var["multi"] is True
    assert var["includeAll"] is True
    assert var["allValue"] == ".+"
    assert var["refresh"] == 2, "reload on time range change"
    query = variable_query(var)
    assert label_values_selector(query)
    assert query.endswith(f", {name})")


def test_panel_and_target_datasource_rule() -> None:
    dashboard = load_dashboard()
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no targets"
    for title, target in targets(dashboard):
        assert target["datasource"]["uid"] == "${datasource}", title
    for annotation in dashboard["annotations"]["list"]:
        assert annotation["datasource"]["uid"] == "${datasource}", annotation["name"]


def test_target_job_instance_rule() -> None:
    exprs = panel_exprs(load_dashboard())
    assert exprs
    for expr in exprs:
        selectors = SELECTOR_RE.findall(expr)
        assert selectors, expr
        for metric, matchers in selectors:
            assert 'job=~"$job"' in matchers, f"{metric} lacks the job matcher in {expr}"
            assert 'instance=~"$instance"' in matchers, f"{metric} lacks instance in {expr}"
        assert bare_selectors(expr) == [], f"selector without matchers in {expr}"


def test_job_variable_query_is_unfiltered_and_instance_filters_by_job() -> None:
    dashboard = load_dashboard()
    assert variable_query(variable(dashboard, "job")) == "label_values(ipxbridge_build_info, job)"
    assert variable_query(variable(dashboard, "instance")) == (
        'label_values(ipxbridge_build_info{job=~"$job"}, instance)'
    )


def test_target_rate_interval_rule() -> None:
    for title, target in targets(load_dashboard()):
        expr = target["expr"]
        calls = len(RATE_CALL_RE.findall(expr))
        assert len(RATE_WITH_INTERVAL_RE.findall(expr)) == calls, (
            f"panel {title!r}: rate/irate/increase must use [$__rate_interval]: {expr}"
        )
        assert set(re.findall(r"\[[^\]]*\]", expr)) <= {"[$__rate_interval]"}, expr


def test_target_counter_and_histogram_rules() -> None:
    for title, target in targets(load_dashboard()):
        expr = target["expr"]
        for match in SELECTOR_RE.finditer(expr):
            metric = match.group(1)
            before, after = expr[: match.start()], expr[match.end() :]
            if metric.endswith("_total"):
                assert re.search(r"\b(?:rate|irate|increase)\($", before), (title, metric)
                assert after.startswith("["), (title, metric)
            if metric.endswith("_bucket"):
                assert expr.startswith("histogram_quantile("), (title, metric)


def test_panel_title_description_units_rules() -> None:
    dashboard = load_dashboard()
    titles = []
    for panel in panels(dashboard):
        if panel["type"] not in LINTED_PANEL_TYPES:
            continue
        titles.append(panel["title"])
        assert panel["title"].strip(), panel["id"]
        assert panel["description"].strip(), panel["title"]
        unit = panel["fieldConfig"]["defaults"].get("unit")
        assert unit in ALLOWED_UNITS, f"panel {panel['title']!r} has unit {unit!r}"
        for override in panel["fieldConfig"]["overrides"]:
            assert all(p["id"] != "unit" for p in override["properties"]), panel["title"]
    assert len(titles) == len(set(titles)), "panel titles must be unique"


def test_panel_layout() -> None:
    occupied: set[tuple[int, int]] = set()
    ids = []
    for panel in panels(load_dashboard()):
        ids.append(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"panel {panel['title']!r} overlaps another"
        occupied |= cells
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_every_panel_has_targets_with_an_expr() -> None:
    for panel in panels(load_dashboard()):
        refs = [t["refId"] for t in panel["targets"]]
        assert refs, f"panel {panel['title']!r} has no query"
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        if panel["type"] == "table":  # an instant query, its labels the columns
            assert all(t.get("format") == "table" and t.get("instant") for t in panel["targets"])


def test_restart_annotation() -> None:
    (annotation,) = load_dashboard()["annotations"]["list"]
    assert annotation["enable"] is True
    assert annotation["expr"].startswith("changes(process_start_time_seconds{")


def test_dashboard_exprs_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    dashboard = load_dashboard()
    everything = panel_exprs(dashboard) + variable_selectors(dashboard)
    exprs = list(dict.fromkeys(as_plain_promql(e) for e in everything))
    rules = [{"record": f"ipxbridge_dashboard:expr_{i}", "expr": e} for i, e in enumerate(exprs)]
    rules_file = tmp_path / "dashboard_exprs.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run([promtool, "check", "rules", rules_file.name], cwd=tmp_path)
    assert result.returncode == 0, output(result)
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout, output(result)


def test_promql_syntax_check_rejects_a_broken_expr(promtool: str, tmp_path: Path) -> None:
    # Guards the check above: promtool really parses the recording rules' expressions.
    rule = {"record": "ipxbridge_dashboard:broken", "expr": "sum by (instance (rate(x[5m]))"}
    rules_file = tmp_path / "broken.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": [rule]}]}))
    result = run([promtool, "check", "rules", rules_file.name], cwd=tmp_path)
    assert result.returncode != 0, output(result)


# --- metric names --------------------------------------------------------------------------


def used_names(text: str, prefix: str) -> set[str]:
    return set(re.findall(rf"\b{prefix}_[a-z_]+", text))


@pytest.mark.parametrize("path", [ALERTS, ALERTS_TEST, DASHBOARD, GENERATOR], ids=lambda p: p.name)
def test_only_exported_metric_names_are_used(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    unknown = used_names(text, "ipxbridge") - IPXBRIDGE_METRICS - set(FAMILIES)
    assert unknown == set(), f"{path.name} uses metrics the bridge does not export"
    assert used_names(text, "process") <= PROCESS_METRICS, path.name


def test_the_registry_is_read() -> None:
    # Guards the coverage test below: the families come from the real registry.
    assert "ipxbridge_ipx_port_received_packets" in FAMILIES
    assert FAMILIES["ipxbridge_relay_flows_refused"] == ("ipxbridge_relay_flows_refused_total",)
    assert "process_open_fds" in PROCESS_METRICS
    assert len(FAMILIES) >= 40


def test_dashboard_charts_every_exported_family() -> None:
    """Every exported family is in a panel's query, or in NOT_CHARTED with a reason."""
    exprs = " ".join(panel_exprs(load_dashboard()))
    used = set(re.findall(IDENT, exprs))
    excluded: dict[str, str] = load_generator().NOT_CHARTED
    assert all(reason.strip() for reason in excluded.values()), "say why it is not charted"
    assert set(excluded) <= set(FAMILIES), "NOT_CHARTED names a family nobody exports"
    uncharted = {f for f, names in FAMILIES.items() if not used & set(names)} - set(excluded)
    assert uncharted == set(), "chart these in deploy/grafana/generate_dashboard.py"
    charted_anyway = {f for f in excluded if used & set(FAMILIES[f])}
    assert charted_anyway == set(), "charted, so not NOT_CHARTED"
