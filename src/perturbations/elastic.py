"""Elastic transform: a smooth random displacement field, bilinear resampling.

Reference: ImageNet-C (Hendrycks & Dietterich, arXiv:1903.12261), ``imagecorruptions.elastic_transform``; the
perturbation parameter k ("scaling factor", Table 8 of Liu et al., arXiv:2604.14973, domain [0.01, 0.05]) is the
displacement scale alpha / 250 (imagecorruptions' severities are alpha = 250·[0.05, 0.065, 0.085, 0.1, 0.12]).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._filters import border_index, gaussian_kernel1d, separable_filter
from ._random import rand

__all__ = ["elastic_transform", "elastic_transform_with", "elastic_fields"]

ALPHA_SCALE = 250.0  # alpha = 250·k
SIGMA_FRACTION = 0.01  # Gaussian smoothing sigma = 0.01·(H, W)
MAX_DISPLACEMENT_FRACTION = 0.005  # raw field uniform in ±0.005·H (both components, as in imagecorruptions)
TRUNCATE = 3.0


def elastic_fields(n: int, h: int, w: int, generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Raw displacement fields (N, 2, H, W) as ``(dx, dy)``, uniform in ±0.005·H, float64."""
    m = MAX_DISPLACEMENT_FRACTION * h
    return (2.0 * rand((n, 2, h, w), generator, like) - 1.0) * m


def _bilinear_reflect(x: Tensor, yy: Tensor, xx: Tensor) -> Tensor:
    """Sample ``x`` (N, C, H, W) at real coordinates (N, H, W), linear interpolation of the signal extended by
    half-sample symmetric reflection (scipy ``map_coordinates(order=1, mode="reflect")``)."""
    n, c, h, w = x.shape
    y0f, x0f = torch.floor(yy), torch.floor(xx)
    ty, tx = (yy - y0f).to(x.dtype), (xx - x0f).to(x.dtype)
    y0, x0 = y0f.long(), x0f.long()
    ys = (border_index(y0, h, "reflect"), border_index(y0 + 1, h, "reflect"))
    xs = (border_index(x0, w, "reflect"), border_index(x0 + 1, w, "reflect"))
    flat = x.reshape(n, c, h * w)

    def at(iy: Tensor, ix: Tensor) -> Tensor:
        idx = (iy * w + ix).reshape(n, 1, h * w).expand(n, c, h * w)
        return flat.gather(2, idx).reshape(n, c, h, w)

    ty, tx = ty[:, None], tx[:, None]
    top = at(ys[0], xs[0]) * (1 - tx) + at(ys[0], xs[1]) * tx
    bottom = at(ys[1], xs[0]) * (1 - tx) + at(ys[1], xs[1]) * tx
    return top * (1 - ty) + bottom * ty


def elastic_transform_with(x: Tensor, k: Tensor, fields: Tensor) -> Tensor:
    """Elastic transform for given raw fields (N, 2, H, W) ``(dx, dy)``: smooth each with a Gaussian of sigma
    ``0.01·(H, W)`` (truncate 3, border ``reflect``), scale by ``alpha = 250·k``, resample at
    ``(row + dy, col + dx)``."""
    n, c, h, w = x.shape
    sig_h = torch.full((n,), SIGMA_FRACTION * h, dtype=torch.float64)
    sig_w = torch.full((n,), SIGMA_FRACTION * w, dtype=torch.float64)
    kr = gaussian_kernel1d(sig_h, TRUNCATE).to(fields.device)
    kc = gaussian_kernel1d(sig_w, TRUNCATE).to(fields.device)
    smooth = separable_filter(fields.to(torch.float64), kr, kc, "reflect")
    alpha = (ALPHA_SCALE * k.to(torch.float64)).view(-1, 1, 1, 1).to(fields.device)
    disp = (smooth * alpha).to(torch.float32)  # imagecorruptions casts the scaled field to float32
    rows = torch.arange(h, device=x.device, dtype=torch.float64).view(1, h, 1)
    cols = torch.arange(w, device=x.device, dtype=torch.float64).view(1, 1, w)
    yy = rows + disp[:, 1].to(torch.float64)
    xx = cols + disp[:, 0].to(torch.float64)
    return _bilinear_reflect(x, yy, xx).clamp_(0.0, 1.0)


def elastic_transform(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Elastic transform with displacement scale ``k`` (alpha = 250·k)."""
    n, _, h, w = x.shape
    return elastic_transform_with(x, k, elastic_fields(n, h, w, generator, x))
