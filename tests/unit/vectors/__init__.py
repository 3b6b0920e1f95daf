"""DirectPlay test vectors, kept here so the tests stand alone (docs/protocols.md 9, 4.2).

``vectors.txt`` is a commented hex dump: a ``## name  description (N bytes)`` line, then
``OOOO  xx xx ...`` rows. ``dplay_vectors.pcap`` holds the same frames inside Ethernet/IPv4
(docs/protocols.md 9, 4.2); ``dplay_over_ipx.lua`` lets tshark decode DirectPlay inside IPX.

Two pcapng files, made by Wireshark 4.0's tools (``tests/integration/test_pcapng.py`` makes
them again and checks they decode alike):

* ``dplay_vectors.pcapng``: ``editcap -F pcapng dplay_vectors.pcap``;
* ``dplay_interfaces.pcapng``: four interfaces in one section (``make_interfaces_pcapng``):
  that conversion (Ethernet, microseconds), DirectPlay 4 enumerations over raw IP
  (``text2pcap -l 101``), and the two IPX vectors captured live by ``dumpcap -i lo -i any``
  (Ethernet and Linux cooked, nanoseconds), joined by ``mergecap -a -F pcapng``.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

VECTOR_DIR: Final = Path(__file__).resolve().parent
VECTORS_TXT: Final = VECTOR_DIR / "vectors.txt"
VECTORS_PCAP: Final = VECTOR_DIR / "dplay_vectors.pcap"
VECTORS_PCAPNG: Final = VECTOR_DIR / "dplay_vectors.pcapng"
VECTORS_INTERFACES: Final = VECTOR_DIR / "dplay_interfaces.pcapng"
LUA_SHIM: Final = VECTOR_DIR / "dplay_over_ipx.lua"

_TITLE = re.compile(r"^## (\S+)\s+(.*?)\s+\((\d+) bytes\)\s*$")
_ROW = re.compile(r"^([0-9a-f]{4})  ((?:[0-9a-f]{2} ?)+)$")


@dataclass(frozen=True, slots=True)
class Vector:
    """One frame of ``vectors.txt``."""

    name: str
    title: str
    data: bytes


def load_vectors(path: Path = VECTORS_TXT) -> dict[str, Vector]:
    """Parse the hex dump; every row's offset and every block's byte count are checked."""
    vectors: dict[str, Vector] = {}
    name = title = ""
    expected = 0
    data = bytearray()

    def close() -> None:
        if name:
            assert len(data) == expected, f"{name}: {len(data)} bytes, header says {expected}"
            vectors[name] = Vector(name, title, bytes(data))

    for line in path.read_text(encoding="utf-8").splitlines():
        if m := _TITLE.match(line):
            close()
            name, title, expected = m.group(1), m.group(2), int(m.group(3))
            data = bytearray()
        elif m := _ROW.match(line.strip()):
            assert int(m.group(1), 16) == len(data), f"{name}: row offset {m.group(1)}"
            data += bytes.fromhex(m.group(2))
        else:
            assert not line.strip(), f"unexpected line in {path.name}: {line!r}"
    close()
    return vectors
