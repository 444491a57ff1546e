"""A fixed probe set of real photos that load offline (scikit-image and scikit-learn sample images), for
DivergenceRadius when a data module has no validation images to offer."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

__all__ = ["bundled_photos", "PHOTO_NAMES"]

PHOTO_NAMES = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field", "camera")


@lru_cache(maxsize=1)
def _sources() -> tuple[np.ndarray, ...]:
    import skimage.data
    from sklearn.datasets import load_sample_images

    out = []
    for name in PHOTO_NAMES:
        img = np.asarray(getattr(skimage.data, name)())
        if img.ndim == 2:
            img = np.repeat(img[..., None], 3, axis=-1)
        out.append(img[..., :3])
    out.extend(np.asarray(im)[..., :3] for im in load_sample_images().images)
    return tuple(out)


def bundled_photos(n: int = 32, size: int = 64, seed: int = 0) -> Tensor:
    """``n`` images (n, 3, size, size) float in [0, 1]: seeded random square crops (side 50–100 % of the photo's
    short side) of the 9 offline sample photos in turn, resized with antialiasing. Deterministic in (n, size, seed)."""
    if n < 1 or size < 1:
        raise ValueError(f"need n >= 1 images of size >= 1, got n={n}, size={size}")
    photos = _sources()
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        img = torch.from_numpy(np.array(photos[i % len(photos)])).permute(2, 0, 1).float() / 255.0
        h, w = img.shape[1:]
        side = int(min(h, w) * (0.5 + 0.5 * rng.random())) if i >= len(photos) else min(h, w)
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = img[:, top : top + side, left : left + side][None]
        crop = torch.nn.functional.interpolate(crop, size=(size, size), mode="bilinear", antialias=True)
        out.append(crop[0].clamp(0.0, 1.0))
    return torch.stack(out)
