"""Settings shared by every tier of the tests."""

import os
from collections.abc import Iterator

import pytest

NODE_KEY_ENV = "IPXBRIDGE_IPX__NODE_KEY_FILE"


@pytest.fixture(scope="session", autouse=True)
def node_key_in_a_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Bridges the tests start keep their node key (``ipx.node_key_file``) in the session's
    temp dir, not in /var/lib/ipxbridge of the machine running them. One key for the
    session, so a bridge restarted by a test recomputes its clients' nodes, as in real use.
    The environment passes on to every ``ipxbridge run`` the tests spawn."""
    if NODE_KEY_ENV in os.environ:
        yield
        return
    os.environ[NODE_KEY_ENV] = str(tmp_path_factory.mktemp("nodekey") / "node.key")
    try:
        yield
    finally:
        del os.environ[NODE_KEY_ENV]


# --- which build runs (ipxbridge/build.py) -------------------------------------------------------

BUILD_ENV = "IPXBRIDGE_EXPECT_BUILD"  # scripts/test.sh: "compiled" or "pure"


def pytest_sessionstart(session: pytest.Session) -> None:
    """With IPXBRIDGE_EXPECT_BUILD set, refuse to run on another build than the one meant:
    a pass of the suite on the wrong build would say nothing about the right one."""
    expected = os.environ.get(BUILD_ENV)
    if not expected:
        return
    from ipxbridge import build

    got = build.build()
    if got != expected:
        pytest.exit(
            f"{BUILD_ENV}={expected}, but this ipxbridge is {build.describe()}",
            returncode=3,
        )


# --- order: the longest modules first -------------------------------------------------------
# With pytest-xdist (--dist loadfile --no-loadscope-reorder: scripts/test.sh) each worker takes
# whole modules in collection order; the ones that take longest go first, so that no long
# module starts last (longest-processing-time scheduling). Seconds each took in a run of 5
# workers (docs/testbed.md, "Where the suite's time goes").
SLOWEST_FIRST = (
    "test_relay.py",  # 151
    "test_bench_scripts.py",  # 128
    "test_vpns.py",  # 127
    "test_container.py",  # 104
    "test_rule8_attacks.py",  # 104
    "test_threats.py",  # 95
    "test_browser_players.py",  # 40
    "test_ipx_tunnel.py",  # 38
    "test_ipx_segments.py",  # 33
    "test_real_clients.py",  # 30
    "test_ipx_interop.py",  # 28
    "test_build.py",  # 22
    "test_config.py",  # 21
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept within
    from ipxbridge import build

    if build.build() == "pure":
        return
    skip = pytest.mark.skip(reason="patches compiled code; runs on the pure-Python build")
    for item in items:
        if item.get_closest_marker("patches_code") is not None:
            item.add_marker(skip)
