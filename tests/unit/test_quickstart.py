"""The README's two commands: what they are, that CI runs the second, how it fails.

``scripts/test.sh`` runs here with stand-ins for apt-get, dpkg-query, id and the Python it
is given, so its decisions are checked without installing anything: an ``apt-get update``
that fails is a warning, a failed ``apt-get install`` or pip install ends the run with a
message and exit 1.
"""

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_SH = ROOT / "scripts" / "test.sh"


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert all(b.count("\n") == 1 for b in blocks), blocks  # one command line each
    return [b.strip() for b in blocks]


def test_two_commands_run_the_bridge_from_a_venv_and_the_tests() -> None:
    run, test = quick_start_commands()
    steps = [shlex.split(step) for step in run.split(" && ")]
    assert ["python3", "-m", "venv", ".venv"] in steps  # Debian's python3 refuses pip
    assert steps[-1] == [".venv/bin/ipxbridge", "run"]
    assert test == "./scripts/test.sh"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert lines[-1] == f"exec {quick_start_commands()[1]}"


def test_test_sh_swallows_no_failure() -> None:
    script = TEST_SH.read_text()
    assert "|| true" not in script
    assert "set +e" not in script
    assert "set -euo pipefail" in script


def stub(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_test_sh(tmp_path: Path, *, install_fails: bool) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    stub(bin_dir / "id", "echo 0")  # as root
    stub(bin_dir / "dpkg-query", "exit 1")  # every package missing
    stub(
        bin_dir / "apt-get",
        f'echo "apt-get $*" >> {calls}\n'
        'case "$1" in\n'
        '  update) echo "E: Some index files failed to download." >&2; exit 100 ;;\n'
        "esac\n"
        f"exit {100 if install_fails else 0}",
    )
    # The real interpreter, except that it says it is in a virtual environment (so no .venv
    # is made in the repository) and that pip refuses, as on Debian's python3.
    stub(
        bin_dir / "python3",
        'case "$*" in\n'
        "  *base_prefix*) exit 0 ;;\n"
        '  "-m pip install"*) echo "error: externally-managed-environment" >&2; exit 1 ;;\n'
        "esac\n"
        f'exec {sys.executable} "$@"',
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": "python3"}
    res = subprocess.run(
        ["bash", str(TEST_SH)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    res.stdout += "".join(f"CALL {line}\n" for line in calls.read_text().splitlines())
    return res


def test_test_sh_goes_on_after_a_failed_apt_update_and_stops_on_a_failed_pip(
    tmp_path: Path,
) -> None:
    res = run_test_sh(tmp_path, install_fails=False)
    assert res.returncode == 1
    assert "==> warning: apt-get update failed" in res.stderr
    assert "CALL apt-get install -y -qq --no-install-recommends dosbox" in res.stdout
    assert "s] Python: the active virtual environment" in res.stdout  # "==> [   1 s] Python:"
    assert "error: externally-managed-environment" in res.stderr
    assert "==> FAILED: pip install -e .[test]" in res.stderr
    assert "] ruff" not in res.stdout


def test_test_sh_stops_on_a_failed_apt_install(tmp_path: Path) -> None:
    res = run_test_sh(tmp_path, install_fails=True)
    assert res.returncode == 1
    assert "==> FAILED: apt-get install dosbox" in res.stderr
    assert "] pip install" not in res.stdout
