"""Atomic file writes: a file under its final name is always a complete file (no Lightning; used by every report
writer and by :class:`~src.utils.checkpoint_io.AtomicCheckpointIO`).

The bytes go to ``.<name>.<pid>.<random>.tmp`` **in the target's own directory**, are flushed and fsynced, then
``os.replace``-d onto the target (atomic on POSIX and Windows within one file system). On any error the temporary
file is removed and the previous file under that name is untouched. A process killed mid-write (SIGKILL, a lost node)
runs no clean-up and leaves its temporary file: never read under the target's name, and removed by
:func:`remove_stale_temps` once it is old.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

__all__ = ["atomic_write_bytes", "is_local", "remove_stale_temps"]

_TMP_SUFFIX = ".tmp"
#: the temporary file of :func:`atomic_write_bytes`: ``.<name>.<pid>.<8 hex digits>.tmp``
_TMP_NAME = re.compile(r"^\..+\.\d+\.[0-9a-f]{8}" + re.escape(_TMP_SUFFIX) + "$")


def is_local(path: str | os.PathLike) -> bool:
    """Whether ``path`` names the local file system (no URL scheme other than ``file://``)."""
    return "://" not in os.fspath(path) or os.fspath(path).startswith("file://")


def atomic_write_bytes(data: bytes, path: str | os.PathLike) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same directory, fsync, ``os.replace``.

    Raises whatever the write raised (e.g. ``OSError: [Errno 28] No space left on device``) after removing the
    temporary file; ``path`` then still holds its previous content (or does not exist)."""
    target = Path(os.fspath(path).removeprefix("file://"))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{_TMP_SUFFIX}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable (best effort: not every file system supports fsync on a directory)
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def remove_stale_temps(folder: str | os.PathLike, older_than_s: float = 3600.0) -> list[Path]:
    """Remove from ``folder`` (not below it) the temporary files of :func:`atomic_write_bytes` older than
    ``older_than_s`` seconds: those a killed writer left behind (a live write takes far less; a younger one may be
    another process's write in progress, so it stays). Returns the removed paths; a missing folder removes nothing."""
    root = Path(folder)
    if not root.is_dir():
        return []
    cutoff = time.time() - older_than_s
    removed = []
    for path in root.iterdir():
        try:
            if _TMP_NAME.match(path.name) and path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:  # another process removed it first
            continue
    return removed
