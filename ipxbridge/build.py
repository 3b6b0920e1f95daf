"""Which build runs: the pure layers compiled with mypyc, or pure Python (``setup.py``).

The same source either way: ``setup.py`` compiles ``ipxbridge/wire`` and ``ipxbridge/policy``
to extension modules that sit beside their ``.py`` files, and Python loads an extension
before the source. This module itself is never compiled: it looks at what was loaded.
"""

import importlib
import importlib.machinery
from typing import Final, Literal

# One module from each compiled package: the first the switch and the relay load.
LAYERS: Final = {"wire": "ipxbridge.wire.ipx", "policy": "ipxbridge.policy.switch"}
PURE_WHY: Final = (
    "no C compiler, Python headers or mypyc when it was installed, or IPXBRIDGE_PURE=1"
)

Build = Literal["compiled", "pure", "partial"]


def compiled_layers() -> list[str]:
    """The layers whose modules were loaded from extension modules."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return [
        layer
        for layer, module in LAYERS.items()
        if (getattr(importlib.import_module(module), "__file__", None) or "").endswith(suffixes)
    ]


def build() -> Build:
    """``compiled`` (every layer), ``pure`` (none) or ``partial`` (an install mixed up by hand)."""
    layers = compiled_layers()
    if len(layers) == len(LAYERS):
        return "compiled"
    return "partial" if layers else "pure"


def describe() -> str:
    """One line for ``--version`` and the start-up log."""
    kind = build()
    if kind == "compiled":
        return f"compiled with mypyc ({', '.join(LAYERS)})"
    if kind == "partial":
        return f"partly compiled ({', '.join(compiled_layers())} only): reinstall it"
    return f"pure Python ({PURE_WHY})"
