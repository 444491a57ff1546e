"""The official absolute eigenvalue cut-off (1e-6) is kept where it only drops rounding-level directions, and refused
where it would discard the features' signal (small-scale features); the relative cut-off is scale-invariant."""

from __future__ import annotations

import warnings

import pytest
import torch

from src.synbench.bayes import evaluate_representation, retained_eig

F64 = torch.float64


def _features(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """6 informative dimensions (unit variance, class means ±0.8) and 2 near-null ones (variance 1e-8 < 1e-6)."""
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, generator=g) < 0.5).long()
    z = torch.randn(n, 8, generator=g, dtype=F64)
    z[:, :6] += 0.8 * (2 * y[:, None] - 1)
    z[:, 6:] *= 1e-4
    return z, y


def _pinv_lda_accuracy(z: torch.Tensor, y: torch.Tensor, zt: torch.Tensor, yt: torch.Tensor) -> float:
    """ε = 0 reference, written out: w = Σ⁺μ̃ over the eigenvalues > 1e-6 of the pooled (n − 2) covariance."""
    m1, m0 = z[y == 1].mean(0), z[y == 0].mean(0)
    centred = torch.cat([z[y == 1] - m1, z[y == 0] - m0])
    evals, evecs = torch.linalg.eigh(centred.T @ centred / (len(z) - 2))
    f, sig = evecs[:, evals > 1e-6], evals[evals > 1e-6]
    w = f @ ((f.T @ (0.5 * (m1 - m0))) / sig)
    return float((((zt - 0.5 * (m1 + m0)) @ w > 0).long() == yt).double().mean())


def test_eig_cutoff_keeps_the_official_result_at_the_feature_scale() -> None:
    z, y = _features(600, 0)
    zt, yt = _features(500, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the 2 dropped directions carry ~2e-8 of the variance: no refusal, no warning
        acc, _ = evaluate_representation(z, y, zt, yt, [0.0, 0.3])
    # the same prediction rule on the same retained eigenvectors: equal counts (1 count = 1/500 ≫ rounding)
    assert float(acc[0]) == pytest.approx(_pinv_lda_accuracy(z, y, zt, yt), abs=0.5 / 500)
    assert float(acc[0]) > 0.9  # the signal is kept


def test_eig_cutoff_refuses_small_scale_features_and_relative_is_scale_invariant() -> None:
    z, y = _features(600, 0)
    zt, yt = _features(500, 1)
    with pytest.raises(ValueError, match=r"drops 8 of 8 covariance eigenvalues carrying 100\.0 %") as info:
        evaluate_representation(1e-4 * z, y, 1e-4 * zt, yt, [0.0, 0.3])  # eigenvalues ~1e-8: all below 1e-6
    message = str(info.value)
    assert "eig_tol_mode='relative'" in message and "synbench.eig_tol_mode=relative" in message
    assert "eig_tol of about 1e-6 x the largest eigenvalue (1e-14)" in message  # λ_max ≈ 1.4e-8 here
    base = evaluate_representation(z, y, zt, yt, [0.0, 0.3], eig_tol_mode="relative")
    small = evaluate_representation(1e-4 * z, y, 1e-4 * zt, yt, [0.0, 0.3], eig_tol_mode="relative")
    # scaling by 1e-4 changes only rounding: margins move by ~κ·u relative (κ(Σ) ≈ 1e8 with the near-null
    # directions, so ~1e-8), far from flipping a sample (1 count = 1/500); bounds agree to 1e-6 ≫ κ·u·D ≈ 2e-7
    torch.testing.assert_close(small[0], base[0], rtol=0, atol=0.5 / 500)
    torch.testing.assert_close(small[1], base[1], rtol=1e-6, atol=0)


@pytest.mark.parametrize("small,refused", [(5e-7, False), (1e-6 / 0.2, True)])
def test_eig_cutoff_refuses_above_one_percent_of_the_variance(small: float, refused: bool) -> None:
    # one eigenvalue 1e-4 and five of 1e-7 (below the cut-off 1e-6): 5e-7 / (1e-4 + 5e-7) = 0.5 % of the variance
    # is dropped -> accepted; with 1e-4 scaled down to `small` = 5e-6 they carry 9 % -> refused
    cov = torch.diag(torch.tensor([1e-4 if not refused else small] + [1e-7] * 5, dtype=F64))
    if refused:
        with pytest.raises(ValueError, match=r"drops 5 of 6 .* 9\.1 %"):
            retained_eig(cov)
    else:
        evals, evecs = retained_eig(cov)
        assert evals.tolist() == [1e-4] and evecs.shape == (6, 1)


def test_relative_cut_off_chosen_large_warns_instead() -> None:
    cov = torch.diag(torch.tensor([1.0, 0.05], dtype=F64))  # eig_tol 0.1 x λ_max drops 0.05 / 1.05 = 4.8 %
    with pytest.warns(RuntimeWarning, match=r"drops 1 of 2 .* 4\.8 %"):
        evals, _ = retained_eig(cov, 0.1, eig_tol_mode="relative")
    assert evals.tolist() == [1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        retained_eig(cov, 0.1, eig_tol_mode="relative", warn=False)
