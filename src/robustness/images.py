"""A fixed probe set of real photos that load offline (``src.utils.photos``: scikit-image and scikit-learn sample
images), for DivergenceRadius when a data module has no validation images to offer."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from ..utils.photos import load_photo

__all__ = ["bundled_photos", "PROBE_PHOTOS"]

PROBE_PHOTOS = (
    "astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field", "camera", "china", "flower"
)  # fmt: skip


@lru_cache(maxsize=1)
def _sources() -> tuple[Tensor, ...]:
    return tuple(load_photo(name) for name in PROBE_PHOTOS)


def bundled_photos(n: int = 32, size: int = 64, seed: int = 0) -> Tensor:
    """``n`` images (n, 3, size, size) float in [0, 1], cycling through the 9 photos of ``PROBE_PHOTOS``: the first
    9 are squares of the photo's whole short side, later ones squares of 50–100 % of it, all at seeded random
    positions, resized with antialiasing. Deterministic in (n, size, seed)."""
    if n < 1 or size < 1:
        raise ValueError(f"need n >= 1 images of size >= 1, got n={n}, size={size}")
    photos = _sources()
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        img = photos[i % len(photos)]
        h, w = img.shape[1:]
        side = int(min(h, w) * (0.5 + 0.5 * rng.random())) if i >= len(photos) else min(h, w)
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = img[:, top : top + side, left : left + side][None]
        crop = torch.nn.functional.interpolate(crop, size=(size, size), mode="bilinear", antialias=True)
        out.append(crop[0].clamp(0.0, 1.0))
    return torch.stack(out)
