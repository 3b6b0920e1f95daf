"""The build (setup.py): compiled with mypyc where it can be, pure Python where it cannot.

Real builds with pip from this checkout (``--no-build-isolation``: the test environment
already has the build requirements, setuptools and mypy, so nothing is downloaded), each
into a temp dir, then imported the way an installed bridge is.
"""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ipxbridge import build
from tests.integration.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]


def wheel(tmp_path: Path, **env: str) -> tuple[Path, str]:
    """Build the project's wheel with ``env`` added; (the wheel, pip's output)."""
    out = tmp_path / "wheels"
    res = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation"),
            *("--disable-pip-version-check", "-w", str(out), str(ROOT)),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
        check=False,
    )
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-4000:]
    (found,) = out.glob("ipxbridge-*.whl")
    return found, text


def installed_describe(tmp_path: Path, whl: Path) -> str:
    """``ipxbridge --version`` of ``whl`` unpacked alone on the path (no checkout in sight)."""
    target = tmp_path / "site"
    with zipfile.ZipFile(whl) as z:
        z.extractall(target)
    res = subprocess.run(
        [sys.executable, "-P", "-m", "ipxbridge", "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def extension_modules(whl: Path) -> list[str]:
    with zipfile.ZipFile(whl) as z:
        return [n for n in z.namelist() if n.endswith(".so")]


def test_no_c_compiler_gives_the_pure_build_and_says_why(tmp_path: Path) -> None:
    whl, text = wheel(tmp_path, CC=str(tmp_path / "no-such-cc"))
    assert "pure-Python build: no C compiler" in text
    assert extension_modules(whl) == []
    version = installed_describe(tmp_path, whl)
    assert version.startswith("ipxbridge "), version
    assert "pure Python" in version, version


def test_asking_for_the_pure_build_gives_it(tmp_path: Path) -> None:
    whl, text = wheel(tmp_path, IPXBRIDGE_PURE="1")
    assert "pure-Python build: IPXBRIDGE_PURE is set" in text
    assert extension_modules(whl) == []


def test_a_compiler_that_fails_leaves_no_half_compiled_package(tmp_path: Path) -> None:
    """mypyc translates every module; the C compiler then fails. Nothing compiled may stay:
    a package of some extension modules and some source would import neither way."""
    failing = tmp_path / "cc"
    failing.write_text("#!/bin/sh\necho 'cc: refusing for the test' >&2\nexit 1\n")
    failing.chmod(0o755)
    whl, text = wheel(tmp_path, CC=str(failing))
    assert "compiling failed" in text
    assert "installing the pure-Python build" in text
    assert extension_modules(whl) == []
    assert "pure Python" in installed_describe(tmp_path, whl)


def test_the_suite_runs_on_the_compiled_build() -> None:
    """scripts/test.sh installs the compiled build and runs the whole suite on it; the
    bridges the integration tests start load the same extension modules."""
    if build.build() != "compiled":
        if IN_CI:
            pytest.fail(f"CI=true but this is not the compiled build: {build.describe()}")
        pytest.skip("this machine built the pure-Python package (with CI=true this fails)")
    res = subprocess.run(
        [sys.executable, "-m", "ipxbridge", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert "compiled with mypyc (wire, policy)" in res.stdout, res.stdout + res.stderr
    assert build.compiled_layers() == ["wire", "policy"]
