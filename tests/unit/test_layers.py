"""House style rule 1: ``wire`` and ``policy`` are pure, and imports point inward."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "ipxbridge"
IMPURE = {
    "asyncio",
    "socket",
    "time",
    "logging",
    "prometheus_client",
    "pyroute2",
    "netifaces",
    "select",
    "selectors",
    "threading",
    "subprocess",
}
# which ipxbridge sub-packages each layer may import
ALLOWED = {
    "wire": {"ipxbridge.errors", "ipxbridge.wire"},
    "policy": {"ipxbridge.errors", "ipxbridge.wire", "ipxbridge.policy"},
}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_pure_layers(layer: str) -> None:
    files = sorted((PKG / layer).glob("*.py"))
    assert files
    for path in files:
        for name in imports(path):
            top = name.split(".")[0]
            assert top not in IMPURE, f"{path.name} imports {name}"
            if top == "ipxbridge":
                assert any(name == a or name.startswith(a + ".") for a in ALLOWED[layer]), (
                    f"{path.name} imports {name}, outside its layer"
                )
