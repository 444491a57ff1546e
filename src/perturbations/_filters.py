"""Small exact filtering helpers shared by the perturbations: border index maps and separable / 2-D convolutions.

Border modes are named after the libraries whose behaviour they reproduce:

* ``"nearest"``: edge replicated (``aaa|abcd|ddd``) -- scipy ``mode="nearest"``, skimage's default.
* ``"reflect"``: half-sample symmetric (``cba|abcd|dcb``) -- scipy ``mode="reflect"`` (numpy ``"symmetric"``).
* ``"reflect101"``: whole-sample symmetric (``dcb|abcd|cba``) -- OpenCV's default ``BORDER_REFLECT_101``, torch's
  ``F.pad(mode="reflect")``.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["border_index", "pad2d", "gaussian_kernel1d", "separable_filter", "depthwise_filter2d", "next_power_of_2"]


def border_index(idx: Tensor, n: int, mode: str) -> Tensor:
    """Map integer positions ``idx`` (any, possibly outside ``[0, n)``) to in-range positions under a border mode."""
    if mode == "nearest":
        return idx.clamp(0, n - 1)
    if mode == "reflect":
        period = 2 * n
        j = torch.remainder(idx, period)
        return torch.where(j >= n, period - 1 - j, j)
    if mode == "reflect101":
        if n == 1:
            return torch.zeros_like(idx)
        period = 2 * n - 2
        j = torch.remainder(idx, period)
        return torch.where(j >= n, period - j, j)
    raise ValueError(f"unknown border mode {mode!r}; use 'nearest', 'reflect' or 'reflect101'")


@lru_cache(maxsize=256)
def _pad_positions(n: int, before: int, after: int, mode: str) -> Tensor:
    return border_index(torch.arange(-before, n + after), n, mode)


def pad2d(x: Tensor, pad_h: int, pad_w: int, mode: str) -> Tensor:
    """Pad the last two dims of ``x`` by ``pad_h`` rows and ``pad_w`` columns on each side.

    ``nearest`` and ``reflect101`` use ``F.pad`` (``replicate`` / ``reflect``: one vectorised copy, 10x faster than
    an index gather); ``reflect`` (half-sample symmetric, no ``F.pad`` mode) concatenates flipped edge strips. Pads
    wider than the image (possible only with ``reflect``/``reflect101`` on tiny images) fall back to the exact index
    gather, which wraps any number of times.
    """
    h, w = x.shape[-2:]
    if not (pad_h or pad_w):
        return x
    fits = pad_h < h and pad_w < w
    if mode == "nearest" or (mode == "reflect101" and fits):
        four_d = x.reshape(-1, 1, h, w) if x.ndim != 4 else x
        y = F.pad(four_d, (pad_w, pad_w, pad_h, pad_h), mode="replicate" if mode == "nearest" else "reflect")
        return y.reshape(*x.shape[:-2], h + 2 * pad_h, w + 2 * pad_w)
    if mode == "reflect" and pad_h <= h and pad_w <= w:
        if pad_h:
            x = torch.cat([x[..., :pad_h, :].flip(-2), x, x[..., h - pad_h :, :].flip(-2)], dim=-2)
        if pad_w:
            x = torch.cat([x[..., :pad_w].flip(-1), x, x[..., w - pad_w :].flip(-1)], dim=-1)
        return x
    if pad_h:
        x = x.index_select(-2, _pad_positions(h, pad_h, pad_h, mode).to(x.device))
    if pad_w:
        x = x.index_select(-1, _pad_positions(w, pad_w, pad_w, mode).to(x.device))
    return x


def gaussian_kernel1d(sigma: Tensor, truncate: float, radius: int | None = None) -> Tensor:
    """scipy.ndimage's 1-D Gaussian: ``exp(-x²/(2σ²))`` on ``x = -r..r``, ``r = int(truncate·σ + 0.5)``, normalised.

    ``sigma`` is a 1-D tensor (one kernel per row of the result); kernels are zero-padded to the largest radius (or to
    ``radius`` when given), which leaves each filter unchanged. Returns ``(len(sigma), 2R + 1)`` in sigma's dtype.
    """
    sigma = sigma.reshape(-1)
    radii = [int(truncate * float(s) + 0.5) for s in sigma.tolist()]
    big = max(radii) if radius is None else int(radius)
    pos = torch.arange(-big, big + 1, dtype=sigma.dtype, device=sigma.device)
    phi = torch.exp(-0.5 * pos[None, :] ** 2 / sigma[:, None] ** 2)
    r = torch.tensor(radii, device=sigma.device)[:, None]
    phi = torch.where(pos[None, :].abs() <= r, phi, torch.zeros_like(phi))
    return phi / phi.sum(dim=1, keepdim=True)


def separable_filter(x: Tensor, k_rows: Tensor, k_cols: Tensor, mode: str) -> Tensor:
    """Correlate every (image, channel) plane of ``x`` (N, C, H, W) with its own separable kernel.

    ``k_rows`` / ``k_cols``: (N, Kh) / (N, Kw) odd-length kernels along H / W, shared by the C channels of an image.
    """
    n, c, h, w = x.shape
    rh, rw = (k_rows.shape[1] - 1) // 2, (k_cols.shape[1] - 1) // 2
    y = pad2d(x, rh, rw, mode).reshape(1, n * c, h + 2 * rh, w + 2 * rw)
    wr = k_rows.to(x.dtype).repeat_interleave(c, dim=0)[:, None, :, None]
    wc = k_cols.to(x.dtype).repeat_interleave(c, dim=0)[:, None, None, :]
    y = F.conv2d(y, wr, groups=n * c)
    y = F.conv2d(y, wc, groups=n * c)
    return y.reshape(n, c, h, w)


def depthwise_filter2d(x: Tensor, kernels: Tensor, mode: str) -> Tensor:
    """Correlate every plane of image ``i`` in ``x`` (N, C, H, W) with ``kernels[i]`` (N, K, K), K odd."""
    n, c, h, w = x.shape
    r = (kernels.shape[-1] - 1) // 2
    if r >= min(h, w) and mode == "reflect101":
        raise ValueError(f"images of {h}x{w} px are too small for a {2 * r + 1}x{2 * r + 1} kernel")
    y = pad2d(x, r, r, mode).reshape(1, n * c, h + 2 * r, w + 2 * r)
    weight = kernels.to(x.dtype).repeat_interleave(c, dim=0)[:, None]
    return F.conv2d(y, weight, groups=n * c).reshape(n, c, h, w)


def next_power_of_2(v: int) -> int:
    """Smallest power of two >= ``v`` (imagecorruptions' ``next_power_of_2``)."""
    return 1 if v == 0 else 2 ** (int(v) - 1).bit_length()
