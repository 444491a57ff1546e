"""SynBench-Score (src/synbench/score.py): eq. 2 and eq. 3, grid (official) and exact integrals."""

import math

import numpy as np
import pytest
from scipy.integrate import quad

from src.synbench.config import official_s_values
from src.synbench.score import expected_bound_curve, official_grid, synbench_score
from src.synbench.theory import reference_curve

S = np.asarray(official_s_values())
A_REF, B_REF = reference_curve(S)


def test_expected_bound_curve_by_hand():
    a, b = [0.6, 0.8, 0.95], [3.0, 2.0, 1.0]
    # E(t) = (1/3)·Σ b_k 1[a_k > t]
    np.testing.assert_allclose(expected_bound_curve(a, b, [0.5, 0.6, 0.7, 0.9, 0.95]), [2.0, 1.0, 1.0, 1 / 3, 0.0])
    assert official_grid()[0] == 0.6 and official_grid()[-1] == 1.0 and official_grid().size == 100
    # b = inf at a = 0.5 (Theorem 3.1 (iv) limit) never enters for thresholds ≥ 0.5, no NaN
    assert np.isfinite(expected_bound_curve([0.5, 0.7], [math.inf, 1.5], [0.5, 0.6])).all()


@pytest.mark.parametrize("a_T", [0.6, 0.7, 0.85, 0.99])
def test_exact_reference_area_matches_quadrature(a_T):
    # ∫_{a_T}^1 E(t) dt by adaptive quadrature on the step function (break points at every a_k)
    f = lambda t: expected_bound_curve(A_REF, B_REF, [t])[0]  # noqa: E731
    pts = sorted(float(p) for p in A_REF if a_T < p < 1)
    area = quad(f, a_T, 1.0, points=pts or None, limit=500, epsabs=1e-13, epsrel=1e-12)[0]
    exact = sum(b * (a - a_T) for a, b in zip(A_REF, B_REF) if a > a_T) / len(S)
    # quad integrates a step function with its break points given: each piece is constant, so its error is
    # its requested epsrel 1e-12 plus the summation of ≤ 50 pieces (50·u); 1e-8 leaves room for its abs 1e-13
    # on areas down to ~1e-5 (a_T = 0.99)
    assert exact == pytest.approx(area, rel=1e-8)
    # half the reference: the measured area is halved, so the exact score is 0.5 up to the rounding of two
    # 49-term sums and one division: 2·49·u ≈ 1.1e-14 → 1e-13
    assert synbench_score(A_REF, 0.5 * B_REF, A_REF, B_REF, a_T, "exact") == pytest.approx(0.5, rel=1e-13)


def test_grid_matches_official_expression():
    # A literal transcription of the official numpy code (evaluate_synbench.py, "calculate synbench-score").
    rng = np.random.default_rng(0)
    a = np.clip(A_REF - rng.uniform(0, 0.1, S.size), 0.5, 1)
    b = B_REF * rng.uniform(0.3, 1.0, S.size)
    xgrid = np.linspace(0.6, 1.0, 100).reshape(100, 1)
    sz = S.size
    temp = np.array([0.6, 0.7, 0.8, 0.9])
    curve = lambda aa, bb: (np.repeat(bb.reshape(1, sz), 100, axis=0) * (aa > xgrid)).sum(axis=1) / sz  # noqa: E731

    def area(c):
        return (
            np.repeat(c.reshape(100, 1), temp.size, axis=1)
            * (np.repeat(xgrid, temp.size, axis=1) >= temp.reshape(1, temp.size))
        ).sum(axis=0)

    official = area(curve(a, b)) / area(curve(A_REF, B_REF))
    ours = [synbench_score(a, b, A_REF, B_REF, t, "grid") for t in temp]
    # the same sums of ≤ 100·49 non-negative terms in another order: ≤ 2·100·u relative per sum (pairwise
    # summation in numpy) → 1e-13 ≥ 4·100·u ≈ 4.4e-14
    np.testing.assert_allclose(ours, official, rtol=1e-13)
    assert 0 < ours[0] < 1


def test_score_one_and_zero():
    for integral in ("grid", "exact"):
        for a_T in (0.6, 0.7, 0.9):
            assert synbench_score(A_REF, B_REF, A_REF, B_REF, a_T, integral) == 1.0
        chance = np.full(S.size, 0.52)  # accuracies never above a_T
        assert synbench_score(chance, np.full(S.size, 5.0), A_REF, B_REF, 0.7, integral) == 0.0
    # scores are not clipped: a representation above the reference scores > 1
    assert synbench_score(A_REF, 1.2 * B_REF, A_REF, B_REF, 0.7) == pytest.approx(1.2)


def test_score_errors():
    low_a, low_b = reference_curve(np.array([0.1, 0.2]))  # Φ(0.2) ≈ 0.58: no reference area above 0.7
    for integral in ("grid", "exact"):
        with pytest.raises(ValueError, match="reference area"):
            synbench_score(low_a, low_b, low_a, low_b, 0.7, integral)
    with pytest.raises(ValueError, match="integral"):
        synbench_score(A_REF, B_REF, A_REF, B_REF, 0.7, "simpson")
    with pytest.raises(ValueError, match="NaN"):
        synbench_score(np.full(S.size, np.nan), B_REF, A_REF, B_REF, 0.7)
    with pytest.raises(ValueError, match="a_T"):
        synbench_score(A_REF, B_REF, A_REF, B_REF, 1.0)
    with pytest.raises(ValueError, match="length"):
        synbench_score(A_REF[:3], B_REF, A_REF, B_REF, 0.7)
