"""Loading RepBench checkpoints safely (``weights_only=True``) without knowing the module class in advance."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import torch

__all__ = ["MODULE_KEY", "load_module", "record_module_class"]

MODULE_KEY = "repbench_module"  # checkpoint entry naming the LightningModule class ("package.module:Class")


def record_module_class(module: Any, checkpoint: dict[str, Any]) -> None:
    """Store the module's class in the checkpoint (call from ``on_save_checkpoint``) so :func:`load_module` can
    rebuild it without being told the class."""
    checkpoint[MODULE_KEY] = f"{type(module).__module__}:{type(module).__qualname__}"


def load_module(ckpt_path: str | Path, map_location: str | torch.device = "cpu", **overrides: Any):
    """Rebuild the LightningModule stored in ``ckpt_path``; ``overrides`` replace saved hyperparameters."""
    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}; pass ckpt_path=<run dir>/checkpoints/last.ckpt")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    target = ckpt.get(MODULE_KEY)
    if not target:
        raise ValueError(f"{path} was not written by a RepBench module (no {MODULE_KEY!r} entry)")
    module_name, _, cls_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    return cls.load_from_checkpoint(path, map_location=map_location, weights_only=True, **overrides)
