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

__all__ = [
    "fog",
    "fog_with",
    "plasma_fractal",
    "plasma_heights",
    "frost",
    "frost_with",
    "frost_layers",
    "frost_layers_gather",
    "frost_starts",
    "frost_images",
]

UniformSource = Callable[[tuple[int, ...], float, float], Tensor]  # (shape, low, high) -> U[low, high) draws
FOG_WIBBLE_DECAY = 2.0  # imagecorruptions severities 1-2 (density 1.5, 2.0); severity 3+ use 1.7, 1.5, 1.4
FROST_IMAGE_WEIGHT = 1.0  # imagecorruptions severity 1: (image 1.0, frost 0.4)
FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")
FROST_RESCALE = 1.1  # imagecorruptions enlarges the frost photo by 1.1 (more when the image is larger than it)


def _plus_rolled(a: Tensor, dim: int, shift: int) -> Tensor:
    """``a + torch.roll(a, shift, dim)`` for ``shift`` = ±1 without materialising the rolled copy."""
    n = a.shape[dim]
    out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    if shift == -1:  # out[i] = a[i] + a[i + 1 mod n]
        torch.add(a.narrow(dim, 0, n - 1), a.narrow(dim, 1, n - 1), out=out.narrow(dim, 0, n - 1))
        torch.add(a.narrow(dim, n - 1, 1), a.narrow(dim, 0, 1), out=out.narrow(dim, n - 1, 1))
    elif shift == 1:  # out[i] = a[i] + a[i - 1 mod n]
        torch.add(a.narrow(dim, 1, n - 1), a.narrow(dim, 0, n - 1), out=out.narrow(dim, 1, n - 1))
        torch.add(a.narrow(dim, 0, 1), a.narrow(dim, n - 1, 1), out=out.narrow(dim, 0, 1))
    else:
        raise ValueError(f"shift must be +1 or -1, got {shift}")
    return out


def plasma_fractal(
    n: int,
    mapsize: int,
    wibbledecay: float,
    uniform: UniformSource,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Diamond-square height maps (N, S, S) rescaled to [0, 1], step for step as imagecorruptions'
    ``plasma_fractal`` (see :func:`plasma_heights` for the draws and the precision)."""
    heights = plasma_heights(n, mapsize, wibbledecay, uniform, device, dtype)
    lo, span = _min_span(heights)
    return heights.sub_(lo).div_(span)


def _min_span(heights: Tensor) -> tuple[Tensor, Tensor]:
    flat = heights.flatten(1)  # (torch.aminmax along a dim is ~7x slower than amin + amax on CPU)
    lo, hi = flat.amin(dim=1), flat.amax(dim=1)
    return lo.view(-1, 1, 1), (hi - lo).view(-1, 1, 1)


def plasma_heights(
    n: int,
    mapsize: int,
    wibbledecay: float,
    uniform: UniformSource,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Diamond-square height maps (N, S, S) before the rescaling to [0, 1], step for step as imagecorruptions'
    ``plasma_fractal``.

    ``uniform(shape, low, high)`` returns U[low, high) draws of ``shape`` (N, a, b); they are consumed in the reference's order
    (squares, then the two diamond sets, per scale), so feeding numpy's draws reproduces the reference exactly. Each
    new point is ``mean of its 4 neighbours + wibble·U(−wibble, wibble)``. Computed in ``dtype`` (float32 by default:
    the map's values stay below ~2·100² in magnitude and the result is rescaled to [0, 1], so float32's relative
    round-off of ~(levels + 2)·u ≈ 1e-6 is far below one grey level).
    """
    if mapsize & (mapsize - 1):
        raise ValueError(f"mapsize must be a power of two, got {mapsize}")
    # Polyphase form: ``grid`` holds the points known at the current step (positions (i·step, j·step)) contiguously;
    # each round computes the square centres C, the points L = (i·step, j·step + half) and T = (i·step + half,
    # j·step) from it, then interleaves G, L, T, C into the grid of the next step (no strided writes into the map).
    grid = torch.zeros(n, 1, 1, dtype=dtype, device=device)
    step = mapsize
    wibble = 100.0

    def wibbledmean(total: Tensor) -> Tensor:
        u = uniform(tuple(total.shape), -wibble * wibble, wibble * wibble).to(device=total.device, dtype=dtype)
        return u.add_(total, alpha=0.25)

    while step >= 2:
        ul = grid
        dr = wibbledmean(_plus_rolled(_plus_rolled(ul, 1, -1), 2, -1))  # square centres
        left = wibbledmean(
            _plus_rolled(dr, 1, 1).add_(_plus_rolled(ul, 2, -1))
        )  # dr + roll(dr,1,1) + ul + roll(ul,-1,2)
        top = wibbledmean(
            _plus_rolled(dr, 2, 1).add_(_plus_rolled(ul, 1, -1))
        )  # dr + roll(dr,1,2) + ul + roll(ul,-1,1)
        a, b = grid.shape[1:]  # next grid[2i + p, 2j + q] = (ul, left, top, dr)[2p + q][i, j]
        grid = torch.stack([ul, left, top, dr]).view(2, 2, n, a, b).permute(2, 3, 0, 4, 1).reshape(n, 2 * a, 2 * b)
        step //= 2
        wibble /= wibbledecay
    return grid


def fog_with(x: Tensor, k: Tensor, fractal: Tensor) -> Tensor:
    """``clip((x + k·F) · max(x) / (max(x) + k))`` with the fractal ``F`` (N, S, S) cropped to the image, shared by
    the channels; ``max(x)`` over the whole image."""
    ones = torch.ones(x.shape[0], 1, 1, dtype=x.dtype, device=x.device)
    return _fog_blend(x, k, fractal, torch.zeros_like(ones), ones)


def _fog_blend(x: Tensor, k: Tensor, heights: Tensor, lo: Tensor, span: Tensor) -> Tensor:
    """``fog_with`` for the unscaled heights ``H`` with ``F = (H − lo)/span``, folded into two passes over the image:
    ``y = x·r + (k·r/span)·H − k·r·lo/span`` with ``r = max(x)/(max(x) + k)``, then the clip."""
    n, c, h, w = x.shape
    kk = k.view(-1, 1, 1, 1).to(x.dtype)
    max_val = x.amax(dim=(1, 2, 3), keepdim=True)
    r = max_val / (max_val + kk)
    scale = kk * r / span.view(-1, 1, 1, 1).to(x.dtype)
    y = torch.addcmul(-scale * lo.view(-1, 1, 1, 1).to(x.dtype), x, r)
    return y.addcmul_(heights[:, None, :h, :w].to(x.dtype), scale).clamp_(0.0, 1.0)


def _symmetric_uniform_source(n: int, mapsize: int, generator: torch.Generator | None, like: Tensor) -> UniformSource:
    """A ``uniform(shape, -c, c)`` for :func:`plasma_heights` that serves consecutive slices of one U[−1, 1) draw
    made up front (3·N·(1 + 4 + … + (S/2)²) values): one parallel fill instead of 3·log2(S) small ones interleaved
    with the arithmetic (measured 20 % faster for 32 maps of 256²)."""
    total, side = 0, 1
    while side < mapsize:
        total += 3 * n * side * side
        side *= 2
    buf = rand((total,), generator, like, -1.0, 1.0)
    pos = 0

    def uniform(shape: tuple[int, ...], low: float, high: float) -> Tensor:
        nonlocal pos
        if low != -high:
            raise ValueError(f"this source draws symmetric ranges only, got [{low}, {high})")
        size = 1
        for d in shape:
            size *= int(d)
        out = buf[pos : pos + size].view(shape).mul_(high)
        pos += size
        return out

    return uniform


def fog(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Fog of density ``k`` (wibble decay 2); map size = next power of two >= max(H, W)."""
    n, _, h, w = x.shape
    size = next_power_of_2(max(h, w, 3))
    heights = plasma_heights(
        n, size, FOG_WIBBLE_DECAY, _symmetric_uniform_source(n, size, generator, x), device=x.device
    )
    return _fog_blend(x, k, heights, *_min_span(heights))


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


@lru_cache(maxsize=8)
def _rescaled_stack(h: int, w: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The six rescaled photos of :func:`_rescaled` zero-padded into one (6, 3, Hmax, Wmax) float32 tensor on
    ``device``, and their true sizes (6, 2) int64 there (cached per image size and device)."""
    photos = [_rescaled(i, h, w) for i in range(len(FROST_FILES))]
    hmax, wmax = max(p.shape[1] for p in photos), max(p.shape[2] for p in photos)
    stack = torch.zeros(len(photos), 3, hmax, wmax, dtype=torch.float32)
    for i, p in enumerate(photos):
        stack[i, :, : p.shape[1], : p.shape[2]] = p
    sizes = torch.tensor([list(p.shape[1:]) for p in photos], dtype=torch.int64)
    return stack.to(device), sizes.to(device)


def frost_starts(idx: Tensor, u: Tensor, h: int, w: int) -> Tensor:
    """Crop origins (N, 2) int64 on ``u``'s device: ``trunc(u·(size − (H, W)))`` in float32 for photo ``idx[i]``
    (imagecorruptions' ``randint(0, size − H)`` through one uniform), the same formula on every device."""
    sizes = _rescaled_stack(h, w, u.device)[1][idx]
    room = sizes - torch.tensor([h, w], dtype=torch.int64, device=u.device)
    return (u.to(torch.float32) * room.to(torch.float32)).to(torch.int64)


def frost_layers_gather(idx: Tensor, starts: Tensor, h: int, w: int) -> Tensor:
    """:func:`frost_layers` as one gather on ``idx``'s device (no per-image loop, nothing through the host):
    element (i, c, r, q) = photo idx[i], channel c, row starts[i, 0] + r, column starts[i, 1] + q."""
    stack = _rescaled_stack(h, w, idx.device)[0]
    dev = idx.device
    rows = starts[:, 0, None] + torch.arange(h, device=dev)  # (N, H)
    cols = starts[:, 1, None] + torch.arange(w, device=dev)  # (N, W)
    chan = torch.arange(3, device=dev).view(1, 3, 1, 1)
    return stack[idx.view(-1, 1, 1, 1), chan, rows[:, None, :, None], cols[:, None, None, :]]


def frost_with(x: Tensor, k: Tensor, layers: Tensor) -> Tensor:
    """``clip(1.0·x + k·frost)`` (ImageNet-C image weight 1.0, frost weight k)."""
    kk = k.view(-1, 1, 1, 1).to(x.dtype)
    return (FROST_IMAGE_WEIGHT * x + kk * layers.to(device=x.device, dtype=x.dtype)).clamp_(0.0, 1.0)


def frost(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Frost of weight ``k``: one of six photos and a crop position drawn uniformly per image. Images on a CPU are
    cropped photo by photo; elsewhere the draws, crop origins and crops stay on the images' device (one gather)."""
    n, _, h, w = x.shape
    if x.device.type != "cpu":
        idx = randint(0, len(FROST_FILES), (n,), generator, x)
        starts = frost_starts(idx, rand((n, 2), generator, x), h, w)
        return frost_with(x, k, frost_layers_gather(idx, starts, h, w))
    idx = randint(0, len(FROST_FILES), (n,), generator, x).cpu()
    u = rand((n, 2), generator, x).cpu()
    starts = []
    for i in range(n):
        fh, fw = _rescaled(int(idx[i]), h, w).shape[1:]
        starts.append([int(u[i, 0] * (fh - h)), int(u[i, 1] * (fw - w))])
    return frost_with(x, k, frost_layers(idx, torch.tensor(starts, dtype=torch.long).view(n, 2), h, w))
