"""Integration tier gate: needs root (namespaces) and the tools; under CI it must run.

Outside CI a missing privilege or tool skips with the reason. With ``CI=true`` the same
condition fails the test instead, so CI can never go green by skipping the real networks.
"""

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.harness import Netns
from tests.integration import container

IN_CI = os.environ.get("CI", "").lower() == "true"


def _missing(tools: tuple[str, ...]) -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return f"missing tools: {', '.join(absent)}"
    return None


def require(*tools: str) -> None:
    reason = _missing(tools)
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI=true but {reason}: the integration tier must run in CI")
    pytest.skip(f"{reason} (with CI=true this fails instead)")


@pytest.fixture
def net(request: pytest.FixtureRequest) -> Iterator[Netns]:
    marker = request.node.get_closest_marker("dosbox")
    require("ip", *(("dosbox",) if marker else ()))
    ns = Netns()
    try:
        yield ns
    finally:
        ns.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


# The container tests' stand-in base, started as the session begins (container.EarlyBase).
EARLY_BASE = pytest.StashKey[container.EarlyBase]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the container tests' slowest step now, if they are to run here at all."""
    if session.config.option.collectonly:
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # every worker collects every test: the one that runs them builds the base
    if not any(item.path.name == "test_container.py" for item in session.items):
        return
    if _missing(container.TOOLS) is not None:
        return  # their own require() skips or fails them
    session.config.stash[EARLY_BASE] = container.start_base()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An early start no test took (deselected, or the run stopped first) is undone."""
    early = session.config.stash.get(EARLY_BASE, None)
    if early is not None and not early.taken:
        early.abandon()
