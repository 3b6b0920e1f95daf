"""The node key file (``ipx.node_key_file``): read, created, refused, or replaced in memory.

Keyed nodes (policy/switch.py rule 2) are only as stable as their key: a bridge restarted
with the same file gives every client the node it already holds.
"""

import logging
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ipxbridge.app.ipx import client_nodes
from ipxbridge.app.reload import keep_restart_only, restart_only_changes
from ipxbridge.config import load_config
from ipxbridge.errors import StartupError
from ipxbridge.io.nodekey import MIN_NODE_KEY_BYTES, NODE_KEY_BYTES, load_node_key
from ipxbridge.wire import ipx

CLIENT = ("10.0.0.11", 40001)


def nodes_with(key_file: Path, **ipx_settings: str) -> bytes:
    config = load_config(None, {}, {"ipx": {"node_key_file": str(key_file), **ipx_settings}})
    return client_nodes(config)(CLIENT)


def test_a_missing_key_is_created_private_and_read_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ipxbridge" / "node.key"  # its directories are made too
    first = load_node_key(path)
    assert (first.source, len(first.key)) == ("created", NODE_KEY_BYTES)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_bytes() == first.key
    assert [p.name for p in path.parent.iterdir()] == ["node.key"]  # no temporary left
    again = load_node_key(path)  # the next start
    assert (again.source, again.key, again.why) == ("read", first.key, "")


def test_the_same_file_gives_the_same_nodes_after_a_restart(tmp_path: Path) -> None:
    key_file = tmp_path / "node.key"
    node = nodes_with(key_file)
    assert node == ipx.keyed_node(key_file.read_bytes(), *CLIENT)
    assert nodes_with(key_file) == node
    assert nodes_with(tmp_path / "other.key") != node


def test_address_nodes_need_no_key(tmp_path: Path) -> None:
    key_file = tmp_path / "node.key"
    assert nodes_with(key_file, node_assignment="address") == ipx.dosbox_node(*CLIENT)
    assert not key_file.exists()


def test_a_short_key_is_a_startup_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    path.write_bytes(b"x" * (MIN_NODE_KEY_BYTES - 1))
    with pytest.raises(StartupError, match=f"ipx.node_key_file {path}: 15 bytes, at least 16"):
        load_node_key(path)
    path.write_bytes(b"x" * MIN_NODE_KEY_BYTES)  # an operator's own 16-byte key is used
    assert load_node_key(path).key == b"x" * MIN_NODE_KEY_BYTES


def test_a_key_path_that_is_not_a_file_is_a_startup_error(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=f"ipx.node_key_file {tmp_path}: cannot read"):
        load_node_key(tmp_path)  # a directory
    dangling = tmp_path / "node.key"
    dangling.symlink_to(tmp_path / "nowhere" / "key")
    with pytest.raises(StartupError, match="dangling symbolic link"):
        load_node_key(dangling)


def test_a_key_others_may_read_is_used_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o644)
    loaded = load_node_key(path)
    assert loaded.source == "read"
    assert "readable by other users (mode 0644)" in loaded.why


def test_an_uncreatable_key_falls_back_to_memory_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the key's directory should be")
    path = blocker / "node.key"
    loaded = load_node_key(path)
    assert (loaded.source, len(loaded.key)) == ("memory", NODE_KEY_BYTES)
    assert str(blocker) in loaded.why
    assert load_node_key(path).key != loaded.key  # a new one each start: nodes change
    with caplog.at_level(logging.INFO):
        node = nodes_with(path)
    assert node[0] == 0x02
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "clients cannot rejoin" in warnings[0]
    assert str(path) in warnings[0]


def test_a_file_system_that_takes_no_new_files_falls_back_to_memory() -> None:
    # procfs refuses new directories to root too, as a read-only file system would.
    loaded = load_node_key(Path("/proc/ipxbridge-test/node.key"))
    assert (loaded.source, len(loaded.key)) == ("memory", NODE_KEY_BYTES)
    assert loaded.why.startswith("cannot create /proc/ipxbridge-test/node.key: ")


def test_run_with_a_short_key_exits_2_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    path.write_bytes(b"short")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{s.getsockname()[1]}"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ipxbridge",
            "run",
            "--ipx-listen",
            listen,
            "--metrics-listen",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={
            **os.environ,
            "IPXBRIDGE_IPX__NODE_KEY_FILE": str(path),
            "IPXBRIDGE_HTTP__LISTEN": "off",
        },
    )
    assert res.returncode == 2, res.stderr
    assert f"ipx.node_key_file {path}: 5 bytes, at least 16 needed" in res.stderr
    assert "Traceback" not in res.stderr


def test_the_node_settings_need_a_restart() -> None:
    # Nodes already given out must stay what the clients hold: a reload keeps them running.
    old = load_config(None, {})
    new = load_config(
        None, {}, {"ipx": {"node_assignment": "address", "node_key_file": "/elsewhere/key"}}
    )
    assert restart_only_changes(old, new) == ["ipx.node_assignment", "ipx.node_key_file"]
    kept = keep_restart_only(old, new).ipx
    assert (kept.node_assignment, kept.node_key_file) == ("keyed", old.ipx.node_key_file)
