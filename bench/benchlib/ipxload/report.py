"""The IPX load bench's figures: the scenarios, medians over rounds, the targets, the tables.

Mixed-ports scenarios (``Scenario.mixed``) run on ipxbridge alone, half the stations DOSBox
clients and half native stations on an Ethernet segment; ``mixed_comparison`` sets them beside
the DOSBox-only figures of the same run and ``render_mixed`` prints that as a Markdown table.
"""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from benchlib.ipxload.client import JsonDict
from benchlib.ipxload.servers import ALL_SERVERS, DOSBOX_FREE_SLOTS


@dataclass(frozen=True, slots=True)
class Scenario:
    """One measured situation."""

    name: str
    kind: str  # rtt | bcast
    rate: float = 0.0
    mixed: bool = False  # DOSBox clients and native stations (ipxbridge only)


def fmt_rate(rate: float) -> str:
    """250.0 -> '250'."""
    return f"{rate:g}"


MIXED_RTT: Final = "mixed_rtt"


def bcast_name(clients: int, rate: float) -> str:
    """The DOSBox-only broadcast scenario of ``clients`` clients at ``rate``."""
    return f"bcast_{clients}x{fmt_rate(rate)}"


def mixed_split(clients: int) -> tuple[int, int]:
    """(DOSBox clients, native stations) of a mixed broadcast run of ``clients`` stations."""
    return clients - clients // 2, clients // 2


def mixed_name(clients: int, rate: float) -> str:
    """The mixed broadcast scenario: ``mixed_8+8x250``."""
    dosbox, native = mixed_split(clients)
    return f"mixed_{dosbox}+{native}x{fmt_rate(rate)}"


def build_scenarios(
    rates: Sequence[float], clients: int, mixed_rate: float | None = None
) -> list[Scenario]:
    """The RTT scenario then one broadcast scenario per rate; with ``mixed_rate``, the mixed
    round trip and broadcast too (and the DOSBox-only broadcast at that rate, if ``rates``
    lacks it, to stand beside them)."""
    every = [*rates]
    if mixed_rate is not None and mixed_rate not in every:
        every.append(mixed_rate)
    scenarios = [Scenario("rtt", "rtt")] + [
        Scenario(bcast_name(clients, rate), "bcast", rate) for rate in every
    ]
    if mixed_rate is not None:
        scenarios += [
            Scenario(MIXED_RTT, "rtt", mixed=True),
            Scenario(mixed_name(clients, mixed_rate), "bcast", mixed_rate, mixed=True),
        ]
    return scenarios


def clients_for(kind: str, scenario: Scenario, clients: int) -> int:
    """How many synthetic DOSBox-protocol clients a server gets in a scenario."""
    if scenario.mixed:
        return 1 if scenario.kind == "rtt" else mixed_split(clients)[0]
    if scenario.kind == "rtt":
        return 2
    if kind == "dosbox":
        return min(clients, DOSBOX_FREE_SLOTS)
    return clients


def natives_for(scenario: Scenario, clients: int) -> int:
    """How many native stations take part in a scenario (the round trip needs one)."""
    if not scenario.mixed:
        return 0
    return 1 if scenario.kind == "rtt" else mixed_split(clients)[1]


def servers_for(scenario: Scenario) -> tuple[str, ...]:
    """The servers a scenario may run on: only ipxbridge has an Ethernet port."""
    return ("ipxbridge",) if scenario.mixed else ALL_SERVERS


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(runs: Sequence[JsonDict], scenarios: Sequence[Scenario]) -> JsonDict:
    """Medians per scenario and server, and the ipxbridge/DOSBox ratios (and, with those
    servers in the run, ipxbridge's CPU over ipxbox's and over the reference bridge's)."""
    summary: JsonDict = {}
    for scenario in scenarios:
        entry: JsonDict = {}
        for kind in ALL_SERVERS:
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
            for key in (*keys, "server_cpu_s", "server_rss_kib"):
                medians[key] = _median([r.get(key) for r in good])
            if scenario.kind == "bcast":
                # CPU per copy delivered: servers that deliver different counts compare too.
                medians["cpu_us_per_copy"] = _median(
                    [
                        1e6 * r["server_cpu_s"] / r["delivered"]
                        if r.get("server_cpu_s") is not None and r.get("delivered")
                        else None
                        for r in good
                    ]
                )
            if scenario.mixed and scenario.kind == "bcast":
                medians.update(_mixed_medians(good))
            entry[kind] = medians
        if scenario.mixed:
            summary[scenario.name] = entry
            continue
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
            for other in ("ipxbox", "ipxbridge_ref"):
                if other in entry:
                    num, den = bridge.get("server_cpu_s"), entry[other].get("server_cpu_s")
                    entry[f"ratio_ipxbridge_over_{other}_cpu"] = (
                        round(num / den, 2) if num and den else None
                    )
        summary[scenario.name] = entry
    return summary


def _mixed_medians(good: Sequence[JsonDict]) -> JsonDict:
    """The mixed broadcast's extra medians: native stations, their drops, and the delivery
    ratio per direction (``dosbox->native``...)."""
    directions: JsonDict = {}
    for name in sorted({d for r in good for d in r.get("directions", {})}):
        directions[name] = _median(
            [r.get("directions", {}).get(name, {}).get("ratio") for r in good]
        )
    return {
        "native": _median([r.get("native") for r in good]),
        "native_socket_drops": _median([r.get("native_socket_drops") for r in good]),
        "native_ignored_frames": _median([r.get("native_ignored_frames") for r in good]),
        "directions": directions,
    }


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
    if MIXED_RTT in summary:
        _mixed_targets(targets, summary, clients)
    return targets


def _mixed_targets(targets: JsonDict, summary: JsonDict, clients: int) -> None:
    """Mixed ports: 8 DOSBox + 8 native at 250/s >= 99 % delivered; native -> DOSBox -> native
    RTT median <= 200 us."""
    name = mixed_name(clients, 250.0)
    ratio = summary.get(name, {}).get("ipxbridge", {}).get("delivery_ratio")
    if clients == 16 and name in summary:
        targets["mixed_8+8x250_delivery_ge_0.99"] = {
            "value": ratio,
            "pass": ratio is not None and ratio >= 0.99,
        }
    else:
        targets["mixed_8+8x250_delivery_ge_0.99"] = {
            "value": None,
            "pass": None,
            "note": "not measured with this configuration",
        }
    rtt = summary.get(MIXED_RTT, {}).get("ipxbridge", {}).get("p50_us")
    targets["mixed_native_dosbox_rtt_p50_le_200us"] = {
        "value_us": rtt,
        "pass": rtt is not None and rtt <= 200.0,
    }


def _num(value: Any, spec: str) -> str:  # noqa: ANN401 - JSON value
    return "-" if value is None else format(value, spec)


def render_table(summary: JsonDict, scenarios: Sequence[Scenario]) -> str:
    """Human-readable summary: medians over the successful runs."""
    out: list[str] = []
    out.append("Unicast RTT (client0 -> client1 -> client0), medians over runs, microseconds")
    out.append(
        f"  {'server':<14}{'runs':>5}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"
        f"{'lost':>6}{'srv cpu s':>11}"
    )
    for scenario in scenarios:
        entry = summary.get(scenario.name, {})
        if scenario.kind != "rtt" or scenario.mixed:
            continue
        for kind in ALL_SERVERS:
            m = entry.get(kind)
            if m is None:
                continue
            out.append(
                f"  {kind:<14}{m['runs']:>5}{_num(m.get('p50_us'), '.1f'):>10}"
                f"{_num(m.get('p90_us'), '.1f'):>10}{_num(m.get('p99_us'), '.1f'):>10}"
                f"{_num(m.get('max_us'), '.1f'):>10}{_num(m.get('lost'), '.0f'):>6}"
                f"{_num(m.get('server_cpu_s'), '.3f'):>11}"
            )
        ratio = entry.get("ratio_dosbox_over_ipxbridge_rtt_p50")
        out.append(f"  ratio dosbox/ipxbridge (p50 RTT): {_num(ratio, '.2f')}x")
    out.append("")
    out.append("Broadcast fan-out, medians over runs (ratio = delivered / (sent x (clients-1)))")
    out.append(
        f"  {'scenario':<15}{'server':<14}{'cli':>4}{'runs':>5}{'sent':>8}{'expected':>10}"
        f"{'delivered':>11}{'ratio':>9}{'srv drop':>9}{'cli drop':>9}"
        f"{'srv cpu':>9}{'cpu%':>6}{'us/copy':>8}{'RSS MiB':>8}"
    )
    for scenario in scenarios:
        if scenario.kind != "bcast" or scenario.mixed:
            continue
        entry = summary.get(scenario.name, {})
        for kind in ALL_SERVERS:
            m = entry.get(kind)
            if m is None:
                continue
            share, rss = m.get("server_cpu_share"), m.get("server_rss_kib")
            out.append(
                f"  {scenario.name:<15}{kind:<14}{_num(m.get('clients'), 'd'):>4}{m['runs']:>5}"
                f"{_num(m.get('sent'), '.0f'):>8}{_num(m.get('expected'), '.0f'):>10}"
                f"{_num(m.get('delivered'), '.0f'):>11}{_num(m.get('delivery_ratio'), '.4f'):>9}"
                f"{_num(m.get('server_socket_drops'), '.0f'):>9}"
                f"{_num(m.get('client_socket_drops'), '.0f'):>9}"
                f"{_num(m.get('server_cpu_s'), '.2f'):>9}"
                f"{_num(None if share is None else 100 * share, '.0f'):>6}"
                f"{_num(m.get('cpu_us_per_copy'), '.2f'):>8}"
                f"{_num(None if rss is None else rss / 1024, '.1f'):>8}"
            )
        ratio = entry.get("ratio_ipxbridge_over_dosbox_delivery")
        out.append(f"  {scenario.name}: ratio ipxbridge/dosbox (delivery): {_num(ratio, '.2f')}x")
        for other in ("ipxbox", "ipxbridge_ref"):
            key = f"ratio_ipxbridge_over_{other}_cpu"
            if key in entry:
                out.append(
                    f"  {scenario.name}: ratio ipxbridge/{other} (server CPU): "
                    f"{_num(entry[key], '.2f')}x"
                )
    return "\n".join(out)


def _values(runs: Sequence[JsonDict], scenario: str, key: str) -> list[float]:
    """``key`` of every good ipxbridge run of ``scenario``."""
    return [
        r[key]
        for r in runs
        if r["scenario"] == scenario
        and r["server"] == "ipxbridge"
        and "error" not in r
        and r.get(key) is not None
    ]


def _book_medians(runs: Sequence[JsonDict], scenario: str) -> JsonDict:
    """Medians of the bridge's own counts of what it did not deliver (from its /metrics):
    copies held for unverified clients, copies refused by the kernel, datagrams the kernel
    dropped at its UDP socket, and (mixed) native broadcasts its AF_PACKET socket never got."""
    good = [
        r
        for r in runs
        if r["scenario"] == scenario and r["server"] == "ipxbridge" and "bridge_ipx_books" in r
    ]
    books = [r["bridge_ipx_books"] for r in good]
    out: JsonDict = {}
    for name, prefix in (
        ("held_unverified", "held_copies_total"),
        ("send_errors", "send_errors_total"),
        ("kernel_drops", "kernel_dropped_packets_total"),
    ):
        out[name] = _median(
            [sum(v for k, v in book.items() if k.startswith(prefix)) for book in books]
        )
    if any("native_sent" in r for r in good):
        # Native broadcasts that never reached the bridge's AF_PACKET socket.
        out["native_unread"] = _median(
            [
                r["native_sent"]
                - sum(
                    v
                    for k, v in r["bridge_ipx_books"].items()
                    if k.startswith("ipx_port_received_packets_total") and 'kind="ethernet"' in k
                )
                for r in good
                if "native_sent" in r
            ]
        )
    return out


def _span(values: Sequence[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None


def mixed_comparison(
    runs: Sequence[JsonDict], summary: JsonDict, clients: int, rate: float, framing: str
) -> JsonDict:
    """The DOSBox-only and the mixed-ports figures of one run, side by side: broadcast
    delivery, unicast RTT median and the bridge's CPU in the broadcast phase (medians over
    rounds, with the per-round range)."""
    dosbox, native = mixed_split(clients)
    rows: list[JsonDict] = []
    for label, bcast, rtt, stations, path in (
        ("DOSBox only", bcast_name(clients, rate), "rtt", f"{clients} DOSBox", "DOSBox"),
        (
            "mixed ports",
            mixed_name(clients, rate),
            MIXED_RTT,
            f"{dosbox} DOSBox + {native} native ({framing})",
            "native",
        ),
    ):
        b = summary.get(bcast, {}).get("ipxbridge", {})
        r = summary.get(rtt, {}).get("ipxbridge", {})
        row: JsonDict = {
            "label": label,
            "scenarios": [bcast, rtt],
            "stations": stations,
            "rtt_path": f"{path} -> DOSBox -> {path}",
            "runs": b.get("runs", 0),
            "failed": b.get("failed", 0) + r.get("failed", 0),
            "sent": b.get("sent"),
            "expected": b.get("expected"),
            "delivered": b.get("delivered"),
            "delivery_ratio": b.get("delivery_ratio"),
            "delivery_range": _span(_values(runs, bcast, "delivery_ratio")),
            "rtt_runs": r.get("runs", 0),
            "rtt_p50_us": r.get("p50_us"),
            "rtt_p50_range": _span(_values(runs, rtt, "p50_us")),
            "rtt_lost": r.get("lost"),
            "bridge_cpu_s": b.get("server_cpu_s"),
            "bridge_cpu_range": _span(_values(runs, bcast, "server_cpu_s")),
            "bridge_cpu_share": b.get("server_cpu_share"),
            "bridge_copies_not_sent": _book_medians(runs, bcast),
        }
        if "directions" in b:
            row["directions"] = b["directions"]
        rows.append(row)
    return {"rate": rate, "rows": rows}


def _range(span: list[float] | None, spec: str, scale: float = 1.0) -> str:
    if not span:
        return ""
    low, high = (format(v * scale, spec) for v in span)
    return f" [{low}]" if low == high else f" [{low}\N{EN DASH}{high}]"


def render_mixed(comparison: JsonDict, rounds: int, secs: float) -> str:
    """The side-by-side table, in Markdown so that docs/benchmarks.md can quote it as it is."""
    rate = fmt_rate(comparison["rate"])
    out = [
        f"Mixed ports beside DOSBox only, ipxbridge, same run: {rate} broadcasts/s per station "
        f"for {secs:g} s; medians over {rounds} round(s), [per-round range]",
        "",
        "| ipxbridge ports | stations | delivered / expected | delivered | unicast RTT p50 "
        "| bridge CPU, broadcast phase |",
        "|---|---|---|---|---|---|",
    ]
    for row in comparison["rows"]:
        ratio, share = row["delivery_ratio"], row["bridge_cpu_share"]
        counts = (
            "-" if row["delivered"] is None else f"{row['delivered']:,.0f} / {row['expected']:,.0f}"
        )
        delivered = (
            "-"
            if ratio is None
            else f"{100 * ratio:.2f} %{_range(row['delivery_range'], '.2f', 100.0)}"
        )
        path = row["rtt_path"].replace("->", "→")
        rtt = (
            "-"
            if row["rtt_p50_us"] is None
            else f"{row['rtt_p50_us']:.1f} µs{_range(row['rtt_p50_range'], '.1f')} ({path})"
        )
        cpu = (
            "-"
            if row["bridge_cpu_s"] is None
            else f"{row['bridge_cpu_s']:.2f} s{_range(row['bridge_cpu_range'], '.2f')}"
            + ("" if share is None else f", {100 * share:.0f} % of a core")
        )
        out.append(
            f"| {row['label']} | {row['stations']} | {counts} | {delivered} | {rtt} | {cpu} |"
        )
    for row in comparison["rows"]:
        if row.get("failed"):
            out.append(f"{row['label']}: {row['failed']} run(s) failed (see the progress lines)")
        books = row.get("bridge_copies_not_sent", {})
        if any(v is not None for v in books.values()):
            out.append(
                f"{row['label']}, the bridge's own books (medians): copies held for "
                f"unverified clients {_num(books['held_unverified'], '.0f')}, refused by "
                f"the kernel {_num(books['send_errors'], '.0f')}, kernel drops at its UDP "
                f"socket {_num(books['kernel_drops'], '.0f')}"
                + (
                    f", native broadcasts it never read {_num(books['native_unread'], '.0f')}"
                    if "native_unread" in books
                    else ""
                )
            )
        if row.get("directions"):
            parts = [
                f"{name.replace('->', '→')} {_num(None if v is None else 100 * v, '.2f')} %"
                for name, v in row["directions"].items()
            ]
            out.append(f"{row['label']}, delivered per direction (medians): " + ", ".join(parts))
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
        + (
            f"  ({run['clients_without_keepalive']} clients never got a keepalive: unverified)"
            if run.get("clients_without_keepalive")
            else ""
        )
    )
