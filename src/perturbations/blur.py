"""Blurs: defocus (disk kernel) and glass blur (Gaussian blur, local pixel shuffle, Gaussian blur).

Reference: ImageNet-C (Hendrycks & Dietterich, arXiv:1903.12261) as implemented by the ``imagecorruptions`` module;
parameter domains from Table 8 of Liu et al., arXiv:2604.14973. Fixed parameters: see docs/perturbations.md.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._filters import depthwise_filter2d, gaussian_kernel1d, separable_filter
from ._random import rand_bits

__all__ = ["defocus_blur", "disk_kernels", "glass_blur", "glass_blur_with", "glass_offsets", "glass_shuffle"]

DEFOCUS_ALIAS_BLUR = 0.5  # imagecorruptions severities 2-5 (severity 1 uses 0.1)
DISK_HALF_WIDTH = 8  # imagecorruptions' disk() support is -8..8 for radius <= 8
GLASS_MAX_DELTA = 1  # imagecorruptions severity 1: (sigma 0.7, max_delta 1, iterations 2)
GLASS_ITERATIONS = 2
GLASS_TRUNCATE = 4.0  # skimage.filters.gaussian default (scipy truncate)


def disk_kernels(radius: Tensor, alias_blur: float = DEFOCUS_ALIAS_BLUR) -> Tensor:
    """imagecorruptions' ``disk(radius, alias_blur)``: the aliased disk ``x² + y² <= r²`` on the grid -8..8,
    normalised, then blurred by OpenCV's 3x3 Gaussian with sigma ``alias_blur``; cropped to its non-zero support.

    ``radius``: (N,) float64 in (0, 8]. Returns (N, K, K) float64 with K = 2·(ceil(max r) + 1) + 1.
    """
    if float(radius.max()) > DISK_HALF_WIDTH:
        raise ValueError(f"disk radius must be <= {DISK_HALF_WIDTH}, got {float(radius.max())}")
    grid = torch.arange(-DISK_HALF_WIDTH, DISK_HALF_WIDTH + 1, dtype=torch.float64, device=radius.device)
    d2 = grid[:, None] ** 2 + grid[None, :] ** 2
    disk = (d2[None] <= radius.view(-1, 1, 1) ** 2).to(torch.float64)
    disk = disk / disk.sum(dim=(1, 2), keepdim=True)
    g = torch.exp(-torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64, device=radius.device) / (2 * alias_blur**2))
    g = g / g.sum()  # cv2.getGaussianKernel(3, alias_blur)
    # 3x3 separable blur of the 17x17 disk; the disk is zero near the grid's edge, so the border mode is irrelevant
    padded = torch.nn.functional.pad(disk, (1, 1, 1, 1))
    blurred = g[0] * padded[:, :-2] + g[1] * padded[:, 1:-1] + g[2] * padded[:, 2:]
    blurred = g[0] * blurred[:, :, :-2] + g[1] * blurred[:, :, 1:-1] + g[2] * blurred[:, :, 2:]
    half = min(DISK_HALF_WIDTH, int(torch.ceil(radius.max()).item()) + 1)
    c = DISK_HALF_WIDTH
    return blurred[:, c - half : c + half + 1, c - half : c + half + 1]


def defocus_blur(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Correlate each channel with the anti-aliased disk of radius ``k`` (OpenCV ``filter2D``, BORDER_REFLECT_101)."""
    kernels = disk_kernels(k.to(torch.float64))
    return depthwise_filter2d(x, kernels.to(x.device), "reflect101").clamp_(0.0, 1.0)


def _gaussian_blur(x: Tensor, sigma: Tensor) -> Tensor:
    """skimage ``gaussian(x, sigma, channel_axis=-1)``: scipy Gaussian, truncate 4, border ``nearest``."""
    kern = gaussian_kernel1d(sigma.to(torch.float64), GLASS_TRUNCATE).to(x.device)
    return separable_filter(x, kern, kern, "nearest")


def glass_offsets(
    n: int, h: int, w: int, generator: torch.Generator | None, like: Tensor, iterations: int = GLASS_ITERATIONS
) -> Tensor:
    """Random source offsets (iterations, N, 2, H, W) int8 as ``(dy, dx)``, uniform in ``{-1, 0}`` (numpy's
    ``randint(-d, d)`` for d = 1 excludes ``d``): one fair bit each. Drawn image-major (N, iterations, 2, H, W), so
    an image's offsets do not depend on the number of images after it; returned as a transposed view."""
    return rand_bits((n, iterations, 2, h, w), generator, like).to(torch.int8).neg_().transpose(0, 1)


def glass_blur_with(x: Tensor, k: Tensor, offsets: Tensor) -> Tensor:
    """Glass blur for given offsets: blur (σ = k), ``iterations`` rounds of local pixel moves, blur again.

    The moves follow imagecorruptions' ``_shuffle_pixels_njit_glass_blur``: rows ``h = H−d … d+1`` and columns
    ``w = W−d … d+1`` are visited in reverse raster order and ``x[h, w], x[h+dy, w+dx] = x[h+dy, w+dx], x[h, w]``
    is executed on 3-channel pixel *views*, which copies ``x[h+dy, w+dx]`` into ``x[h, w]`` and leaves the source
    unchanged (not a swap; checked against the reference in the tests). With ``d = 1`` the source (up/left, offsets in
    {−1, 0}) is visited later in the scan, so it still holds its value from the start of the round: each round is one
    exact parallel gather. (ImageNet-C quantises to uint8 between the steps; this float version does not, see
    docs/perturbations.md.)
    """
    return _gaussian_blur(glass_shuffle(_gaussian_blur(x, k), offsets), k).clamp_(0.0, 1.0)


def glass_shuffle(y: Tensor, offsets: Tensor) -> Tensor:
    """The pixel moves of glass blur for integer offsets (iterations, N, 2, H, W) ``(dy, dx)`` in ``[-d, d)``
    (see ``glass_blur_with``)."""
    n, c, h, w = y.shape
    d = GLASS_MAX_DELTA
    rows = torch.arange(h, device=y.device).view(h, 1)
    cols = torch.arange(w, device=y.device).view(1, w)
    visited = (rows >= d + 1) & (rows <= h - d) & (cols >= d + 1) & (cols <= w - d)  # (H, W)
    here = rows * w + cols
    for it in range(offsets.shape[0]):
        move = offsets[it, :, 0].to(torch.int64) * w + offsets[it, :, 1]  # (N, H, W): dy·W + dx
        src = move.mul_(visited).add_(here)
        flat = src.reshape(n, 1, h * w).expand(n, c, h * w)
        y = y.reshape(n, c, h * w).gather(2, flat).reshape(n, c, h, w)
    return y


def glass_blur(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Glass blur with Gaussian σ = ``k`` (ImageNet-C severity-1 shuffle: max_delta 1, 2 iterations)."""
    n, _, h, w = x.shape
    return glass_blur_with(x, k, glass_offsets(n, h, w, generator, x))
