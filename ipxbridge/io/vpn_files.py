"""The peers tinc and Nebula name in their own files (docs/relay.md, "Peers").

A tinc net in router mode and a Nebula net are L3: their interface carries no broadcast and
does not say who is at the other end. Their configuration does, and it names the interface:

* tinc (``wire/tinc_conf.py``): every ``tinc.conf`` the globs match is a net (its directory's
  name), with ``hosts/NODE`` beside it; the host-sized subnets of every node but this one
  are peers on the net's interface. Debian's ``tinc@NET`` unit: ``/etc/tinc/NET/tinc.conf``.
* Nebula (``wire/nebula_conf.py``): every YAML file the globs match; the ``via`` of each
  unsafe route is a peer on its ``tun.dev``. Debian's ``nebula@NAME`` unit:
  ``/etc/nebula/NAME.yml`` or ``.yaml``.

Several nets on one box are told apart by the interface each names. Reading is file I/O, on
the worker thread that reads WireGuard's peers and OpenVPN's status files
(``app/wgpeers.py``), every round; a file is parsed again only when it changed (its size,
inode or modification time), and at most ``MAX_NETS`` configs per VPN, ``MAX_HOSTS`` host
files per tinc net, ``MAX_CONF_BYTES`` / ``MAX_YAML_BYTES`` of each are read. A file that
cannot be read or parsed is said once in the log, with its path and line, until it changes;
never a traceback, never raises.
"""

import glob
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

import yaml

from ipxbridge.wire.nebula_conf import NEBULA_CONFIGS, nebula_peers
from ipxbridge.wire.tinc_conf import (
    MAX_CONF_BYTES,
    MAX_HOSTS,
    NODE_NAME,
    TINC_CONFIGS,
    Problem,
    TincConf,
    host_addresses,
    read_tinc_conf,
)

logger = logging.getLogger(__name__)

MAX_NETS: Final = 64  # configs read per VPN and round, whatever the globs match
MAX_YAML_BYTES: Final = 1 << 20  # a Nebula config with its certificates inlined fits


@dataclass(frozen=True)
class NetPeers:
    """The peers one net's files name on its interface."""

    interface: str
    source: str  # "tinc /etc/tinc/NET" or "nebula /etc/nebula/NAME.yml", for the log and CLI
    addresses: tuple[str, ...]


T = TypeVar("T")


class _Cache:
    """Each file's parse, kept while the file is unchanged; what went wrong said once."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[tuple[int, int, int], Any]] = {}
        self._unreadable: set[str] = set()  # said in the log; again only after it was read

    def get(self, path: str, limit: int, parse: Callable[[str], tuple[T, list[str]]]) -> T | None:
        """``parse`` of the file's first ``limit`` bytes; None when it cannot be read.

        From the cache while the file is as it was; ``parse``'s problems are logged as it runs.
        """
        try:
            st = os.stat(path)  # noqa: PTH116 - one stat a file and round
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            kept = self._parsed.get(path)
            if kept is not None and kept[0] == stamp:
                return cast(T, kept[1])
            with open(path, "rb") as f:  # noqa: PTH123 - bounded read of a small file
                data = f.read(limit)
        except OSError as exc:
            self.unreadable(path, exc)
            return None
        self._unreadable.discard(path)
        value, problems = parse(data.decode("utf-8", "replace"))
        for problem in problems:
            logger.warning("%s: %s", path, problem)
        self._parsed[path] = (stamp, value)
        return value

    def unreadable(self, path: str, exc: OSError) -> None:
        """Say once that ``path`` cannot be read, and forget its parse."""
        self._parsed.pop(path, None)
        if path not in self._unreadable:
            self._unreadable.add(path)
            logger.warning("cannot read %s: %s", path, exc.strerror or exc)

    def keep_only(self, paths: set[str]) -> None:
        """Forget files no longer read (a net removed), so the cache stays bounded."""
        for path in set(self._parsed) - paths:
            del self._parsed[path]
        self._unreadable &= paths


def by_interface(nets: Iterable[NetPeers]) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """The nets' peers by interface name, each with its source (``policy/relay.peer_sources``).

    Two nets naming one interface both count.
    """
    out: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for n in nets:
        out.setdefault(n.interface, []).append((n.source, n.addresses))
    return out


def _said(problems: list[Problem]) -> list[str]:
    return [f"line {p.line}: {p.what}" if p.line else p.what for p in problems]


def _matches(patterns: Iterable[str]) -> list[str]:
    return sorted({p for pattern in patterns for p in glob.glob(pattern)})[:MAX_NETS]  # noqa: PTH207 - absolute globs


class VpnFiles:
    """Reads the tinc and Nebula configs the globs match, each round; keeps their parses."""

    def __init__(self) -> None:
        self._cache = _Cache()

    def read(
        self, tinc: Iterable[str] = TINC_CONFIGS, nebula: Iterable[str] = NEBULA_CONFIGS
    ) -> list[NetPeers]:
        """The peers of every net found, in path order. Never raises."""
        out: list[NetPeers] = []
        read: set[str] = set()
        for conf in _matches(tinc):
            found = self._tinc_net(conf, read)
            if found is not None:
                out.append(found)
        for path in _matches(nebula):
            read.add(path)
            got = self._cache.get(path, MAX_YAML_BYTES, _nebula)
            if got is not None:
                dev, addresses = got
                out.append(NetPeers(dev, f"nebula {path}", addresses))
        self._cache.keep_only(read)
        return out

    def _tinc_net(self, conf: str, read: set[str]) -> NetPeers | None:
        netdir = os.path.dirname(conf)  # noqa: PTH120 - plain strings throughout
        net = os.path.basename(netdir)  # noqa: PTH119
        read.add(conf)

        def parse_conf(text: str) -> tuple[TincConf | None, list[str]]:
            got, problems = read_tinc_conf(text, net)
            return got, _said(problems)

        this = self._cache.get(conf, MAX_CONF_BYTES, parse_conf)
        if this is None:
            return None
        hosts = os.path.join(netdir, "hosts")  # noqa: PTH118
        read.add(hosts)
        try:
            nodes = sorted(e.name for e in os.scandir(hosts) if NODE_NAME.match(e.name))
        except OSError as exc:
            self._cache.unreadable(hosts, exc)
            nodes = []
        addresses: dict[str, None] = {}
        for node in nodes[:MAX_HOSTS]:
            if node == this.name:
                continue  # this node's own subnets
            path = os.path.join(hosts, node)  # noqa: PTH118
            read.add(path)
            got = self._cache.get(path, MAX_CONF_BYTES, _host)
            addresses.update(dict.fromkeys(got or ()))
        return NetPeers(this.interface, f"tinc {netdir}", tuple(addresses))


def _host(text: str) -> tuple[tuple[str, ...], list[str]]:
    addresses, problems = host_addresses(text)
    return addresses, _said(problems)


def _nebula(text: str) -> tuple[tuple[str, tuple[str, ...]] | None, list[str]]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return None, [f"{where}not YAML ({problem})"]
    dev, addresses, problems = nebula_peers(doc)
    return (dev, addresses), problems
