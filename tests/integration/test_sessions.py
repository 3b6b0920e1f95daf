"""The live game list end to end: a bridge probes fake DirectPlay 4 / 8 / IPX hosts in a
namespace; the sessions appear in ``ipxbridge sessions --json`` and expire when the hosts stop.

Topology: ``box`` (bridge, lan 10.51.0.1/24) <-> ``host`` (10.51.0.20/24) running
``fake_dplay_host.py``.
"""

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ipxbridge.wire.directplay import EnumSessionsReply, SessionDesc, build_enum_sessions_reply
from scripts.harness import ROOT, BridgeProcess, Client, Netns
from tests.factories import armada_user

FAKE_HOST = Path(__file__).with_name("fake_dplay_host.py")
TA = uuid.UUID("99797420-F5F5-11CF-9827-00A0241496C8")


def start_host(net: Netns, ns: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        net.exec_args(ns, sys.executable, str(FAKE_HOST), *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + (proc.stdout.read() if proc.poll() else "")
    return proc


def sessions(net: Netns, ns: str, *args: str) -> list[dict[str, object]]:
    res = subprocess.run(
        net.exec_args(ns, sys.executable, "-m", "ipxbridge", "sessions", "--json", *args),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert isinstance(data, list)
    return data


def wait_sessions(net: Netns, ns: str, count: int, timeout: float) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    found: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        found = sessions(net, ns)
        if len(found) == count:
            return found
        time.sleep(0.5)
    raise AssertionError(f"expected {count} sessions, got {found}")


@pytest.mark.netns
def test_probed_sessions_are_listed_and_expire(net: Netns, workdir: Path) -> None:
    box, host = net.add("box"), net.add("host")
    net.link(box, "lan", "10.51.0.1/24", host, "eth0", "10.51.0.20/24")
    # The fake IPX host registers and waits silently for enumerations, as a DirectPlay host
    # does: the bridge's own probes reach it within the reflection limit (docs/ipx.md,
    # "Verification").
    env = {"IPXBRIDGE_DIRECTPLAY__SESSION_EXPIRY": "4"}
    bridge = BridgeProcess(
        net, box, "--probe-interval", "1", "--ipx-listen", "10.51.0.1:213", log_dir=workdir, env=env
    )
    fake = start_host(
        net,
        host,
        "--name",
        "Armada LAN",
        "--players",
        "3",
        "--max",
        "8",
        "--password",
        "--ipx",
        "10.51.0.1:213",
    )
    try:
        found = wait_sessions(net, box, 3, 15)
        by_transport = {s["transport"]: s for s in found}
        assert set(by_transport) == {"dp4-tcp", "dp8", "ipx"}
        dp4 = by_transport["dp4-tcp"]
        assert dp4["game"] == "Star Trek: Armada"
        assert dp4["game_guid"] == "{76F93801-9340-11D2-AE34-00600895C779}"
        assert dp4["session_name"] == "Armada LAN"
        assert (dp4["players"], dp4["max_players"], dp4["password"]) == (3, 8, True)
        assert dp4["host"] == "10.51.0.20:2300"  # the host's TCP port from its SOCKADDR
        dp8 = by_transport["dp8"]
        assert dp8["session_name"] == "Armada LAN (DP8)"
        assert dp8["host"] == "10.51.0.20:2302"  # answered from the game port, not 6073
        assert dp8["game"] is None
        assert dp8["password"] is True
        ipx_session = by_transport["ipx"]
        assert ipx_session["session_name"] == "Armada LAN (IPX)"
        assert str(ipx_session["host"]).endswith(":4002")
        for s in found:
            assert set(s) >= {
                "game",
                "game_guid",
                "session_name",
                "players",
                "max_players",
                "password",
                "host",
                "transport",
                "last_seen",
            }
    finally:
        fake.kill()
        fake.wait(5)
    wait_sessions(net, box, 0, 10)  # expiry 4 s once the host stops answering
    assert bridge.stop() == 0
    assert "Traceback" not in bridge.log()


@pytest.mark.netns
def test_sessions_probe_without_a_bridge(net: Netns) -> None:
    box, host = net.add("box"), net.add("host")
    net.link(box, "lan", "10.52.0.1/24", host, "eth0", "10.52.0.20/24")
    fake = start_host(net, host, "--name", "Direct probe")
    try:
        found = sessions(net, box, "--probe", "--iface", "lan", "--timeout", "2")
    finally:
        fake.kill()
        fake.wait(5)
    names = sorted(str(s["session_name"]) for s in found)
    assert names == ["Direct probe", "Direct probe (DP8)"]


@pytest.mark.netns
def test_armada_lobby_state_reaches_sessions_json_and_text(net: Netns) -> None:
    """docs/protocols.md 1.6.1: Armada sends dwMaxPlayers 0 and no DirectPlay password flag; its
    user fields say 6 players, password, map lake.bzn. DP8 MaxPlayers 0 means no limit."""
    box, host = net.add("box"), net.add("host")
    net.link(box, "lan", "10.59.0.1/24", host, "eth0", "10.59.0.20/24")
    user = armada_user(players=6, flags=0x04, map_name=b"lake.bzn")
    fake = start_host(
        net,
        host,
        *("--name", "Locked", "--players", "2", "--max", "0"),
        *("--user", ",".join(str(word) for word in user)),
    )
    try:
        found = sessions(net, box, "--probe", "--iface", "lan", "--timeout", "2")
        text = subprocess.run(
            net.exec_args(
                box, sys.executable, "-m", "ipxbridge", "sessions", "--probe", "--iface", "lan",
                "--timeout", "2",
            ),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=ROOT,
        )  # fmt: skip
    finally:
        fake.kill()
        fake.wait(5)
    by_transport = {s["transport"]: s for s in found}
    dp4 = by_transport["dp4-tcp"]
    assert dp4["game"] == "Star Trek: Armada"
    assert (dp4["players"], dp4["max_players"], dp4["password"], dp4["open"]) == (2, 6, True, False)
    assert (dp4["join_disabled"], dp4["started"], dp4["head_to_head"]) == (False, False, False)
    assert dp4["map"] == "lake.bzn"
    assert dp4["user_bytes"] == "00060400 6c616b65 2e627a6e 00000000"  # raw, wire order
    dp8 = by_transport["dp8"]
    assert (dp8["max_players"], dp8["open"], dp8["join_disabled"]) == (None, True, None)
    assert text.returncode == 0, text.stderr
    rows = {line.split()[-2]: line for line in text.stdout.splitlines()[1:]}  # by transport
    assert "lake.bzn" in rows["dp4-tcp"]
    assert " 2/6 " in rows["dp4-tcp"]
    assert " password " in rows["dp4-tcp"]
    assert " open " not in rows["dp4-tcp"]
    assert " 2/unlimited " in rows["dp8"]
    assert " 2/0 " not in text.stdout


@pytest.mark.netns
def test_sessions_without_a_running_bridge_says_so(net: Netns) -> None:
    box = net.add("box")
    res = subprocess.run(
        net.exec_args(box, sys.executable, "-m", "ipxbridge", "sessions"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )
    assert res.returncode == 1
    assert "cannot reach the bridge" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.netns
def test_dplay_reply_carried_between_ipx_clients_is_listed(net: Netns, workdir: Path) -> None:
    """Inspection in the data path: the bridge lists what its IPX clients announce."""
    box, c1 = net.add("box"), net.add("c1")
    net.link(box, "lan", "10.53.0.1/24", c1, "eth0", "10.53.0.11/24")
    bridge = BridgeProcess(net, box, log_dir=workdir)
    try:
        host = Client(c1, ("10.53.0.1", 213))
        player = Client(c1, ("10.53.0.1", 213))
        player.announce()  # a player's game searches first (a broadcast) before it listens
        desc = SessionDesc(
            flags=0,
            instance_guid=uuid.uuid4(),
            application_guid=TA,
            max_players=4,
            current_players=2,
            user=(0, 0, 0, 0),
        )
        reply = build_enum_sessions_reply(EnumSessionsReply(desc, "TA over IPX"), bare=True)
        host.send(player.node, reply, sock=0x4002)
        assert player.receive(0x4002)[1] == reply  # forwarded unchanged...
        (session,) = wait_sessions(net, box, 1, 5)  # ...and inspected on the way
        assert session["game"] == "Total Annihilation"
        assert session["session_name"] == "TA over IPX"
        assert session["transport"] == "ipx"
        assert session["host"] == f"00000000.{host.node.hex()}:4002"
    finally:
        assert bridge.stop() == 0
