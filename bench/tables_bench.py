"""Bounded tables under a flood: the duplicate filter's insert, eviction and purge.

    python3 bench/tables_bench.py [--entries 65536] [--ops 50000] [--rounds 5]

Side by side in one run: ``policy.dedup.DuplicateFilter`` as it is (an ``OrderedDict``, the
oldest record popped from the front) and, as the baseline, the same filter on a plain dict
evicting with ``next(iter(d))``, which walks every slot deleted from the dict's front since
its last resize. Three scenarios per table size:

* ``flood``: a new identity per packet with the table full, every insert evicts (what a
  stranger sending unique packets at a high rate causes);
* ``steady``: identities seen again (pop and re-insert), no eviction: the common path;
* ``purge``: the once-a-second purge of expired records, a tenth of the table expired.

Prints µs per operation, medians over the rounds with the range, and the ratio
baseline / current. No network, no root.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipxbridge.policy.dedup import DuplicateFilter


class PlainDictFilter:
    """The filter before the change: a plain dict, evicting with ``next(iter(d))``."""

    def __init__(self, window: float, max_entries: int) -> None:
        self.window = window
        self.max_entries = max_entries
        self._entries: dict[int, tuple[int, float, int]] = {}

    def is_duplicate(self, key: int, port: int, now: float, hops: int = 0) -> bool:
        entries = self._entries
        entry = entries.pop(key, None)
        if entry is not None and now - entry[1] < self.window and entry[0] != port:
            entries[key] = entry
            return True
        entries[key] = (port, now, hops)
        if len(entries) > self.max_entries:
            del entries[next(iter(entries))]
        return False

    def purge(self, now: float) -> int:
        entries = self._entries
        removed = 0
        for key, (_, seen, _hops) in list(entries.items()):
            if now - seen < self.window:
                break
            del entries[key]
            removed += 1
        return removed


Table = DuplicateFilter[int] | PlainDictFilter
Make = Callable[[int], Table]


def filled(make: Make, n: int) -> Table:
    table = make(n)
    for key in range(n):
        table.is_duplicate(key, 0, key / n)  # inserted over one second
    return table


def flood(make: Make, n: int, ops: int) -> float:
    table = filled(make, n)
    started = time.perf_counter()
    for key in range(n, n + ops):
        table.is_duplicate(key, 1, 1.0)
    return (time.perf_counter() - started) / ops * 1e6


def steady(make: Make, n: int, ops: int) -> float:
    table = filled(make, n)
    started = time.perf_counter()
    for i in range(ops):
        table.is_duplicate(i % n, 0, 1.0 + i * 1e-9)
    return (time.perf_counter() - started) / ops * 1e6


def purge(make: Make, n: int, _ops: int) -> float:
    table = filled(make, n)
    started = time.perf_counter()
    removed = table.purge(0.1 + 10.0)  # the window is 10 s: a tenth of the records expired
    elapsed = time.perf_counter() - started
    if abs(removed - n // 10) > 1:
        raise SystemExit(f"purge removed {removed} of {n}, expected about {n // 10}")
    return elapsed * 1e6 / max(removed, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--ops", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    makes: dict[str, Make] = {
        "current (OrderedDict)": lambda n: DuplicateFilter[int](10.0, n),
        "baseline (plain dict)": lambda n: PlainDictFilter(10.0, n),
    }
    print(
        f"µs per operation, median of {args.rounds} rounds [range]; Python {sys.version.split()[0]}"
    )
    for n in args.entries:
        for name, scenario in (("flood", flood), ("steady", steady), ("purge", purge)):
            results: dict[str, list[float]] = {k: [] for k in makes}
            for _ in range(args.rounds):
                for label, make in makes.items():  # interleaved: load hits both alike
                    results[label].append(scenario(make, n, args.ops))
            medians = {k: statistics.median(v) for k, v in results.items()}
            cells = "  ".join(
                f"{k}: {medians[k]:.3f} [{min(v):.3f}-{max(v):.3f}]" for k, v in results.items()
            )
            ratio = medians["baseline (plain dict)"] / medians["current (OrderedDict)"]
            print(f"{n:>6} entries  {name:<6}  {cells}  baseline/current {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
