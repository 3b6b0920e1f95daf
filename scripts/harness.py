"""Real test networks for the integration tier: namespaces, veth links, bridges, DOSBox.

Everything runs in network namespaces created here and removed afterwards
(``docs/testbed.md``). Interface names live inside their namespaces, so two tests never
clash on them; namespace names carry the pid.
"""

import contextlib
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pyroute2 import netns as pr_netns

from ipxbridge.wire import ipx

ROOT = Path(__file__).resolve().parents[1]


def run_bench(script: str, *args: str, timeout: float) -> tuple[int, str]:
    """Run ``bench/<script>`` with this interpreter: (exit code, stdout + stderr)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def namespaces() -> set[str]:
    """The named network namespaces there are now (``ip netns``)."""
    where = Path("/var/run/netns")
    return {p.name for p in where.iterdir()} if where.exists() else set()


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command (never through a shell) and fail loudly with its output."""
    res = subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {res.stderr.strip()}")
    return res


@dataclass
class Netns:
    """Namespaces made for one test; ``close`` removes them and whatever runs inside."""

    prefix: str = field(default_factory=lambda: f"ixb{os.getpid() % 100000}")
    names: list[str] = field(default_factory=list)

    def add(self, short: str) -> str:
        name = f"{self.prefix}_{short}"
        sh("ip", "netns", "add", name)
        self.names.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def link(self, ns_a: str, if_a: str, addr_a: str, ns_b: str, if_b: str, addr_b: str) -> None:
        """A veth pair between two namespaces, with ``A.B.C.D/len`` addresses, up."""
        sh(
            "ip",
            "link",
            "add",
            if_a,
            "netns",
            ns_a,
            "type",
            "veth",
            "peer",
            "name",
            if_b,
            "netns",
            ns_b,
        )
        for ns, ifname, addr in ((ns_a, if_a, addr_a), (ns_b, if_b, addr_b)):
            sh("ip", "-n", ns, "addr", "add", addr, "brd", "+", "dev", ifname)
            sh("ip", "-n", ns, "link", "set", ifname, "up")

    def exec_args(self, ns: str, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", ns, *cmd]

    def close(self) -> None:
        for name in reversed(self.names):
            # kill anything still running in the namespace, then remove it
            pids = sh("ip", "netns", "pids", name, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            sh("ip", "netns", "del", name, check=False)
            # its own /etc, if a test gave it one (ip-netns(8): ip netns exec mounts it)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        self.names.clear()


@contextlib.contextmanager
def inside(ns: str) -> Iterator[None]:
    """Create sockets inside ``ns`` from this process (they stay bound to it)."""
    pr_netns.pushns(ns)
    try:
        yield
    finally:
        pr_netns.popns()


def bridge_get(ns: str, path: str, timeout: float = 5.0) -> str:
    """``GET http://127.0.0.1:9213{path}`` from inside ``ns`` (the bridge's default listen)."""
    url = f"http://127.0.0.1:9213{path}"
    with inside(ns), urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
    return body.decode()


_RUNS = itertools.count()


STARTED = r"started: every service is up"  # app/bridge.py, after the last service


class LoggedProcess:
    """A program running in a namespace in the foreground, its output in a log file."""

    name = "process"
    log_path: Path
    proc: "subprocess.Popen[bytes]"
    _log: IO[bytes]

    def _start(self, cmd: Sequence[str], log_path: Path, **popen: Any) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, **popen)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of ``pattern`` in the log; fails if the program exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.log())
            if match:
                return match
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.05)
        raise TimeoutError(f"{pattern!r} not in {self.name}'s log after {timeout}s:\n{self.log()}")

    def stop(self, grace: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode


class BridgeProcess(LoggedProcess):
    """``ipxbridge run`` inside a namespace, with its log captured."""

    name = "bridge"

    def __init__(
        self,
        net: Netns,
        ns: str,
        *args: str,
        log_dir: Path,
        ready: str = r"IPX tunnel on udp",
        env: dict[str, str] | None = None,
    ) -> None:
        self._start(
            net.exec_args(ns, sys.executable, "-m", "ipxbridge", "run", *args),
            log_dir / f"bridge-{ns}-{next(_RUNS)}.log",
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        self.wait_for(ready, 15)
        # ``ready`` names one service's line; the services after it (HTTP) start later.
        self.wait_for(STARTED, 15)

    def summary(self) -> dict[str, int]:
        """Counters from the stop line: received, forwarded, control, dropped, copies_sent."""
        match = re.search(r"stopped; IPX: (.*)", self.log())
        assert match, self.log()
        out: dict[str, int] = {}
        for key, value in re.findall(r"(\w+)=(\d+)", match.group(1)):
            out.setdefault(key, int(value))
        return out


DOSBOX_CONF = """\
[sdl]
output=surface
[cpu]
cycles=fixed 3000
[mixer]
nosound=true
[ipx]
ipx=true
[autoexec]
mount c {drive}
c:
{commands}
"""


class DosBox:
    """A real headless DOSBox 0.74 in a namespace, running ``ipxnet`` commands."""

    def __init__(
        self, net: Netns, ns: str, workdir: Path, commands: list[str], *, exit_when_done: bool
    ) -> None:
        self.drive = workdir / "c"
        self.drive.mkdir(parents=True)
        home = workdir / "home"
        home.mkdir()
        lines = [*commands, "exit"] if exit_when_done else commands
        conf = workdir / "dosbox.conf"
        conf.write_text(DOSBOX_CONF.format(drive=self.drive, commands="\n".join(lines)))
        env: dict[str, Any] = {
            **os.environ,
            "HOME": str(home),
            "SDL_VIDEODRIVER": "dummy",
            "SDL_AUDIODRIVER": "dummy",
        }
        self.log_path = workdir / "dosbox.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            net.exec_args(ns, "timeout", "60", "dosbox", "-conf", str(conf)),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
        )

    def read(self, name: str) -> str:
        path = self.drive / name
        return path.read_text(errors="replace").replace("\r\n", "\n") if path.exists() else ""

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # timeout(1) passes SIGTERM on to dosbox
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


# What a stand-in game broadcasts first (``Client.announce``); the tests' data uses 0x4545.
ANNOUNCE_SOCKET = 0x4546


def register_as_ipxwrapper(ns: str, server: tuple[str, int]) -> tuple[socket.socket, bytes]:
    """A UDP socket in ``ns`` registered as IPXWrapper in DOSBox mode registers: packet type
    2 (docs/protocols.md 6). Returns the socket (2 s timeout) and the registration reply."""
    with inside(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 0))
    sock.settimeout(2.0)
    registration = bytearray(ipx.build_registration())
    registration[5] = 2  # IPXWrapper registers with packet type 2
    sock.sendto(bytes(registration), server)
    reply, _ = sock.recvfrom(2048)
    return sock, reply


class Client:
    """A synthetic DOSBox-protocol client living in a namespace.

    It behaves as DOSBox does: it registers (docs/protocols.md 4.2), sends from the node the reply
    gave it, and answers every ping it reads with a unicast to the pinger's node (4.5, 4.6),
    whether it arrives while the test waits for data or for the ping itself.
    """

    def __init__(self, ns: str, server: tuple[str, int]) -> None:
        with inside(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(2.0)
        self.sock.bind(("0.0.0.0", 0))
        self.server = server
        self.sock.sendto(ipx.build_registration(), server)
        reply, _ = self.sock.recvfrom(2048)
        self.node = ipx.parse_header(reply).dst_node
        self.pings_answered = 0

    def send(self, dst_node: bytes, payload: bytes, sock: int = 0x4545) -> None:
        pkt = ipx.build_packet(
            dst_node=dst_node, dst_socket=sock, src_node=self.node, src_socket=sock, payload=payload
        )
        self.sock.sendto(pkt, self.server)

    def announce(self) -> None:
        """What a game sends first: a broadcast saying it is there (DOOM's and Duke3D's
        network setup, DirectPlay's EnumSessions), on ``ANNOUNCE_SOCKET``.

        It carries the node our registration reply gave, which proves this client receives
        at its address (policy/switch.py rule 2). A client need not call it to be served:
        one that only listens is (tests/integration/test_listeners.py); tests call it where
        the game they stand in for announces itself.
        """
        self.send(ipx.BROADCAST_NODE, b"here", sock=ANNOUNCE_SOCKET)

    def _answer_ping(self, header: ipx.IpxHeader) -> bool:
        """Answer a ping as DOSBox does; True if ``header`` was one."""
        if not (header.is_echo and header.is_broadcast):
            return False
        self.sock.sendto(ipx.build_ping_reply(header.src_node, self.node), self.server)
        self.pings_answered += 1
        return True

    def answer_keepalive(self, timeout: float = 5.0) -> None:
        """Wait for the bridge's ping and answer it, as DOSBox does (docs/protocols.md 4.6).

        An unverified client is probed a second after it registers, or with its first
        packet (policy/switch.py rule 2); a verified one after ``keepalive_interval`` of
        silence.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # The probe goes on the bridge's once-a-second tick, so up to 2 s after
            # registration: the socket's own 2 s timeout is no deadline here.
            try:
                data, _ = self.sock.recvfrom(70_000)
            except TimeoutError:
                continue
            if self._answer_ping(ipx.parse_header(data)):
                return
        raise TimeoutError(f"no keepalive from the bridge within {timeout} s")

    def receive(self, sock: int = 0x4545) -> tuple[ipx.IpxHeader, bytes]:
        """Next packet on the data socket (pings are answered, other sockets skipped)."""
        while True:
            data, _ = self.sock.recvfrom(70_000)
            header, payload = ipx.parse_packet(data)
            if header.dst_socket == sock:
                return header, bytes(payload)
            self._answer_ping(header)
