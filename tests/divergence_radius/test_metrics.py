"""R_dr, R_cs, R_ed: the paper's five properties (§2), Fig. 1, Theorem 2 and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from src.divergence_radius import cosine_robustness, divergence_radius, euclidean_robustness

F64 = torch.float64
U = torch.finfo(F64).eps
# Values are O(1) functions of O(1) unit vectors computed with O(10) roundings (normalisation, Gram entries, one
# small solve of condition ≲ 1e3 for these sets): 1e3·u·κ-scale slack = 1e-10 is a generous c·κ·u bound.
TOL = 1e-10


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _orthogonal(D: int, seed: int) -> torch.Tensor:
    q, r = torch.linalg.qr(_rand(D, D, seed=seed))
    return q * torch.sign(torch.diagonal(r))


ALL = (divergence_radius, cosine_robustness, euclidean_robustness)


@pytest.mark.parametrize("fn", ALL)
def test_bounded_in_unit_interval(fn) -> None:
    z = _rand(50, 6, 16, seed=1) * _rand(50, 6, 1, seed=2).abs()  # arbitrary norms: normalised inside
    v = fn(z)
    assert v.shape == (50,) and bool(((v >= 0) & (v <= 1)).all())


@pytest.mark.parametrize("fn", ALL)
def test_monotone_when_points_are_added(fn) -> None:
    z = _rand(40, 9, 8, seed=3)
    for k in range(1, 9):
        assert bool((fn(z[:, : k + 1]) >= fn(z[:, :k]) - TOL).all())


@pytest.mark.parametrize("fn", ALL)
def test_best_robustness_identical_embeddings(fn) -> None:
    z = _rand(5, 1, 32, seed=4).expand(5, 6, 32) * torch.tensor([1.0, 2.0, 0.5, 3.0, 1.0, 7.0], dtype=F64)[:, None]
    v = fn(z)  # the same direction at different norms: identical after normalisation
    assert bool(torch.isfinite(v).all()) and float(v.abs().max()) <= TOL


def test_worst_robustness_when_a_subset_sums_to_zero() -> None:
    """k unit vectors of a centred regular simplex (sum 0) in a random rotation, plus extra points: R_dr = 1."""
    for k, D, extra in [(3, 2, 0), (3, 8, 2), (4, 10, 3), (6, 32, 1)]:
        e = torch.eye(k, dtype=F64) - 1.0 / k  # rows sum to 0 across rows
        e = e / e.norm(dim=1, keepdim=True)
        pts = torch.cat([e, torch.zeros(k, D - k, dtype=F64)], 1) if D >= k else e[:, :D]
        pts = pts @ _orthogonal(pts.shape[1], seed=k).T
        assert float(pts.sum(0).norm()) < 1e-12
        z = torch.cat([pts, _rand(extra, pts.shape[1], seed=D)])
        assert abs(float(divergence_radius(z)) - 1.0) <= TOL


def test_rotation_invariance() -> None:
    z = _rand(20, 6, 24, seed=5)
    q = _orthogonal(24, seed=6)
    for fn in ALL:
        assert torch.allclose(fn(z @ q.T), fn(z), atol=TOL, rtol=0)


def test_antipodal_pair_is_one() -> None:
    u = torch.nn.functional.normalize(_rand(7, seed=7), dim=0)
    z = torch.stack([u, -u])
    for fn in ALL:
        assert abs(float(fn(z)) - 1.0) <= TOL


def test_figure_1_three_vectors_at_120_degrees() -> None:
    a = torch.tensor([0.0, 2 * math.pi / 3, 4 * math.pi / 3], dtype=F64)
    z = torch.stack([a.cos(), a.sin()], -1)
    assert abs(float(divergence_radius(z)) - 1.0) <= TOL
    assert abs(float(cosine_robustness(z)) - 0.75) <= TOL  # (1 - cos 120°) / 2 = (1 + 1/2) / 2
    assert abs(float(euclidean_robustness(z)) - math.sqrt(0.75)) <= TOL


def test_theorem_2_euclidean_is_sqrt_of_cosine() -> None:
    """‖a − b‖² = 2 − 2cos(a, b) for unit a, b, so max‖a−b‖/2 = √((1 − min cos)/2): R_ed = √R_cs."""
    z = _rand(100, 6, 12, seed=8)
    r_cs, r_ed = cosine_robustness(z), euclidean_robustness(z)
    # |√x − √y| ≤ |x − y| / (2√y); R_cs here is ≥ 0.1, |x − y| ≤ TOL, so TOL / (2·√0.1) < 2·TOL
    assert float(r_cs.min()) > 0.1
    assert torch.allclose(r_ed, r_cs.sqrt(), atol=2 * TOL, rtol=0)


def test_divergence_radius_dominates_euclidean() -> None:
    """Any enclosing ball has diameter ≥ the largest pairwise distance, so R_dr ≥ R_ed."""
    z = _rand(30, 6, 10, seed=9)
    assert bool((divergence_radius(z) >= euclidean_robustness(z) - TOL).all())


def test_single_point_is_zero() -> None:
    z = _rand(4, 1, 5, seed=10)
    for fn in ALL:
        assert torch.equal(fn(z), torch.zeros(4, dtype=F64))


@pytest.mark.parametrize("fn", ALL)
def test_bad_input(fn) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        fn(torch.tensor([[1.0, 0.0], [float("inf"), 1.0]]))
    with pytest.raises(ValueError, match="all-zero"):
        fn(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"\(\.\.\., n, D\)"):
        fn(torch.ones(4))


def test_cosine_robustness_equals_the_cosine_formula() -> None:
    """Independent computation of eq. 6 from pairwise cosines (numpy)."""
    import numpy as np

    z = _rand(25, 6, 9, seed=11)
    zn = z.numpy() / np.linalg.norm(z.numpy(), axis=-1, keepdims=True)
    ref = (1 - np.einsum("bid,bjd->bij", zn, zn).min(axis=(1, 2))) / 2
    # both are O(1) with O(D) roundings: 1e3·u
    assert np.allclose(cosine_robustness(z).numpy(), ref, atol=1e3 * U, rtol=0)
