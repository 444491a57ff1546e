"""scikit-learn's bundled digits as tensors, without Lightning: the one loader behind the digits data module, the
DivergenceRadius report, the Task-Prior study and the Task-Prior callback's probe images (like ``src.images.photos`` for
the bundled photos). Image sizes are checked by :func:`src.utils.checks.check_image_size`."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.checks import check_image_size

__all__ = ["load_digits_tensors", "upsample_digits"]

_INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


def upsample_digits(images: Tensor, image_size: int, interpolation: str = "bilinear") -> Tensor:
    """(N, 1, 8, 8) gray images in [0, 1] -> (N, 3, S, S) RGB in [0, 1] with ``F.interpolate``
    (align_corners=False; bicubic overshoot is clamped; antialias only matters when shrinking below 8x8).

    Gray -> RGB repeats the channel as a broadcast view (``expand``: no copy; the DataLoader's collate materialises
    the batch). Call ``.contiguous()`` before writing into a single item in place.
    """
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"unknown interpolation {interpolation!r}; expected one of {_INTERPOLATIONS}")
    image_size = check_image_size(image_size)
    size = (image_size, image_size)
    if interpolation == "nearest":
        out = F.interpolate(images, size=size, mode="nearest")
    else:
        shrink = image_size < images.shape[-1]
        out = F.interpolate(images, size=size, mode=interpolation, align_corners=False, antialias=shrink)
    return out.clamp_(0.0, 1.0).expand(-1, 3, -1, -1)


def load_digits_tensors() -> tuple[Tensor, Tensor]:
    """scikit-learn's ``load_digits()`` as ((1797, 1, 8, 8) float32 in [0, 1] (values 0..16 divided by 16), int64)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.from_numpy(np.asarray(bunch.images, dtype=np.float32) / 16.0)[:, None]
    return images, torch.from_numpy(np.asarray(bunch.target, dtype=np.int64))
