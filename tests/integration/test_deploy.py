"""The container entrypoint (deploy/docker/entrypoint.sh), run the way Docker would run it.

There is no Docker engine here, so these tests recreate what
``docker run --network host --cap-drop ALL --cap-add ... --security-opt
no-new-privileges:true`` gives the entrypoint. It starts as root in a network namespace,
with a bounding set of only the capabilities added, no inheritable capabilities and
no_new_privs set (``setpriv --bounding-set=-all,+... --inh-caps=-all --no-new-privs``).
The tests then check what the entrypoint does:

* With the compose file's capabilities, the real bridge runs as uid 10001 with only
  NET_BIND_SERVICE and NET_RAW (ambient and effective). It binds UDP 213, answers a
  DOSBox registration, relays a broadcast in preserve mode (raw sockets) and answers the
  image's HEALTHCHECK script.
* With a capability missing, it refuses with one line naming the ``--cap-add`` to add and
  exits 2. It works out what the configuration needs from flags, environment and the file.
  These decision tests run a stub in place of ipxbridge that prints its identity.

uid 10001 and the interpreter. The Python that runs the tests may live where uid 10001
cannot reach it. On the development machines it is pyenv under /root, which is mode
0700. In that case every command runs in a private mount namespace (``unshare --mount``).
There, the directory that blocks access is covered by a world-traversable tmpfs that holds
a bind mount of just the interpreter's tree. Paths stay identical (the RPATH of the
interpreter keeps working) and nothing changes on the host. In the image the venv is in
/opt/ipxbridge, so this is a test-bed detail.
"""

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ipxbridge.wire import ipx
from scripts.harness import (
    ROOT,
    BridgeProcess,
    Client,
    Netns,
    bridge_get,
    inside,
    sh,
)
from tests.integration.conftest import require

ENTRYPOINT = ROOT / "deploy" / "docker" / "entrypoint.sh"
HEALTHCHECK = ROOT / "deploy" / "docker" / "healthcheck.py"
RUN_UID = 10001

CAP_SETGID, CAP_SETUID, CAP_SETPCAP = 6, 7, 8
CAP_NET_BIND_SERVICE, CAP_NET_ADMIN, CAP_NET_RAW = 10, 12, 13
# What deploy/docker-compose.yml adds after cap_drop: [ALL].
COMPOSE_CAPS = ("net_bind_service", "net_raw", "setuid", "setgid")

OVERLAY_SCRIPT = """set -e
mount --bind "$IXB_OVL_DIR/$IXB_OVL_CHILD" "$IXB_OVL_STASH"
mount -t tmpfs -o mode=0755,size=1m ixb-overlay "$IXB_OVL_DIR"
mkdir "$IXB_OVL_DIR/$IXB_OVL_CHILD"
mount --bind "$IXB_OVL_STASH" "$IXB_OVL_DIR/$IXB_OVL_CHILD"
exec "$@"
"""

STUB = """#!/bin/sh
# stands in for ipxbridge: who am I, with which capabilities, called how
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
grep -E '^(CapEff|CapPrm|CapAmb|CapBnd|NoNewPrivs):' /proc/$$/status
echo "args=$*"
"""


def mask(*bits: int) -> int:
    out = 0
    for bit in bits:
        out |= 1 << bit
    return out


def status_fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def uid_reaches_python(prefix: list[str], env: dict[str, str]) -> bool:
    """Can uid 10001 start this interpreter and import ipxbridge (inside ``prefix``)?

    Started from a shell, as the ``ipxbridge`` script in the scratch directory starts it:
    setpriv's own exec was seen to succeed where a shell's then fails (a venv's symlink to
    an interpreter under /root).
    """
    probe = [
        *prefix,
        "setpriv",
        f"--reuid={RUN_UID}",
        f"--regid={RUN_UID}",
        "--clear-groups",
        "--",
        "sh",
        "-c",
        'exec "$0" -c "import ipxbridge, pydantic, pyroute2, yaml"',
        sys.executable,
    ]
    res = subprocess.run(
        probe, capture_output=True, timeout=30, check=False, cwd="/", env={**os.environ, **env}
    )
    return res.returncode == 0


@dataclass
class Launcher:
    """Builds the command lines; owns a world-readable scratch directory."""

    scratch: Path
    overlay: list[str] = field(default_factory=list)
    overlay_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls) -> "Launcher":
        scratch = Path(tempfile.mkdtemp(prefix="ixb-deploy-"))
        scratch.chmod(0o755)  # uid 10001 runs the scripts placed here
        launcher = cls(scratch)
        try:
            if not uid_reaches_python([], {}):
                launcher.cover_blocking_directory()
        except BaseException:
            launcher.close()
            raise
        (scratch / "ipxbridge").write_text(f'#!/bin/sh\nexec {sys.executable} -m ipxbridge "$@"\n')
        (scratch / "stub").write_text(STUB)
        for name in ("ipxbridge", "stub"):
            (scratch / name).chmod(0o755)
        return launcher

    def cover_blocking_directory(self) -> None:
        # In a virtual environment (scripts/test.sh makes one) the interpreter itself is in
        # the base installation: either tree may be the one behind a closed directory.
        for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
            target = Path(os.path.realpath(prefix))
            blocked = next(
                (
                    p
                    for p in [*reversed(target.parents), target]
                    if not p.stat().st_mode & stat.S_IXOTH
                ),
                None,
            )
            if blocked is not None and blocked != target:
                break
        else:
            pytest.fail(f"uid {RUN_UID} cannot run {sys.executable} and no overlay would help")
        child = target.relative_to(blocked).parts[0]
        stash = self.scratch / "stash"
        stash.mkdir()
        script = self.scratch / "overlay.sh"
        script.write_text(OVERLAY_SCRIPT)
        self.overlay = ["unshare", "--mount", "--propagation", "private", "--", "sh", str(script)]
        self.overlay_env = {
            "IXB_OVL_DIR": str(blocked),
            "IXB_OVL_CHILD": child,
            "IXB_OVL_STASH": str(stash),
        }
        if not uid_reaches_python(self.overlay, self.overlay_env):
            pytest.fail(f"uid {RUN_UID} cannot run {sys.executable} even with {blocked} covered")

    def argv(
        self,
        ns: str,
        caps: tuple[str, ...],
        args: tuple[str, ...],
        *,
        as_uid: int | None = None,
    ) -> list[str]:
        """The entrypoint in ``ns`` as Docker starts it: root, only ``caps``, NNP."""
        bounding = ",".join(["-all", *(f"+{c}" for c in caps)])
        user = [f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups"] if as_uid else []
        return [
            *self.overlay,
            "ip",
            "netns",
            "exec",
            ns,
            "setpriv",
            f"--bounding-set={bounding}",
            "--inh-caps=-all",
            "--no-new-privs",
            *user,
            "--",
            str(ENTRYPOINT),
            *args,
        ]

    def env(self, exec_name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("IPXBRIDGE_") and not k.startswith("IXB_")
        }
        return {
            **base,
            **self.overlay_env,
            "IPXBRIDGE_EXEC": str(self.scratch / exec_name),
            **(extra or {}),
        }

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    require("ip", "setpriv", "unshare")
    lau = Launcher.create()
    try:
        yield lau
    finally:
        lau.close()


# --- the real bridge through the entrypoint ----------------------------------------------


class EntrypointBridge(BridgeProcess):
    """The bridge started through the entrypoint (BridgeProcess runs ``python -m``)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_dir: Path, ready: str) -> None:
        self._start(argv, log_dir / "entrypoint-bridge.log", cwd="/", env=env)
        self.wait_for(ready, 15)


@pytest.mark.netns
def test_bridge_runs_as_10001_with_only_its_capabilities_and_relays(
    net: Netns, launcher: Launcher, workdir: Path
) -> None:
    pa, box, hb = net.add("pa"), net.add("box"), net.add("hb")
    net.link(pa, "eth0", "10.71.1.10/24", box, "lanA", "10.71.1.1/24")
    net.link(box, "lanB", "10.71.2.1/24", hb, "eth0", "10.71.2.20/24")
    sh("ip", "-n", pa, "route", "add", "default", "via", "10.71.1.1")
    sh("ip", "-n", hb, "route", "add", "default", "via", "10.71.2.1")
    sh("ip", "netns", "exec", box, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    args = ("run", "--iface", "lanA", "--iface", "lanB", "--source-mode", "preserve")
    # The image's state directory: owned by 10001, mode 0700 (Dockerfile), for the node key.
    state = launcher.scratch / "state"
    state.mkdir(mode=0o700)
    os.chown(state, RUN_UID, RUN_UID)
    key_file = state / "node.key"
    bridge = EntrypointBridge(
        launcher.argv(box, COMPOSE_CAPS, (*args, "--fast-path", "off")),
        launcher.env("ipxbridge", {"IPXBRIDGE_IPX__NODE_KEY_FILE": str(key_file)}),
        workdir,
        # both services up, in either order (the relay starts first: R18)
        ready=r"(?s)(?=.*IPX tunnel on udp 0\.0\.0\.0:213)(?=.*relaying between: .*lanA.*lanB)",
    )
    try:
        # every exec along the way kept the pid: this is the bridge itself
        st = status_fields(Path(f"/proc/{bridge.proc.pid}/status").read_text())
        assert st["Name"].startswith("python"), st["Name"]
        assert st["Uid"].split() == [str(RUN_UID)] * 4
        assert st["Gid"].split() == [str(RUN_UID)] * 4
        assert st["Groups"] == ""
        assert st["NoNewPrivs"] == "1"
        wanted = mask(CAP_NET_BIND_SERVICE, CAP_NET_RAW)
        for key in ("CapEff", "CapPrm", "CapAmb"):
            assert int(st[key], 16) == wanted, (key, st[key])
        # without CAP_SETPCAP the bounding set cannot shrink; no_new_privs keeps it moot
        assert int(st["CapBnd"], 16) & ~mask(CAP_SETUID, CAP_SETGID) == wanted

        # UDP 213 (NET_BIND_SERVICE): a DOSBox-protocol registration gets its reply, with
        # the keyed node from the key the bridge made as 10001 in its state directory
        client = Client(pa, ("10.71.1.1", 213))
        node_key = key_file.read_bytes()
        assert (key_file.stat().st_uid, stat.S_IMODE(key_file.stat().st_mode)) == (RUN_UID, 0o600)
        port = client.sock.getsockname()[1]
        assert client.node == ipx.keyed_node(node_key, "10.71.1.10", port)
        client.sock.close()

        # preserve mode (NET_RAW): the broadcast crosses with the player's own source
        with inside(pa):
            player = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with inside(hb):
            host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with player, host:
            player.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            player.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"eth0")
            player.bind(("0.0.0.0", 50100))
            host.bind(("0.0.0.0", 47624))
            host.settimeout(3)
            player.sendto(b"deploy test broadcast", ("255.255.255.255", 47624))
            data, src = host.recvfrom(2048)
        assert data == b"deploy test broadcast"
        assert src == ("10.71.1.10", 50100)

        # the image's HEALTHCHECK script against the bridge's default HTTP listener
        health = subprocess.run(
            ["ip", "netns", "exec", box, sys.executable, "-I", str(HEALTHCHECK)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        assert health.returncode == 0, health.stderr
    finally:
        code = bridge.stop()
    # SIGTERM reached the bridge itself (it is the exec'd process) and it stopped cleanly
    assert code == 0, bridge.log()
    summary = bridge.summary()
    assert summary["received"] >= 1
    assert summary["control"] >= 1
    assert "Traceback" not in bridge.log()


def promiscuity(ns: str, dev: str) -> int:
    out = subprocess.run(
        ["ip", "-n", ns, "-d", "link", "show", dev],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    return int(out.split("promiscuity ", 1)[1].split()[0])


@pytest.mark.netns
def test_native_ipx_port_opens_as_10001_with_net_raw_alone(
    net: Netns, launcher: Launcher, workdir: Path
) -> None:
    """Least privilege for interface ports: an ethernet port needs NET_RAW, and nothing more.

    In rewrite mode the relay needs no raw socket, but the IPX interface port keeps NET_RAW
    (an AF_PACKET socket). Promiscuous mode comes with the socket's membership
    (PACKET_ADD_MEMBERSHIP, no NET_ADMIN) and goes when the bridge stops.
    """
    box, st = net.add("box"), net.add("st")
    net.link(box, "seg0", "10.72.1.1/24", st, "eth0", "10.72.1.20/24")
    assert promiscuity(box, "seg0") == 0
    args = ("run", "--source-mode", "rewrite", "--ipx-iface", "seg0:ethernet")
    bridge = EntrypointBridge(
        launcher.argv(box, COMPOSE_CAPS, args),
        launcher.env("ipxbridge"),
        workdir,
        ready=r"IPX interface ports: seg0/ethernet \(",
    )
    try:
        st_fields = status_fields(Path(f"/proc/{bridge.proc.pid}/status").read_text())
        assert st_fields["Uid"].split() == [str(RUN_UID)] * 4
        wanted = mask(CAP_NET_BIND_SERVICE, CAP_NET_RAW)
        for key in ("CapEff", "CapAmb"):
            assert int(st_fields[key], 16) == wanted, (key, st_fields[key])
        assert promiscuity(box, "seg0") == 1
        # A native station's Ethernet II broadcast (docs/protocols.md 3.1) reaches the port: the
        # only port, so it is dropped there (no_destination), and counted.
        packet = ipx.build_packet(
            dst_node=ipx.BROADCAST_NODE,
            dst_socket=0x4545,
            src_node=bytes.fromhex("00a0c9123456"),
            src_socket=0x4545,
            payload=b"native hello",
        )
        frame = b"\xff" * 6 + bytes.fromhex("00a0c9123456") + b"\x81\x37" + packet
        with inside(st):
            raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        metric = 'ipxbridge_ipx_port_received_packets_total{interface="seg0",kind="ethernet"}'
        seen = ""
        with raw:
            raw.bind(("eth0", 0))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                raw.send(frame.ljust(60, b"\0"))  # padded to the 60-byte minimum frame
                time.sleep(0.2)
                seen = next(
                    (m for m in bridge_get(box, "/metrics").splitlines() if m.startswith(metric)),
                    "",
                )
                if seen and float(seen.split()[-1]) >= 1:
                    break
        assert seen, bridge_get(box, "/metrics")
        assert float(seen.split()[-1]) >= 1, seen
    finally:
        code = bridge.stop()
    assert code == 0, bridge.log()
    assert "NOT open" not in bridge.log()
    assert promiscuity(box, "seg0") == 0  # given back with the socket
    summary = bridge.summary()
    assert summary["received"] >= 1, bridge.log()
    assert "Traceback" not in bridge.log()


@pytest.mark.netns
def test_sigterm_stops_the_bridge_cleanly_as_pid_1(
    net: Netns, launcher: Launcher, workdir: Path
) -> None:
    """In a container the exec'd bridge is PID 1, which gets no default SIGTERM action."""
    box = net.add("pid1")
    argv = ["unshare", "--pid", "--fork", "--", *launcher.argv(box, COMPOSE_CAPS, ("run",))]
    bridge = EntrypointBridge(argv, launcher.env("ipxbridge"), workdir, ready=r"HTTP API on")
    try:
        (pid,) = sh("ip", "netns", "pids", box).stdout.split()
        st = status_fields(Path(f"/proc/{pid}/status").read_text())
        assert st["NSpid"].split()[-1] == "1"  # the bridge itself is PID 1 in its namespace
        assert st["Uid"].split()[0] == str(RUN_UID)
        started = time.monotonic()
        os.kill(int(pid), signal.SIGTERM)
        assert bridge.proc.wait(10) == 0, bridge.log()
        assert time.monotonic() - started < 5
    finally:
        bridge.stop()
    assert "stopped; IPX:" in bridge.log()


def has_table(ns: str) -> bool:
    res = sh("ip", "netns", "exec", ns, "nft", "list", "table", "ip", "ipxbridge", check=False)
    return res.returncode == 0


def pids_by_name(ns: str) -> dict[str, list[str]]:
    """The processes in ``ns`` by their Name in /proc (the shell, the bridge)."""
    out: dict[str, list[str]] = {}
    for pid in sh("ip", "netns", "pids", ns).stdout.split():
        st = status_fields(Path(f"/proc/{pid}/status").read_text())
        out.setdefault(st["Name"], []).append(pid)
    return out


@pytest.mark.netns
def test_with_net_admin_it_stays_pid_1_and_removes_the_table_however_the_bridge_ends(
    net: Netns, launcher: Launcher, workdir: Path
) -> None:
    """R18 in the container: with NET_ADMIN the bridge's fast-path table could outlive it, so
    the entrypoint stays PID 1, passes signals on and runs ``ipxbridge cleanup`` before the
    bridge starts and after it exits: a SIGTERM (clean stop, exit 0) or a SIGKILL of the
    bridge alone (an OOM kill: the table would stay and keep copying)."""
    require("nft")
    box, a, b = net.add("nadm"), net.add("na"), net.add("nb")
    net.link(a, "eth0", "10.73.1.10/24", box, "lanA", "10.73.1.1/24")
    net.link(box, "lanB", "10.73.2.1/24", b, "eth0", "10.73.2.20/24")
    caps = (*COMPOSE_CAPS, "net_admin")
    args = ("run", "--ipx-listen", "off", "--iface", "lanA", "--iface", "lanB")

    def start(*extra: str) -> EntrypointBridge:
        argv = ["unshare", "--pid", "--fork", "--", *launcher.argv(box, caps, (*args, *extra))]
        return EntrypointBridge(
            argv, launcher.env("ipxbridge"), workdir, ready=r"relaying between: .*lanA.*lanB"
        )

    # a table an earlier run left is gone before the bridge starts, even on the Python path
    sh("ip", "netns", "exec", box, "nft", "add", "table", "ip", "ipxbridge")
    bridge = start("--fast-path", "off")
    try:
        assert not has_table(box)
        procs = pids_by_name(box)
        (shell,) = procs["entrypoint.sh"]
        (python,) = [
            pid for name, pids in procs.items() if name.startswith("python") for pid in pids
        ]
        sup = status_fields(Path(f"/proc/{shell}/status").read_text())
        assert sup["NSpid"].split()[-1] == "1"
        # stepped down too (root without CAP_KILL could not signal the bridge), NET_ADMIN kept
        assert sup["Uid"].split() == [str(RUN_UID)] * 4
        assert int(sup["CapAmb"], 16) == mask(CAP_NET_RAW, CAP_NET_ADMIN)
        st = status_fields(Path(f"/proc/{python}/status").read_text())
        assert st["Uid"].split()[0] == str(RUN_UID)
        assert int(st["CapAmb"], 16) == mask(CAP_NET_RAW)  # no fast path: no NET_ADMIN
        os.kill(int(shell), signal.SIGTERM)  # docker stop: to PID 1, passed on to the bridge
        assert bridge.proc.wait(10) == 0, bridge.log()
    finally:
        bridge.stop()
    assert "stopped; relay:" in bridge.log()  # the bridge's own clean stop

    # the fast path, then the bridge alone killed (the OOM killer): cleanup still runs
    bridge = start("--source-mode", "preserve", "--fast-path", "on")
    try:
        assert has_table(box)
        procs = pids_by_name(box)
        (python,) = [
            pid for name, pids in procs.items() if name.startswith("python") for pid in pids
        ]
        os.kill(int(python), signal.SIGKILL)
        assert bridge.proc.wait(10) == 128 + signal.SIGKILL, bridge.log()
    finally:
        bridge.stop()
    assert not has_table(box), bridge.log()
    assert "ipxbridge cleanup: removed nftables table ip ipxbridge" in bridge.log()


# --- what the entrypoint decides ---------------------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def status(self) -> dict[str, str]:
        return status_fields(self.out)

    @property
    def uid(self) -> str:
        return self.out.split()[0]

    def cap(self, key: str) -> int:
        return int(self.status[key], 16)


def entry(
    launcher: Launcher,
    ns: str,
    caps: tuple[str, ...],
    *args: str,
    env: dict[str, str] | None = None,
    as_uid: int | None = None,
) -> Outcome:
    res = subprocess.run(
        launcher.argv(ns, caps, args, as_uid=as_uid),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd="/",
        env=launcher.env("stub", env),
    )
    return Outcome(res.returncode, res.stdout, res.stderr)


@pytest.fixture
def ns(net: Netns) -> str:
    """A fresh namespace: ip_unprivileged_port_start is 1024 there, whatever the host says."""
    return net.add("ep")


def refused(outcome: Outcome, *flags: str) -> str:
    assert outcome.code == 2, outcome
    assert outcome.out == "", "ipxbridge must not have been started"
    lines = outcome.err.splitlines()
    assert len(lines) == 1, outcome.err
    line = lines[0]
    assert line.startswith("ipxbridge-entrypoint: missing capabilities: ")
    assert line.endswith(" to docker run (compose: cap_add)")
    assert line.count("--cap-add") == len(flags), line
    for flag in flags:
        assert f"--cap-add {flag}" in line
    return line


@pytest.mark.netns
def test_refuses_without_net_bind_service_naming_the_cap_add(launcher: Launcher, ns: str) -> None:
    line = refused(entry(launcher, ns, ("net_raw", "setuid", "setgid"), "run"), "NET_BIND_SERVICE")
    assert "IPX port 213 < 1024" in line


@pytest.mark.netns
def test_refuses_without_setuid_and_setgid(launcher: Launcher, ns: str) -> None:
    line = refused(entry(launcher, ns, ("net_bind_service", "net_raw"), "run"), "SETUID", "SETGID")
    assert "to switch to uid 10001" in line


@pytest.mark.netns
def test_refuses_all_missing_at_once(launcher: Launcher, ns: str) -> None:
    refused(
        entry(launcher, ns, (), "run", "--source-mode", "preserve", "--fast-path=on"),
        "SETUID",
        "SETGID",
        "NET_BIND_SERVICE",
        "NET_RAW",
        "NET_ADMIN",
    )


@pytest.mark.netns
def test_preserve_needs_net_raw_and_fast_path_on_needs_net_admin(
    launcher: Launcher, ns: str
) -> None:
    base = ("net_bind_service", "setuid", "setgid")
    refused(entry(launcher, ns, base, "run", "--source-mode", "preserve"), "NET_RAW")
    refused(entry(launcher, ns, (*base, "net_raw"), "run", "--fast-path", "on"), "NET_ADMIN")
    # the same decisions from the environment and from the config file
    env = {"IPXBRIDGE_RELAY__SOURCE_MODE": "preserve"}
    refused(entry(launcher, ns, base, "run", env=env), "NET_RAW")
    cfg = launcher.scratch / "preserve.yaml"
    cfg.write_text("relay:\n  interfaces: []\n  source_mode: 'preserve'   # raw copies\n")
    cfg.chmod(0o644)
    refused(entry(launcher, ns, base, "run", "--config", str(cfg)), "NET_RAW")


@pytest.mark.netns
def test_steps_down_keeping_only_the_network_capabilities(launcher: Launcher, ns: str) -> None:
    got = entry(launcher, ns, COMPOSE_CAPS, "run", "--config", "/nonexistent.yaml")
    assert got.code == 0, got
    assert got.out.splitlines()[0] == f"uid={RUN_UID} gid={RUN_UID} groups={RUN_UID}"
    assert got.out.splitlines()[-1] == "args=run --config /nonexistent.yaml"
    wanted = mask(CAP_NET_BIND_SERVICE, CAP_NET_RAW)
    assert got.cap("CapEff") == got.cap("CapPrm") == got.cap("CapAmb") == wanted
    assert got.status["NoNewPrivs"] == "1"
    assert got.err == ""


@pytest.mark.netns
def test_optional_capabilities_follow_the_mode(launcher: Launcher, ns: str) -> None:
    with_admin = (*COMPOSE_CAPS, "net_admin")
    auto = entry(launcher, ns, with_admin, "run")
    assert auto.cap("CapAmb") == mask(CAP_NET_BIND_SERVICE, CAP_NET_RAW, CAP_NET_ADMIN)
    no_fast = entry(launcher, ns, with_admin, "run", "--fast-path", "off")
    assert no_fast.cap("CapAmb") == mask(CAP_NET_BIND_SERVICE, CAP_NET_RAW)
    rewrite = entry(launcher, ns, with_admin, "run", "--source-mode=rewrite")
    assert rewrite.cap("CapAmb") == mask(CAP_NET_BIND_SERVICE)
    # NET_RAW is optional in auto mode: without it the bridge falls back to rewrite
    bare = entry(launcher, ns, ("net_bind_service", "setuid", "setgid"), "run")
    assert bare.code == 0, bare
    assert bare.cap("CapAmb") == mask(CAP_NET_BIND_SERVICE)


@pytest.mark.netns
def test_ipx_interface_ports_keep_net_raw_in_rewrite_mode(launcher: Launcher, ns: str) -> None:
    """Native IPX ports open an AF_PACKET socket: NET_RAW is kept when IPX interface ports
    are configured (flag, environment or file), even where the relay needs no raw socket."""
    rewrite = ("--source-mode", "rewrite")
    with_raw = mask(CAP_NET_BIND_SERVICE, CAP_NET_RAW)
    without = mask(CAP_NET_BIND_SERVICE)
    flag = entry(launcher, ns, COMPOSE_CAPS, "run", *rewrite, "--ipx-iface", "eth1:ethernet")
    assert flag.cap("CapAmb") == with_raw
    assert (
        entry(launcher, ns, COMPOSE_CAPS, "run", *rewrite, "--ipx-iface=eth1").cap("CapAmb")
        == with_raw
    )
    env = {"IPXBRIDGE_IPX__INTERFACES": "[{name: eth1, kinds: [ethernet]}]"}
    assert entry(launcher, ns, COMPOSE_CAPS, "run", *rewrite, env=env).cap("CapAmb") == with_raw
    none = {"IPXBRIDGE_IPX__INTERFACES": " [ ] "}
    assert entry(launcher, ns, COMPOSE_CAPS, "run", *rewrite, env=none).cap("CapAmb") == without
    files = {
        "block.yaml": ("ipx:\n  interfaces:\n    # native DOS PCs\n    - name: eth1\n", with_raw),
        "flow.yaml": ("ipx:\n  interfaces: [{name: eth1}]\n", with_raw),
        "empty.yaml": ("ipx:\n  interfaces: []\nrelay:\n  interfaces:\n    - name: eth1\n",
                       without),
        "relay_only.yaml": ("relay:\n  interfaces:\n    - name: eth1\nipx:\n  rejoin: true\n",
                            without),
    }  # fmt: skip
    for name, (text, wanted) in files.items():
        cfg = launcher.scratch / name
        cfg.write_text(text)
        cfg.chmod(0o644)
        got = entry(launcher, ns, COMPOSE_CAPS, "run", *rewrite, "--config", str(cfg))
        assert got.code == 0, (name, got)
        assert got.cap("CapAmb") == wanted, name
    # Not required: without NET_RAW the bridge starts, and says which port stays closed.
    bare = entry(launcher, ns, ("net_bind_service", "setuid", "setgid"), "run", "--ipx-iface",
                 "eth1")  # fmt: skip
    assert bare.code == 0, bare
    assert bare.cap("CapAmb") == without


@pytest.mark.netns
def test_unprivileged_ports_need_no_net_bind_service(launcher: Launcher, ns: str) -> None:
    only_setid = ("setuid", "setgid")
    flags = entry(
        launcher, ns, only_setid, "run", "--ipx-listen", "0.0.0.0:2130", "--metrics-listen=off"
    )
    assert flags.code == 0, flags
    assert flags.uid == f"uid={RUN_UID}"
    assert flags.cap("CapAmb") == 0
    env = {"IPXBRIDGE_IPX__LISTEN": '"0.0.0.0:2130"', "IPXBRIDGE_HTTP__LISTEN": "off"}
    assert entry(launcher, ns, only_setid, "run", env=env).code == 0
    cfg = launcher.scratch / "high-port.yaml"
    cfg.write_text(
        "# a LAN party on an unprivileged port\nipx:\n"
        '  listen: "0.0.0.0:2130"   # not 213\n  peers: []\nhttp:\n  listen: off\n'
    )
    cfg.chmod(0o644)
    assert entry(launcher, ns, only_setid, "run", "--config", str(cfg)).code == 0
    # precedence as in ipxbridge: file < environment < flags
    low = {"IPXBRIDGE_IPX__LISTEN": "0.0.0.0:213"}
    refused(
        entry(launcher, ns, only_setid, "run", "--config", str(cfg), env=low), "NET_BIND_SERVICE"
    )
    refused(
        entry(launcher, ns, only_setid, "run", "--ipx-listen", "0.0.0.0:213", env=env),
        "NET_BIND_SERVICE",
    )
    # the HTTP API below 1024 needs it as well; an IPX tunnel turned off does not
    line = refused(
        entry(
            launcher, ns, only_setid, "run", "--ipx-listen", "off", "--metrics-listen", "0.0.0.0:80"
        ),
        "NET_BIND_SERVICE",
    )
    assert "HTTP port 80 < 1024" in line
    # and so does the browser players' listener on 443 (wss:// without a proxy)
    line = refused(
        entry(launcher, ns, only_setid, "run", "--ipx-listen", "off", "--ws-listen", "0.0.0.0:443"),
        "NET_BIND_SERVICE",
    )
    assert "browser players' port 443 < 1024" in line


@pytest.mark.netns
def test_config_unreadable_by_10001_is_reported(launcher: Launcher, ns: str) -> None:
    cfg = launcher.scratch / "secret.yaml"
    cfg.write_text("ipx:\n  listen: 0.0.0.0:213\n")
    cfg.chmod(0o600)
    got = entry(launcher, ns, COMPOSE_CAPS, "run", "--config", str(cfg))
    assert got.code == 2
    assert got.out == ""
    assert got.err.strip() == (
        f"ipxbridge-entrypoint: config {cfg} is not readable by uid {RUN_UID}: "
        f"make it world-readable (chmod 644) or chown {RUN_UID}"
    )


@pytest.mark.netns
def test_bounding_set_shrinks_when_setpcap_is_available(launcher: Launcher, ns: str) -> None:
    got = entry(launcher, ns, (*COMPOSE_CAPS, "setpcap"), "run")
    assert got.code == 0, got
    wanted = mask(CAP_NET_BIND_SERVICE, CAP_NET_RAW)
    assert got.cap("CapBnd") == got.cap("CapAmb") == wanted


@pytest.mark.netns
def test_other_commands_pass_through_without_checks(launcher: Launcher, ns: str) -> None:
    got = entry(launcher, ns, (), "check-config", "/etc/ipxbridge/config.yaml")
    assert got.code == 0, got
    assert got.uid == "uid=0"  # as started: no capability checks, no step-down
    assert got.out.splitlines()[-1] == "args=check-config /etc/ipxbridge/config.yaml"
    assert entry(launcher, ns, (), "--version").out.splitlines()[-1] == "args=--version"


@pytest.mark.netns
def test_started_non_root_it_just_execs(launcher: Launcher, ns: str) -> None:
    got = entry(launcher, ns, (), "run", as_uid=RUN_UID)  # docker run --user 10001
    assert got.code == 0, got
    assert got.uid == f"uid={RUN_UID}"
    assert got.cap("CapEff") == 0
    assert got.out.splitlines()[-1] == "args=run"


@pytest.mark.netns
def test_real_bridge_refusal_leaves_nothing_running(net: Netns, launcher: Launcher) -> None:
    """End to end: without NET_BIND_SERVICE, the exit is the entrypoint's, not a traceback."""
    box = net.add("ref")
    res = subprocess.run(
        launcher.argv(box, ("net_raw", "setuid", "setgid"), ("run",)),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd="/",
        env=launcher.env("ipxbridge"),
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1
    # the entrypoint's own line, before setpriv or the bridge could fail less clearly
    assert res.stderr.startswith("ipxbridge-entrypoint: missing capabilities: NET_BIND_SERVICE")
    assert "--cap-add NET_BIND_SERVICE" in res.stderr
    assert sh("ip", "netns", "pids", box).stdout.strip() == ""
