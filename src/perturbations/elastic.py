"""Elastic transform: a smooth random displacement field, bilinear resampling.

Reference: ImageNet-C (Hendrycks & Dietterich, arXiv:1903.12261), ``imagecorruptions.elastic_transform``; the
perturbation parameter k ("scaling factor", Table 8 of Liu et al., arXiv:2604.14973, domain [0.01, 0.05]) is the
displacement scale alpha / 250 (imagecorruptions' severities are alpha = 250·[0.05, 0.065, 0.085, 0.1, 0.12]).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ._filters import gaussian_kernel1d, separable_filter
from ._random import rand

__all__ = ["elastic_transform", "elastic_transform_with", "elastic_fields"]

ALPHA_SCALE = 250.0  # alpha = 250·k
SIGMA_FRACTION = 0.01  # Gaussian smoothing sigma = 0.01·(H, W)
MAX_DISPLACEMENT_FRACTION = 0.005  # raw field uniform in ±0.005·H (both components, as in imagecorruptions)
TRUNCATE = 3.0


def elastic_fields(n: int, h: int, w: int, generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Raw displacement fields (N, 2, H, W) as ``(dx, dy)``, uniform in ±0.005·H, float32."""
    m = MAX_DISPLACEMENT_FRACTION * h
    return rand((n, 2, h, w), generator, like).mul_(2.0 * m).sub_(m)


def _sample_reflect(x: Tensor, dy: Tensor, dx: Tensor) -> Tensor:
    """Sample ``x`` (N, C, H, W) at ``(row + dy, col + dx)`` (displacements (N, H, W)) by linear interpolation of the
    signal extended by half-sample symmetric reflection: scipy ``map_coordinates(order=1, mode="reflect")``.

    ``F.grid_sample(align_corners=False, padding_mode="reflection")`` reflects a coordinate about the pixel borders
    −0.5 and W − 0.5 and then clips it to [0, W − 1]; on a half-sample symmetric extension both give the same value
    (between −0.5 and 0 the two neighbours of the extension are the same pixel, which the clip returns). Coordinates are
    normalised as ``(2·(col + dx) + 1)/W − 1`` in x's dtype: the round trip moves a sample by ~W·u/2 px (1e-5 px at
    224 px in float32), i.e. at most that fraction of one grey level between neighbours.
    """
    n, c, h, w = x.shape
    rows = torch.arange(h, device=x.device, dtype=x.dtype).view(1, h, 1)
    cols = torch.arange(w, device=x.device, dtype=x.dtype).view(1, 1, w)
    gx = (2 * (cols + dx.to(x.dtype)) + 1) / w - 1
    gy = (2 * (rows + dy.to(x.dtype)) + 1) / h - 1
    grid = torch.stack([gx, gy], dim=-1)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


def elastic_transform_with(x: Tensor, k: Tensor, fields: Tensor) -> Tensor:
    """Elastic transform for given raw fields (N, 2, H, W) ``(dx, dy)``: smooth each with a Gaussian of sigma
    ``0.01·(H, W)`` (truncate 3, border ``reflect``), scale by ``alpha = 250·k``, resample at
    ``(row + dy, col + dx)``.

    The smoothing runs in float32 (imagecorruptions smooths in float64, then casts the scaled field to float32): the
    float32 sum of at most 2·⌈3σ⌉ + 1 positive-weight terms errs by ~K·u relative, 1e-6 px on a 1 px displacement.
    """
    n, c, h, w = x.shape
    sig_h = torch.full((n,), SIGMA_FRACTION * h, dtype=torch.float64)
    sig_w = torch.full((n,), SIGMA_FRACTION * w, dtype=torch.float64)
    kr = gaussian_kernel1d(sig_h, TRUNCATE).to(fields.device)
    kc = gaussian_kernel1d(sig_w, TRUNCATE).to(fields.device)
    smooth = separable_filter(fields.to(torch.float32), kr, kc, "reflect")
    alpha = (ALPHA_SCALE * k.to(torch.float64)).view(-1, 1, 1, 1).to(device=fields.device, dtype=torch.float32)
    disp = smooth.mul_(alpha)
    return _sample_reflect(x, disp[:, 1], disp[:, 0]).clamp_(0.0, 1.0)


def elastic_transform(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Elastic transform with displacement scale ``k`` (alpha = 250·k)."""
    n, _, h, w = x.shape
    return elastic_transform_with(x, k, elastic_fields(n, h, w, generator, x))
