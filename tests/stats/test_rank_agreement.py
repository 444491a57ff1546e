"""Rank agreement statistics (src.report.agreement) against scipy and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from src.stats.rank_agreement import (
    agreement,
    check_agreement_options,
    kendall_tau_b,
    pearson,
    permutation_p_value,
)


@pytest.mark.parametrize("seed", range(5))
def test_pearson_and_kendall_match_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=7)
    y = np.round(x + rng.normal(size=7), 1)  # rounding makes ties in y: tau-b's tie correction is exercised
    x[2] = x[5]  # and a tie in x
    # both are sums of O(n^2) float64 terms of size O(1): agreement to 1e-12 leaves room for ~1e4 roundings
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y, variant="b")[0], abs=1e-12)


def test_undefined_cases_are_nan() -> None:
    assert math.isnan(pearson([1, 2], [3, 4])) and math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))
    assert math.isnan(permutation_p_value([1, 1, 1], [1, 2, 3]))


def test_exact_permutation_p_value_floor() -> None:
    # n = 5, perfect order: only the identity and the reversal reach |tau| = 1 among 5! = 120 orderings
    assert permutation_p_value([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == pytest.approx(2 / 120)
    # scipy's exact test agrees for tie-free data
    x, y = [0.3, 0.1, 0.5, 0.2, 0.9, 0.7], [1, 2, 3, 4, 5, 6]
    assert permutation_p_value(x, y) == pytest.approx(stats.kendalltau(x, y, method="exact")[1], abs=1e-12)


def test_kendall_is_invariant_to_monotone_maps() -> None:
    x, y = [0.1, 0.4, 0.2, 0.9, 0.5], [3.0, 1.0, 2.0, 5.0, 4.0]
    assert kendall_tau_b(np.exp(x), y) == kendall_tau_b(x, y) == kendall_tau_b(x, np.log(y))


def test_perfect_agreement_has_a_degenerate_interval_and_an_honest_verdict() -> None:
    a = agreement([1, 2, 3, 4, 5], [0.5, 0.6, 0.7, 0.8, 0.9], score_name="s", higher_is_better=True, n_boot=500)
    # every defined resample of a perfectly ordered set is perfectly ordered: tau_b = 1 and r = 1 (to rounding)
    assert a.kendall == 1.0 and a.kendall_low == a.kendall_high == 1.0
    assert a.pearson_low == pytest.approx(1.0, abs=1e-12)
    assert 0 < a.defined_fraction < 1  # resamples with < 3 distinct backbones are left out
    assert "agrees" in a.verdict and a.p_value == pytest.approx(2 / 120)


def test_noise_cannot_be_separated_and_lower_is_better_is_read_the_right_way() -> None:
    a = agreement([0.2, 0.1, 0.3, 0.25, 0.15], [0.5, 0.9, 0.6, 0.7, 0.8], n_boot=500)
    assert "cannot separate" in a.verdict
    three = agreement([1, 2, 3], [0.1, 0.2, 0.3], n_boot=200)  # perfectly ordered, but 3 backbones: p >= 1/3
    assert three.kendall == 1.0 and "cannot separate" in three.verdict and "below 0.333" in three.verdict
    loss = agreement([5, 4, 3, 2, 1], [0.5, 0.6, 0.7, 0.8, 0.9], higher_is_better=False, n_boot=200)
    assert loss.kendall == -1.0 and "agrees" in loss.verdict  # a loss falling as accuracy rises agrees


def test_seeds_are_resampled_and_names_are_matched() -> None:
    scores = {"a": [0.1, 0.12], "b": [0.5, 0.52], "c": [0.9, 0.88], "d": [0.3, 0.35]}
    acc = {"d": 0.4, "c": 0.95, "b": 0.6, "a": 0.2}
    a = agreement(scores, acc, n_boot=300)
    assert a.n == 4 and a.kendall == 1.0  # seed means order a < d < b < c, as the accuracies
    with pytest.raises(ValueError, match="no value for backbones"):
        agreement(scores, {"a": 1.0}, n_boot=10)
    with pytest.raises(ValueError, match="finite"):
        agreement([1.0, math.nan, 2.0], [1, 2, 3], n_boot=10)


def test_spearman_matches_scipy_with_ties() -> None:
    from src.stats.rank_agreement import spearman

    x, y = [1.0, 2.0, 2.0, 5.0, 3.0], [0.3, 0.1, 0.4, 0.9, 0.9]
    # sums of a handful of O(1) float64 terms: 1e-12 is orders above their rounding
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_n_boot_and_level_are_checked() -> None:
    """R23: n_boot=0 (or negative) left every interval NaN and turned a perfect ranking into "cannot separate"."""
    scores, acc = [0.1, 0.5, 0.3, 0.9, 0.7], [0.2, 0.6, 0.35, 0.95, 0.8]
    for bad in (0, -5):
        with pytest.raises(ValueError, match=r"^n_boot must be an integer >= 1"):
            agreement(scores, acc, n_boot=bad)
    for bad in (2.5, True, "100"):
        with pytest.raises(TypeError, match=r"^n_boot must be an integer >= 1"):
            agreement(scores, acc, n_boot=bad)
    for bad in (0.0, 1.0, 1.5, float("nan"), "0.9"):
        with pytest.raises(ValueError, match=r"^level must be in \(0, 1\)"):
            agreement(scores, acc, level=bad)
    assert check_agreement_options(200.0, 0.9, prefix="agreement.") == (200, 0.9)
    with pytest.raises(ValueError, match=r"^agreement\.n_boot must be an integer >= 1 .*set agreement\.n_boot=2000"):
        check_agreement_options(0, 0.9, prefix="agreement.")
    a = agreement(scores, acc, n_boot=1)
    assert a.kendall == 1.0 and a.defined_fraction in (0.0, 1.0)
