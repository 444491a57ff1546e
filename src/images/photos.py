"""Real photos that load offline from installed packages (scikit-image, scikit-learn, matplotlib; no download) and
seeded random square crops of them. No Lightning: shared by ``src.data.photos`` (the fine-tuning data module) and
:func:`bundled_photos` (the fixed probe set of photos: ``images="photos"`` of the monitors, ``src.images.probe_images``,
and the audit report).

Sources: scikit-image ``skimage.data`` photographs, scikit-learn's ``load_sample_image`` (china, flower) and
matplotlib's ``grace_hopper.jpg``. Gray photos are repeated to RGB.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["PHOTO_NAMES", "PROBE_PHOTOS", "bundled_photos", "load_photo", "random_crops"]


def _skimage(name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from skimage import data

        return getattr(data, name)()

    return load


def _sklearn(name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from sklearn.datasets import load_sample_image

        return load_sample_image(f"{name}.jpg")

    return load


def _grace_hopper() -> np.ndarray:
    import matplotlib.cbook
    from PIL import Image

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        return np.asarray(Image.open(f).convert("RGB"))


_SOURCES: dict[str, Callable[[], np.ndarray]] = {
    **{
        n: _skimage(n)
        for n in (
            "astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "retina", "immunohistochemistry",
            "camera", "coins", "moon", "grass", "gravel", "brick", "clock", "cell",
        )
    },
    "china": _sklearn("china"),
    "flower": _sklearn("flower"),
    "grace_hopper": _grace_hopper,
}  # fmt: skip
PHOTO_NAMES: tuple[str, ...] = tuple(_SOURCES)


def load_photo(name: str) -> Tensor:
    """Photo ``name`` as a (3, H, W) float32 tensor in [0, 1] (gray repeated to RGB)."""
    if name not in _SOURCES:
        raise ValueError(f"unknown photo {name!r}; known: {', '.join(PHOTO_NAMES)}")
    a = np.asarray(_SOURCES[name]())
    if a.ndim == 2:
        a = np.repeat(a[..., None], 3, axis=2)
    a = a[..., :3]
    scale = 255.0 if a.dtype == np.uint8 else 1.0
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32) / scale).permute(2, 0, 1).contiguous()


def random_crops(
    photos: Sequence[Tensor], n: int, size: int, min_scale: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``n`` crops (n, 3, size, size) in [0, 1] and their photo indices (n,): crop ``i`` comes from photo
    ``i mod len(photos)``, is a square of side ``s·min(H, W)`` with ``s ~ U[min_scale, 1]`` at a uniform position,
    resized with antialiased bilinear interpolation."""
    out = torch.empty(n, 3, size, size)
    src = torch.arange(n) % len(photos)
    u = torch.rand(n, 3, generator=generator, dtype=torch.float64)
    for i in range(n):
        img = photos[int(src[i])]
        h, w = img.shape[1:]
        side = max(1, int(round((min_scale + (1.0 - min_scale) * float(u[i, 0])) * min(h, w))))
        top, left = int(float(u[i, 1]) * (h - side + 1)), int(float(u[i, 2]) * (w - side + 1))
        crop = img[None, :, top : top + side, left : left + side]
        out[i] = F.interpolate(crop, size=(size, size), mode="bilinear", antialias=side > size, align_corners=False)[0]
    return out.clamp_(0.0, 1.0), src


# ---------------------------------------------------------------------------------------------------- probe set
PROBE_PHOTOS = (
    "astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field", "camera", "china", "flower"
)  # fmt: skip


@lru_cache(maxsize=1)
def _probe_sources() -> tuple[Tensor, ...]:
    """The photos of :data:`PROBE_PHOTOS`, loaded once per process."""
    return tuple(load_photo(name) for name in PROBE_PHOTOS)


def bundled_photos(n: int = 32, size: int = 64, seed: int = 0) -> Tensor:
    """``n`` images (n, 3, size, size) float in [0, 1], cycling through the 9 photos of ``PROBE_PHOTOS``: the first
    9 are squares of the photo's whole short side, later ones squares of 50–100 % of it, all at seeded random
    positions, resized with antialiasing. Deterministic in (n, size, seed)."""
    if n < 1 or size < 1:
        raise ValueError(f"need n >= 1 images of size >= 1, got n={n}, size={size}")
    photos = _probe_sources()
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        img = photos[i % len(photos)]
        h, w = img.shape[1:]
        side = int(min(h, w) * (0.5 + 0.5 * rng.random())) if i >= len(photos) else min(h, w)
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = img[:, top : top + side, left : left + side][None]
        crop = F.interpolate(crop, size=(size, size), mode="bilinear", antialias=True)
        out.append(crop[0].clamp(0.0, 1.0))
    return torch.stack(out)
