"""Host-to-device copies: pinned (page-locked) host memory and non-blocking copies for CUDA (not measured on a
GPU here); a plain ``.to`` elsewhere."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["to_device"]


def to_device(x: Tensor, device: torch.device | None, pin_memory: bool) -> Tensor:
    """``x`` on ``device`` (None: where it is). CPU → CUDA copies go through pinned memory (PyTorch's caching
    host allocator reuses the pinned blocks) and ``non_blocking=True``, so the copy overlaps earlier kernels."""
    if device is None or x.device == device:
        return x
    if device.type == "cuda" and x.device.type == "cpu":
        if pin_memory and not x.is_pinned():
            x = x.pin_memory()
        return x.to(device, non_blocking=True)
    return x.to(device)
