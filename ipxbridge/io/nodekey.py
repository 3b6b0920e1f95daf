"""The node key: the secret behind the nodes the IPX switch assigns (``wire.ipx.keyed_node``).

Kept in a file (``ipx.node_key_file``) so the nodes survive a restart: a client that
registered with an earlier run rejoins with the node it holds, and the switch recomputes the
same node from its address (policy/clients.py, rule 2). Read when present; created when
missing (32 random bytes, mode 0600, its directory 0700), atomically, so a second bridge
starting at the same moment reads the whole key or makes none of its own.
"""

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from ipxbridge.errors import StartupError

NODE_KEY_BYTES: Final = 32
MIN_NODE_KEY_BYTES: Final = 16  # HMAC-SHA256 with less is guessable offline


@dataclass(frozen=True, slots=True)
class NodeKey:
    """The key and where it came from.

    Attributes:
        key: the secret bytes.
        source: ``read`` (the file existed), ``created`` (written now) or ``memory`` (the
            file could not be created: nodes change at the next start).
        why: for ``memory``, why the file could not be created; for ``read``, a warning
            when other users may read it (else empty).
    """

    key: bytes
    source: Literal["read", "created", "memory"]
    why: str = ""


def load_node_key(path: Path) -> NodeKey:
    """Read the key at ``path``, or create it there, or fall back to a key in memory.

    A path this process may not even look into (a directory it cannot search) counts as
    one where the key cannot be created.

    Raises:
        StartupError: the file is there but cannot be read, is not a regular file or is
            shorter than 16 bytes (a key that is there must be used, or clients could not
            rejoin; the operator fixes or removes it).
    """
    try:
        return _read(path)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        pass  # not there, or not for us to see: make it
    try:
        return _create(path)
    except FileExistsError:
        try:
            return _read(path)  # it is there (or another bridge created it meanwhile)
        except FileNotFoundError:
            raise StartupError(f"ipx.node_key_file {path}: a dangling symbolic link") from None
        except OSError as exc:
            raise _unreadable(path, exc) from None
    except OSError as exc:
        why = f"cannot create {path}: {exc.strerror or exc}"
        return NodeKey(os.urandom(NODE_KEY_BYTES), "memory", why)


def _unreadable(path: Path, exc: OSError) -> StartupError:
    return StartupError(
        f"ipx.node_key_file {path}: cannot read: {exc.strerror or exc} (fix its "
        "permissions, or remove it and a new key is made; clients then register again)"
    )


def _read(path: Path) -> NodeKey:
    """The key in ``path``.

    Raises:
        FileNotFoundError, NotADirectoryError, PermissionError: it cannot be opened.
        StartupError: it is not a usable key.
    """
    try:
        with path.open("rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            key = f.read(4096)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        raise
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if not stat.S_ISREG(mode):
        raise StartupError(f"ipx.node_key_file {path}: not a regular file")
    if len(key) < MIN_NODE_KEY_BYTES:
        raise StartupError(
            f"ipx.node_key_file {path}: {len(key)} bytes, at least {MIN_NODE_KEY_BYTES} "
            "needed (remove it and a new key is made; clients then register again)"
        )
    why = ""
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        why = (
            f"ipx.node_key_file {path} is readable by other users (mode "
            f"{stat.S_IMODE(mode):04o}): whoever reads it can predict client nodes; chmod 600"
        )
    return NodeKey(key, "read", why)


def _create(path: Path) -> NodeKey:
    """Write a new key: a private temporary file, hard-linked to ``path`` when complete.

    Raises:
        FileExistsError: ``path`` appeared meanwhile.
        OSError: it cannot be written (read-only, no permission...).
    """
    parent = path.parent
    try:
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(parent)) from None
    key = os.urandom(NODE_KEY_BYTES)
    tmp = parent / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails with EEXIST rather than replace another's key
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            tmp.rename(path)  # a filesystem without hard links
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return NodeKey(key, "created")
