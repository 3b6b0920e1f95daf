"""Run every fuzz target for a fixed time and print one line of figures each.

    python tests/fuzz/campaign.py --seconds 900 --jobs 2 [--corpus fuzz-corpus] [TARGET ...]

Each target keeps its corpus in ``CORPUS/TARGET`` (seeded from ``targets.py`` on the first
run), so later campaigns start where earlier ones stopped. libFuzzer runs with a 10 s
per-input timeout and a 256 MB RSS limit (docs/reliability.md R1); a crash, timeout or leak is
written to ``CORPUS/TARGET-artifacts/`` and the line says FAIL.
"""

import argparse
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
FUZZ = HERE / "fuzz.py"
STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.MULTILINE)
DONE = re.compile(r"^#\d+\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.MULTILINE)


def run(target: str, seconds: int, corpus: Path) -> str:
    work = corpus / target
    artifacts = corpus / f"{target}-artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    if not work.exists():
        subprocess.run([sys.executable, str(FUZZ), target, "--write-seeds", str(work)], check=True)
    proc = subprocess.run(
        [
            sys.executable,
            str(FUZZ),
            target,
            str(work),
            f"-max_total_time={seconds}",
            "-max_len=4096",
            "-timeout=10",
            "-rss_limit_mb=256",
            "-print_final_stats=1",
            f"-artifact_prefix={artifacts}/",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    log = proc.stdout + proc.stderr
    (corpus / f"{target}.log").write_text(log)
    stats = {k: int(v) for k, v in STAT.findall(log)}
    done = DONE.search(log)
    cov, ft, units = done.groups() if done else ("?", "?", "?")
    verdict = "ok" if proc.returncode == 0 and done else f"FAIL rc={proc.returncode}"
    return (
        f"{target:<11} {stats.get('number_of_executed_units', 0):>11,} execs "
        f"{stats.get('average_exec_per_sec', 0):>6,}/s  cov {cov:>5} ft {ft:>5} "
        f"corpus {units:>5}  peak rss {stats.get('peak_rss_mb', 0):>4} MB  {verdict}"
    )


def main() -> int:
    sys.path.insert(0, str(HERE.parents[1]))
    from tests.fuzz.targets import TARGETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=list(TARGETS))
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=Path("fuzz-corpus"))
    args = parser.parse_args()
    unknown = set(args.targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    corpus = args.corpus.resolve()
    with ThreadPoolExecutor(args.jobs) as pool:
        lines = pool.map(lambda t: run(t, args.seconds, corpus), args.targets)
        failed = False
        for line in lines:
            print(line, flush=True)
            failed |= "FAIL" in line
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
