"""Checkpoint writes that never leave a truncated file under a checkpoint's name.

Lightning's ``TorchCheckpointIO`` saves through fsspec's local transaction, which writes the bytes to a file in the
system temporary directory and then moves it onto the target. When ``$TMPDIR`` and the run directory are on two file
systems (node-local scratch, shared output storage) the move is a copy that first truncates the target: a disk that
fills during the copy destroys the previous good ``last.ckpt``. A failed save also leaves partial files behind.

:class:`AtomicCheckpointIO` writes ``.<name>.<pid>.<random>.tmp`` **in the target's own directory**, flushes and
fsyncs it, then ``os.replace``-s it onto the target (atomic on POSIX and Windows within one file system). On any
error the temporary file is removed and the previous checkpoint under that name is untouched. Remote URLs
(``s3://``...) go to Lightning's own implementation.

Use it in your own Trainer: ``L.Trainer(plugins=[AtomicCheckpointIO()])``; ``python -m src.train`` always does.
"""

from __future__ import annotations

import io
import os
import secrets
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

__all__ = ["AtomicCheckpointIO", "atomic_write_bytes"]

_TMP_SUFFIX = ".tmp"


def _is_local(path: str | os.PathLike) -> bool:
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


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic in the target directory (see the module docstring)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"{type(self).__name__}.save_checkpoint got storage_options={storage_options!r}, which it does not "
                "use; drop them or use Lightning's TorchCheckpointIO"
            )
        if not _is_local(path):
            return super().save_checkpoint(checkpoint, path)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(buffer.getvalue(), path)
