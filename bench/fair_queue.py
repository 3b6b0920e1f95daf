#!/usr/bin/env python3
"""Cost of ``policy/fairness.FairQueue`` per datagram taken, against a baseline copy of it.

A spoofed flood gives the relay thousands of sources with one datagram each, served 8 a turn
(``io/relay.py`` ``FAIR_TURN``); a dict used as the round made each turn walk past the holes
its served sources left. Prints the median of 5 runs per case, this tree beside the baseline.

    git show REV:ipxbridge/policy/fairness.py > /tmp/fairness_base.py
    python3 bench/fair_queue.py [--baseline /tmp/fairness_base.py]
"""

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

from benchlib import ROOT

TURN = 8


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_datagram_us(module: ModuleType, sources: int, each: int) -> float:
    queue = module.FairQueue()
    for n in range(each):
        for i in range(sources):
            queue.push(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", n, 60)
    taken = 0
    began = time.perf_counter()
    while queue:
        taken += len(queue.take(TURN))
    return (time.perf_counter() - began) / taken * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="another fairness.py to compare with")
    args = parser.parse_args()
    trees = {"this tree": load(ROOT / "ipxbridge" / "policy" / "fairness.py", "fair_now")}
    if args.baseline:
        trees["baseline"] = load(args.baseline, "fair_base")
    for sources, each in ((4096, 1), (64, 1), (2, 256)):
        row = {name: statistics.median(per_datagram_us(m, sources, each) for _ in range(5))
               for name, m in trees.items()}  # fmt: skip
        figures = ", ".join(f"{name} {us:.2f} us" for name, us in row.items())
        ratio = (
            f"; baseline / this tree {row['baseline'] / row['this tree']:.1f}x"
            if args.baseline
            else ""
        )
        print(f"{sources} sources x {each} datagrams, take({TURN}) until empty: {figures}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
