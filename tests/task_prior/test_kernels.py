"""The centred cosine kernel: dense reference, double centring, Frobenius norm without n × n, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from src.task_prior import centered_cosine_kernel
from src.task_prior.kernels import centered_normalized_features, kernel_frobenius_norm

EPS = torch.finfo(torch.float64).eps


def _features(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(0.5, 3, d, dtype=torch.float64) + 1


def test_matches_explicit_centring_matrix():
    """K = H X̂ X̂ᵀ H with H = I − 11ᵀ/n (numpy, explicit). Entries are O(1) sums of d + 2n products of numbers
    ≤ 1 in magnitude, so the two evaluation orders differ by ≤ 8 (d + 2n) u."""
    n, d = 50, 7
    x = _features(n, d, 0)
    xn = x.numpy()
    xh = xn / np.linalg.norm(xn, axis=1, keepdims=True)
    h = np.eye(n) - 1.0 / n
    ref = h @ xh @ xh.T @ h
    k = centered_cosine_kernel(x)
    assert k.dtype == torch.float64 and k.shape == (n, n)
    np.testing.assert_allclose(k.numpy(), ref, rtol=0, atol=8 * (d + 2 * n) * EPS)
    # double centred: every row and column sums to zero (n terms of size ≤ 2: ≤ 2 n u each)
    assert torch.all(k.sum(0).abs() <= 4 * n * EPS) and torch.all(k.sum(1).abs() <= 4 * n * EPS)
    assert torch.equal(k, k.T)


def test_frobenius_option_and_norm_without_n_by_n():
    """‖K‖_F = ‖X̃ᵀX̃‖_F (the nonzero eigenvalues of X̃X̃ᵀ and X̃ᵀX̃ coincide); the two float64 evaluations differ
    by the relative rounding of a Gram product and a Frobenius sum, ≤ 8 (d + n) u relative."""
    n, d = 120, 9
    x = _features(n, d, 1)
    dense = torch.linalg.matrix_norm(centered_cosine_kernel(x)).item()
    assert abs(kernel_frobenius_norm(x) - dense) <= 8 * (d + n) * EPS * dense
    kf = centered_cosine_kernel(x, frobenius=True)
    assert abs(torch.linalg.matrix_norm(kf).item() - 1) <= 8 * n * EPS


def test_float32_input_and_exact_factor():
    """float32 features are promoted to float64 first; the kernel is X̃X̃ᵀ symmetrised (same formula and rounding)."""
    x = _features(30, 5, 2)
    z = centered_normalized_features(x.float())
    assert z.dtype == torch.float64
    k = z @ z.T
    assert torch.equal(0.5 * (k + k.T), centered_cosine_kernel(x.float()))


def test_errors():
    x = _features(5, 3, 3)
    with pytest.raises(ValueError, match="shape"):
        centered_cosine_kernel(x.reshape(-1))
    with pytest.raises(ValueError, match="floating"):
        centered_cosine_kernel(torch.ones(4, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="zero-norm row"):
        bad = x.clone()
        bad[2] = 0
        kernel_frobenius_norm(bad)
    with pytest.raises(ValueError, match="empty"):
        centered_cosine_kernel(torch.zeros(0, 3))
    with pytest.raises(TypeError, match="torch.Tensor"):
        centered_cosine_kernel(np.ones((3, 3)))
