"""Closed forms of SynBench (Ko et al., ICML 2024, "What would Gauss say about representations?").

Everything here is float64 and vectorised: a Python float returns a float, an ndarray an ndarray, a tensor a
float64 tensor on the input's device.

Balanced classes (Theorem 3.1, paper §3.2), Σ = I, ‖μ̃‖₂ = s:
    (iii)  a = Φ(s)                                         -> :func:`reference_accuracy`
    (iv)   b(a) = φ(Φ⁻¹(a)) / (a Φ⁻¹(a)) + 1                 -> :func:`expected_scaled_bound`
Class prior τ ≠ 1/2 (Theorem A.3, Appendix A.6) -> :func:`imbalanced_accuracy`,
:func:`imbalanced_expected_scaled_bound` (derived here; the printed statement (iv) is wrong, see there).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from scipy import special

__all__ = [
    "reference_accuracy",
    "expected_scaled_bound",
    "scaled_bound_from_margin",
    "reference_curve",
    "imbalanced_accuracy",
    "imbalanced_expected_scaled_bound",
    "imbalanced_expected_scaled_bound_as_printed",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _as_np(x: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Float64 ndarray view of ``x`` and a function that converts a result back to ``x``'s kind."""
    if isinstance(x, torch.Tensor):
        dev = x.device
        return x.detach().cpu().double().numpy(), lambda r: torch.as_tensor(np.asarray(r, np.float64), device=dev)
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0 and not isinstance(x, np.ndarray):
        return arr, lambda r: float(r)
    return arr, lambda r: np.asarray(r, dtype=np.float64)


def _phi(x: np.ndarray) -> np.ndarray:
    """Standard normal density φ."""
    return np.exp(-0.5 * x * x) / _SQRT_2PI


def reference_accuracy(s: Any) -> Any:
    """Theorem 3.1 (iii) for Σ = I, μ̃ = s·1/√d: the Bayes-optimal accuracy a = Φ(‖μ̃‖) = Φ(s)."""
    arr, back = _as_np(s)
    return back(special.ndtr(arr))


def scaled_bound_from_margin(u: Any) -> Any:
    """Theorem 3.1 (iv) written in u = Φ⁻¹(a) (for the raw data u = s): b = 1 + φ(u) / (u Φ(u)).

    Numerically preferable to :func:`expected_scaled_bound` when u is known (no Φ⁻¹ of a number close to 1).
    u = 0 gives +inf (a = 0.5, see :func:`expected_scaled_bound`); u = +inf gives 1; u < 0 raises.
    """
    arr, back = _as_np(u)
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError("scaled_bound_from_margin: u = Phi^-1(a) must be >= 0 (accuracy >= 0.5) and not NaN")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 1.0 + _phi(arr) / (arr * special.ndtr(arr))
    out = np.where(arr == 0, np.inf, np.where(np.isinf(arr), 1.0, out))
    return back(out)


def expected_scaled_bound(a: Any) -> Any:
    """Theorem 3.1 (iv): expected scaled bound of correctly classified samples at accuracy a,

        b(a) = φ(Φ⁻¹(a)) / (a Φ⁻¹(a)) + 1.

    Defined values: b(0.5) = +inf (the limit a → 0.5⁺: Φ⁻¹(a) → 0 while φ → 1/√(2π)), b(1) = 1 (the limit
    a → 1: φ(Φ⁻¹(a))/Φ⁻¹(a) → 0). ``a`` outside [0.5, 1] or NaN raises ValueError: below 0.5 the robust Bayes
    classifier is not defined by the theorem (μ̃ᵀw > 0 is assumed in its proof).
    """
    arr, back = _as_np(a)
    if np.any(np.isnan(arr)) or np.any(arr < 0.5) or np.any(arr > 1.0):
        raise ValueError(f"expected_scaled_bound: accuracy must lie in [0.5, 1], got {arr!r}")
    return back(np.asarray(scaled_bound_from_margin(special.ndtri(arr)), dtype=np.float64))


def reference_curve(s_values: Any, class_prior: float = 0.5, margin_scale: float = 1.0) -> tuple[Any, Any]:
    """Reference pairs (a_k, b_k) of the raw Gaussian data for every s_k (Algorithm 1, lines 9-10).

    ``margin_scale`` κ multiplies s: the Mahalanobis half-distance √(μ̃ᵀΣ⁻¹μ̃) = κ·s for a non-identity pixel
    covariance (Gaussian-H, §4.4; κ = 1 for Σ = I). ``class_prior`` τ ≠ 1/2 uses Theorem A.3 at ε = 0 (the
    prior-corrected classifier); with the un-thresholded classifier of the official code the balanced formula
    is exact for every τ, because each class is symmetric about the boundary - pass 0.5 then.
    """
    arr, back = _as_np(s_values)
    u = arr * float(margin_scale)
    if class_prior == 0.5:
        return back(special.ndtr(u)), back(np.asarray(scaled_bound_from_margin(u), np.float64))
    a = imbalanced_accuracy(u, class_prior)
    b = imbalanced_expected_scaled_bound(u, class_prior)
    return back(a), back(b)


def _imbalanced_terms(s: Any, tau: float, eps: float, relative: bool) -> tuple[np.ndarray, ...]:
    """Shared quantities of Theorem A.3 for Σ = I, ‖μ̃‖ = s, w = μ̃(1 − ε/‖μ̃‖), q = ln((1 − τ)/τ).

    Returns (A = μ̃ᵀw, σ = ‖w‖, m₁ = A − q/2, m₂ = A + q/2, P₁ = Φ(m₁/σ), P₂ = Φ(m₂/σ)).
    """
    if not 0.0 < tau < 1.0:
        raise ValueError(f"class prior tau must lie in (0, 1), got {tau}")
    arr = np.asarray(s, dtype=np.float64)
    if np.any(arr <= 0):
        raise ValueError("s = ||mu_tilde|| must be > 0")
    shrink = (1.0 - eps) if relative else (1.0 - eps / arr)
    if np.any(shrink <= 0):
        raise ValueError("eps must be smaller than ||mu_tilde|| (w = 0 otherwise)")
    sigma = arr * shrink
    big_a = arr * sigma
    q = math.log((1.0 - tau) / tau)
    m1, m2 = big_a - q / 2.0, big_a + q / 2.0
    return big_a, sigma, m1, m2, special.ndtr(m1 / sigma), special.ndtr(m2 / sigma)


def imbalanced_accuracy(s: Any, tau: float, eps: float = 0.0, relative: bool = False) -> Any:
    """Theorem A.3 (iii): a = τ Φ((μ̃ᵀw − q/2)/‖w‖) + (1 − τ) Φ((μ̃ᵀw + q/2)/‖w‖) (printed formula is right)."""
    arr, back = _as_np(s)
    _, _, _, _, p1, p2 = _imbalanced_terms(arr, tau, eps, relative)
    return back(tau * p1 + (1.0 - tau) * p2)


def imbalanced_expected_scaled_bound(s: Any, tau: float, eps: float = 0.0, relative: bool = False) -> Any:
    """E[‖Δ̄‖₂ | f_ε(x) = y] for class prior τ (Theorem A.3 (iv)), derived from the proof in Appendix A.6.

    With u = tᵀw − q/2, u | y ~ N(y μ̃ᵀw − q/2, ‖w‖²) and the scaled bound (ii) |u| / D,
    D = (|m₁| + |m₂|)/2. Correct samples are u > 0 (y = +1, probability P₁) and u < 0 (y = −1, probability P₂);
    the truncated-normal means give E[u | y=1, u>0] = m₁ + σ φ(m₁/σ)/P₁, E[−u | y=−1, u<0] = m₂ + σ φ(m₂/σ)/P₂.
    Conditioning on "correct" weights the classes by their share of correct samples, τP₁/a and (1−τ)P₂/a:

        E = [τ (m₁P₁ + σφ(m₁/σ)) + (1−τ)(m₂P₂ + σφ(m₂/σ))] / (a D),  a = τP₁ + (1−τ)P₂.

    This equals the last display of the paper's proof ("Therefore ..."). The *statement* (iv) printed in
    Theorem A.3 weights the two class terms by τ and 1 − τ instead of τP₁/a and (1 − τ)P₂/a, which is wrong
    unless P₁ = P₂ (τ = 1/2); see :func:`imbalanced_expected_scaled_bound_as_printed` and the Monte Carlo
    test in tests/synbench/test_theory.py. For τ = 1/2 both reduce to Theorem 3.1 (iv).
    """
    arr, back = _as_np(s)
    _, sigma, m1, m2, p1, p2 = _imbalanced_terms(arr, tau, eps, relative)
    acc = tau * p1 + (1.0 - tau) * p2
    half_d = 0.5 * (np.abs(m1) + np.abs(m2))
    num = tau * (m1 * p1 + sigma * _phi(m1 / sigma)) + (1.0 - tau) * (m2 * p2 + sigma * _phi(m2 / sigma))
    return back(num / (acc * half_d))


def imbalanced_expected_scaled_bound_as_printed(s: Any, tau: float, eps: float = 0.0, relative: bool = False) -> Any:
    """Theorem A.3 (iv) exactly as printed (class weights τ and 1 − τ). Kept only to document the erratum."""
    arr, back = _as_np(s)
    _, sigma, m1, m2, p1, p2 = _imbalanced_terms(arr, tau, eps, relative)
    half_d = 0.5 * (np.abs(m1) + np.abs(m2))
    t1 = m1 + sigma * _phi(-m1 / sigma) / p1
    t2 = m2 + sigma * _phi(m2 / sigma) / p2
    return back((tau * t1 + (1.0 - tau) * t2) / half_d)
