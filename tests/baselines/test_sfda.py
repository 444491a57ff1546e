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
