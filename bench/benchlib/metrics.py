"""What the benches read back: the bridge's /metrics, nftables counters, the kernel's own."""

import json
import re
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Final

from benchlib.netns import inside, nsexec

METRICS_URL: Final = "http://127.0.0.1:9213/metrics"


def scrape(ns: str | None = None, url: str = METRICS_URL) -> dict[str, float]:
    """The bridge's ``ipxbridge_*`` samples, ``name{labels}`` -> value, read in ``ns``."""
    with inside(ns), urllib.request.urlopen(url, timeout=5) as res:  # noqa: S310 - our own URL
        text: str = res.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("ipxbridge_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def by_label(m: dict[str, float], family: str, label: str, where: str = "") -> dict[str, int]:
    """The samples of ``family`` (those containing ``where``) summed per value of ``label``."""
    out: dict[str, int] = {}
    for key, value in m.items():
        if key.startswith(family + "{") and where in key:
            found = re.search(rf'{label}="([^"]*)"', key)
            if found:
                out[found.group(1)] = out.get(found.group(1), 0) + int(value)
    return out


def family_sum(m: dict[str, float], family: str, where: str = "") -> int:
    """All samples of ``family`` (those containing ``where``) added up."""
    return int(sum(v for k, v in m.items() if k.startswith(family) and where in k))


def nft_counters(ns: str, table: str, *, missing_ok: bool = False) -> dict[str, int]:
    """Packets counted per rule comment in nftables table ``ip <table>`` of ``ns``; empty if
    the table is not there and ``missing_ok``."""
    listing = nsexec(ns, "nft", "-j", "list", "table", "ip", table, check=not missing_ok)
    out: Counter[str] = Counter()
    try:
        items = json.loads(listing)["nftables"]
    except (ValueError, KeyError):
        if missing_ok:
            return {}
        raise
    for item in items:
        rule = item.get("rule")
        if rule and rule.get("comment"):
            for expr in rule["expr"]:
                if "counter" in expr:
                    out[rule["comment"]] += int(expr["counter"]["packets"])
    return dict(out)


def kernel_counters(ns: str | None = None) -> dict[str, dict[str, int]]:
    """The kernel's protocol counters in ``ns`` (/proc/net/snmp and netstat), per section:
    ``{"Udp": {"RcvbufErrors": ...}, "IpExt": {...}, ...}``."""
    with inside(ns):
        # thread-self: the namespace this thread is in, not the process's first thread's
        text = "".join(
            Path(f"/proc/thread-self/net/{name}").read_text(encoding="ascii")
            for name in ("snmp", "netstat")
        )
    rows = text.splitlines()
    out: dict[str, dict[str, int]] = {}
    for head, values in zip(rows[::2], rows[1::2], strict=False):
        section = head.split(":", 1)[0]
        names, numbers = head.split()[1:], values.split()[1:]
        out.setdefault(section, {}).update(
            (name, int(value)) for name, value in zip(names, numbers, strict=False)
        )
    return out
