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
