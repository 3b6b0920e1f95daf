"""Podman, a stand-in base image and the image build, for ``test_container.py``.

There is no Docker engine and no registry here (``docs/testbed.md``, "Building and
running the container image for real"). So the tests use podman with its storage, run
directory and configuration in a temp dir, and a base image made locally with debootstrap:
Debian bookworm (minbase) with its python3.11, python3-venv and python-is-python3. It is
tagged ``localhost/ipxbridge-test-base:debootstrap-bookworm`` and passed as the Dockerfile's
``BASE`` build argument: it stands in for ``python:3.12-slim-bookworm``, it is not that image.

pip inside the build installs from a wheelhouse built here beforehand and served to the
build on 127.0.0.1 (``PIP_NO_INDEX``/``PIP_FIND_LINKS`` build arguments), so
the build needs neither this machine's pip.conf nor its CA bundle, and none of it reaches
the image.
"""

import contextlib
import functools
import http.server
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASE_TAG = "localhost/ipxbridge-test-base:debootstrap-bookworm"
IMAGE_TAG = "localhost/ipxbridge:test"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

# The Debian images on Docker Hub ship this apt setting (debuerreotype's docker-clean):
# without it `apt-get update` in the Dockerfile would leave ~120 MB of /var/cache/apt/*.bin
# in the stand-in base's layer that the official base never has.
DOCKER_CLEAN = """\
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb \
/var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb \
/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""

CONTAINERS_CONF = """\
# podman on this test bed (docs/testbed.md): runc (crun 1.8 fails on hybrid
# cgroups), cgroupfs (no systemd), events to a file, ulimits runc may set.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

# linux/capability.h, by bit number
CAP_NAMES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
)


def cap_names(mask_hex: str) -> set[str]:
    """The capability names in a ``CapEff:``-style hex mask from /proc/PID/status."""
    mask = int(mask_hex, 16)
    return {name for bit, name in enumerate(CAP_NAMES) if mask >> bit & 1} | {
        f"bit{bit}" for bit in range(len(CAP_NAMES), 64) if mask >> bit & 1
    }


def proc_status(pid: int) -> dict[str, str]:
    """``/proc/PID/status`` as a dict of its fields."""
    out: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


CA_SCAN_DIRS = ("etc", "usr/local", "opt", "root", "usr/share/ca-certificates")


def scan_tree(mount: Path, needles: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Walk an image's mounted filesystem: (world-writable entries, ``tests`` directories,
    files under CA_SCAN_DIRS containing one of ``needles``), as paths relative to ``mount``.

    Symlinks and sticky directories (``/tmp``-like) do not count as world-writable.
    """
    world_writable: list[str] = []
    tests_dirs: list[str] = []
    matches: list[str] = []
    for dirpath, dirnames, filenames in os.walk(mount):
        here = Path(dirpath)
        rel = here.relative_to(mount).as_posix()
        if rel.split("/")[0] in ("proc", "sys", "dev"):
            dirnames.clear()
            continue
        tests_dirs += [f"{rel}/{d}" for d in dirnames if d in ("tests", "integration")]
        for name in dirnames + filenames:
            mode = (here / name).lstat().st_mode
            if stat.S_ISLNK(mode) or not mode & stat.S_IWOTH:
                continue
            if stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
                continue
            world_writable.append(f"{rel}/{name}")
        if not rel.startswith(CA_SCAN_DIRS):
            continue
        for name in filenames:
            path = here / name
            if path.is_symlink() or not path.is_file() or path.stat().st_size > 4_000_000:
                continue
            text = path.read_bytes().decode("latin-1")
            if any(needle in text for needle in needles):
                matches.append(f"{rel}/{name}")
    return world_writable, tests_dirs, matches


def debian_mirror() -> str:
    """The Debian mirror apt uses here (deb822 sources or sources.list), for debootstrap."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in stanza.splitlines() if re.match(r"^\w[\w-]*:", line)
            )
            suites = fields.get("Suites", "").split()
            if "bookworm" in suites and "security" not in fields.get("URIs", ""):
                return fields["URIs"].split()[0]
    listing = Path("/etc/apt/sources.list")
    if listing.exists():
        for line in listing.read_text().splitlines():
            words = line.split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == "bookworm":
                return words[1]
    return DEFAULT_MIRROR


def build_requirements() -> list[str]:
    """What pip needs to build and install the project: its build backend and dependencies."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires: list[str] = meta["build-system"]["requires"]
    dependencies: list[str] = meta["project"]["dependencies"]
    return [*requires, *dependencies]


def readme_docker_run() -> list[str]:
    """The README's ``docker run`` command line (continuation lines joined), as argv."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("docker run "))
    command = ""
    for line in lines[start:]:
        command += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            break
    return shlex.split(command)


def checked(res: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    """``res`` if it exited 0; otherwise fail with its output."""
    if res.returncode != 0:
        raise AssertionError(f"{what} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res


@dataclass
class Podman:
    """podman with everything (storage, run state, config, CNI, events) under ``home``."""

    home: Path

    def __post_init__(self) -> None:
        self.conf = self.home / "containers.conf"
        self.conf.write_text(CONTAINERS_CONF)

    def argv(self, *args: str) -> list[str]:
        """A podman command line with this instance's global options."""
        return [
            "podman",
            "--root",
            str(self.home / "storage"),
            "--runroot",
            str(self.home / "run"),
            "--tmpdir",
            str(self.home / "tmp"),
            "--network-config-dir",
            str(self.home / "cni"),
            *args,
        ]

    @property
    def env(self) -> dict[str, str]:
        """The environment podman runs with (its containers.conf, a plain PATH)."""
        return {
            "CONTAINERS_CONF": str(self.conf),
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
        }

    def run(
        self, *args: str, netns: str | None = None, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run podman (inside network namespace ``netns`` if given) and capture its output.

        ``nsenter --net`` rather than ``ip netns exec``: the latter remounts /sys and runc then
        finds no cgroup mount (docs/testbed.md).
        """
        prefix = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
        res = subprocess.run(
            [*prefix, *self.argv(*args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=self.env,
        )
        return checked(res, f"podman {' '.join(args[:2])}") if check else res

    def inspect(self, name: str, kind: str = "container") -> dict[str, Any]:
        """``podman inspect`` of one container or image, as a dict."""
        out = self.run(kind, "inspect", name).stdout
        data: list[dict[str, Any]] = json.loads(out)
        return data[0]

    def logs(self, name: str) -> str:
        """The container's stdout and stderr so far."""
        res = self.run("logs", name, check=False)
        return res.stdout + res.stderr

    def wait_log(self, name: str, pattern: str, timeout: float) -> re.Match[str]:
        """Wait until ``pattern`` appears in the container's log."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.logs(name)
            match = re.search(pattern, log)
            if match:
                return match
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{pattern!r} not in the log of {name} after {timeout}s:\n{log}"
                )
            time.sleep(0.2)


# What the container tests need; the early start below checks it too.
TOOLS = ("ip", "nsenter", "podman", "buildah", "runc", "debootstrap", "docker-compose", "dosbox")


def _background() -> list[str]:
    """A prefix that runs a command at the lowest CPU and I/O priority: the early start's
    work then takes only what the tests running meanwhile leave idle."""
    prefix = ["nice", "-n", "19"]
    if shutil.which("ionice"):
        prefix += ["ionice", "-c", "3"]
    return prefix


def start_debootstrap(rootfs: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start ``debootstrap --variant=minbase bookworm`` with python3 (about a minute)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                *_background(),
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,python-is-python3",
                "bookworm",
                str(rootfs),
                debian_mirror(),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: abandon() stops its dpkg and wget too
        )


# The wheel of ipxbridge the run compiled (scripts/test.sh), for the image to install instead
# of compiling the same source again (the Dockerfile's WHEEL argument).
WHEEL_ENV = "IPXBRIDGE_WHEEL"


def run_wheel() -> Path | None:
    """The wheel scripts/test.sh built, or None (the image then compiles /src itself)."""
    path = os.environ.get(WHEEL_ENV, "")
    return Path(path) if path and Path(path).is_file() else None


def build_wheelhouse(wheels: Path) -> None:
    """Wheels of the project's build backend and dependencies, for an offline build, and the
    run's own wheel of ipxbridge if there is one.

    Built with this interpreter (CPython 3.11 on Debian bookworm, the stand-in base's ABI).
    """
    res = subprocess.run(
        [
            *_background(),
            *(sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels)),
            *build_requirements(),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    checked(res, "pip wheel")
    wheel = run_wheel()
    if wheel is not None:
        shutil.copy2(wheel, wheels / wheel.name)


@dataclass
class EarlyBase:
    """The stand-in base's slow first half, debootstrap and the wheelhouse (about a minute),
    started when the session begins, so that it runs while the tests before the container's
    do (mostly waiting on their networks), at the lowest priority. ``built`` finishes it."""

    home: Path
    debootstrap: subprocess.Popen[bytes]
    wheels: threading.Thread
    errors: list[BaseException]
    taken: bool = False

    @property
    def rootfs(self) -> Path:
        return self.home / "rootfs"

    @property
    def wheelhouse(self) -> Path:
        return self.home / "wheels"

    def wait(self) -> None:
        """Until both are done; raises what the wheelhouse build raised."""
        rc = self.debootstrap.wait(600)
        log = (self.home / "debootstrap.log").read_text(errors="replace")
        assert rc == 0, f"debootstrap exited {rc}:\n{log[-3000:]}"
        self.wheels.join(300)
        if self.errors:
            raise self.errors[0]

    def abandon(self) -> None:
        """Stop what has not finished and remove the temp dir (after the tests, or when
        they did not run)."""
        if self.debootstrap.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.debootstrap.pid, signal.SIGKILL)
            self.debootstrap.wait(30)
        self.wheels.join(300)
        # A debootstrap stopped midway leaves its mounts (the rootfs's /proc and /sys), and
        # podman its storage: everything mounted under home goes, deepest first.
        prefix = f"{self.home}/"
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        shutil.rmtree(self.home, ignore_errors=True)


def start_base() -> EarlyBase:
    """Start debootstrap and, beside it, the wheelhouse build, both into a new temp dir."""
    home = Path(tempfile.mkdtemp(prefix="ixb-podman-"))
    debootstrap = start_debootstrap(home / "rootfs", home / "debootstrap.log")
    errors: list[BaseException] = []

    def wheelhouse() -> None:
        try:
            build_wheelhouse(home / "wheels")
        except BaseException as exc:  # reported by EarlyBase.wait
            errors.append(exc)

    thread = threading.Thread(target=wheelhouse, name="wheelhouse", daemon=True)
    thread.start()
    return EarlyBase(home, debootstrap, thread, errors)


def finish_base(podman: Podman, rootfs: Path, tarball: Path) -> None:
    """Trim the debootstrap tree like an official Debian image and import it as BASE_TAG."""
    for leftover in ("etc/resolv.conf", "etc/hostname"):  # this host's, set at run time
        (rootfs / leftover).unlink(missing_ok=True)
    for deb in (rootfs / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    for listing in (rootfs / "var/lib/apt/lists").glob("*_*"):
        listing.unlink()
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(DOCKER_CLEAN)
    checked(
        subprocess.run(
            ["tar", "-C", str(rootfs), "-cf", str(tarball), "."],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ),
        "tar",
    )
    podman.run(
        "import",
        "--change",
        "ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--change",
        "ENV=LANG=C.UTF-8",
        "--change",
        'CMD=["/bin/bash"]',
        str(tarball),
        BASE_TAG,
    )


@contextlib.contextmanager
def serve_wheels(wheels: Path) -> Iterator[str]:
    """Serve the wheelhouse on 127.0.0.1 (a free port) for a ``--network host`` build: its URL.

    Not a ``-v`` mount: buildah leaves the mount point (an empty ``/wheels``) in the layer
    of every stage that runs a RUN step, the final one included. pip trusts plain HTTP
    from 127.0.0.0/8.
    """
    handler = functools.partial(QuietHandler, directory=str(wheels))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """A directory server that does not log every request to stderr."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        """Drop the access log."""


def build_image(
    podman: Podman, wheels_url: str, tag: str, dockerfile: Path = ROOT / "Dockerfile"
) -> subprocess.CompletedProcess[str]:
    """``podman build`` of ``dockerfile`` with the repository as context, on the stand-in base.

    ``--format docker`` keeps the HEALTHCHECK (OCI images have none). pip reads only the
    wheelhouse ``serve_wheels`` serves at ``wheels_url``, never PyPI. Every build of a session
    takes the same URL: it is a build argument, and another value would invalidate every
    cached layer after it.
    """
    return _build(podman, wheels_url, tag, dockerfile)


def _build(
    podman: Podman, wheels_url: str, tag: str, dockerfile: Path
) -> subprocess.CompletedProcess[str]:
    wheel = run_wheel()
    return podman.run(
        "build",
        "--format",
        "docker",
        "--pull=never",
        "--network",
        "host",
        "--build-arg",
        f"BASE={BASE_TAG}",
        "--build-arg",
        "PIP_NO_INDEX=1",
        "--build-arg",
        f"PIP_FIND_LINKS={wheels_url}",
        *(("--build-arg", f"WHEEL={wheel.name}") if wheel is not None else ()),
        "-t",
        tag,
        "-f",
        str(dockerfile),
        str(ROOT),
        timeout=600,
        check=False,
    )
