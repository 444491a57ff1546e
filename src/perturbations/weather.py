"""Weather: fog (plasma fractal added to the image) and frost (a crop of a bundled frost photo blended in).

Reference: ImageNet-C (Hendrycks & Dietterich, arXiv:1903.12261), ``imagecorruptions.fog`` / ``frost``; domains from
Table 8 of Liu et al., arXiv:2604.14973: fog density [0.5, 2.5], frost weight [0.2, 0.6].
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from ._filters import next_power_of_2
from ._random import rand, randint

__all__ = ["fog", "fog_with", "plasma_fractal", "frost", "frost_with", "frost_layers", "frost_images"]

FOG_WIBBLE_DECAY = 2.0  # imagecorruptions severities 1-2 (density 1.5, 2.0); severity 3+ use 1.7, 1.5, 1.4
FROST_IMAGE_WEIGHT = 1.0  # imagecorruptions severity 1: (image 1.0, frost 0.4)
FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")
FROST_RESCALE = 1.1  # imagecorruptions enlarges the frost photo by 1.1 (more when the image is larger than it)


def plasma_fractal(
    n: int, mapsize: int, wibbledecay: float, uniform: Callable[[tuple[int, ...]], Tensor], device=None
) -> Tensor:
    """Diamond-square height maps (N, S, S) in [0, 1], step for step as imagecorruptions' ``plasma_fractal``.

    ``uniform(shape)`` returns U[0, 1) float64 draws of ``shape`` (N, a, b); they are consumed in the reference's order
    (squares, then the two diamond sets, per scale), so feeding numpy's draws reproduces the reference exactly.
    """
    if mapsize & (mapsize - 1):
        raise ValueError(f"mapsize must be a power of two, got {mapsize}")
    m = torch.zeros(n, mapsize, mapsize, dtype=torch.float64, device=device)
    step = mapsize
    wibble = 100.0

    def wibbledmean(a: Tensor) -> Tensor:
        return a / 4 + wibble * (-wibble + 2 * wibble * uniform(tuple(a.shape)).to(a.device))

    while step >= 2:
        half = step // 2
        corner = m[:, 0:mapsize:step, 0:mapsize:step]
        square = corner + torch.roll(corner, -1, dims=1)
        square = square + torch.roll(square, -1, dims=2)
        m[:, half:mapsize:step, half:mapsize:step] = wibbledmean(square)
        dr = m[:, half:mapsize:step, half:mapsize:step]
        ul = m[:, 0:mapsize:step, 0:mapsize:step]
        lt = dr + torch.roll(dr, 1, dims=1) + ul + torch.roll(ul, -1, dims=2)
        m[:, 0:mapsize:step, half:mapsize:step] = wibbledmean(lt)
        tt = dr + torch.roll(dr, 1, dims=2) + ul + torch.roll(ul, -1, dims=1)
        m[:, half:mapsize:step, 0:mapsize:step] = wibbledmean(tt)
        step //= 2
        wibble /= wibbledecay
    m = m - m.amin(dim=(1, 2), keepdim=True)
    return m / m.amax(dim=(1, 2), keepdim=True)


def fog_with(x: Tensor, k: Tensor, fractal: Tensor) -> Tensor:
    """``clip((x + k·F) · max(x) / (max(x) + k))`` with the fractal ``F`` (N, S, S) cropped to the image, shared by
    the channels; ``max(x)`` over the whole image."""
    n, c, h, w = x.shape
    kk = k.view(-1, 1, 1, 1).to(x.dtype)
    max_val = x.amax(dim=(1, 2, 3), keepdim=True)
    y = x + kk * fractal[:, None, :h, :w].to(x.dtype)
    return (y * max_val / (max_val + kk)).clamp_(0.0, 1.0)


def fog(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Fog of density ``k`` (wibble decay 2); map size = next power of two >= max(H, W)."""
    n, _, h, w = x.shape
    size = next_power_of_2(max(h, w, 3))
    fractal = plasma_fractal(n, size, FOG_WIBBLE_DECAY, lambda s: rand(s, generator, x), device=x.device)
    return fog_with(x, k, fractal)


def _frost_dir() -> Path:
    spec = importlib.util.find_spec("imagecorruptions")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "frost needs the frost photos bundled with the 'imagecorruptions' module: "
            "pip install imagecorruptions-imaug (a project dependency)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "frost"
    missing = [f for f in FROST_FILES if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"frost photos {missing} are missing from {folder}; reinstall with "
            "pip install --force-reinstall imagecorruptions-imaug"
        )
    return folder


@lru_cache(maxsize=1)
def frost_images() -> tuple[Tensor, ...]:
    """The six bundled frost photos as uint8 RGB (3, h, w) CPU tensors (alpha dropped, as ``cv2.imread`` does)."""
    folder = _frost_dir()
    with warnings.catch_warnings():  # torchvision 0.29 deprecates torchvision.io in favour of torchcodec (not a dep)
        warnings.simplefilter("ignore", DeprecationWarning)
        from torchvision.io import ImageReadMode, decode_image, read_file

        return tuple(decode_image(read_file(str(folder / f)), mode=ImageReadMode.RGB) for f in FROST_FILES)


def _scale(fh: int, fw: int, h: int, w: int) -> float:
    """imagecorruptions' frost scaling factor: 1 when the photo covers the image, else the larger ratio; times 1.1."""
    if fh >= h and fw >= w:
        s = 1.0
    elif fh < h and fw >= w:
        s = h / fh
    elif fh >= h and fw < w:
        s = w / fw
    else:
        s = max(h / fh, w / fw)
    return s * FROST_RESCALE


@lru_cache(maxsize=32)
def _rescaled(idx: int, h: int, w: int) -> Tensor:
    """Frost photo ``idx`` resized as imagecorruptions does (bicubic, a = −0.75, rounded to uint8), as float [0, 1]."""
    img = frost_images()[idx]
    fh, fw = img.shape[1:]
    s = _scale(fh, fw, h, w)
    size = (
        int(torch.tensor(fh * s, dtype=torch.float64).ceil()),
        int(torch.tensor(fw * s, dtype=torch.float64).ceil()),
    )
    out = F.interpolate(img[None].to(torch.float64), size=size, mode="bicubic", align_corners=False)[0]
    return (out.round().clamp(0, 255) / 255.0).to(torch.float32)


def frost_layers(idx: Tensor, starts: Tensor, h: int, w: int) -> Tensor:
    """Frost crops (N, 3, H, W) in [0, 1]: photo ``idx[i]`` rescaled for an H x W image, rows/cols from
    ``starts[i] = (row, col)``."""
    crops = []
    for i, (r, c) in zip(idx.tolist(), starts.tolist()):
        layer = _rescaled(int(i), h, w)
        crops.append(layer[:, r : r + h, c : c + w])
    return torch.stack(crops)


def frost_with(x: Tensor, k: Tensor, layers: Tensor) -> Tensor:
    """``clip(1.0·x + k·frost)`` (ImageNet-C image weight 1.0, frost weight k)."""
    kk = k.view(-1, 1, 1, 1).to(x.dtype)
    return (FROST_IMAGE_WEIGHT * x + kk * layers.to(device=x.device, dtype=x.dtype)).clamp_(0.0, 1.0)


def frost(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Frost of weight ``k``: one of six photos and a crop position drawn uniformly per image."""
    n, _, h, w = x.shape
    idx = randint(0, len(FROST_FILES), (n,), generator, x).cpu()
    u = rand((n, 2), generator, x).cpu()
    starts = []
    for i in range(n):
        fh, fw = _rescaled(int(idx[i]), h, w).shape[1:]
        starts.append([int(u[i, 0] * (fh - h)), int(u[i, 1] * (fw - w))])
    return frost_with(x, k, frost_layers(idx, torch.tensor(starts, dtype=torch.long).view(n, 2), h, w))
