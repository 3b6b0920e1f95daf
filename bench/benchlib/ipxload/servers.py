"""The orchestrator's side: a fresh server per run inside the namespace, the load generator
beside it, each on its own CPU. A mixed-ports run gives the bridge the Ethernet segment too
(``--ipx-iface IF:ethernet``); the DOSBox-only runs start it as before, without it.

Servers: ``ipxbridge`` (``--bridge-cmd``), ``dosbox`` (DOSBox's own server, the baseline) and,
when asked for, ``ipxbridge_ref`` (``--ref-bridge-cmd``: another checkout, for before/after in
one run) and ``ipxbox`` (``--ipxbox PATH``, a reference built by hand: not in CI)."""

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

from benchlib import BenchError
from benchlib.bridge import Process, spawn
from benchlib.ipxload.client import (
    DRAIN_SECONDS,
    READY_TIMEOUT,
    REGISTER_TIMEOUT,
    RTT_BUDGET_PER_EXCHANGE,
    RTT_WARMUP,
    SEND_GRACE,
    ClientSpec,
    JsonDict,
    process_cpu_seconds,
)
from benchlib.procstat import rss_kib
from ipxbridge.policy.clients import FIRST_PROBE_DELAY

SERVER_CPU: Final = 1
CLIENT_CPU: Final = 0
SERVERS: Final = ("ipxbridge", "dosbox")
# Every server the tables know, in their order; the optional ones run only when configured.
ALL_SERVERS: Final = ("ipxbridge", "ipxbridge_ref", "dosbox", "ipxbox")
BRIDGES: Final = ("ipxbridge", "ipxbridge_ref")
DOSBOX_SLOTS: Final = 16
DOSBOX_FREE_SLOTS: Final = DOSBOX_SLOTS - 1  # ipxnet startserver registers DOSBox itself
# Broadcast runs on ipxbridge wait this long at most for its first keepalive to each client
# (sent FIRST_PROBE_DELAY after registering; answering it verifies the client).
KEEPALIVE_WAIT: Final = FIRST_PROBE_DELAY + 2.0
STOP_TIMEOUT: Final = 3.0


@dataclass(slots=True)
class Bench:
    """Configuration and live state of the orchestrator.

    ``script`` is what runs the load generator as ``SCRIPT _client --spec JSON``;
    ``segment_if`` is the bridge's port on the native stations' segment (mixed-ports runs).
    """

    netns: str
    port: int
    bridge_cmd: str
    workdir: Path
    script: Path
    running: list[Process] = field(default_factory=list)
    dosbox_ok: bool = True
    segment_if: str | None = None
    ref_bridge_cmd: str | None = None
    ipxbox: str | None = None

    def servers(self) -> tuple[str, ...]:
        """The servers this run compares, in table order."""
        wanted = {
            "ipxbridge": True,
            "ipxbridge_ref": self.ref_bridge_cmd is not None,
            "dosbox": self.dosbox_ok,
            "ipxbox": self.ipxbox is not None,
        }
        return tuple(kind for kind in ALL_SERVERS if wanted[kind])

    def _launch(self, argv: list[str], env: dict[str, str] | None, tag: str) -> Process:
        server = spawn(
            argv, log=self.workdir / f"{tag}.log", ns=self.netns, cpus={SERVER_CPU}, env=env
        )
        self.running.append(server)
        return server

    def start_bridge(self, tag: str, *, segment: bool = False, ref: bool = False) -> Process:
        """Start ipxbridge from the ``--bridge-cmd`` template (``ref``: ``--ref-bridge-cmd``;
        with ``segment``: also on the native stations' segment, as an ``ethernet`` port)."""
        template = self.ref_bridge_cmd if ref and self.ref_bridge_cmd else self.bridge_cmd
        argv = shlex.split(template.format(port=self.port))
        if segment:
            if self.segment_if is None:
                raise BenchError("a mixed-ports run without a segment")
            argv += ["--ipx-iface", f"{self.segment_if}:ethernet"]
        return self._launch(argv, None, tag)

    def start_dosbox(self, tag: str) -> Process:
        """Start a headless DOSBox whose autoexec runs ``ipxnet startserver PORT``."""
        home = self.workdir / "dosbox-home"
        drive = self.workdir / "dosbox-c"
        home.mkdir(exist_ok=True)
        drive.mkdir(exist_ok=True)
        conf = self.workdir / "dosbox.conf"
        conf.write_text(
            "[sdl]\noutput=surface\n"
            "[cpu]\ncycles=fixed 3000\n"
            "[mixer]\nnosound=true\n"
            "[ipx]\nipx=true\n"
            f"[autoexec]\nmount c {drive}\nc:\nipxnet startserver {self.port}\n",
            encoding="ascii",
        )
        env = dict(os.environ, SDL_VIDEODRIVER="dummy", SDL_AUDIODRIVER="dummy", HOME=str(home))
        return self._launch(["dosbox", "-conf", str(conf)], env, tag)

    def start_ipxbox(self, tag: str) -> Process:
        """Start ipxbox (``--ipxbox PATH``) on the bench port, every option at its default."""
        if self.ipxbox is None:
            raise BenchError("no --ipxbox binary")
        return self._launch([self.ipxbox, "--port", str(self.port)], None, tag)

    def stop(self, server: Process) -> tuple[float | None, int | None]:
        """Terminate a server by pid (kill after a grace period); returns its CPU seconds and
        resident memory in KiB, read just before."""
        cpu = process_cpu_seconds(server.pid)
        try:
            rss: int | None = rss_kib(server.pid)
        except OSError:
            rss = None
        server.stop(STOP_TIMEOUT)
        if server in self.running:
            self.running.remove(server)
        return cpu, rss

    def stop_all(self) -> None:
        """Stop whatever is still running (used from ``finally``)."""
        for server in list(self.running):
            with contextlib.suppress(Exception):
                self.stop(server)

    def run_client(self, spec: ClientSpec) -> JsonDict:
        """Run the load generator child inside the namespace on its own CPU."""
        argv = [
            *("ip", "netns", "exec", self.netns, "taskset", "-c", str(CLIENT_CPU)),
            *(sys.executable, str(self.script), "_client", "--spec", json.dumps(asdict(spec))),
        ]
        limit = (
            READY_TIMEOUT
            + REGISTER_TIMEOUT * spec.clients
            + spec.secs
            + SEND_GRACE
            + DRAIN_SECONDS
            + 5.0
            + (READY_TIMEOUT if spec.native else 0.0)
            + spec.keepalive_wait
            + RTT_BUDGET_PER_EXCHANGE * (spec.rtt_count + RTT_WARMUP)
            + 30.0
        )
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"load generator exceeded {limit:.0f} s"}
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if not lines:
            return {"error": f"load generator exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
        try:
            result: JsonDict = json.loads(lines[-1])
        except json.JSONDecodeError:
            return {"error": f"unparsable load generator output: {lines[-1][:200]}"}
        return result

    def run_once(self, kind: str, spec: ClientSpec, tag: str) -> JsonDict:
        """Fresh server, one scenario, server stopped; returns the result with metadata."""
        if kind in BRIDGES:
            server = self.start_bridge(tag, segment=spec.native > 0, ref=kind == "ipxbridge_ref")
            if spec.scenario == "bcast":
                spec = ClientSpec(**{**asdict(spec), "keepalive_wait": KEEPALIVE_WAIT})
        elif kind == "ipxbox":
            server = self.start_ipxbox(tag)
        else:
            server = self.start_dosbox(tag)
        try:
            result = self.run_client(ClientSpec(**{**asdict(spec), "server_pid": server.pid}))
            exit_code = server.proc.poll()
            if "error" in result and exit_code is not None:
                result["error"] += f" (server exited with {exit_code}: {server.tail()})"
        finally:
            total_cpu, rss = self.stop(server)
        result["server_total_cpu_s"] = round(total_cpu, 3) if total_cpu is not None else None
        result["server_rss_kib"] = rss  # at the end of the run, before it is stopped
        return result


def preflight(skip_baseline: bool, *, mixed: bool = False) -> bool:
    """Check privileges and tools (``mixed``: those the Ethernet segment needs too); returns
    whether the DOSBox baseline can run."""
    if os.geteuid() != 0:
        raise BenchError("must run as root (network namespaces)")
    for tool in ("ip", "taskset", *(("sysctl",) if mixed else ())):
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} not found")
    if not {CLIENT_CPU, SERVER_CPU} <= os.sched_getaffinity(0):
        raise BenchError(f"needs CPUs {CLIENT_CPU} and {SERVER_CPU}")
    if skip_baseline:
        return False
    if shutil.which("dosbox") is None:
        print("dosbox not found: continuing with ipxbridge alone")
        return False
    return True
