"""Run one fuzz target (``targets.py``) under atheris, or without it as a quick smoke run.

Usage (from the repository root)::

    pip install atheris
    python tests/fuzz/fuzz.py --list
    python tests/fuzz/fuzz.py dp4 --write-seeds corpus/dp4            # seeds as files
    python tests/fuzz/fuzz.py dp4 corpus/dp4 -atheris_runs=10000000 -max_len=2048
    python tests/fuzz/fuzz.py dp4 crash-<sha1>                        # replay one input
    python tests/fuzz/fuzz.py dp4 --smoke 20000                       # no atheris needed

Every argument after the target name goes to libFuzzer. The file name does not match
``test_*.py``, so pytest does not collect it; ``tests/unit/test_fuzz_targets.py`` runs the
smoke form of every target in CI.
"""

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

USAGE = "usage: fuzz.py --list | TARGET (--smoke [N] | --write-seeds DIR | [libFuzzer args])"


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--list"]:
        from tests.fuzz.targets import TARGETS

        print("\n".join(TARGETS))
        return 0
    if not args or args[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    atheris = None
    if rest[:1] not in (["--smoke"], ["--write-seeds"]):
        atheris = importlib.import_module("atheris")  # optional; not a project dependency
        # Coverage feedback from the whole package: a decoder's helpers count too.
        with atheris.instrument_imports(include=["ipxbridge"]):
            from tests.fuzz import targets
    else:
        from tests.fuzz import targets
    target = targets.TARGETS.get(name)
    if target is None:
        print(f"unknown target {name!r}; one of: {', '.join(targets.TARGETS)}", file=sys.stderr)
        return 2
    if rest[:1] == ["--smoke"]:
        runs = int(rest[1]) if len(rest) > 1 else 20_000
        seeds = target.seeds()
        for data in targets.mutations(seeds, runs):
            target.check(data)
        print(f"{name}: {len(seeds)} seeds and {runs} mutations, no failure")
        return 0
    if rest[:1] == ["--write-seeds"]:
        out = Path(rest[1])
        out.mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(target.seeds()):
            (out / f"seed-{i:02d}").write_bytes(data)
        return 0
    assert atheris is not None
    atheris.Setup([sys.argv[0], *rest], target.check)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
