"""Floating-point extremes of the Task-Prior sampler and kernels (S10, T19) and clear errors (S03, S13)."""

from __future__ import annotations

import numpy
import pytest
import torch

from src.task_prior import sample_task_labels, task_prior_moments
from src.task_prior.sampler import prior_factor

F64 = torch.float64


def _features():
    return torch.randn(20, 8, generator=torch.Generator().manual_seed(0))


def _labels(temperature, order="sequential"):
    g = torch.Generator().manual_seed(0)
    return sample_task_labels(_features(), 3, temperature, num_tasks=8, generator=g, order=order)


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_s10_tiny_temperatures_give_the_zero_temperature_limit(order):
    ref = _labels(1e-300, order)
    # before: T = 1e-310 overflowed z/T, 0·inf = NaN won the argmax: counts [144, 16, 0] instead of [53, 53, 54]
    for t in (1e-310, 5e-324):  # 5e-324: the smallest positive float64
        assert torch.equal(_labels(t, order), ref)


def test_s10_limit_is_the_argmax_of_the_prefix_scores():
    """Documented T -> 0 semantics: each point joins a class of largest Σ_{j<i} K_ij 1[y_j = c] (K = Z Zᵀ)."""
    labels = _labels(1e-310)
    z = prior_factor(_features())
    k = z @ z.T
    for row in labels:
        onehot = torch.nn.functional.one_hot(row, 3).to(F64)
        h = torch.tril(k, diagonal=-1) @ onehot  # (n, q) prefix scores
        chosen = h.gather(1, row[:, None])[:, 0]
        # ties (e.g. empty classes) are broken by the noise, so the chosen class only has to attain the maximum;
        # the scores are exact sums of the same float64 products up to summation order: 1e-12 absolute bounds
        # n·u·max|K| (20 · 1.1e-16 · O(1)) with a wide margin
        assert bool((chosen >= h.amax(1) - 1e-12).all())


def test_t19_huge_features_are_not_identical_points():
    x = torch.randn(20, 8, dtype=F64, generator=torch.Generator().manual_seed(1))
    y = torch.randn(20, 5, generator=torch.Generator().manual_seed(2))
    ref = task_prior_moments(x, y, 0.01)
    # before: the float64 row norms overflowed (inf), every row became 0 and this raised "all points identical";
    # power-of-two scaling is exact in every step, so the moments are bitwise equal
    assert task_prior_moments(x * 2.0**700, y, 0.01) == ref
    assert task_prior_moments(x * 2.0**-90, y, 0.01) == ref  # row norms ~1e-27 stay above ZERO_NORM (1e-30)


def test_t19_message_of_a_truly_zero_kernel_names_the_cause():
    same = torch.ones(4, 3)  # every row points the same way: the centred cosine kernel is 0
    with pytest.raises(ValueError, match=r"every row points in the same direction.*eval_scale='none'"):
        task_prior_moments(same, torch.randn(4, 3), 0.01)


def test_t19_row_norm_beyond_float64_is_refused_clearly():
    x = torch.full((3, 8), 1.5e308, dtype=F64)
    with pytest.raises(ValueError, match=r"norm exceeds the float64 range \(row 0\).*divide the features"):
        task_prior_moments(x, torch.randn(3, 2), 0.01)


def test_s03_string_num_classes_shows_its_type():
    with pytest.raises(TypeError, match=r"num_classes must be an integer >= 2, got '2' \(str\)"):
        sample_task_labels(torch.randn(20, 8), "2", 0.01)
    with pytest.raises(TypeError, match=r"num_tasks must be an integer >= 1, got 1.5 \(float\)"):
        sample_task_labels(torch.randn(20, 8), 2, 0.01, num_tasks=1.5)


def test_s13_numpy_generator_names_generator():
    with pytest.raises(TypeError, match=r"generator must be a torch.Generator.*numpy.*torch.Generator\(\).manual_seed"):
        sample_task_labels(torch.randn(20, 8), 2, 0.01, generator=numpy.random.default_rng(0))
