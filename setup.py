"""The build: ipxbridge's pure layers compiled to C with mypyc where this machine can.

``ipxbridge/wire`` and ``ipxbridge/policy`` hold every per-packet decision and codec; they
import nothing but the standard library, each other and ``ipxbridge/errors.py``, and are
``mypy --strict`` clean. mypyc (it ships with mypy, pinned in ``pyproject.toml``) compiles
those same files to extension modules; the ``.py`` files stay in the package beside them, and
Python loads the extension first. No second copy of any rule exists.

A machine without a C compiler, without Python's headers (Debian: ``python3-dev``) or without
mypyc gets the pure-Python package: the build says why once, and ``ipxbridge --version`` and
the start-up log say which build runs (``ipxbridge/build.py``). ``IPXBRIDGE_PURE=1`` asks for
the pure build on purpose. A compile that fails part-way leaves no extension behind: either
every listed module is compiled or none is, so the package is never half of each.
"""

import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
COMPILED_PACKAGES = ("ipxbridge/wire", "ipxbridge/policy")


def _say(text: str) -> None:
    print(f"ipxbridge build: {text}", file=sys.stderr, flush=True)


def _why_pure() -> str | None:
    """Why this build cannot compile, or None when it can."""
    if os.environ.get("IPXBRIDGE_PURE", "") not in ("", "0"):
        return "IPXBRIDGE_PURE is set"
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}; Debian: apt-get install gcc)"
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").is_file():
        return f"no Python headers ({include}/Python.h; Debian: apt-get install python3-dev)"
    if importlib.util.find_spec("mypyc") is None:  # the build requirement mypy brings it
        return "mypyc is not installed (it comes with mypy)"
    return None


def _sources() -> list[str]:
    files: list[str] = []
    for package in COMPILED_PACKAGES:
        files.extend(
            str(p.relative_to(HERE))
            for p in sorted((HERE / package).glob("*.py"))
            if p.name != "__init__.py"  # the package markers stay Python: nothing runs there
        )
    return files


class AllOrNothing(build_ext):
    """Build every mypyc extension or none.

    A failure removes what was built and leaves the pure-Python package, saying so.
    """

    def run(self) -> None:
        """Build the extensions; on any failure, remove them all and say why."""
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001  (any compiler failure: fall back, loudly)
            for ext in self.extensions:  # in place or in build/, wherever this run put them
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            _say(f"compiling failed ({exc}); installing the pure-Python build")
        else:
            if self.extensions:
                _say(f"compiled {len(self.extensions)} extension modules with mypyc")


def _extensions() -> list[Any]:
    why = _why_pure()
    if why is not None:
        _say(f"pure-Python build: {why}")
        return []
    from mypyc.build import mypycify  # noqa: PLC0415  (only where it can compile)

    try:
        # opt_level 3: what mypyc's own benchmarks use; debug_level 0 keeps the modules small.
        # group_name: the shared runtime module is ipxbridge/runtime__mypyc, inside the package
        # (not a top-level module, nor a hash of the list), so an editable install maps it too.
        return list(
            mypycify(_sources(), opt_level="3", debug_level="0", group_name="ipxbridge.runtime")
        )
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (mypyc exits on a type error)
        _say(f"mypyc could not compile ({exc}); pure-Python build")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": AllOrNothing})
