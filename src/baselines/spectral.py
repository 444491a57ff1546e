"""Spectral baselines of a feature matrix Z (n, D): RankMe and α-ReQ, each from the features or from their second
moments (what the torchmetrics accumulate).

RankMe (Garrido et al., "RankMe: Assessing the Downstream Performance of Pretrained Self-Supervised
Representations by Their Rank", ICML 2023, arXiv:2210.02885, eq. 1): with σ_1 ≥ … ≥ σ_m the m = min(n, D) singular
values of the embedding matrix Z itself (NOT centred, as the paper's definition; computed as √ of the eigenvalues
of ZᵀZ or ZZᵀ, the smaller), p_k = σ_k/‖σ‖₁ + ε and
RankMe = exp(−Σ_k p_k log p_k) (0·log 0 = 0 when ε = 0). σ_k = √λ_k(ZᵀZ). Higher is better (an effective rank in
[1, m] for ε = 0). An eigenvalue at or below λ_max·max(n, D)·u (u the float64 unit roundoff) is taken as 0
(:func:`rank_cut`): the Gram route computes eigenvalues with an absolute error ≈ u·λ_max, so the zero singular
values of rank-deficient features would otherwise come out as σ ≈ √(u)·σ_max ≈ 1e-8·σ_max and move RankMe by up to
≈ 1e-6 relative; with the cut, RankMe equals the definition over ``torch.linalg.svdvals(Z)`` to rounding.
Note: the α-ReQ authors' ``reptrix`` library computes a "rankme" of the centred covariance eigenvalues instead (λ_k, not σ_k): a different number; we follow the RankMe paper.

α-ReQ (Agrawal et al., "α-ReQ: Assessing Representation Quality in Self-Supervised Learning by measuring
eigenspectrum decay", NeurIPS 2022): λ_1 ≥ λ_2 ≥ … the eigenvalues of the feature covariance (centred; the divisor
does not change α), fitted by λ_i ∝ i^(−α) with weighted least squares of log λ_i on −log i over the ranks
i ∈ [11, 100] with weights 1/i, as the authors' code (``reptrix``: ``fit_range = np.arange(10, 100)`` 0-based,
weights 1/rank). Lower α = slower decay; the paper reports that α near 1 is best, so α has no monotone "better"
direction (``higher_is_better = None``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ..utils.checks import check_features, check_int, check_real

F64 = torch.float64

__all__ = [
    "rankme",
    "rankme_from_gram",
    "alpha_req",
    "alpha_req_from_moments",
    "power_law_exponent",
    "DEFAULT_FIT_RANGE",
]

DEFAULT_FIT_RANGE = (11, 100)  # 1-based ranks, inclusive (authors' np.arange(10, 100), 0-based)
_ZERO_RTOL = 1e-12  # eigenvalues at or below 1e-12·λ_max are zero (no power law can be fitted there)
_EPS64 = torch.finfo(F64).eps


def _gram_eigenvalues(z: Tensor) -> Tensor:
    """The m = min(n, D) largest eigenvalues of ZᵀZ (= squared singular values of Z), descending, from the smaller
    of ZᵀZ and ZZᵀ (one eigvalsh: several times faster than an SVD of Z; absolute error ≈ u·λ_max). A Gram matrix is
    positive semi-definite, so a rounding-level negative eigenvalue is taken as its exact value 0."""
    gram = z.T @ z if z.shape[0] >= z.shape[1] else z @ z.T
    return _sym_eigenvalues(gram)[: min(z.shape)]


def _sym_eigenvalues(gram: Tensor) -> Tensor:
    """Eigenvalues of the symmetric part of ``gram``, descending, negatives (rounding) set to 0."""
    return torch.linalg.eigvalsh((gram + gram.T) / 2).flip(0).clamp_min(0.0)


def rank_cut(eigenvalues: Tensor, n: int, d: int) -> Tensor:
    """Eigenvalues λ (descending, >= 0) of the Gram matrix of an (n, D) float64 matrix with those at or below the
    numerical-rank threshold λ_max·max(n, D)·u set to 0: torch.linalg.matrix_rank's rule (σ_max·max(N, D)·eps)
    applied to the Gram matrix, whose singular values are the λ. A zero singular value of Z has a Gram eigenvalue
    of rounding size (≈ u·λ_max: the product ZᵀZ and the eigensolver each err by a few u·λ_max), far below the
    threshold; √ of it would be a spurious σ ≈ 1e-8·σ_max. Singular values below √(max(n, D)·u)·σ_max are
    unresolvable through the Gram matrix either way."""
    if eigenvalues.numel() == 0:
        return eigenvalues
    threshold = float(eigenvalues[0]) * max(n, d) * _EPS64
    return torch.where(eigenvalues > threshold, eigenvalues, torch.zeros_like(eigenvalues))


def _entropy_rank(sigma: Tensor, eps: float) -> float:
    """exp(−Σ p log p), p = σ/‖σ‖₁ + ε."""
    total = float(sigma.sum())
    if total <= 0.0:
        raise ValueError("RankMe: the features are all zero (no singular value > 0); the rank is undefined")
    p = sigma / total + eps
    return math.exp(-float(torch.xlogy(p, p).sum()))


def rankme(features: Tensor, eps: float = 1e-7) -> float:
    """RankMe of ``features`` (n, D), uncentred, float64 (module docstring)."""
    z = check_features(features, min_rows=2, dtype=F64)
    eps = check_real(eps, "eps", low=0.0, low_open=False)
    return _entropy_rank(rank_cut(_gram_eigenvalues(z), *z.shape).sqrt(), eps)


def rankme_from_gram(gram: Tensor, n: int, eps: float = 1e-7) -> float:
    """RankMe from ZᵀZ (D, D) and n: σ_k = √λ_k(ZᵀZ) for the m = min(n, D) largest eigenvalues (a Gram matrix is
    positive semi-definite, so a rounding-level negative eigenvalue is taken as its exact value 0, and one below the
    numerical-rank threshold too: :func:`rank_cut`)."""
    eps = check_real(eps, "eps", low=0.0, low_open=False)
    n = check_int(n, "n", 1)
    lam = _sym_eigenvalues(gram.to(F64))[: min(n, gram.shape[0])]
    return _entropy_rank(rank_cut(lam, n, gram.shape[0]).sqrt(), eps)


def check_fit_range(fit_range: object, available: int | None = None) -> tuple[int, int]:
    """``fit_range`` as (first, last) 1-based ranks with 1 <= first < last — the α-ReQ power-law fit — and, when
    ``available`` is given, last <= available eigenvalues; a TypeError / ValueError naming ``fit_range`` and the fix
    otherwise. The one validator of the fit range (functional, metric and callback)."""
    if isinstance(fit_range, (str, bytes)) or not isinstance(fit_range, Sequence) or len(fit_range) != 2:
        raise TypeError(
            f"fit_range must be (first, last) ranks of the α-ReQ power-law fit, e.g. fit_range=(11, 100) (the "
            f"authors'), got {fit_range!r}"
        )
    lo, hi = (check_int(v, "fit_range", 1) for v in fit_range)
    if hi <= lo:
        raise ValueError(f"fit_range={tuple(fit_range)} must be (first, last) ranks with first < last, 1-based")
    if available is not None and hi > available:
        raise ValueError(
            f"alpha_req: fit_range={tuple(fit_range)} needs {hi} covariance eigenvalues but the features give "
            f"{available} (min(n - 1, D)); pass a smaller fit_range, e.g. fit_range=(2, {max(available, 3)})"
        )
    return lo, hi


def power_law_exponent(eigenvalues: Tensor, fit_range: tuple[int, int] = DEFAULT_FIT_RANGE) -> float:
    """α of λ_i ∝ i^(−α): weighted least squares of log λ_i = c − α log i over ranks ``fit_range`` (1-based,
    inclusive) with weights 1/i. ``eigenvalues`` are sorted descending here."""
    lam = eigenvalues.to(F64).sort(descending=True).values
    lo, hi = check_fit_range(fit_range, lam.numel())
    top = float(lam[0])
    part = lam[lo - 1 : hi]
    if top <= 0 or bool((part <= _ZERO_RTOL * top).any()):
        first = lo + int((part <= _ZERO_RTOL * max(top, 0.0)).nonzero()[0, 0])
        raise ValueError(
            f"alpha_req: covariance eigenvalue {first} is zero (the features have rank < {hi} in fit_range="
            f"{tuple(fit_range)}); a power law needs positive eigenvalues: pass fit_range ending below rank {first}"
        )
    ranks = torch.arange(lo, hi + 1, dtype=F64, device=lam.device)
    design = torch.stack([-ranks.log(), torch.ones_like(ranks)], 1)
    w = 1.0 / ranks
    coef = torch.linalg.solve(design.T @ (design * w[:, None]), design.T @ (w * part.log()))
    return float(coef[0])


def alpha_req(features: Tensor, fit_range: tuple[int, int] = DEFAULT_FIT_RANGE) -> float:
    """α-ReQ of ``features`` (n, D): the power-law exponent of the centred covariance spectrum (module docstring)."""
    z = check_features(features, min_rows=2, dtype=F64)
    return power_law_exponent(_gram_eigenvalues(z - z.mean(0))[: min(z.shape[0] - 1, z.shape[1])], fit_range)


def alpha_req_from_moments(
    sum_outer: Tensor, total: Tensor, n: int, fit_range: tuple[int, int] = DEFAULT_FIT_RANGE
) -> float:
    """α-ReQ from Σ z zᵀ (D, D), Σ z (D,) and n: eigenvalues of the scatter Σ zzᵀ − (Σz)(Σz)ᵀ/n (raw float64
    moments: relative error ≈ u·‖mean‖²/λ_i)."""
    n = check_int(n, "n", 2)
    scatter = sum_outer.to(F64) - torch.outer(total.to(F64), total.to(F64)) / n
    lam = _sym_eigenvalues(scatter)
    return power_law_exponent(lam[: min(n - 1, lam.numel())], fit_range)
