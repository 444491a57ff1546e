"""SFDA against a straightforward numpy re-computation (the official route: generalised eigenvectors) and limits."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from src.baselines import sfda


def _softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _fda_prob(x: np.ndarray, y: np.ndarray, shrink: float | None) -> tuple[np.ndarray, float, np.ndarray]:
    """(p(c|x), shrinkage used, class means) with the generalised eigenvectors of (S_b, S_w^λ), as the paper."""
    classes = np.unique(y)
    n, d = x.shape
    priors = np.array([np.mean(y == c) for c in classes])
    means = np.stack([x[y == c].mean(0) for c in classes])
    sw = sum(p * np.cov(x[y == c].T, bias=True).reshape(d, d) for p, c in zip(priors, classes))
    if shrink is None:
        shrink = max(np.exp(-5 * np.linalg.eigvalsh(sw)[-1]), 1e-10)
    st = np.cov(x.T, bias=True).reshape(d, d)
    sw_s = (1 - shrink) * sw + shrink * np.trace(sw) / d * np.eye(d)
    st_s = (1 - shrink) * st + shrink * np.trace(st) / d * np.eye(d)
    _, w = scipy.linalg.eigh(st_s - sw_s, sw_s)
    coef = means @ w @ w.T
    intercept = -0.5 * np.sum(means * coef, 1) + np.log(priors)
    return _softmax(x @ coef.T + intercept), shrink, means


def _reference(x: np.ndarray, y: np.ndarray) -> float:
    prob, shrink, means = _fda_prob(x, y, None)
    soft = _softmax(prob)
    c = len(means)
    mixed = x.copy()
    for i in range(len(y)):
        other = (means.sum(0) - means[y[i]]) / (c - 1)
        mixed[i] = soft[i, y[i]] * x[i] + (1 - soft[i, y[i]]) * other
    prob2, _, _ = _fda_prob(mixed, y, shrink)
    return float(np.mean(prob2[np.arange(len(y)), y]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sfda_equals_numpy_recomputation(seed) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, 40)
    x = rng.normal(size=(40, 5)) * 0.5 + y[:, None] * 0.4
    # two float64 routes to the same (S_w^λ)⁻¹ (Cholesky vs generalised eigenvectors): ≈ cond(S_w^λ)·u ≈ 1e-14
    # in the probabilities; 1e-10 leaves room
    assert sfda(torch.tensor(x), torch.tensor(y)) == pytest.approx(_reference(x, y), rel=0, abs=1e-10)


def test_sfda_limits() -> None:
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 50)
    noise = rng.normal(size=(100, 3)) * 0.1
    # separation 100 noise scales: the first discriminant gives p(y|x) = 1 up to e^-(huge); softened
    # p' = e/(1+e); ConfMix keeps the classes 0.46·100 noise scales apart, so the second p(y|x) is 1 - O(e^-100)
    separated = noise + np.outer(y, [10.0, 0, 0])
    assert sfda(torch.tensor(separated), torch.tensor(y)) == pytest.approx(1.0, abs=1e-9)
    # identical class distributions (the same rows under both labels): means coincide, p(c|x) = prior = 1/2
    same = np.concatenate([noise[:50], noise[:50]])
    assert sfda(torch.tensor(same), torch.tensor(y)) == pytest.approx(0.5, abs=1e-12)


def test_sfda_bad_input() -> None:
    with pytest.raises(ValueError, match="at least 2 classes"):
        sfda(torch.randn(10, 3), torch.zeros(10, dtype=torch.long))
    with pytest.raises(ValueError, match="no within-class variance"):
        sfda(torch.ones(10, 3), torch.arange(10) % 2)
    with pytest.raises(ValueError, match="shrinkage"):
        sfda(torch.randn(10, 3), torch.arange(10) % 2, shrinkage=2.0)


def _sfda_module():
    import sys

    return sys.modules["src.baselines.sfda"]  # ``src.baselines.sfda`` the attribute is the function


# (n, D, feature scale, shrinkage or None = adaptive): n < D throughout, shrinkage from none (λ_s = 1: S_w^λ ∝ I)
# to the 1e-10 floor (cond(S_w^λ) ≈ 1e11)
FEW_SAMPLES = [(20, 60, 0.1, None), (12, 40, 0.3, 0.9), (20, 60, 1.0, 0.1), (30, 100, 0.2, 1e-6), (30, 100, 3.0, 1e-10),
               (30, 100, 0.2, 1.0)]  # fmt: skip


@pytest.mark.parametrize("n, d, scale, shrinkage", FEW_SAMPLES)
def test_sfda_in_n_dimensions_equals_the_d_dimensional_computation(n, d, scale, shrinkage) -> None:
    """BL-sfda-hugeD: with n < D SFDA runs in n dimensions (Woodbury); its discriminant is the D-dimensional one."""
    mod = _sfda_module()
    g = torch.Generator().manual_seed(n + d)
    y = torch.arange(n) % 3
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * scale
    x[:, :3] += 0.3 * scale * y[:, None]
    lam = shrinkage if shrinkage is not None else mod.sfda_shrinkage(mod._class_stats(x, y, 3)[2])
    assert mod._factor_shrinkage(mod._class_factor(x, y, 3)[2]) == pytest.approx(
        mod.sfda_shrinkage(mod._class_stats(x, y, 3)[2]), rel=1e-12
    )  # λ_max of RRᵀ and RᵀR: one eigenvalue, two backward-stable solvers (≈ n·u relative each); exp(−5λ) keeps it
    _, means, sw = mod._class_stats(x, y, 3)
    _, _, r = mod._class_factor(x, y, 3)
    d_dim, n_dim = mod._coefficients_scatter(means, sw, lam), mod._coefficients_gram(means, r, lam)
    # both solve S_w^λ·w = μ_c backward-stably, so each has a relative error ≲ c·κ·u, κ = cond₂(S_w^λ) (perturbation
    # bound of a linear system, Higham Thm 7.2), c a small multiple of 1 for Cholesky on these sizes (measured: the two
    # differ by 0.2–0.9·κ·u on every case here); 8·κ·u bounds the sum of both errors with room
    eig = torch.linalg.eigvalsh(mod._shrunk(sw, lam))
    kappa = float(eig[-1] / eig[0])
    u = torch.finfo(torch.float64).eps
    assert float((n_dim - d_dim).norm() / d_dim.norm()) <= 8 * kappa * u
    if kappa < 100:  # well-conditioned cases: the whole score, both forms, as the numpy reference above
        # end to end: the reference's comment (≈ cond(S_w^λ)·u ≈ 1e-14 in the probabilities) holds with κ < 100
        score = mod._score(x, y, 3, shrinkage, False, True)
        assert score == pytest.approx(mod._score(x, y, 3, shrinkage, False, False), rel=0, abs=1e-10)
        if shrinkage is None:
            assert sfda(x, y) == score == pytest.approx(_reference(x.numpy(), y.numpy()), rel=0, abs=1e-10)
    # the authors' power estimate through the factor: the same 3 steps with A·v = Rᵀ(R·v) (rounding only)
    assert mod._power_estimate_factor(r) == pytest.approx(mod._power_estimate(sw), rel=1e-12)


def test_sfda_with_few_samples_forms_no_d_by_d_matrix(monkeypatch) -> None:
    """BL-sfda-hugeD: ``sfda(torch.randn(20, 20000), labels)`` formed D×D float64 scatters (3.2 GB each) and ran for
    minutes; in n dimensions it needs a few MB and well under a second."""
    mod = _sfda_module()

    def refuse(*args, **kwargs):
        raise AssertionError("a D×D scatter matrix was formed")

    for name in ("_class_stats", "_shrunk", "sfda_shrinkage", "_power_estimate"):
        monkeypatch.setattr(mod, name, refuse)
    x = torch.randn(20, 20000, generator=torch.Generator().manual_seed(0))
    for authors in (False, True):
        assert 0.0 < sfda(x, torch.arange(20) % 2, authors=authors) <= 1.0
    with pytest.raises(ValueError, match="no within-class variance"):
        sfda(torch.ones(4, 50), torch.arange(4) % 2)
