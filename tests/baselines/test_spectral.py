"""RankMe and α-ReQ on designed spectra with closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from src.baselines import alpha_req, rankme, rankme_from_gram


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
    # σ from √eig(ZᵀZ): the zero singular values' rounding-level eigenvalues are cut to exactly 0 (rank_cut), the
    # five equal ones err by ≤ δλ/σ ≈ 50·u·σ (gram_route_tolerance), moving the entropy by ≤ 2·|1 + log p|·5·50u/5
    # ≈ 3e-14 relative; 1e-12 leaves room (before the cut: ≈ 1e-6, from σ ≈ 3e-8 for the zeros)
    assert rankme(z, eps) == pytest.approx(expected, rel=1e-12)
    assert rankme(_with_singular_values(torch.tensor([3.0] * 6), 30), eps=0.0) == pytest.approx(6.0, rel=1e-12)
    rank1 = torch.outer(torch.arange(1.0, 11.0), torch.tensor([1.0, 2.0, -1.0]))
    # the two zero σ are cut to 0: p = (1, 0, 0) and RankMe = e^0 = 1 exactly (was ≈ 1e-7 off at worst)
    assert rankme(rank1, eps=0.0) == pytest.approx(1.0, abs=1e-12)
    # scale invariance (p = σ/‖σ‖₁), float32 promoted; the same bits up to the eigen-solver rounding ≈ 1e-15
    assert rankme(4.0 * z.float()) == pytest.approx(rankme(z.float()), rel=1e-9)  # ×4: exact in binary


U64 = torch.finfo(torch.float64).eps


def rankme_definition(z: torch.Tensor, eps: float) -> float:
    """RankMe by its definition: exp(entropy of p = σ/‖σ‖₁ + ε) over σ = torch.linalg.svdvals(Z) (float64)."""
    s = torch.linalg.svdvals(z.double())
    p = s / s.sum() + eps
    return math.exp(-float(torch.xlogy(p, p).sum()))


def gram_route_tolerance(z: torch.Tensor, eps: float, solver_dim: int | None = None) -> float:
    """A bound on |RankMe through the Gram eigenvalues − :func:`rankme_definition`| relative to the value.

    Derivation (u = float64 unit roundoff, σ_k the singular values, S = Σσ_k, m = min(n, D), r = numerical rank):
    * the Gram matrix formed in float64 errs by ‖δG‖₂ ≤ γ_N·‖|Z|ᵀ|Z|‖₂ ≤ N·u·‖Z‖_F² (inner products of length
      N = max(n, D) for the smaller Gram; Higham, Accuracy and Stability, §3.5), and a backward-stable symmetric
      eigensolver adds ≤ k·u·λ_max for a k×k matrix (k = ``solver_dim``, default m); by Weyl each eigenvalue then
      moves by ≤ δλ = u·(N·‖Z‖_F² + k·λ_max);
    * a kept eigenvalue gives σ_k = √λ_k within |√(λ+δ) − √λ| ≤ δλ/σ_k; the cut eigenvalues are exactly 0 on the
      Gram side, and svdvals (backward stable) returns every σ within m·u·σ_max, the zero ones as ≤ m·u·σ_max;
    * with p_k = σ_k/S + ε, Σ_k |dp_k| ≤ 2·Σ_k |dσ_k|/S, and dH = −Σ_k (1 + log p_k)·dp_k, so
      |dH| ≤ 2·max_k |1 + log p_k|·Σ_k |dσ_k|/S over the p_k that move (all of them when ε > 0: log p ≥ log ε);
      for ε = 0 a zero σ contributes q·|log q| at most on the svdvals side, q = m·u·σ_max/S (x|log x| increases
      below 1/e);
    * RankMe = e^H, so its relative error is e^{|dH|} − 1 ≤ 1.01·|dH| for |dH| ≤ 0.01.
    The un-cut Gram route (square roots of the rounding-level eigenvalues, σ ≈ √(u)·σ_max) violates this by orders
    of magnitude (≈ 1e-6 relative measured), the cut route meets it with room (≈ 1e-13 measured)."""
    z = z.double()
    n, d = z.shape
    m, big = min(n, d), max(n, d)
    s = torch.linalg.svdvals(z)
    total, s_max = float(s.sum()), float(s[0])
    lam_max = s_max**2
    d_lam = U64 * (big * float(z.square().sum()) + (solver_dim or m) * lam_max)
    kept = s[s**2 > lam_max * big * U64]
    moved = float((d_lam / kept).sum()) + m * m * U64 * s_max
    p = (kept / total + eps) if eps == 0 else (s / total + eps)
    log_term = float((1 + p.log()).abs().max())
    q = m * U64 * s_max / total
    null_terms = (m - kept.numel()) * q * abs(math.log(q)) if eps == 0 else 0.0
    return 1.01 * (2 * log_term * moved / total + null_terms)


RANK_DEFICIENT = [(500, 64, 10), (64, 500, 10), (300, 40, 1), (200, 200, 50)]  # (n, D, rank): ZᵀZ and ZZᵀ routes


def rank_deficient(n: int, d: int, rank: int, seed: int = 0) -> torch.Tensor:
    """A float64 (n, D) matrix of the given rank (a product of Gaussian factors)."""
    g = torch.Generator().manual_seed(seed)
    left = torch.randn(n, rank, generator=g, dtype=torch.float64)
    return left @ torch.randn(rank, d, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("n, d, rank", RANK_DEFICIENT)
@pytest.mark.parametrize("eps", [0.0, 1e-7])
def test_rankme_equals_the_singular_value_definition_on_rank_deficient_features(n, d, rank, eps) -> None:
    # the issue: √ of the rounding-level Gram eigenvalues gave singular values ≈ 1e-8·σ_max instead of 0, and RankMe
    # differed from the definition by up to 1e-6 relative; the numerical-rank cut makes them equal to rounding
    z = rank_deficient(n, d, rank)
    expected = rankme_definition(z, eps)
    tol = gram_route_tolerance(z, eps)
    assert tol < 1e-9  # the bound itself is far below the 1e-6 the spurious singular values caused
    assert abs(rankme(z, eps) - expected) <= tol * expected
    assert abs(rankme_from_gram(z.T @ z, n, eps) - expected) <= gram_route_tolerance(z, eps, solver_dim=d) * expected


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
