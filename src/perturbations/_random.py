"""Random draws on the generator's device, moved to the images' device (a seed gives the same draws on any device)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rand", "randn", "randint"]


def _device(generator: torch.Generator | None, like: Tensor) -> torch.device:
    return generator.device if generator is not None else like.device


def rand(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor, dtype=torch.float64) -> Tensor:
    """Uniform [0, 1) of ``shape`` on ``like``'s device."""
    return torch.rand(shape, generator=generator, device=_device(generator, like), dtype=dtype).to(like.device)


def randn(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Standard normal of ``shape`` in ``like``'s dtype and device (drawn in float64, so a seed gives the same noise
    whatever the images' dtype)."""
    z = torch.randn(shape, generator=generator, device=_device(generator, like), dtype=torch.float64)
    return z.to(device=like.device, dtype=like.dtype)


def randint(low: int, high: int, shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Integers uniform in ``[low, high)`` of ``shape`` (int64) on ``like``'s device."""
    return torch.randint(low, high, shape, generator=generator, device=_device(generator, like)).to(like.device)
