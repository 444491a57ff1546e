"""Robust Bayes classifier (src/synbench/bayes.py) against independent scipy solves and a direct
implementation of Algorithm 1."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from src.synbench.bayes import (
    TrainStats,
    check_eps,
    classifier_from_statistics,
    evaluate_representation,
    finalize_test_statistics,
    fit_gaussian,
    merge,
    retained_eig,
    robust_bayes_direction,
    robust_bayes_directions,
    test_statistics,
    train_statistics,
)

F64 = torch.float64
U = 2.0**-53  # float64 unit roundoff

# Tolerance convention (numerical analysis, not the machine the test was written on): a float64 solve or
# eigendecomposition at condition number κ of dimension d carries a normwise relative error ≲ c·d·κ·u
# (backward-stable algorithms, first-order perturbation bound); we take c = 10 and compare normwise, because
# componentwise relative errors of small entries are unbounded. κ is computed in each test.


def _kappa(cov, tol=1e-6):
    """Condition number of the retained part of Σ (eigenvalues > tol): what the pseudo-inverse sees."""
    ev = np.linalg.eigvalsh(np.asarray(cov, dtype=np.float64))
    ev = ev[ev > tol]
    return float(ev.max() / ev.min())


def _close(a, b, tol):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert np.linalg.norm(a - b) <= tol * max(np.linalg.norm(b), np.finfo(float).tiny), (np.linalg.norm(a - b), tol)


def _spd(d, log_cond, seed, rank=None):
    g = np.random.default_rng(seed)
    q, _ = np.linalg.qr(g.standard_normal((d, d)))
    ev = np.logspace(-log_cond / 2, log_cond / 2, d)
    if rank is not None:
        ev[: d - rank] = 0.0
    return torch.tensor((q * ev) @ q.T, dtype=F64), torch.tensor(g.standard_normal(d), dtype=F64)


def _pinv(cov, tol=1e-6):
    ev, vec = np.linalg.eigh(cov)
    keep = ev > tol
    return (vec[:, keep] / ev[keep]) @ vec[:, keep].T, vec[:, keep]


@pytest.mark.parametrize("log_cond,rank", [(1, None), (8, None), (2, 5)])
@pytest.mark.parametrize("eps", [0.05, 0.3, 0.8])
def test_l2_against_scipy(log_cond, rank, eps):
    cov, mu = _spd(8, log_cond, seed=3, rank=rank)
    w, z = robust_bayes_direction(mu, cov, eps)
    p, f = _pinv(cov.numpy())
    m = mu.numpy()
    budget = eps * np.linalg.norm(f.T @ m)  # relative ε: ‖Fᵀμ̃‖ (official)
    obj = lambda x: (m - x) @ p @ (m - x)  # noqa: E731
    ref = minimize(
        obj,
        np.zeros(8),
        jac=lambda x: -2 * p @ (m - x),
        method="SLSQP",
        constraints=[{"type": "ineq", "fun": lambda x: budget**2 - x @ x, "jac": lambda x: -2 * x}],
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    zn = z.numpy()
    d, kappa = 8, _kappa(cov.numpy())
    # Feasible: the secular-equation root makes ‖z‖ = β up to the rounding of a d-term sum of squares, an rsqrt
    # and Newton's 1e-15 relative stopping step, independent of κ: c·d·u with c = 500 (≈ 4e-13).
    assert np.linalg.norm(zn) == pytest.approx(budget, rel=500 * d * U)
    # Never worse than the independent solver, up to (i) the rounding of the quadratic form itself: evaluating
    # (m − z)ᵀP(m − z) with ‖P‖ = 1/σ_min loses up to d²·κ·u relative to its value (≥ ‖m − z‖²/σ_max), and
    # (ii) SLSQP's constraint violation v = (‖x‖² − β²)₊, which lowers its objective by up to λ·v (envelope
    # theorem: d obj*/d(β²) = −λ, the KKT multiplier, w = λz).
    lam = (w @ z / (z @ z)).item()
    violation = max(0.0, float(ref.x @ ref.x) - budget**2)
    assert obj(zn) <= ref.fun * (1 + d * d * kappa * U) + 2 * lam * violation + 1e-300
    # Agreement with SLSQP is limited by SLSQP (an iterative method stopping at ftol = 1e-15 on an objective
    # of condition κ ≤ 1e8): its iterates are ~√(ftol·κ) ≈ 3e-4 away in z, the objective second order:
    # ≲ 1e-5 relative, which is also what it attains in practice.
    assert obj(zn) == pytest.approx(ref.fun, rel=1e-5)
    # KKT: w = Σ⁺(μ̃ − z) = λ z with λ ≥ 0. In the eigenbasis w_k = λ z_k holds to a few u per component; both
    # are rotated by the same F (d·u each) and λ is a ratio of d-term dot products: ≤ 10·d²·u overall.
    assert lam >= 0
    assert torch.linalg.vector_norm(w - lam * z) <= 10 * d * d * U * torch.linalg.vector_norm(w)
    # w against the independent pseudo-inverse product (numpy's eigh): a solve at condition κ, 10·d·κ·u.
    _close(w.numpy(), p @ (m - zn), 10 * d * kappa * U)
    # z ∈ span(F): the two eigen-solvers' retained subspaces agree to ~d·u·‖Σ‖/gap ≤ d·κ·u (gap ≥ σ_min).
    _close(f @ (f.T @ zn), zn, 10 * d * kappa * U)


def test_l2_special_cases():
    cov, mu = _spd(6, 2, seed=4)
    w, z = robust_bayes_direction(mu, cov, 0.0)
    assert torch.count_nonzero(z) == 0
    tol = 10 * 6 * _kappa(cov.numpy()) * U  # two float64 solves (eigenbasis vs LU) at condition κ ≈ 1e2
    _close(w, torch.linalg.solve(cov, mu), tol)  # plain LDA
    # budget ≥ ‖Fᵀμ̃‖ (absolute ε): z = μ̃ feasible, w = 0 (degenerate, documented)
    w, z = robust_bayes_direction(mu, cov, float(mu.norm()) * 1.01, relative=False)
    assert torch.count_nonzero(w) == 0 and torch.allclose(z, mu)
    # one eigendecomposition for the grid gives the same answer as separate calls
    eig = retained_eig(cov)
    W, Z = robust_bayes_directions(mu, None, [0.0, 0.2, 0.6], eig=eig)
    for i, e in enumerate([0.0, 0.2, 0.6]):
        w, z = robust_bayes_direction(mu, cov, e)
        # batched Newton may take extra (no-op) steps on converged entries: same root to the solve's rounding
        _close(W[i], w, tol)


@pytest.mark.parametrize("d,rank", [(7, None), (7, 4), (40, None)])
@pytest.mark.parametrize("eps", [0.1, 0.5])
def test_linf_against_scipy(d, rank, eps):
    cov, mu = _spd(d, 3, seed=5, rank=rank)
    w, z = robust_bayes_direction(mu, cov, eps, norm="linf")
    p, _ = _pinv(cov.numpy())
    m = mu.numpy()
    beta = eps * np.abs(m).max()
    obj = lambda x: (m - x) @ p @ (m - x)  # noqa: E731
    ref = minimize(
        obj,
        np.zeros(d),
        jac=lambda x: -2 * p @ (m - x),
        method="L-BFGS-B",
        bounds=[(-beta, beta)] * d,
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 5000},
    )
    zn = z.numpy()
    kappa = _kappa(cov.numpy())
    # Bound constraints hold exactly up to the rounding of β = ε·max|μ̃| (1 u) and the clamp: 4u.
    assert np.abs(zn).max() <= beta * (1 + 4 * U)
    # The active-set solution is exact for its active set; the objective's evaluation loses ≤ d²·κ·u (see the
    # ℓ2 test); L-BFGS-B (iterative, gtol 1e-12, ftol 1e-15) is the independent check, never better.
    assert obj(zn) <= ref.fun * (1 + d * d * kappa * U) + 1e-300
    # L-BFGS-B stops at ftol = 1e-15 relative decrease on an objective of condition κ = 1e3: ≲ √κ·1e-15·1e6 ≈ 1e-7
    # relative in the objective in practice; 1e-6 covers it (abs 1e-10 for β ≥ max|μ̃| where the optimum is 0).
    assert obj(zn) == pytest.approx(ref.fun, rel=1e-6, abs=1e-10)
    _close(w.numpy(), p @ (m - zn), 10 * d * kappa * U)  # w = Σ⁺(μ̃ − z): a product at condition κ


def test_linf_identity_is_soft_thresholding():
    # ICLR submission App. B: for Σ = I, w = μ̃ − sign(μ̃) min(|μ̃|, ε).
    mu = torch.tensor([0.9, -0.2, 0.5, -1.4], dtype=F64)
    w, z = robust_bayes_direction(mu, torch.eye(4, dtype=F64), 0.3, relative=False, norm="linf")
    # exact: the diagonal path computes (μ̃ − clip(μ̃))/1, the same floating-point operations as the formula
    torch.testing.assert_close(w, mu - mu.sign() * mu.abs().clamp(max=0.3), rtol=0, atol=0)
    # the general BVLS path (no cov given → not detected as diagonal) agrees
    eig = retained_eig(torch.eye(4, dtype=F64))
    w2, _ = robust_bayes_direction(mu, None, 0.3, relative=False, norm="linf", eig=eig)
    _close(w2, w, 10 * 4 * 1.0 * U * 10)  # κ(I) = 1: d = 4 rotations F, Fᵀ and the block solve, 10·d·κ·u ×10


def _gaussian_features(n, d, seed, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=F64)
    y = (torch.rand(n, generator=g) < 0.5).long()
    mu = torch.linspace(-0.5, 0.5, d, dtype=F64) * 0.8
    z = torch.randn(n, d, generator=g, dtype=F64) @ a * 0.5 + (2 * y[:, None] - 1) * mu + shift
    return z, y


def test_evaluate_matches_direct_algorithm_1():
    z, y = _gaussian_features(600, 5, 0)
    zt, yt = _gaussian_features(500, 5, 1)
    acc, bnd = evaluate_representation(z, y, zt, yt, [0.0])
    zn, yn, ztn, ytn = z.numpy(), y.numpy(), zt.numpy(), yt.numpy()
    m1, m0 = zn[yn == 1].mean(0), zn[yn == 0].mean(0)
    cov = (
        np.cov(zn[yn == 1], rowvar=False) * ((yn == 1).sum() - 1)
        + np.cov(zn[yn == 0], rowvar=False) * ((yn == 0).sum() - 1)
    ) / (len(yn) - 2)
    mt = (m1 - m0) / 2
    w = np.linalg.solve(cov, mt)
    margin = (ztn - (m1 + m0) / 2) @ w
    correct = (margin > 0) == (ytn == 1)
    # Accuracy is a count: the two computations' margins differ by ≲ 10·d·κ·u relative, so no sample changes
    # side unless its margin is that close to 0 (probability ~n·1e-13): equal counts.
    assert acc.item() * len(ytn) == correct.sum()
    tol = 10 * 5 * _kappa(cov, 0.0) * U  # mean of |margin|/|μ̃ᵀw|: the solve's relative error, 10·d·κ·u
    assert bnd.item() == pytest.approx((np.abs(margin) / abs(mt @ w))[correct].mean(), rel=tol)


def test_invariances_exact():
    z, y = _gaussian_features(800, 6, 2)
    zt, yt = _gaussian_features(700, 6, 3)
    eps = [0.0, 0.2, 0.5, 0.8]
    base = evaluate_representation(z, y, zt, yt, eps)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(9), dtype=F64))
    c = torch.linspace(-3, 5, 6, dtype=F64)
    kappa = _kappa(torch.cov(z.T).numpy(), 0.0)
    spread = float(z.std(0).min())
    # Each transform only changes rounding: the shift by c adds |c|/spread to the relative rounding of the
    # centred data, then a solve at condition κ: tol = 10·d·κ·u·(1 + max|c|/spread). Accuracies are counts
    # (1 count = 1/700): margins move by ~tol relative, so counts are equal (atol far below one count).
    tol = 10 * 6 * kappa * U * (1 + 5 / spread)
    for fz in (lambda v: v @ q, lambda v: v + c, lambda v: 7.3 * v):
        acc, bnd = evaluate_representation(fz(z), y, fz(zt), yt, eps)
        torch.testing.assert_close(acc, base[0], rtol=0, atol=0.1 / len(yt))
        torch.testing.assert_close(bnd, base[1], rtol=tol, atol=0)
    for fz in (lambda v: v + c, lambda v: 7.3 * v):  # ℓ∞ is not rotation invariant, but shift/scale invariant
        a1, b1 = evaluate_representation(z, y, zt, yt, eps, norm="linf")
        a2, b2 = evaluate_representation(fz(z), y, fz(zt), yt, eps, norm="linf")
        torch.testing.assert_close(a2, a1, rtol=0, atol=0.1 / len(yt))
        # the active-set QP solves the same free block (same active set) exactly: the same rounding argument
        # plus one extra block solve at condition ≤ κ
        torch.testing.assert_close(b2, b1, rtol=2 * tol, atol=0)


def test_statistics_are_additive_and_shift_stable():
    z, y = _gaussian_features(1000, 4, 5, shift=1e6)  # |mean| = 1e6 ≫ spread ≈ 1
    whole = train_statistics(z, y)
    parts = merge(train_statistics(z[:300], y[:300]), train_statistics(z[300:], y[300:]))  # different shifts
    # Means are shift + (sum of n centred terms)/n: absolute error ≤ |shift|·u + n·u·spread (≈ 1e-10 + 1e-13);
    # ×10. The covariance sums n products of O(1) centred values: n·u relative to its largest entry; ×10.
    n = len(y)
    mu1_w, mu0_w, cov_w = fit_gaussian(whole)
    mu1_p, mu0_p, cov_p = fit_gaussian(parts)
    for a, b in ((mu1_w, mu1_p), (mu0_w, mu0_p)):
        torch.testing.assert_close(a, b, rtol=0, atol=10 * (1e6 + n) * U)
    cov_tol = 10 * n * U * float(cov_w.abs().max())
    torch.testing.assert_close(cov_w, cov_p, rtol=0, atol=cov_tol)
    zn, yn = z.numpy(), y.numpy()
    cov = sum(np.cov(zn[yn == c] - 1e6, rowvar=False) * ((yn == c).sum() - 1) for c in (0, 1)) / (len(yn) - 2)
    # raw (unshifted) moments would lose ~12 of 16 digits here; z − 1e6 is exact (Sterbenz), so numpy's
    # covariance of the centred data and ours both carry only the n·u summation error
    np.testing.assert_allclose(cov_p.numpy(), cov, rtol=0, atol=cov_tol)
    zero_shift = TrainStats.zeros(4).update(z - 1e6, y)
    np.testing.assert_allclose(fit_gaussian(zero_shift)[2].numpy(), cov, rtol=0, atol=cov_tol)
    clf = classifier_from_statistics(whole, [0.0, 0.4])
    ts = test_statistics(z[:400], y[:400], clf) + test_statistics(z[400:], y[400:], clf)
    # counts are integers in float64 (exact below 2^53) and the same margins: identical
    torch.testing.assert_close(
        finalize_test_statistics(ts)[0], finalize_test_statistics(test_statistics(z, y, clf))[0], rtol=0, atol=0
    )


def test_bad_inputs():
    z, y = _gaussian_features(100, 3, 6)
    for bad in (float("nan"), float("inf")):
        zb = z.clone()
        zb[3, 1] = bad
        with pytest.raises(ValueError, match="NaN or inf"):
            evaluate_representation(zb, y, z, y, [0.0])
    with pytest.raises(ValueError, match="class 0 has no training samples"):
        evaluate_representation(z, torch.ones_like(y), z, y, [0.0])
    with pytest.raises(ValueError, match="labels"):
        evaluate_representation(z, y * 2, z, y, [0.0])
    for eps, mode in (([-0.1], "relative"), ([float("nan")], "relative"), ([1.0], "relative"), ([-1.0], "absolute")):
        with pytest.raises(ValueError, match="eps"):
            evaluate_representation(z, y, z, y, eps, mode)
    with pytest.raises(ValueError):
        check_eps([0.1], "bogus")
    # constant features: degenerate classifier -> accuracy 0.5, bound 0, with a warning
    with pytest.warns(RuntimeWarning, match="degenerate"):
        acc, bnd = evaluate_representation(torch.ones(50, 4), y[:50], torch.ones(20, 4), y[:20], [0.0, 0.5])
    assert acc.tolist() == [0.5, 0.5] and bnd.tolist() == [0.0, 0.0]
    # D ≥ N: singular covariance handled by the pseudo-inverse, finite results
    zw, yw = _gaussian_features(30, 50, 7)
    acc, bnd = evaluate_representation(zw, yw, zw, yw, [0.0, 0.3])
    assert torch.isfinite(acc).all() and torch.isfinite(bnd).all() and (acc > 0.5).all()


def test_linf_bvls_fallback_agrees(monkeypatch):
    # The exact BVLS fallback (used when the active-set iteration does not certify its KKT conditions) gives the
    # same classifier as the primary path, on full-rank and singular covariances.
    import src.synbench.bayes._linf as bayes

    for rank in (None, 12):
        cov, mu = _spd(20, 3, seed=8, rank=rank)
        w_fast, _ = robust_bayes_directions(mu, cov, [0.1, 0.4, 0.7], norm="linf")
        with monkeypatch.context() as m:
            m.setattr(bayes, "_pdas_box_qp", lambda *a, **k: None)
            w_slow, _ = robust_bayes_directions(mu, cov, [0.1, 0.4, 0.7], norm="linf")
        # Both are exact active-set solutions (PDAS certified by its KKT check, BVLS to its 1e-13 tolerance): on
        # the same active set they differ by the block solves' rounding, 10·d·κ·u; ×1e3 for BVLS's termination
        # tolerance 1e-13 ≈ 1e3·u relative.
        _close(w_fast, w_slow, 1e3 * 10 * 20 * _kappa(cov.numpy()) * U)
