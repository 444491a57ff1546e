"""Prefix sampler (Algorithm 1): limits, clusters, reproducibility, vectorisation, exact sampling distribution."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from src.task_prior import centered_cosine_kernel, sample_task_labels
from src.task_prior.sampler import prior_factor, sequential_log_prob


def _features(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64) + 0.2


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_shape_dtype_range():
    x = _features(30, 4, 0)
    labels = sample_task_labels(x, 3, 0.01, 5, generator=_gen(0))
    assert labels.shape == (5, 30) and labels.dtype == torch.long
    assert int(labels.min()) >= 0 and int(labels.max()) <= 2


def test_factor_is_exact_for_the_centred_cosine_kernel():
    """Z Zᵀ = K/‖K‖_F (scale "frobenius") and Z Zᵀ = K (scale "none"): entries agree to the rounding of two
    d-term products of vectors of norm ≤ 2 after an n-term centring, ≤ 8 (d + n) u."""
    n, d = 40, 6
    x = _features(n, d, 1)
    k = centered_cosine_kernel(x)
    tol = 8 * (d + n) * torch.finfo(torch.float64).eps
    z = prior_factor(x, scale="none")
    assert torch.allclose(z @ z.T, k, rtol=0, atol=tol)
    z = prior_factor(x, scale="frobenius")
    assert torch.allclose(z @ z.T, k / k.norm(), rtol=0, atol=tol)


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_high_temperature_is_uniform(order):
    """At T = 1e6 every logit is ≤ Σ|K_i·|/T ≤ 2n/T = 4e-4, so each label is uniform on q classes up to that
    relative bias. Each class count over N = tasks·n labels is Binomial(N, 1/q): within 4 standard errors
    √(N (1/q)(1 − 1/q)) (bias 4e-4·N/q = 0.7 counts, negligible against the SE of 47)."""
    n, q, tasks = 200, 3, 50
    labels = sample_task_labels(_features(n, 5, 2), q, 1e6, tasks, generator=_gen(1), order=order)
    counts = torch.bincount(labels.flatten(), minlength=q).double()
    total = n * tasks
    se = math.sqrt(total * (1 / q) * (1 - 1 / q))
    assert torch.all((counts - total / q).abs() <= 4 * se)


@pytest.mark.parametrize("order", ["sequential", "random"])
@pytest.mark.parametrize("scale", ["frobenius", "none"])
def test_two_separated_clusters_at_low_temperature(order, scale):
    """Two tight clusters at opposite directions: K_ij ≈ +1 within a cluster and ≈ −1 across. After the first point
    (uniform), a point of the other cluster sees logit ≈ −(prefix size)/T for the taken class and 0 for the other,
    so at T = 1e-3 every cluster gets one label and the two labels differ, with probability 1 − O(e^{-1/T})."""
    g = torch.Generator().manual_seed(3)
    n_half, d = 20, 4
    base = torch.zeros(d, dtype=torch.float64)
    base[0] = 1.0
    a = base + 0.01 * torch.randn(n_half, d, generator=g, dtype=torch.float64)
    b = -base + 0.01 * torch.randn(n_half, d, generator=g, dtype=torch.float64)
    x = torch.stack([a, b], dim=1).reshape(2 * n_half, d)  # interleaved: a0, b0, a1, b1, ...
    labels = sample_task_labels(x, 2, 1e-3, 16, generator=_gen(4), order=order, scale=scale)
    la, lb = labels[:, 0::2], labels[:, 1::2]
    assert torch.all(la == la[:, :1]) and torch.all(lb == lb[:, :1])
    assert torch.all(la[:, 0] != lb[:, 0])


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_seeded_reproducibility(order):
    x = _features(50, 4, 5)
    a = sample_task_labels(x, 3, 0.01, 4, generator=_gen(7), order=order)
    b = sample_task_labels(x, 3, 0.01, 4, generator=_gen(7), order=order)
    c = sample_task_labels(x, 3, 0.01, 4, generator=_gen(8), order=order)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_vectorised_tasks_equal_one_at_a_time(order):
    x = _features(40, 4, 6)
    together = sample_task_labels(x, 3, 0.02, 6, generator=_gen(9), order=order)
    g = _gen(9)
    one_by_one = torch.cat([sample_task_labels(x, 3, 0.02, 1, generator=g, order=order) for _ in range(6)])
    assert torch.equal(together, one_by_one)


def test_factor_path_equals_feature_path():
    x = _features(30, 4, 10)
    a = sample_task_labels(x, 2, 0.05, 3, generator=_gen(11))
    b = sample_task_labels(None, 2, 0.05, 3, generator=_gen(11), factor=prior_factor(x))
    assert torch.equal(a, b)


def _exact_sequential_probs(k: np.ndarray, t: float, q: int, order: tuple[int, ...]) -> dict:
    """P(labels) for visiting points in ``order``: Π_steps softmax_c((1/T) Σ_{earlier j} K_ij 1[y_j = c])[y_i],
    an independent numpy enumeration of all q^n labelings."""
    n = k.shape[0]
    probs = {}
    for labels in itertools.product(range(q), repeat=n):
        p = 1.0
        for s, i in enumerate(order):
            h = np.array([sum(k[i, j] for j in order[:s] if labels[j] == c) for c in range(q)]) / t
            w = np.exp(h - h.max())
            p *= w[labels[i]] / w.sum()
        probs[labels] = p
    return probs


def _chi_square_pvalue(labels: torch.Tensor, probs: dict) -> float:
    """Pearson chi-square of observed labeling counts against exact probabilities (cells with expectation < 5
    pooled into one)."""
    s = labels.shape[0]
    observed: dict = {}
    for row in labels.tolist():
        observed[tuple(row)] = observed.get(tuple(row), 0) + 1
    stat, cells, pooled_o, pooled_e = 0.0, 0, 0, 0.0
    for key, p in probs.items():
        e, o = s * p, observed.get(key, 0)
        if e < 5:
            pooled_o, pooled_e = pooled_o + o, pooled_e + e
            continue
        stat += (o - e) ** 2 / e
        cells += 1
    if pooled_e > 0:
        stat += (pooled_o - pooled_e) ** 2 / pooled_e
        cells += 1
    return float(chi2.sf(stat, cells - 1))


def _tiny_factor() -> tuple[torch.Tensor, float]:
    g = torch.Generator().manual_seed(12)
    z = torch.randn(5, 3, generator=g, dtype=torch.float64) * 0.5
    return z, 0.3  # logits up to ~|K|·n/T ≈ 5: far from uniform and from deterministic


def test_sequential_sampler_matches_its_exact_distribution():
    """n = 5, q = 2: all 32 labelings enumerated. With S = 40,000 samples, Pearson's statistic is asymptotically
    chi-square; the seeded test asserts p-value > 1e-3 (a correct sampler fails with probability 1e-3 per seed)."""
    z, t = _tiny_factor()
    k = (z @ z.T).numpy()
    probs = _exact_sequential_probs(k, t, 2, tuple(range(5)))
    assert abs(sum(probs.values()) - 1) <= 1e-12  # 32 products of 5 softmax terms: rounding ≪ 1e-12
    labels = sample_task_labels(None, 2, t, 40_000, generator=_gen(13), factor=z)
    assert _chi_square_pvalue(labels, probs) > 1e-3
    # the module's dense log-probability agrees with the enumeration (rounding of 5 log-softmax terms ≪ 1e-12)
    keys = torch.tensor(list(probs))
    ref = torch.tensor([math.log(probs[tuple(r)]) for r in keys.tolist()], dtype=torch.float64)
    assert torch.allclose(sequential_log_prob(keys, z, t, 2), ref, rtol=0, atol=1e-12)


def test_random_order_sampler_matches_permutation_mixture():
    """order="random": the law is the average over all n! visiting orders of the sequential law (n = 5: 120
    orders × 32 labelings, enumerated). Same chi-square criterion as above."""
    z, t = _tiny_factor()
    k = (z @ z.T).numpy()
    mix: dict = {}
    perms = list(itertools.permutations(range(5)))
    for order in perms:
        for key, p in _exact_sequential_probs(k, t, 2, order).items():
            mix[key] = mix.get(key, 0.0) + p / len(perms)
    labels = sample_task_labels(None, 2, t, 40_000, generator=_gen(14), factor=z, order="random")
    assert _chi_square_pvalue(labels, mix) > 1e-3


def test_kernel_passed_as_factor_warns():
    x = _features(12, 3, 15)
    k = centered_cosine_kernel(x)
    with pytest.warns(UserWarning, match="K²"):
        sample_task_labels(None, 2, 0.1, 1, generator=_gen(0), factor=k)


def test_bad_input_raises_clear_errors():
    x = _features(10, 3, 16)
    with pytest.raises(ValueError, match="num_classes"):
        sample_task_labels(x, 1, 0.1)
    for t in (0.0, -0.5, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            sample_task_labels(x, 2, t)
    with pytest.raises(ValueError, match="NaN or inf"):
        bad = x.clone()
        bad[2, 2] = float("nan")
        sample_task_labels(bad, 2, 0.1)
    with pytest.raises(ValueError, match="zero-norm row"):
        bad = x.clone()
        bad[1] = 0
        sample_task_labels(bad, 2, 0.1)
    with pytest.raises(ValueError, match="order"):
        sample_task_labels(x, 2, 0.1, order="reverse")
    with pytest.raises(ValueError, match="num_tasks"):
        sample_task_labels(x, 2, 0.1, 0)
    with pytest.raises(ValueError, match="rows"):
        sample_task_labels(x, 2, 0.1, factor=prior_factor(x[:9]))
    with pytest.raises(ValueError, match="prior_features"):
        sample_task_labels(None, 2, 0.1)
    with pytest.raises(ValueError, match="scale"):
        sample_task_labels(x, 2, 0.1, scale="max")
