"""Tiny DOS programs of our own for real DOSBox clients: a listener and a sender.

``dos/ipxrecv.asm`` only listens (it never calls IPX send), as a DOS game waiting for
another's broadcast does; ``dos/ipxsend.asm`` sends numbered broadcasts. Both use the IPX
interface DOSBox emulates (INT 2Fh AX=7A00h and its far entry point; the sources say what
they rely on in DOSBox's ``src/hardware/ipx.cpp``). They are assembled with ``nasm -f bin``
once per session (``assemble``) into a directory that each DOSBox mounts as ``D:``
(``mount_command``), so the harness's ``C:`` drive stays the DOSBox's own: the programs
write their results there, where ``DosBox.read`` finds them.
"""

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from scripts.harness import DosBox

SOURCES = Path(__file__).resolve().parent / "dos"
PROGRAMS = ("IPXRECV", "IPXSEND")
SOCKET = 0x4545  # the IPX socket both programs use
READY = "READY.TXT"  # IPXRECV creates it once its ECBs are posted
RECEIVED = "RECV.TXT"  # IPXRECV's result
SENT = "SENT.TXT"  # IPXSEND's result
DRIVE = "D"  # where the DOSBoxes see the programs


def assemble(out_dir: Path) -> Path:
    """``nasm -f bin`` every program into ``out_dir`` as ``NAME.COM``; returns ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in PROGRAMS:
        source = SOURCES / f"{name.lower()}.asm"
        target = out_dir / f"{name}.COM"
        res = subprocess.run(
            ["nasm", "-f", "bin", "-i", f"{source.parent}/", "-o", str(target), str(source)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if res.returncode != 0:
            raise RuntimeError(f"nasm {source.name} failed:\n{res.stdout}{res.stderr}")
        # A .COM program is at most 64 KiB less the PSP and the stack it needs.
        assert 0 < target.stat().st_size < 0xF000, target
    return out_dir


def mount_command(bin_dir: Path) -> str:
    """The autoexec line that shows the assembled programs to a DOSBox as ``D:``."""
    return f"mount {DRIVE.lower()} {bin_dir}"


def listener_commands(bin_dir: Path, server: str, count: int, seconds: int) -> list[str]:
    """Connect, then only listen: ``IPXRECV count seconds`` (it stops at whichever comes
    first and writes ``RECV.TXT``)."""
    return [
        mount_command(bin_dir),
        f"ipxnet connect {server} > C:\\CONN.TXT",
        f"{DRIVE}:\\IPXRECV {count} {seconds}",
    ]


def sender_commands(bin_dir: Path, server: str, count: int, gap_ticks: int = 2) -> list[str]:
    """Connect, then ``IPXSEND count gap``: numbered broadcasts ``gap`` BIOS ticks (55 ms
    each) apart; it writes ``SENT.TXT``."""
    return [
        mount_command(bin_dir),
        f"ipxnet connect {server} > C:\\CONN.TXT",
        f"{DRIVE}:\\IPXSEND {count} {gap_ticks}",
    ]


def wait_ready(dosbox: DosBox, timeout: float) -> None:
    """Until IPXRECV has posted its listen ECBs (it creates ``READY.TXT`` then)."""
    deadline = time.monotonic() + timeout
    while "READY" not in dosbox.read(READY):
        if dosbox.proc.poll() is not None:
            raise RuntimeError(
                f"DOSBox exited {dosbox.proc.returncode} before IPXRECV was ready: "
                f"CONN.TXT={dosbox.read('CONN.TXT')!r} RECV.TXT={dosbox.read(RECEIVED)!r}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"IPXRECV not ready after {timeout}s: {dosbox.read('CONN.TXT')!r}")
        time.sleep(0.1)


@dataclass(frozen=True)
class Tally:
    """What a program wrote: its count, its errors, and (IPXRECV) the payloads received."""

    count: int
    errors: int
    payloads: tuple[str, ...]


def parse_result(text: str, label: str) -> Tally:
    """Read ``RECV.TXT`` (``label`` RECEIVED) or ``SENT.TXT`` (SENT)."""
    counted = re.search(rf"^{label} (\d+)$", text, re.MULTILINE)
    errors = re.search(r"^ERRORS (\d+)$", text, re.MULTILINE)
    if counted is None or errors is None:
        raise AssertionError(f"no {label} count in {text!r}")
    lines = text.splitlines()
    start = lines.index(errors.group(0)) + 1
    return Tally(int(counted.group(1)), int(errors.group(1)), tuple(lines[start:]))
