"""minimum_enclosing_ball: closed forms, degenerate sets, and random clouds against an independent exact solver."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from src.divergence_radius import minimum_enclosing_ball
from tests.divergence_radius.reference_meb import welzl_meb

F64 = torch.float64
U = torch.finfo(F64).eps  # unit round-off of float64 (2.2e-16)


def test_two_points_closed_form() -> None:
    p = torch.tensor([[[1.0, 2.0, 3.0], [4.0, 6.0, 3.0]]], dtype=F64)
    c, r = minimum_enclosing_ball(p)
    # closed form: centre = midpoint, radius = |p1 - p0| / 2 = 5 / 2; a few roundings of numbers of size ~5
    assert torch.allclose(c, torch.tensor([[2.5, 4.0, 3.0]], dtype=F64), atol=16 * U * 5)
    assert abs(float(r) - 2.5) <= 16 * U * 5


def test_three_unit_vectors_at_120_degrees() -> None:
    a = torch.tensor([0.0, 2 * math.pi / 3, 4 * math.pi / 3], dtype=F64)
    p = torch.stack([a.cos(), a.sin()], -1)
    c, r = minimum_enclosing_ball(p)
    # circumcentre of the equilateral triangle inscribed in the unit circle: the origin, radius 1 (rounding of O(1))
    assert abs(float(r) - 1.0) <= 64 * U and float(c.norm()) <= 64 * U


def test_obtuse_triangle_uses_the_longest_side() -> None:
    p = torch.tensor([[0.0, 0.0], [4.0, 0.0], [2.0, 0.5]], dtype=F64)  # the apex is inside the diameter ball
    c, r = minimum_enclosing_ball(p)
    assert abs(float(r) - 2.0) <= 64 * U and torch.allclose(c, torch.tensor([2.0, 0.0], dtype=F64), atol=64 * U)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 10])
def test_standard_simplex_closed_form(n: int) -> None:
    # the n unit basis vectors of R^n: centre 1/n, radius sqrt(1 - 1/n); rotated into a higher dimension as well
    e = torch.eye(n, dtype=F64)
    q, _ = torch.linalg.qr(torch.randn(n + 7, n + 7, generator=torch.Generator().manual_seed(n), dtype=F64))
    for pts in (e, torch.cat([e, torch.zeros(n, 7, dtype=F64)], 1) @ q.T):
        c, r = minimum_enclosing_ball(pts)
        # condition number of the simplex edge Gram matrix is O(n); tolerance c·κ·u with κ ≤ n, c = 100
        assert abs(float(r) - math.sqrt(1 - 1 / n)) <= 100 * n * U
    assert torch.allclose(minimum_enclosing_ball(e)[0], torch.full((n,), 1 / n, dtype=F64), atol=100 * n * U)


def test_identical_and_duplicated_points() -> None:
    p = torch.full((2, 6, 5), 0.3, dtype=F64)
    c, r = minimum_enclosing_ball(p)
    assert torch.equal(r, torch.zeros(2, dtype=F64)) and torch.allclose(c, p[:, 0], atol=4 * U)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, generator=g, dtype=F64)
    dup = torch.cat([q, q, q[:1], q[2:3]])  # 10 points, only 3 distinct
    _, r_dup = minimum_enclosing_ball(dup)
    _, r_q = minimum_enclosing_ball(q)
    assert torch.isfinite(r_dup) and abs(float(r_dup - r_q)) <= 1e3 * U * float(q.abs().max())


def test_single_point_has_radius_zero() -> None:
    p = torch.tensor([[[1.0, -2.0]]])
    c, r = minimum_enclosing_ball(p)
    assert torch.equal(c, p[:, 0]) and torch.equal(r, torch.zeros(1))


def _support_condition(points: np.ndarray, support: list[int]) -> float:
    if len(support) < 2:
        return 1.0
    V = points[support[1:]] - points[support[0]]
    return float(np.linalg.cond(V @ V.T))


@pytest.mark.parametrize(("n", "D"), [(2, 1), (3, 2), (5, 3), (6, 1280), (8, 4), (10, 64), (12, 5)])
def test_random_clouds_match_welzl(n: int, D: int) -> None:
    g = torch.Generator().manual_seed(100 * n + D)
    pts = torch.randn(6, n, D, generator=g, dtype=F64)
    c, r = minimum_enclosing_ball(pts)
    for i in range(pts.shape[0]):
        p = pts[i].numpy()
        _, r_ref, support = welzl_meb(p, seed=i)
        kappa = _support_condition(p - p.mean(0), support)
        scale = float(np.abs(p - p.mean(0)).max())
        # Both radii are circumradii of the same support set solved in float64: each centre is off by at most
        # ~κ·u·scale (κ = condition number of the support's edge Gram matrix, computed here), and a radius is
        # 1-Lipschitz in the centre. c = 1e3 covers the Gram-matrix route (which squares the scale, not κ) and
        # Welzl's containment slack 1e-12·r.
        tol = 1e3 * kappa * U * scale + 2e-12 * r_ref
        assert abs(float(r[i]) - r_ref) <= tol, (i, float(r[i]), r_ref, tol)
        # the returned ball encloses every point (the radius is the max distance from the returned centre)
        assert float(((pts[i] - c[i]) ** 2).sum(-1).sqrt().max()) <= float(r[i]) * (1 + 1e-12) + 1e3 * U * scale


@pytest.mark.parametrize(("n", "D"), [(20, 3), (25, 2)])
def test_working_set_path_matches_welzl(n: int, D: int) -> None:
    """Many points, small supports (low D): the interior point must leave most points out of the support."""
    g = torch.Generator().manual_seed(n)
    pts = torch.randn(5, n, D, generator=g, dtype=F64)
    _, r = minimum_enclosing_ball(pts)
    for i in range(pts.shape[0]):
        p = pts[i].numpy()
        _, r_ref, support = welzl_meb(p, seed=i)
        kappa = _support_condition(p - p.mean(0), support)
        # as above, plus the certificate: the result is within (1 + 5e-13) of r* (src/divergence_radius/meb.py)
        tol = 1e3 * kappa * U * float(np.abs(p).max()) + 4e-12 * r_ref
        assert abs(float(r[i]) - r_ref) <= tol


def test_perturbation_like_curves_many_points() -> None:
    """21 points along a smooth curve on the unit sphere in 1280-d (a DivergenceRadius sweep with m = 20) against
    Welzl's recursion."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(4, 1, 1280, generator=g, dtype=F64)
    dirs = 0.02 * torch.randn(4, 2, 1280, generator=g, dtype=F64)
    t = torch.linspace(0, 1, 21, dtype=F64)[None, :, None]
    pts = base + t * dirs[:, :1] + t**2 * dirs[:, 1:] + 0.004 * torch.randn(4, 21, 1280, generator=g, dtype=F64)
    pts = pts / pts.norm(dim=-1, keepdim=True)
    _, r = minimum_enclosing_ball(pts)
    for i in range(4):
        _, r_ref, support = welzl_meb(pts[i].numpy(), seed=i)
        # radii ~0.03 of points of norm 1: centring makes the Gram entries O(spread²); tolerance as above
        assert abs(float(r[i]) - r_ref) <= 1e-10 * r_ref + 1e3 * U, (float(r[i]), r_ref, len(support))


def test_batch_shapes_and_dtypes() -> None:
    g = torch.Generator().manual_seed(0)
    pts = torch.randn(2, 3, 4, 5, generator=g)
    c, r = minimum_enclosing_ball(pts)
    assert c.shape == (2, 3, 5) and r.shape == (2, 3) and c.dtype == torch.float32 and r.dtype == torch.float32
    _, r_flat = minimum_enclosing_ball(pts.reshape(6, 4, 5).double())
    # float32 output of a float64 computation: relative rounding 2^-24
    assert torch.allclose(r.reshape(6).double(), r_flat, rtol=2 * 2**-24)


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        minimum_enclosing_ball(torch.tensor([[0.0, float("nan")], [1.0, 0.0]]))
    with pytest.raises(ValueError, match=r"\(\.\.\., n, D\)"):
        minimum_enclosing_ball(torch.ones(3))
    with pytest.raises(ValueError, match="at least one point"):
        minimum_enclosing_ball(torch.ones(2, 0, 3))
    with pytest.raises(TypeError, match="torch.Tensor"):
        minimum_enclosing_ball([[0.0, 1.0]])  # type: ignore[arg-type]
