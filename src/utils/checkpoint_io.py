"""Checkpoint writes that never leave a truncated file under a checkpoint's name.

Lightning's ``TorchCheckpointIO`` saves through fsspec's local transaction, which writes the bytes to a file in the
system temporary directory and then moves it onto the target. When ``$TMPDIR`` and the run directory are on two file
systems (node-local scratch, shared output storage) the move is a copy that first truncates the target: a disk that
fills during the copy destroys the previous good ``last.ckpt``. A failed save also leaves partial files behind.

:class:`AtomicCheckpointIO` saves local paths through :func:`~src.utils.atomic_write.atomic_write_bytes` (a
temporary file in the target's own directory, fsync, ``os.replace``): on any error the previous checkpoint under
that name is untouched. Remote URLs (``s3://``...) go to Lightning's own implementation.

Use it in your own Trainer: ``L.Trainer(plugins=[AtomicCheckpointIO()])``; ``python -m src.train`` always does.
"""

from __future__ import annotations

import io
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .atomic_write import atomic_write_bytes, is_local

__all__ = ["AtomicCheckpointIO", "atomic_write_bytes"]


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic in the target directory (see the module docstring)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"{type(self).__name__}.save_checkpoint got storage_options={storage_options!r}, which it does not "
                "use; drop them or use Lightning's TorchCheckpointIO"
            )
        if not is_local(path):
            return super().save_checkpoint(checkpoint, path)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(buffer.getvalue(), path)
