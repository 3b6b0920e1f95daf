"""docs/architecture.md rule 1: ``wire`` and ``policy`` are pure, and imports point inward."""

import ast
import sys
from pathlib import Path

import pytest

from ipxbridge.config import DEFAULT_CONFIG_YAML, Config, load_config
from ipxbridge.policy.relay import DEFAULT_RELAY_PORTS
from ipxbridge.wire.directplay import DP4_ENUM_PORT
from ipxbridge.wire.dplay8 import DP8_ENUM_PORT, is_dp8_port

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


# The outer layers. io/ reports through the plain counters of obs/counters
# and logs through obs/logging; it never pulls in the exposition (prometheus_client), the
# HTTP server (aiohttp) or the composition root. obs/ reads policy/ and wire/ and never
# reaches into io/ or app/. Only app/ wires them together.
OUTER = {
    "io": (
        {"ipxbridge.errors", "ipxbridge.wire", "ipxbridge.policy", "ipxbridge.io"}
        | {"ipxbridge.obs.counters", "ipxbridge.obs.logging"},
        {"prometheus_client", "aiohttp"},
    ),
    "obs": (
        {"ipxbridge", "ipxbridge.errors", "ipxbridge.wire", "ipxbridge.policy", "ipxbridge.obs"},
        set(),
    ),
}
PLAIN_OBS = ("counters", "logging")  # what io/ may import from obs/: no third-party imports


@pytest.mark.parametrize("layer", sorted(OUTER))
def test_outer_layers_import_only_inward(layer: str) -> None:
    allowed, forbidden = OUTER[layer]
    files = sorted((PKG / layer).glob("*.py"))
    assert files
    wrong = []
    for path in files:
        for name in imports(path):
            top = name.split(".")[0]
            if top in forbidden:
                wrong.append(f"{layer}/{path.name} imports {name}")
            elif top == "ipxbridge" and not any(
                name == a or name.startswith(a + ".") for a in allowed
            ):
                wrong.append(f"{layer}/{path.name} imports {name}, outside its layer")
    assert wrong == []


@pytest.mark.parametrize("module", PLAIN_OBS)
def test_what_io_reads_from_obs_is_plain(module: str) -> None:
    third_party = {
        name
        for name in imports(PKG / "obs" / f"{module}.py")
        if name.split(".")[0] not in {"ipxbridge", *sys.stdlib_module_names}
    }
    assert third_party == set()


# The subcommands (ipxbridge/commands/, one module each) sit above app/; cli.py above them
# only parses and dispatches. A command shares what it needs through commands/common.py,
# never through cli.py or another command, so the commands and cli.py form no circle.
COMMON = "ipxbridge.commands.common"
ENTRY_POINTS = {"cli.py", "__main__.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def internal_imports(path: Path) -> set[str]:
    """The ipxbridge modules ``path`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in MODULES:
                found.add(node.module)
            # `from ipxbridge.commands import decode` imports the submodule
            found.update(
                f"{node.module}.{a.name}"
                for a in node.names
                if f"{node.module}.{a.name}" in MODULES
            )
    found.discard(module_name(path))
    return found


def test_commands_import_common_and_the_layers_below_only() -> None:
    files = sorted((PKG / "commands").glob("*.py"))
    assert {p.stem for p in files} >= {"common", "run", "decode", "sessions", "interfaces"}
    wrong = [
        f"commands/{path.name} imports {name}"
        for path in files
        for name in internal_imports(path)
        if name == "ipxbridge.cli"
        or (name.startswith("ipxbridge.commands") and name not in (COMMON, "ipxbridge.commands"))
    ]
    assert wrong == []


def test_cli_only_parses_and_dispatches() -> None:
    names = internal_imports(PKG / "cli.py")
    commands = {n for n in MODULES if n.startswith("ipxbridge.commands.")}
    # each one registered; ipxbridge.build names the build in --version
    assert names - {"ipxbridge", "ipxbridge.commands", "ipxbridge.build"} == commands
    assert {n.split(".")[0] for n in imports(PKG / "cli.py")} <= {
        "ipxbridge",
        "argparse",
        "sys",
        "collections",
    }


def test_only_the_entry_points_import_the_commands() -> None:
    def may_import_commands(path: Path) -> bool:
        where = path.relative_to(PKG).parts
        return where[0] == "commands" or (len(where) == 1 and where[0] in ENTRY_POINTS)

    wrong = [
        f"{path.relative_to(PKG)} imports {name}"
        for path in sorted(PKG.rglob("*.py"))
        if not may_import_commands(path)
        for name in internal_imports(path)
        if name == "ipxbridge.cli" or name.startswith("ipxbridge.commands")
    ]
    assert wrong == []


def test_no_import_circle() -> None:
    """No chain of imports (top-level or deferred into a function) leads back to its start."""
    graph = {name: internal_imports(path) for name, path in MODULES.items()}
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert [" -> ".join(c) for c in circles] == []


# Well-known ports: each defined once, by the codec of its protocol. They
# used to be written out in eight places that disagreed (2300-2400 against 2302-2400).
WELL_KNOWN_PORTS = {213, 47624, 6073, 2300, 2302, 2400, 2401}


def test_well_known_ports_are_defined_only_in_wire() -> None:
    elsewhere = []
    for path in sorted(PKG.rglob("*.py")):
        if path.relative_to(PKG).parts[0] == "wire":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and type(node.value) is int
                and node.value in WELL_KNOWN_PORTS
            ):
                elsewhere.append(f"{path.relative_to(PKG)}:{node.lineno}: {node.value}")
    assert elsewhere == []


def test_one_dp8_port_rule_and_the_defaults_agree() -> None:
    # [MC-DPLHP] 1.9: 2302-2400 (2300 and 2301 are DirectPlay 4's, not 8's)
    assert [p for p in range(2290, 2410) if is_dp8_port(p)] == list(range(2302, 2401))
    assert is_dp8_port(DP8_ENUM_PORT)
    assert not is_dp8_port(DP4_ENUM_PORT)
    # the embedded YAML, the model's default and the relay policy name the same ports
    assert DEFAULT_RELAY_PORTS == (DP4_ENUM_PORT, DP8_ENUM_PORT)
    assert Config().relay.ports == DEFAULT_RELAY_PORTS
    assert load_config(None, environ={}).relay.ports == DEFAULT_RELAY_PORTS
    assert "ports: [47624, 6073]" in DEFAULT_CONFIG_YAML


def test_no_constant_is_defined_twice() -> None:
    """One owner per constant: a module-level UPPER_CASE name given the same
    literal value in two modules is one rule written twice (SO_BINDTODEVICE and the Winsock
    AF_INET were, in the prober and the relay)."""
    owners: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id.isupper()
                and node.value is not None
            ):
                continue
            try:
                value = repr(ast.literal_eval(node.value))
            except ValueError:
                continue  # computed from something else: not a literal written again
            where = f"{path.relative_to(PKG)}:{node.lineno}"
            owners.setdefault((node.target.id, value), []).append(where)
    assert {k: v for k, v in owners.items() if len(v) > 1} == {}


# docs/architecture.md's map of the package: every module named once, under its package, and
# nothing named that is not there.
ARCHITECTURE = PKG.parent / "docs" / "architecture.md"


def mapped_modules() -> list[str]:
    """The modules docs/architecture.md's map lists, as paths inside the package."""
    text = ARCHITECTURE.read_text()
    block = text[text.index("```\nipxbridge/\n") + 4 :]
    block = block[: block.index("```")]
    found: list[str] = []
    package = ""
    for line in block.splitlines():
        if not line.startswith("  "):  # tests/, bench/, ...: outside the package
            if line and not line.startswith("ipxbridge/"):
                break
            continue
        name = line.split()[0]
        if name.endswith("/"):
            package = name
        elif name.endswith(".py"):
            found.append((package if line.startswith("    ") else "") + name)
    return found


def test_the_architecture_map_names_every_module_once() -> None:
    tree = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if p.name != "__init__.py")
    listed = mapped_modules()
    assert sorted(listed) == tree
    assert len(set(listed)) == len(listed)
