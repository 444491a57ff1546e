"""SynBench-Score (ICML 2024 paper, eq. 2 and eq. 3, Appendix A.3).

E(a_t) = (1/n) Σ_k b_k 1[a_k > a_t]  (eq. 2 with p(s_k) = 1/n; A.3), one pair (a_k, b_k) per s value.

SynBench-Score(a_T) = ∫_{a_T}^1 E_θ,ε(a_t) da_t / ∫_{a_T}^1 E(a_t) da_t   (eq. 3), computed either as
* "grid" (official ``evaluate_synbench.py``): Riemann sums over the grid points t_j ∈ linspace(0.6, 1, 100)
  with t_j ≥ a_T, ratio Σ_j E_θ,ε(t_j) / Σ_j E(t_j) (Δt cancels); or
* "exact": ∫_{a_T}^1 1[a_k > t] dt = (a_k − a_T)₊ (a_k ≤ 1), so the score is
  (1/n) Σ_k b_k (a_k − a_T)₊ / ((1/n_ref) Σ_k b_k^ref (a_k^ref − a_T)₊).
The score is not clipped: finite-sample representations can exceed the reference (score > 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["official_grid", "expected_bound_curve", "synbench_score"]


def official_grid() -> np.ndarray:
    """The threshold-accuracy grid of the official code: linspace(0.6, 1.0, 100)."""
    return np.linspace(0.6, 1.0, 100)


def _vec(x: Any, name: str) -> np.ndarray:
    arr = (x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, np.float64)).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} contains NaN")
    return arr


def _pairs(a: Any, b: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = _vec(a, f"{name} accuracies"), _vec(b, f"{name} bounds")
    if a.shape != b.shape:
        raise ValueError(f"{name}: accuracies and bounds differ in length ({a.size} vs {b.size})")
    if np.any(a < 0) or np.any(a > 1):
        raise ValueError(f"{name} accuracies must lie in [0, 1]")
    if np.any(b < 0):
        raise ValueError(f"{name} bounds must be >= 0")
    return a, b


def expected_bound_curve(a: Any, b: Any, a_t: Any = None) -> np.ndarray:
    """E(a_t) = (1/n) Σ_k b_k 1[a_k > a_t] on the thresholds ``a_t`` (default: :func:`official_grid`).

    An infinite b_k (a_k = 0.5, Theorem 3.1 (iv)) only enters where a_t < a_k, i.e. never for a_t ≥ 0.5.
    """
    a, b = _pairs(a, b, "curve")
    t = official_grid() if a_t is None else _vec(a_t, "a_t")
    above = a[None, :] > t[:, None]
    return np.where(above, b[None, :], 0.0).sum(1) / a.size


def synbench_score(
    a: Any, b: Any, a_ref: Any, b_ref: Any, a_T: float, integral: str = "grid", grid: Any = None
) -> float:
    """SynBench-Score(θ, ε, a_T), eq. 3, from measured pairs (a_k, b_k) and reference pairs (a_k^ref, b_k^ref).

    ``integral``: "grid" (official Riemann sum on ``grid``, default linspace(0.6, 1, 100)) or "exact".
    Raises ValueError when the reference area above a_T is 0 (a_T too high for the s grid), a_T ∉ [0, 1), or,
    for the grid integral, a_T below the grid's first point (0.6 for the official grid: the sum would silently
    start at the grid and give the same score for every lower a_T; use integral="exact" there).
    Equal measured and reference pairs give exactly 1; representations whose accuracies never exceed a_T give 0.
    """
    if not 0.0 <= float(a_T) < 1.0:
        raise ValueError(f"a_T must lie in [0, 1), got {a_T}")
    a, b = _pairs(a, b, "measured")
    ar, br = _pairs(a_ref, b_ref, "reference")
    if integral == "grid":
        t = official_grid() if grid is None else _vec(grid, "grid")
        if float(a_T) < t.min() - 1e-12:
            raise ValueError(
                f"a_T = {a_T} lies below the grid integral's first threshold {t.min():g}; use a_T >= {t.min():g} "
                "or integral='exact'"
            )
        t = t[t >= float(a_T) - 1e-12]
        num = expected_bound_curve(a, b, t).sum() if t.size else 0.0
        den = expected_bound_curve(ar, br, t).sum() if t.size else 0.0
    elif integral == "exact":
        up, upr = a > a_T, ar > a_T
        num = (b[up] * (a[up] - a_T)).sum() / a.size
        den = (br[upr] * (ar[upr] - a_T)).sum() / ar.size
    else:
        raise ValueError(f"integral must be 'grid' or 'exact', got {integral!r}")
    if not den > 0 or not np.isfinite(den):
        raise ValueError(
            f"reference area above a_T = {a_T} is {den}: no reference accuracy exceeds a_T on the "
            f"{'grid' if integral == 'grid' else 's grid'}; lower a_T or extend the s grid"
        )
    return float(num / den)
