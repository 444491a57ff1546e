"""Closed forms of src/synbench/theory.py against hand computations and Monte Carlo."""

import math

import numpy as np
import pytest
import torch

from src.synbench.theory import (
    expected_scaled_bound,
    imbalanced_accuracy,
    imbalanced_expected_scaled_bound,
    imbalanced_expected_scaled_bound_as_printed,
    reference_accuracy,
    reference_curve,
    scaled_bound_from_margin,
)

PHI_1 = 0.8413447460685429  # Φ(1), standard table value to 16 digits


def _phi(x):
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def test_reference_accuracy_values_and_types():
    assert reference_accuracy(0.0) == 0.5
    assert reference_accuracy(1.0) == pytest.approx(PHI_1, abs=1e-15)  # ndtr is accurate to a few u (≈ 4e-16)
    arr = reference_accuracy(np.array([1.0, 2.0]))
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float64
    t = reference_accuracy(torch.tensor([1.0, 2.0], dtype=torch.float32))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64
    assert t[1].item() == pytest.approx(0.9772498680518208, abs=1e-15)  # Φ(2) to a few u, as above


def test_expected_scaled_bound_by_hand():
    # Theorem 3.1 (iv) at a = Φ(1): Φ⁻¹(a) = 1, so b = φ(1) / (Φ(1)·1) + 1.
    by_hand = _phi(1.0) / (PHI_1 * 1.0) + 1.0
    # via Φ⁻¹(a): ndtri's relative error ~1e-15 is amplified by the bound's condition |d log b/d log Φ⁻¹| ≤ 10
    # around s = 1 → 1e-12 leaves a factor ~100; the direct form only rounds a few operations (≤ 10 u ≈ 1e-15)
    assert expected_scaled_bound(PHI_1) == pytest.approx(by_hand, rel=1e-12)
    assert scaled_bound_from_margin(1.0) == pytest.approx(by_hand, rel=1e-14)
    s = np.linspace(0.1, 4.9, 49)  # the two forms agree on the whole official grid (Φ⁻¹ loses ~1e-10 at 4.9)
    np.testing.assert_allclose(expected_scaled_bound(reference_accuracy(s)), scaled_bound_from_margin(s), rtol=1e-9)


def test_expected_scaled_bound_limits_and_errors():
    assert expected_scaled_bound(0.5) == math.inf
    assert expected_scaled_bound(1.0) == 1.0
    out = expected_scaled_bound(np.array([0.5, 0.75, 1.0]))
    assert not np.isnan(out).any() and out[0] == math.inf and out[2] == 1.0
    assert np.all(np.diff(expected_scaled_bound(np.linspace(0.51, 0.999, 50))) < 0)  # the trade-off: decreasing
    for bad in (0.49, 1.01, float("nan")):
        with pytest.raises(ValueError, match="accuracy"):
            expected_scaled_bound(bad)


def test_balanced_bound_monte_carlo():
    # Raw data, Σ = I, ‖μ̃‖ = s: projecting on μ̃/s, t = y·s + N(0, 1); scaled bound |t·s|/s² over correct samples.
    rng = np.random.default_rng(1)
    for s in (0.3, 1.0, 2.5):
        t = s + rng.standard_normal(1_000_000)  # by symmetry y = +1 suffices
        sb = np.abs(t)[t > 0] / s
        se = sb.std() / math.sqrt(sb.size)
        # 5 standard errors of the MC mean: a false alarm has probability ~6e-7 per check.
        assert abs(sb.mean() - scaled_bound_from_margin(s)) < 5 * se
        assert abs((t > 0).mean() - reference_accuracy(s)) < 5 * math.sqrt(0.25 / t.size)


def _mc_imbalanced(s, tau, eps, n=2_000_000, seed=0):
    """Monte Carlo of Theorem A.3's setting: Σ = I, w = μ̃(1 − ε/s), classifier sign(tᵀw − q/2).
    Only the coordinate along μ̃ matters, so t·μ̃/s = y·s + N(0, 1)."""
    rng = np.random.default_rng(seed)
    q = math.log((1 - tau) / tau)
    y = np.where(rng.random(n) < tau, 1.0, -1.0)
    proj = y * s + rng.standard_normal(n)
    wn = s - eps
    u = proj * wn - q / 2  # tᵀw − q/2
    correct = (u > 0) == (y > 0)
    d = 0.5 * (abs(s * wn - q / 2) + abs(s * wn + q / 2))
    sb = np.abs(u[correct]) / d
    return correct.mean(), sb.mean(), sb.std() / math.sqrt(sb.size)


@pytest.mark.parametrize("s,tau,eps", [(1.0, 0.2, 0.0), (0.5, 0.1, 0.0), (2.0, 0.3, 0.5), (1.5, 0.7, 0.2)])
def test_imbalanced_reference_monte_carlo(s, tau, eps):
    acc, mean, se = _mc_imbalanced(s, tau, eps)
    # Derived formula (= the proof's last display): within 5 MC standard errors (false alarm ~6e-7).
    assert abs(imbalanced_expected_scaled_bound(s, tau, eps) - mean) < 5 * se
    assert abs(imbalanced_accuracy(s, tau, eps) - acc) < 5 * math.sqrt(0.25 / 2_000_000)


def test_imbalanced_printed_statement_is_wrong():
    # Theorem A.3 (iv) as printed weights the classes by τ, 1 − τ instead of their shares of correct samples.
    # At s = 1, τ = 0.2 the gap (≈ 0.053) is ~75 MC standard errors: the printed statement is rejected.
    acc, mean, se = _mc_imbalanced(1.0, 0.2, 0.0)
    assert abs(imbalanced_expected_scaled_bound_as_printed(1.0, 0.2) - mean) > 20 * se
    # For τ = 1/2 all three forms coincide with Theorem 3.1 (iv).
    for s in (0.4, 1.0, 3.0):
        b = scaled_bound_from_margin(s)
        # closed forms, a few dozen floating-point operations each (no solve, no iteration): ≤ 100·u ≈ 1e-14,
        # 1e-12 with margin for the ndtr/exp evaluations at s = 3; the accuracy is the same ndtr call (≤ 4 u)
        assert imbalanced_expected_scaled_bound(s, 0.5) == pytest.approx(b, rel=1e-12)
        assert imbalanced_expected_scaled_bound_as_printed(s, 0.5) == pytest.approx(b, rel=1e-12)
        assert imbalanced_accuracy(s, 0.5) == pytest.approx(reference_accuracy(s), rel=1e-15)


def test_reference_curve():
    s = np.array([0.1, 1.0, 4.9])
    a, b = reference_curve(s)
    np.testing.assert_allclose(a, reference_accuracy(s), rtol=0)
    np.testing.assert_allclose(b, scaled_bound_from_margin(s), rtol=0)
    a2, b2 = reference_curve(s, margin_scale=0.5)
    np.testing.assert_allclose(a2, reference_accuracy(0.5 * s), rtol=0)
    a3, b3 = reference_curve(s, class_prior=0.3)
    np.testing.assert_allclose(b3, imbalanced_expected_scaled_bound(s, 0.3), rtol=0)
    with pytest.raises(ValueError):
        imbalanced_accuracy(1.0, 1.5)
