"""RankMe and α-ReQ on designed spectra with closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from src.baselines import alpha_req, rankme


def _with_singular_values(s: torch.Tensor, n: int, centred: bool = False, seed: int = 0) -> torch.Tensor:
    """Z = U diag(s) Vᵀ (n, len(s)) with orthonormal U (orthogonal to 1 when ``centred``) and orthogonal V."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, len(s), generator=g, dtype=torch.float64)
    if centred:
        a = a - a.mean(0)
    u, _ = torch.linalg.qr(a)
    v, _ = torch.linalg.qr(torch.randn(len(s), len(s), generator=g, dtype=torch.float64))
    return u @ torch.diag(s.double()) @ v.T


def test_rankme_closed_forms() -> None:
    # k equal singular values and m - k zeros: p = 1/k + ε (k times) and ε (m - k times), exactly
    k, m, eps = 5, 8, 1e-7
    z = _with_singular_values(torch.tensor([2.0] * k + [0.0] * (m - k)), 40)
    p, q = 1 / k + eps, eps
    expected = math.exp(-(k * p * math.log(p) + (m - k) * q * math.log(q)))
    # σ from √eig(ZᵀZ): zero singular values come back as ≈ √(u·σ_max²) ≈ 3e-8 at worst, shifting each p by ≤ 1e-8/k
    # and the entropy by ≤ m·1e-8·|log ε| ≈ 1e-6 relative
    assert rankme(z, eps) == pytest.approx(expected, rel=2e-6)
    assert rankme(_with_singular_values(torch.tensor([3.0] * 6), 30), eps=0.0) == pytest.approx(6.0, rel=1e-12)
    rank1 = torch.outer(torch.arange(1.0, 11.0), torch.tensor([1.0, 2.0, -1.0]))
    assert rankme(rank1, eps=0.0) == pytest.approx(1.0, abs=1e-6)  # the two zero σ ≈ 1e-7 relative at worst
    # scale invariance (p = σ/‖σ‖₁), float32 promoted; the same bits up to the eigen-solver rounding ≈ 1e-15
    assert rankme(4.0 * z.float()) == pytest.approx(rankme(z.float()), rel=1e-9)  # ×4: exact in binary


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_alpha_req_recovers_a_power_law(alpha) -> None:
    # covariance eigenvalues exactly i^-alpha (i = 1..120): centred Z with singular values √((n-1)·i^-alpha); the
    # fit is exact in exact arithmetic. Eigenvalues from the Gram matrix carry ≈ u·λ_1 absolute error, i.e. a
    # relative error ≤ u·100^alpha ≈ 2e-12 at rank 100 for alpha = 2, which moves the slope by less than 1e-10
    n, d = 300, 120
    lam = torch.arange(1, d + 1, dtype=torch.float64) ** -alpha
    z = _with_singular_values(((n - 1) * lam).sqrt(), n, centred=True) + 5.0  # a mean offset: alpha-ReQ centres
    assert alpha_req(z) == pytest.approx(alpha, abs=1e-8)
    assert alpha_req(z, fit_range=(2, 30)) == pytest.approx(alpha, abs=1e-8)


def test_spectral_bad_input() -> None:
    with pytest.raises(ValueError, match="needs 100 covariance eigenvalues"):
        alpha_req(torch.randn(50, 20))
    with pytest.raises(ValueError, match="eigenvalue 4 is zero"):
        alpha_req(torch.randn(50, 3) @ torch.randn(3, 20), fit_range=(2, 10))
    with pytest.raises(ValueError, match="all zero"):
        rankme(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="eps"):
        rankme(torch.randn(4, 3), eps=-1.0)
