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
    # Feasible (active constraint, to rounding) and never worse than the independent solver; SLSQP's own
    # accuracy on cond 1e8 is ~1e-7 relative, hence the tolerance.
    assert np.linalg.norm(zn) == pytest.approx(budget, rel=1e-12)
    assert obj(zn) <= ref.fun * (1 + 1e-7) + 1e-12
    assert obj(zn) == pytest.approx(ref.fun, rel=1e-5)
    # KKT: w = Σ⁺(μ̃ − z) = λ z with λ ≥ 0 (stationarity of the Lagrangian), z ∈ span(F), w = Σ⁺(μ̃ − z).
    lam = (w @ z / (z @ z)).item()
    assert lam >= 0
    assert torch.linalg.vector_norm(w - lam * z) <= 1e-9 * torch.linalg.vector_norm(w)
    np.testing.assert_allclose(w.numpy(), p @ (m - zn), rtol=1e-8, atol=1e-10 * np.abs(w.numpy()).max())
    np.testing.assert_allclose(f @ (f.T @ zn), zn, atol=1e-12 * np.linalg.norm(zn) + 1e-15)


def test_l2_special_cases():
    cov, mu = _spd(6, 2, seed=4)
    w, z = robust_bayes_direction(mu, cov, 0.0)
    assert torch.count_nonzero(z) == 0
    torch.testing.assert_close(w, torch.linalg.solve(cov, mu), rtol=1e-10, atol=0)  # plain LDA
    # budget ≥ ‖Fᵀμ̃‖ (absolute ε): z = μ̃ feasible, w = 0 (degenerate, documented)
    w, z = robust_bayes_direction(mu, cov, float(mu.norm()) * 1.01, relative=False)
    assert torch.count_nonzero(w) == 0 and torch.allclose(z, mu)
    # one eigendecomposition for the grid gives the same answer as separate calls
    eig = retained_eig(cov)
    W, Z = robust_bayes_directions(mu, None, [0.0, 0.2, 0.6], eig=eig)
    for i, e in enumerate([0.0, 0.2, 0.6]):
        w, z = robust_bayes_direction(mu, cov, e)
        torch.testing.assert_close(W[i], w, rtol=1e-12, atol=1e-14)


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
    assert np.abs(zn).max() <= beta * (1 + 1e-12)
    assert obj(zn) <= ref.fun * (1 + 1e-8) + 1e-12  # BVLS is exact; L-BFGS-B is the independent check
    assert obj(zn) == pytest.approx(ref.fun, rel=1e-6, abs=1e-10)
    np.testing.assert_allclose(w.numpy(), p @ (m - zn), rtol=1e-7, atol=1e-9)


def test_linf_identity_is_soft_thresholding():
    # ICLR submission App. B: for Σ = I, w = μ̃ − sign(μ̃) min(|μ̃|, ε).
    mu = torch.tensor([0.9, -0.2, 0.5, -1.4], dtype=F64)
    w, z = robust_bayes_direction(mu, torch.eye(4, dtype=F64), 0.3, relative=False, norm="linf")
    torch.testing.assert_close(w, mu - mu.sign() * mu.abs().clamp(max=0.3))
    # the general BVLS path (no cov given → not detected as diagonal) agrees
    eig = retained_eig(torch.eye(4, dtype=F64))
    w2, _ = robust_bayes_direction(mu, None, 0.3, relative=False, norm="linf", eig=eig)
    torch.testing.assert_close(w2, w, rtol=1e-10, atol=1e-12)


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
    assert acc.item() == pytest.approx(correct.mean(), abs=1e-15)
    assert bnd.item() == pytest.approx((np.abs(margin) / abs(mt @ w))[correct].mean(), rel=1e-12)


def test_invariances_exact():
    z, y = _gaussian_features(800, 6, 2)
    zt, yt = _gaussian_features(700, 6, 3)
    eps = [0.0, 0.2, 0.5, 0.8]
    base = evaluate_representation(z, y, zt, yt, eps)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(9), dtype=F64))
    c = torch.linspace(-3, 5, 6, dtype=F64)
    for fz in (lambda v: v @ q, lambda v: v + c, lambda v: 7.3 * v):
        acc, bnd = evaluate_representation(fz(z), y, fz(zt), yt, eps)
        torch.testing.assert_close(acc, base[0], rtol=0, atol=1e-9)
        torch.testing.assert_close(bnd, base[1], rtol=1e-9, atol=0)
    for fz in (lambda v: v + c, lambda v: 7.3 * v):  # ℓ∞ is not rotation invariant, but shift/scale invariant
        a1, b1 = evaluate_representation(z, y, zt, yt, eps, norm="linf")
        a2, b2 = evaluate_representation(fz(z), y, fz(zt), yt, eps, norm="linf")
        torch.testing.assert_close(a2, a1, rtol=0, atol=1e-9)
        torch.testing.assert_close(b2, b1, rtol=1e-7, atol=0)


def test_statistics_are_additive_and_shift_stable():
    z, y = _gaussian_features(1000, 4, 5, shift=1e6)  # |mean| = 1e6 ≫ spread ≈ 1
    whole = train_statistics(z, y)
    parts = merge(train_statistics(z[:300], y[:300]), train_statistics(z[300:], y[300:]))  # different shifts
    for a, b in zip(fit_gaussian(whole), fit_gaussian(parts)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    zn, yn = z.numpy(), y.numpy()
    cov = sum(np.cov(zn[yn == c] - 1e6, rowvar=False) * ((yn == c).sum() - 1) for c in (0, 1)) / (len(yn) - 2)
    # raw (unshifted) moments would lose ~12 of 16 digits here; the shifted ones keep ~1e-10 relative
    np.testing.assert_allclose(fit_gaussian(parts)[2].numpy(), cov, rtol=1e-8, atol=1e-9)
    zero_shift = TrainStats.zeros(4).update(z - 1e6, y)
    np.testing.assert_allclose(fit_gaussian(zero_shift)[2].numpy(), cov, rtol=1e-9, atol=1e-10)
    clf = classifier_from_statistics(whole, [0.0, 0.4])
    ts = test_statistics(z[:400], y[:400], clf) + test_statistics(z[400:], y[400:], clf)
    torch.testing.assert_close(
        finalize_test_statistics(ts)[0], finalize_test_statistics(test_statistics(z, y, clf))[0], rtol=0, atol=1e-15
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
        torch.testing.assert_close(w_fast, w_slow, rtol=1e-7, atol=1e-9 * float(w_fast.abs().max()))
