"""Code the bench scripts share: namespaces, frames, sockets, /metrics, the bridge process.

Every bench script runs as ``python3 bench/NAME.py`` (as root). Python puts the script's
folder, ``bench/``, first on ``sys.path``, so ``import benchlib`` needs nothing more. Importing
this package puts the checkout's root right after it: ``ipxbridge`` is then this tree's, even
where the package is not installed (or is installed from another checkout). This is the one
place the bench sets the path.

Modules: ``netns`` (namespaces, veth links, sockets inside a namespace), ``frames`` (raw
IPv4/UDP and IPX frames), ``sockets`` (buffers, broadcast senders, receive timestamps),
``metrics`` (/metrics, nft counters, kernel counters), ``procstat`` (a process's CPU, memory,
descriptors), ``bridge`` (start a bridge or a server, wait for its ready line, stop it), and
``ipxload`` (the IPX tunnel load bench behind ``ipx_bench.py``).
"""

import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))


class BenchError(Exception):
    """A run could not be completed (a tool missing, a command failed, a server silent...)."""
