"""Pixel-wise perturbations: brightness (HSV value shift), contrast, Gaussian noise.

Reference: ImageNet-C (Hendrycks & Dietterich, ICLR 2019, arXiv:1903.12261), as implemented by the ``imagecorruptions``
module; parameter domains from Table 8 of Liu et al., "Robustness of Vision Foundation Models to Common
Perturbations", arXiv:2604.14973.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._random import randn

__all__ = ["brightness", "contrast", "gaussian_noise"]


def brightness(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Add ``k`` to the HSV value channel, clip it to [0, 1], and convert back to RGB.

    Closed form of ``hsv2rgb(rgb2hsv(x) with V -> min(V + k, 1))``: every channel of an HSV colour is ``V·(1 − S·g)``
    with hue/saturation terms ``S, g`` left unchanged, so the result is ``x · V'/V`` with ``V = max_c x_c`` and
    ``V' = min(V + k, 1)``; a black pixel (V = 0, hence S = 0) becomes grey ``V'``. ``k``: (N,).
    """
    v = x.amax(dim=1, keepdim=True)
    kk = k.view(-1, 1, 1, 1)
    v_new = torch.clamp(v + kk, max=1.0)
    positive = v > 0
    ratio = torch.where(positive, v_new / torch.where(positive, v, torch.ones_like(v)), torch.zeros_like(v))
    y = torch.where(positive, x * ratio, v_new.expand_as(x))
    return y.clamp_(0.0, 1.0)


def contrast(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Scale deviations from the per-image, per-channel mean by ``k``: ``(x − mean)·k + mean``, clipped."""
    kk = k.view(-1, 1, 1, 1)
    mean = x.mean(dim=(2, 3), keepdim=True)
    return torch.addcmul(mean * (1 - kk), x, kk).clamp_(0.0, 1.0)  # x·k + mean·(1 − k): two passes over x


def gaussian_noise(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Add i.i.d. N(0, k²) noise to every pixel and channel, clipped to [0, 1]. Noise is drawn on the generator's
    device (CPU when none is given and ``x`` is on CPU) and moved to ``x``'s device, so a seed gives the same images on
    every device."""
    return noise_with(x, k, randn(tuple(x.shape), generator, x))


def noise_with(x: Tensor, k: Tensor, noise: Tensor) -> Tensor:
    """``clip(x + k·noise)`` for a given standard-normal ``noise`` tensor (the deterministic part, for tests)."""
    return torch.addcmul(x, noise, k.view(-1, 1, 1, 1)).clamp_(0.0, 1.0)
