"""Which build runs (ipxbridge/build.py): what --version, the start-up line and
ipxbridge_build_info say. The suite runs on both builds (scripts/test.sh), so each case is
checked against what this interpreter really loaded."""

import importlib.machinery

import pytest

from ipxbridge import __version__, build
from ipxbridge.cli import main
from ipxbridge.policy import switch
from ipxbridge.wire import ipx


def loaded_compiled() -> list[bool]:
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return [str(m.__file__).endswith(suffixes) for m in (ipx, switch)]


def test_the_build_is_what_was_loaded() -> None:
    compiled = loaded_compiled()
    expected = "compiled" if all(compiled) else ("partial" if any(compiled) else "pure")
    assert build.build() == expected


def test_version_names_the_build(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == f"ipxbridge {__version__}, {build.describe()}"
    if all(loaded_compiled()):
        assert out.endswith("compiled with mypyc (wire, policy)")
    else:
        assert "pure Python (no C compiler, Python headers or mypyc" in out
