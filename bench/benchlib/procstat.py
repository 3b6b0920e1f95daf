"""A process seen from /proc: CPU time, resident memory, open descriptors."""

import os
import re
from pathlib import Path
from typing import Final

CLK_TCK: Final = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid``.

    Raises:
        OSError: the process is gone.
    """
    text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    # After the command name in parentheses; utime and stime are fields 14 and 15.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` in KiB (0 if the kernel does not say)."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) if match else 0


def open_fds(pid: int) -> int:
    """How many descriptors ``pid`` has open."""
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))
