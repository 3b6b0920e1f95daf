"""The IPX load bench's figures: the scenarios, medians over rounds, the targets, the table."""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchlib.ipxload.client import JsonDict
from benchlib.ipxload.servers import DOSBOX_FREE_SLOTS, SERVERS


@dataclass(frozen=True, slots=True)
class Scenario:
    """One measured situation."""

    name: str
    kind: str  # rtt | bcast
    rate: float = 0.0


def fmt_rate(rate: float) -> str:
    """250.0 -> '250'."""
    return f"{rate:g}"


def build_scenarios(rates: Sequence[float], clients: int) -> list[Scenario]:
    """The RTT scenario then one broadcast scenario per rate."""
    return [Scenario("rtt", "rtt")] + [
        Scenario(f"bcast_{clients}x{fmt_rate(rate)}", "bcast", rate) for rate in rates
    ]


def clients_for(kind: str, scenario: Scenario, clients: int) -> int:
    """How many synthetic clients a server gets in a scenario."""
    if scenario.kind == "rtt":
        return 2
    if kind == "dosbox":
        return min(clients, DOSBOX_FREE_SLOTS)
    return clients


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(runs: Sequence[JsonDict], scenarios: Sequence[Scenario]) -> JsonDict:
    """Medians per scenario and server, and the ipxbridge/DOSBox ratios."""
    summary: JsonDict = {}
    for scenario in scenarios:
        entry: JsonDict = {}
        for kind in SERVERS:
            good = [
                r
                for r in runs
                if r["scenario"] == scenario.name and r["server"] == kind and "error" not in r
            ]
            failed = sum(
                1
                for r in runs
                if r["scenario"] == scenario.name and r["server"] == kind and "error" in r
            )
            if not good:
                if failed:
                    entry[kind] = {"runs": 0, "failed": failed}
                continue
            keys = (
                ("p50_us", "p90_us", "p99_us", "max_us", "lost")
                if scenario.kind == "rtt"
                else (
                    "delivery_ratio",
                    "sent",
                    "expected",
                    "delivered",
                    "server_socket_drops",
                    "client_socket_drops",
                    "client_cpu_share",
                    "server_cpu_share",
                )
            )
            medians: JsonDict = {
                "runs": len(good),
                "failed": failed,
                "clients": good[0].get("clients", 2),
            }
            for key in (*keys, "server_cpu_s"):
                medians[key] = _median([r.get(key) for r in good])
            entry[kind] = medians
        bridge, dosbox = entry.get("ipxbridge", {}), entry.get("dosbox", {})
        if scenario.kind == "rtt":
            num, den = dosbox.get("p50_us"), bridge.get("p50_us")
            entry["ratio_dosbox_over_ipxbridge_rtt_p50"] = (
                round(num / den, 2) if num and den else None
            )
        else:
            num, den = bridge.get("delivery_ratio"), dosbox.get("delivery_ratio")
            entry["ratio_ipxbridge_over_dosbox_delivery"] = (
                round(num / den, 2) if num and den else None
            )
        summary[scenario.name] = entry
    return summary


def check_targets(summary: JsonDict, clients: int, secs: float) -> JsonDict:
    """The two acceptance targets, evaluated on the ipxbridge medians."""
    targets: JsonDict = {}
    rtt = summary.get("rtt", {}).get("ipxbridge", {}).get("p50_us")
    targets["rtt_p50_le_150us"] = {"value_us": rtt, "pass": rtt is not None and rtt <= 150.0}
    name = f"bcast_{clients}x250"
    ratio = summary.get(name, {}).get("ipxbridge", {}).get("delivery_ratio")
    if clients == 16 and secs == 4.0 and name in summary:
        targets["bcast_16x250_4s_delivery_ge_0.99"] = {
            "value": ratio,
            "pass": ratio is not None and ratio >= 0.99,
        }
    else:
        targets["bcast_16x250_4s_delivery_ge_0.99"] = {
            "value": None,
            "pass": None,
            "note": "not measured with this configuration",
        }
    return targets


def _num(value: Any, spec: str) -> str:  # noqa: ANN401 - JSON value
    return "-" if value is None else format(value, spec)


def render_table(summary: JsonDict, scenarios: Sequence[Scenario]) -> str:
    """Human-readable summary: medians over the successful runs."""
    out: list[str] = []
    out.append("Unicast RTT (client0 -> client1 -> client0), medians over runs, microseconds")
    out.append(
        f"  {'server':<11}{'runs':>5}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"
        f"{'lost':>6}{'srv cpu s':>11}"
    )
    for scenario in scenarios:
        entry = summary.get(scenario.name, {})
        if scenario.kind != "rtt":
            continue
        for kind in SERVERS:
            m = entry.get(kind)
            if m is None:
                continue
            out.append(
                f"  {kind:<11}{m['runs']:>5}{_num(m.get('p50_us'), '.1f'):>10}"
                f"{_num(m.get('p90_us'), '.1f'):>10}{_num(m.get('p99_us'), '.1f'):>10}"
                f"{_num(m.get('max_us'), '.1f'):>10}{_num(m.get('lost'), '.0f'):>6}"
                f"{_num(m.get('server_cpu_s'), '.3f'):>11}"
            )
        ratio = entry.get("ratio_dosbox_over_ipxbridge_rtt_p50")
        out.append(f"  ratio dosbox/ipxbridge (p50 RTT): {_num(ratio, '.2f')}x")
    out.append("")
    out.append("Broadcast fan-out, medians over runs (ratio = delivered / (sent x (clients-1)))")
    out.append(
        f"  {'scenario':<15}{'server':<11}{'cli':>4}{'runs':>5}{'sent':>8}{'expected':>10}"
        f"{'delivered':>11}{'ratio':>9}{'srv drop':>9}{'cli drop':>9}"
        f"{'srv cpu':>9}{'cpu%':>6}"
    )
    for scenario in scenarios:
        if scenario.kind != "bcast":
            continue
        entry = summary.get(scenario.name, {})
        for kind in SERVERS:
            m = entry.get(kind)
            if m is None:
                continue
            share = m.get("server_cpu_share")
            out.append(
                f"  {scenario.name:<15}{kind:<11}{_num(m.get('clients'), 'd'):>4}{m['runs']:>5}"
                f"{_num(m.get('sent'), '.0f'):>8}{_num(m.get('expected'), '.0f'):>10}"
                f"{_num(m.get('delivered'), '.0f'):>11}{_num(m.get('delivery_ratio'), '.4f'):>9}"
                f"{_num(m.get('server_socket_drops'), '.0f'):>9}"
                f"{_num(m.get('client_socket_drops'), '.0f'):>9}"
                f"{_num(m.get('server_cpu_s'), '.2f'):>9}"
                f"{_num(None if share is None else 100 * share, '.0f'):>6}"
            )
        ratio = entry.get("ratio_ipxbridge_over_dosbox_delivery")
        out.append(f"  {scenario.name}: ratio ipxbridge/dosbox (delivery): {_num(ratio, '.2f')}x")
    return "\n".join(out)


def describe_run(run: JsonDict) -> str:
    """One progress line per run."""
    head = f"  round {run['round']} {run['scenario']:<14} {run['server']:<10}"
    if "error" in run:
        return f"{head} ERROR {run['error']}"
    if "p50_us" in run:
        return (
            f"{head} p50 {run['p50_us']} us  p90 {run['p90_us']}  p99 {run['p99_us']}  "
            f"lost {run['lost']}  srv cpu {run['server_cpu_s']} s"
        )
    return (
        f"{head} clients {run['clients']} sent {run['sent']} delivered {run['delivered']}"
        f"/{run['expected']} ratio {run['delivery_ratio']}  srv drops "
        f"{run['server_socket_drops']} cli drops {run['client_socket_drops']}  "
        f"srv cpu {run['server_cpu_s']} s ({run['server_cpu_share']})  "
        f"gen cpu {run['client_cpu_share']} lag {run['max_send_lag_ms']} ms"
    )
