"""The container image, built from the repository's Dockerfile and run as the README says.

With podman (no Docker engine here) and a Debian bookworm base made with
debootstrap, standing in for ``python:3.12-slim-bookworm`` (``tests/integration/container.py``
says what it is and why). The image is built once per session; everything lives in a temp
dir (podman's storage included) and in network namespaces made here, and is removed after.

* The build itself, then the image's hygiene read from its filesystem: no pip.conf, no CA
  from this host, no proxy or pip index settings, no compiler, no pip cache, nothing
  world-writable, no tests.
* The README's ``docker run`` line, run in a namespace: PID 1 as uid 10001 with exactly
  NET_BIND_SERVICE and NET_RAW (effective and ambient), HEALTHCHECK healthy, ``/metrics``,
  a real DOSBox client registering and ``ipxnet ping`` answered, the read-only config
  mount read, SIGHUP reloading it, SIGTERM stopping within the stop timeout with the summary
  line; without each capability, one line and exit 2.
* ``docker-compose`` (1.29) with the repository's compose file, through podman's
  Docker-compatible socket: up, kill -s SIGHUP, stop, down.
* A copy of the Dockerfile with a broken HEALTHCHECK builds, runs and is reported unhealthy.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.harness import DosBox, Netns, bridge_get
from tests.integration.conftest import EARLY_BASE, require
from tests.integration.container import (
    BASE_TAG,
    IMAGE_TAG,
    ROOT,
    TOOLS,
    Podman,
    build_image,
    cap_names,
    checked,
    finish_base,
    proc_status,
    readme_docker_run,
    scan_tree,
    serve_wheels,
    start_base,
)

pytestmark = pytest.mark.netns

RUN_UID = 10001
BRIDGE_CAPS = {"NET_BIND_SERVICE", "NET_RAW"}  # README: what the bridge itself keeps
STOP_TIMEOUT = 10  # README/compose: stop_grace_period 10s
READY = r"IPX tunnel on udp"
# The test's config, mounted read-only: JSON logs (the image's default config logs text),
# so a JSON log line proves the mounted file was read.
CONFIG = """\
ipx:
  listen: "0.0.0.0:213"
logging:
  format: json
"""


@dataclass
class Built:
    """The session's podman, wheelhouse and image, with the build's output."""

    podman: Podman
    wheels_url: str  # the wheelhouse, served for the whole session (serve_wheels)
    build: subprocess.CompletedProcess[str]
    seconds: dict[str, float]


@pytest.fixture(scope="session")
def built(request: pytest.FixtureRequest) -> Iterator[Built]:
    """Stand-in base and image, built once per session in a temp dir removed afterwards.

    The base's first half was started when the session began (``EARLY_BASE``, the
    integration conftest), unless only some tests were selected here without it.
    """
    require(*TOOLS)
    early = request.config.stash.get(EARLY_BASE, None)
    if early is None:
        early = start_base()
    early.taken = True
    home = early.home
    podman = Podman(home)
    seconds: dict[str, float] = {}
    stack = contextlib.ExitStack()
    try:
        began = time.monotonic()
        early.wait()
        finish_base(podman, early.rootfs, home / "base.tar")
        shutil.rmtree(early.rootfs)
        seconds["base"] = time.monotonic() - began
        began = time.monotonic()
        wheels_url = stack.enter_context(serve_wheels(early.wheelhouse))
        build = build_image(podman, wheels_url, IMAGE_TAG)
        seconds["build"] = time.monotonic() - began
        print(f"\nstand-in base {seconds['base']:.0f} s more, image build {seconds['build']:.0f} s")
        yield Built(podman, wheels_url, build, seconds)
    finally:
        stack.close()
        podman.run("rm", "--force", "--all", "--time", "0", check=False)
        podman.run("system", "reset", "--force", check=False, timeout=300)
        subprocess.run(["umount", "-R", str(home / "storage")], capture_output=True, check=False)
        early.abandon()  # stops what has not finished; removes the temp dir


@pytest.fixture(scope="session")
def image(built: Built) -> Podman:
    """The podman holding a successfully built ``IMAGE_TAG``."""
    checked(built.build, "podman build")
    return built.podman


def test_the_dockerfile_builds_on_the_stand_in_base(built: Built) -> None:
    res = built.build
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    out = res.stdout + res.stderr
    assert f"Successfully tagged {IMAGE_TAG}" in out
    # pip read only the mounted wheelhouse: the build had no index to fall back on
    assert "Looking in links: http://127.0.0.1:" in out
    data = built.podman.inspect(IMAGE_TAG, "image")
    config = data["Config"]
    assert config["Entrypoint"] == ["/usr/local/bin/ipxbridge-entrypoint"]
    assert config["Cmd"] == ["run", "--config", "/etc/ipxbridge/config.yaml"]
    assert config.get("User", "") == ""  # the entrypoint steps down itself
    assert config["StopSignal"] == "SIGTERM"
    # --format docker keeps the HEALTHCHECK
    health = data["Healthcheck"]
    assert health["Test"][:2] == ["CMD", "/opt/ipxbridge/bin/python"], health
    # built on the stand-in, named as what it is
    assert built.podman.run("image", "exists", BASE_TAG, check=False).returncode == 0


def host_extra_cas() -> list[str]:
    """The base64 bodies of CAs this host added to its bundle (not Debian's), one line each."""
    bodies = []
    for crt in sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt")):
        lines = crt.read_text(errors="replace").splitlines()
        body = [line for line in lines if line and not line.startswith("-----")]
        if len(body) > 2:
            bodies.append(body[1])  # a line from inside the certificate, not its header
    return bodies


def test_image_hygiene(image: Podman) -> None:
    podman = image
    env = podman.inspect(IMAGE_TAG, "image")["Config"]["Env"]
    names = {entry.split("=", 1)[0] for entry in env}
    # PIP_NO_CACHE_DIR is set on purpose; no index, links, cert or proxy settings
    assert {n for n in names if n.startswith("PIP_")} <= {"PIP_NO_CACHE_DIR"}, env
    assert not {n for n in names if "proxy" in n.lower()}, env
    assert not names & {"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"}
    history = podman.run("history", "--no-trunc", "--format", "{{.CreatedBy}}", IMAGE_TAG).stdout
    assert "PIP_FIND_LINKS" not in history, history
    assert "PIP_NO_INDEX" not in history, history

    mount = Path(podman.run("image", "mount", IMAGE_TAG).stdout.strip())
    try:
        assert (mount / "opt/ipxbridge/bin/ipxbridge").is_file()
        for absent in (
            "etc/pip.conf",
            "root/.config/pip",
            "root/.pip",
            "root/.cache",
            "etc/xdg/pip",
            "src",
            "wheels",
            "usr/local/share/ca-certificates/custom-ca.crt",
        ):
            assert not (mount / absent).exists(), absent
        for compiler in ("gcc", "cc", "c++", "g++", "clang", "x86_64-linux-gnu-gcc-12"):
            assert not (mount / "usr/bin" / compiler).exists(), compiler
        # the compiled build (setup.py), without the compiler that built it
        site = sorted((mount / "opt/ipxbridge/lib").glob("python3*/site-packages"))
        assert site, "no site-packages in /opt/ipxbridge"
        assert list(site[0].glob("ipxbridge/runtime__mypyc.*.so")), "no mypyc runtime module"
        for layer in ("wire/ipx", "policy/switch", "policy/relay"):
            assert list(site[0].glob(f"ipxbridge/{layer}.*.so")), f"{layer} is not compiled"
        extra_cas = host_extra_cas()
        world_writable, tests_dirs, ca_copies = scan_tree(mount, extra_cas)
        assert world_writable == [], world_writable
        # no tests/ of ours (pip's vendored colorama ships its own: not ours to judge)
        ours = [d for d in tests_dirs if d.endswith(("site-packages/tests", "tests/integration"))]
        assert ours == [], tests_dirs
        assert "./tests" not in tests_dirs
        assert ca_copies == [], ca_copies
    finally:
        podman.run("image", "unmount", IMAGE_TAG, check=False)
    # The size by layer, for the README.
    layers = podman.run("history", "--format", "{{.Size}}\t{{.CreatedBy}}", IMAGE_TAG).stdout
    size = podman.inspect(IMAGE_TAG, "image")["Size"]
    print(f"\nimage {IMAGE_TAG}: {size / 1e6:.1f} MB\n{layers}")


# --- the README's docker run, in a namespace ----------------------------------------------


def run_argv(name: str, config: Path, *, drop: str = "", extra: tuple[str, ...] = ()) -> list[str]:
    """The README's ``docker run`` arguments for this test: its container name, config file
    and image tag; without ``--cap-add DROP`` and in the foreground if ``drop`` is given."""
    argv = readme_docker_run()
    assert argv[:2] == ["docker", "run"], argv
    args = argv[2:]
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--name":
            out += ["--name", name]
            i += 2
            continue
        if arg == "-v" and args[i + 1].endswith(":/etc/ipxbridge/config.yaml:ro"):
            out += ["-v", f"{config}:/etc/ipxbridge/config.yaml:ro"]
            i += 2
            continue
        if drop and arg == "--cap-add" and args[i + 1] == drop:
            i += 2
            continue
        if drop and arg == "-d":
            i += 1
            continue
        out.append(arg)
        i += 1
    assert out[-1] == "ipxbridge", out  # the image name
    return ["run", *out[:-1], *extra, IMAGE_TAG]


def test_readme_run_line_is_the_hardened_one() -> None:
    args = readme_docker_run()
    joined = " ".join(args)
    for flag in (
        "--network host",
        "--cap-drop ALL",
        "--security-opt no-new-privileges:true",
        "--read-only",
        "--tmpfs /tmp",
        "/etc/ipxbridge/config.yaml:/etc/ipxbridge/config.yaml:ro",
    ):
        assert flag in joined, flag
    added = {args[i + 1] for i, a in enumerate(args) if a == "--cap-add"}
    assert added == BRIDGE_CAPS | {"SETUID", "SETGID"}


@dataclass
class Running:
    """The README's container, running in namespace ``box``, with a client namespace."""

    podman: Podman
    net: Netns
    box: str
    client: str
    name: str
    config: Path


@pytest.fixture(scope="module")
def running(image: Podman, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """``box`` (10.71.1.1) runs the container; ``c1`` (10.71.1.11) is a client's host."""
    net = Netns()
    work = tmp_path_factory.mktemp("container")
    config = work / "config.yaml"
    config.write_text(CONFIG)
    config.chmod(0o644)
    name = "ixb-readme"
    try:
        box, client = net.add("cbox"), net.add("cc1")
        net.link(box, "lan1", "10.71.1.1/24", client, "eth0", "10.71.1.11/24")
        image.run(*run_argv(name, config), netns=box)
        image.wait_log(name, READY, 30)
        yield Running(image, net, box, client, name, config)
    finally:
        image.run("rm", "--force", "--time", "0", name, check=False)
        net.close()


def test_pid1_runs_as_uid_10001_with_exactly_the_documented_capabilities(
    running: Running,
) -> None:
    state = running.podman.inspect(running.name)["State"]
    assert state["Running"], state
    status = proc_status(int(state["Pid"]))
    assert status["NSpid"].split()[-1] == "1"  # PID 1 inside the container
    assert status["Name"].startswith(("ipxbridge", "python")), status["Name"]
    assert status["Uid"].split() == [str(RUN_UID)] * 4
    assert status["Gid"].split() == [str(RUN_UID)] * 4
    assert status["Groups"] == ""
    assert cap_names(status["CapEff"]) == BRIDGE_CAPS
    assert cap_names(status["CapAmb"]) == BRIDGE_CAPS
    assert cap_names(status["CapPrm"]) == BRIDGE_CAPS
    assert status["NoNewPrivs"] == "1"
    # the bounding set is what --cap-add gave (no CAP_SETPCAP to cut it): nothing more
    assert cap_names(status["CapBnd"]) == BRIDGE_CAPS | {"SETUID", "SETGID"}


def test_healthcheck_reports_healthy_and_metrics_answer(running: Running) -> None:
    deadline = time.monotonic() + 20
    while True:
        # With --network host the check's exec runs in the caller's network namespace.
        res = running.podman.run("healthcheck", "run", running.name, netns=running.box, check=False)
        if res.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "unhealthy" not in res.stdout + res.stderr
    health = running.podman.inspect(running.name)["State"]["Health"]
    assert health["Status"] == "healthy", health
    metrics = bridge_get(running.box, "/metrics")
    assert "# TYPE ipxbridge_" in metrics, metrics[:500]


def test_the_read_only_config_mount_is_read(running: Running) -> None:
    mounts = running.podman.inspect(running.name)["Mounts"]
    config_mount = next(m for m in mounts if m["Destination"] == "/etc/ipxbridge/config.yaml")
    assert config_mount["Source"] == str(running.config)
    assert config_mount["RW"] is False
    # JSON lines: set by the mounted file only (the image's default config logs text)
    ready = next(line for line in running.podman.logs(running.name).splitlines() if READY in line)
    assert json.loads(ready)["level"] == "info", ready


def test_the_node_key_is_made_in_the_named_state_volume(running: Running) -> None:
    # The README's run line mounts a named volume on /var/lib/ipxbridge: writable under
    # --read-only, owned by 10001 (the image's directory), kept when the container goes.
    mounts = running.podman.inspect(running.name)["Mounts"]
    state = next(m for m in mounts if m["Destination"] == "/var/lib/ipxbridge")
    assert (state["Type"], state["RW"]) == ("volume", True), state
    log = running.podman.logs(running.name)
    assert "IPX node key created in /var/lib/ipxbridge/node.key" in log, log
    assert "key in memory" not in log, log


@pytest.mark.dosbox
def test_a_real_dosbox_client_registers_and_ipxnet_ping_answers(
    running: Running, tmp_path: Path
) -> None:
    dosbox = DosBox(
        running.net,
        running.client,
        tmp_path,
        ["ipxnet connect 10.71.1.1 213 > C:\\CONN.TXT", "ipxnet ping > C:\\PING.TXT"],
        exit_when_done=True,
    )
    try:
        assert dosbox.wait(50) == 0
    finally:
        dosbox.kill()
    assert "connected to server at 10.71.1.1" in dosbox.read("CONN.TXT"), dosbox.read("CONN.TXT")
    # the bridge answers the ping for itself (ipx.answer_pings)
    assert "Response from 10.71.1.1, port 213" in dosbox.read("PING.TXT"), dosbox.read("PING.TXT")
    running.podman.wait_log(running.name, r"client 10\.71\.1\.11:\d+ registered", 5)


def test_sighup_reloads_the_mounted_config(running: Running) -> None:
    # The host edits the file in place (same inode: the bind mount sees it): text logs now.
    with running.config.open("r+") as f:
        f.write(CONFIG.replace("format: json", "format: text"))
        f.truncate()
    running.podman.run("kill", "--signal", "HUP", running.name)
    line = running.podman.wait_log(running.name, r".*configuration reloaded.*", 10).group(0)
    assert not line.startswith("{"), line  # logged with the reloaded (text) format
    assert " INFO " in line, line


def test_sigterm_stops_it_within_the_stop_timeout_with_the_summary(running: Running) -> None:
    began = time.monotonic()
    running.podman.run("stop", "--time", str(STOP_TIMEOUT), running.name, timeout=30)
    took = time.monotonic() - began
    state = running.podman.inspect(running.name)["State"]
    log = running.podman.logs(running.name)
    assert state["ExitCode"] == 0, (state, log)
    assert took < STOP_TIMEOUT, took  # SIGTERM did it, not the SIGKILL after the timeout
    assert "stopped; IPX:" in log, log


# --- a missing capability: one line, exit 2 -----------------------------------------------


@pytest.mark.parametrize(
    ("cap", "extra"),
    [
        ("SETUID", ()),
        ("SETGID", ()),
        ("NET_BIND_SERVICE", ()),  # UDP 213
        ("NET_RAW", ("-e", "IPXBRIDGE_RELAY__SOURCE_MODE=preserve")),
    ],
)
def test_a_missing_capability_gives_one_line_and_exit_2(
    image: Podman, tmp_path: Path, cap: str, extra: tuple[str, ...]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    config.chmod(0o644)
    net = Netns()
    try:
        ns = net.add("ccap")
        argv = run_argv(f"ixb-no-{cap.lower()}", config, drop=cap, extra=("--rm", *extra))
        res = image.run(*argv, netns=ns, check=False)
    finally:
        net.close()
    lines = [line for line in res.stderr.splitlines() if not line.startswith("time=")]
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == ""
    assert len(lines) == 1, lines
    assert lines[0].startswith("ipxbridge-entrypoint: missing capabilities: "), lines
    assert lines[0].endswith(f"add --cap-add {cap} to docker run (compose: cap_add)"), lines


# --- docker-compose through podman's Docker API ---------------------------------------------


def test_compose_up_sighup_stop_down_through_podmans_socket(image: Podman, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    config.chmod(0o644)
    sock = tmp_path / "podman.sock"
    # The compose file builds from ".." and tags ipxbridge:latest: use the built image.
    override = tmp_path / "override.yml"
    override.write_text(f"services:\n  ipxbridge:\n    image: {IMAGE_TAG}\n")
    compose = [
        "docker-compose",
        "--project-name",
        "ixbcompose",
        "-f",
        str(ROOT / "deploy/docker-compose.yml"),
        "-f",
        str(override),
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DOCKER_HOST": f"unix://{sock}",
        "IPXBRIDGE_CONFIG": str(config),
        "HOME": str(tmp_path),
    }

    def dc(*args: str) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [*compose, *args], capture_output=True, text=True, env=env, timeout=90, check=False
        )
        return checked(res, f"docker-compose {args[0]}")

    net = Netns()
    service: subprocess.Popen[bytes] | None = None
    try:
        ns = net.add("ccomp")
        service = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{ns}",
                *image.argv("system", "service", "--time", "0", f"unix://{sock}"),
            ],
            env=image.env,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "service.log").open("wb"),
        )
        deadline = time.monotonic() + 15
        while not sock.exists():
            assert service.poll() is None, (tmp_path / "service.log").read_text()
            assert time.monotonic() < deadline, "podman system service made no socket"
            time.sleep(0.1)
        dc("up", "-d")
        name = image.run(
            "ps",
            "--filter",
            "label=com.docker.compose.project=ixbcompose",
            "--format",
            "{{.Names}}",
        ).stdout.split()
        assert len(name) == 1, name
        image.wait_log(name[0], READY, 30)
        caps = proc_status(int(image.inspect(name[0])["State"]["Pid"]))
        assert cap_names(caps["CapAmb"]) == BRIDGE_CAPS
        assert caps["Uid"].split()[0] == str(RUN_UID)
        dc("kill", "-s", "SIGHUP")
        image.wait_log(name[0], "configuration reloaded", 10)
        began = time.monotonic()
        dc("stop")
        assert time.monotonic() - began < STOP_TIMEOUT
        assert "stopped; IPX:" in image.logs(name[0])
        assert image.inspect(name[0])["State"]["ExitCode"] == 0
        dc("down")
        assert image.run("ps", "-a", "--format", "{{.Names}}").stdout.split().count(name[0]) == 0
    finally:
        if service is not None:
            subprocess.run(
                [*compose, "down", "--timeout", "0"],
                env=env,
                capture_output=True,
                timeout=60,
                check=False,
            )
            service.send_signal(signal.SIGTERM)
            try:
                service.wait(10)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait(5)
        net.close()


# --- and a deliberately broken copy fails the checks -----------------------------------------


def test_a_broken_healthcheck_in_a_copy_of_the_dockerfile_is_reported_unhealthy(
    built: Built, image: Podman, tmp_path: Path
) -> None:
    original = (ROOT / "Dockerfile").read_text()
    good = '/usr/local/lib/ipxbridge/healthcheck.py"]'
    assert original.count(good) == 1
    broken = tmp_path / "Dockerfile"
    broken.write_text(original.replace(good, '/usr/local/lib/ipxbridge/missing.py"]'))
    tag = "localhost/ipxbridge:broken-healthcheck"
    res = build_image(image, built.wheels_url, tag, broken)  # all but the last layer cached
    checked(res, "podman build (broken copy)")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    config.chmod(0o644)
    net = Netns()
    name = "ixb-broken"
    try:
        ns = net.add("cbrk")
        argv = run_argv(name, config)
        image.run(*argv[:-1], tag, netns=ns)
        image.wait_log(name, READY, 30)
        # the bridge itself is fine: /-/healthy answers; only the HEALTHCHECK is broken
        assert bridge_get(ns, "/-/healthy")
        check = image.run("healthcheck", "run", name, netns=ns, check=False)
        assert check.returncode == 1, check
        assert "unhealthy" in check.stdout + check.stderr, check
        health = image.inspect(name)["State"]["Health"]
        # within the 10 s start period a failure leaves the status at "starting"
        assert health["Status"] in ("starting", "unhealthy"), health
        assert health["Log"][-1]["ExitCode"] != 0, health
    finally:
        image.run("rm", "--force", "--time", "0", name, check=False)
        image.run("rmi", "--force", tag, check=False)
        net.close()
