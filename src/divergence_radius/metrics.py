"""The three per-image robustness values of Liu et al., "Robustness of Vision Foundation Models to Common
Perturbations" (arXiv:2604.14973), Table 1, on the embeddings of an image's perturbed versions.

Each function maps embeddings (..., n, D) — the n points being f(P(x, k)) for k in the sampled domain, the clean
image (k = ⊥) always among them — to one value per set (...). Embeddings are ℓ2-normalised first (§2: the bounds
in [0, 1] hold on the unit sphere), in float64. A set of a single point is defined (every value is 0: one point has
no spread); an all-zero embedding cannot be normalised and raises.

* R_dr, DivergenceRadius (§3.3, eq. 10): radius of the minimum enclosing ball; in [0, 1] (App. C), = 1 when some
  subset sums to 0 (worst robustness), rotation invariant, monotone in the set of points.
* R_cs, cosine robustness (§3.1, eq. 6): (1 − min_{i,j} cos(z_i, z_j)) / 2.
* R_ed, Euclidean robustness (§3.2, eq. 8): max_{i,j} ‖z_i − z_j‖ / 2 = √R_cs on unit vectors (Theorem 2:
  ‖a − b‖² = 2 − 2 cos(a, b) for unit a, b).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..utils.numerics import pow2_exponent, times_pow2
from .meb import _check_points, minimum_enclosing_ball

#: a finite norm >= 2^-500 has a sum of squares >= 2^-1000, inside float64's normal range: computed directly; only
#: smaller or infinite norms take the (exact) power-of-two rescaling
SAFE_NORM = 2.0**-500

__all__ = ["normalize_embeddings", "divergence_radius", "cosine_robustness", "euclidean_robustness"]

F64 = torch.float64


def normalize_embeddings(embeddings: Tensor, name: str = "embeddings") -> Tensor:
    """ℓ2-normalise the last dimension in float64, after checking shape (..., n, D), finiteness and non-zero norms.

    Each vector is first divided by the power of two of its largest |component| (exact), so the norm of a finite
    vector at any scale (1e-200 or 1e200, whose squares under/overflow float64) is computed without under/overflow
    and only a vector of zeros has norm 0.
    """
    z = _check_points(embeddings, name).to(F64)
    norms = z.norm(dim=-1, keepdim=True)
    if z.numel() and not bool(((norms >= SAFE_NORM) & torch.isfinite(norms)).all()):  # under/overflow possible
        z = times_pow2(z, -pow2_exponent(z, -1))
        norms = z.norm(dim=-1, keepdim=True)
    if z.numel() and bool((norms == 0).any()):
        raise ValueError(
            f"{name} contain {int((norms == 0).sum())} all-zero vector(s) (every component exactly 0), which have no "
            "direction to normalise; "
            "check the feature function (a dead ReLU head or an all-black image through a bias-free encoder)"
        )
    return z / norms


def divergence_radius(embeddings: Tensor, *, normalize: bool = True) -> Tensor:
    """R_dr: radius of the minimum enclosing ball of the (ℓ2-normalised) embeddings (..., n, D) -> (...), in [0, 1].

    ``normalize=False`` skips the normalisation (the points must then already be unit vectors for the [0, 1]
    bound; the value is clamped to it only in the normalised case).
    """
    z = normalize_embeddings(embeddings) if normalize else _check_points(embeddings, "embeddings").to(F64)
    _, radius = minimum_enclosing_ball(z)
    return radius.clamp(0.0, 1.0) if normalize else radius


def _max_distance(embeddings: Tensor) -> Tensor:
    z = normalize_embeddings(embeddings)
    return torch.cdist(z, z, compute_mode="donot_use_mm_for_euclid_dist").amax(dim=(-1, -2))


def cosine_robustness(embeddings: Tensor) -> Tensor:
    """R_cs = (1 − min_{i,j} cos(z_i, z_j)) / 2 over the set (..., n, D) -> (...), in [0, 1].

    Computed as max_{i,j} ‖z_i − z_j‖² / 4 of the unit vectors (= (1 − cos)/2 by eq. 11), which avoids the
    cancellation of 1 − cos for nearly identical embeddings (R_cs ~ 1e-4 keeps full relative precision) and is exactly
    0 for identical ones."""
    return (_max_distance(embeddings).square() / 4.0).clamp(0.0, 1.0)


def euclidean_robustness(embeddings: Tensor) -> Tensor:
    """R_ed = max_{i,j} ‖z_i − z_j‖ / 2 of the unit vectors (..., n, D) -> (...), in [0, 1]."""
    return (_max_distance(embeddings) / 2.0).clamp(0.0, 1.0)
