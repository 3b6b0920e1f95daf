"""The process under test: started in a namespace with its output in a log, waited for until
it says it is ready, stopped by its own pid."""

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from benchlib import ROOT, BenchError

READY_IPX: Final = "IPX tunnel on udp"  # the IPX tunnel's socket is bound
# The relay's plan is in place, the fast path included, and names two_segments' lanA (before
# the interfaces are up it may log a plan with nothing in it).
READY_RELAY: Final = "relaying between: lanA"


@dataclass(slots=True)
class Process:
    """A process running in the background, its stdout and stderr in ``log``."""

    proc: "subprocess.Popen[bytes]"
    log: Path

    @property
    def pid(self) -> int:
        """Its pid (``ip netns exec`` execs the command: the pid is the command's own)."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether it still runs."""
        return self.proc.poll() is None

    def text(self) -> str:
        """Everything it has written so far."""
        with contextlib.suppress(OSError):
            return self.log.read_text(encoding="utf-8", errors="replace")
        return ""

    def tail(self, lines: int = 8) -> str:
        """Its last lines of output on one line, for an error message."""
        return " | ".join(self.text().strip().splitlines()[-lines:])

    def wait_for(self, line: str, timeout: float) -> None:
        """Wait until its output contains ``line``.

        Raises:
            BenchError: it exited or ``timeout`` seconds passed first.
        """
        deadline = time.monotonic() + timeout
        while line not in self.text():
            if not self.alive() or time.monotonic() > deadline:
                raise BenchError(f"{self.log.stem} did not start:\n{self.text()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> str:
        """SIGTERM, SIGKILL after ``timeout`` seconds; returns its whole output and removes the
        log."""
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        text = self.text()
        self.log.unlink(missing_ok=True)
        return text


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    ns: str | None = None,
    cpus: set[int] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
) -> Process:
    """Start ``argv`` (inside ``ns``, pinned to ``cpus``) in its own session, output to ``log``."""
    wrapped = ["ip", "netns", "exec", ns, *argv] if ns else list(argv)
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            wrapped,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    if cpus:
        # Before the bridge has done any work: affinity survives ip netns exec's exec().
        os.sched_setaffinity(proc.pid, cpus)
    return Process(proc, log)


def bridge_argv(*args: str) -> list[str]:
    """``python -m ipxbridge run ARGS`` with this interpreter."""
    return [sys.executable, "-m", "ipxbridge", "run", *args]


def start_bridge(
    *args: str,
    name: str,
    ns: str | None = None,
    ready: str | None = None,
    timeout: float = 20.0,
    root: Path = ROOT,
    env: Mapping[str, str] | None = None,
    cpus: set[int] | None = None,
) -> Process:
    """``ipxbridge run ARGS`` from checkout ``root`` (cwd and PYTHONPATH), its log in the temp
    folder as ``NAME.log``, extra environment ``env``; waits for the log line ``ready``.

    Raises:
        BenchError: it did not say ``ready`` within ``timeout`` seconds (it is stopped).
    """
    log = Path(tempfile.gettempdir()) / f"{name}.log"
    full_env = {**os.environ, "PYTHONPATH": str(root), **(env or {})}
    bridge = spawn(bridge_argv(*args), log=log, ns=ns, cpus=cpus, env=full_env, cwd=root)
    if ready is not None:
        try:
            bridge.wait_for(ready, timeout)
        except BaseException:
            bridge.stop()
            raise
    return bridge
