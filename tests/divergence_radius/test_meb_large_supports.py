"""minimum_enclosing_ball on large supports (the old subset enumeration refused supports of more than 13 points):
closed forms (regular simplices, points on a known sphere) and an independent KKT check (scipy NNLS) up to n = 1000.

Tolerance (derived once, used throughout): the solver returns R = max_j ‖p_j − c‖ with a duality-gap certificate
R² − f(λ) <= CERT_RTOL·R² (src/divergence_radius/meb.py), so R <= r*(1 + CERT_RTOL/2) in exact arithmetic. The squared
distances come from the Gram expansion, each off by at most 4(D + 2n + 4)·u·r*² (worst case; the Gram product adds
D·u, the expansion (2n + 4)·u, max G_ii <= (2r*)²), which moves R and f by that much: relative radius error
<= CERT_RTOL/2 + 6(D + 2n + 4)·u (u = 2^-53), i.e. ~1.3e-12 for D = 1024, n = 64 and ~1.4e-12 for D = 512, n = 1000.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from src.divergence_radius import divergence_radius, minimum_enclosing_ball
from src.divergence_radius.meb import CERT_RTOL
from tests.divergence_radius.reference_meb import kkt_lower_bound, welzl_meb

F64 = torch.float64
U = 2.0**-53


def radius_rtol(n: int, D: int) -> float:
    """The module docstring's bound on the relative radius error."""
    return CERT_RTOL / 2 + 6 * (D + 2 * n + 4) * U


def regular_simplex(k: int, D: int, seed: int) -> torch.Tensor:
    """The k unit basis vectors of R^k rotated into R^D (orthonormal columns), times 3, shifted: circumradius
    3·sqrt(1 − 1/k), centre 3/k·Σ rotated basis vectors + shift."""
    g = torch.Generator().manual_seed(seed)
    rot, _ = torch.linalg.qr(torch.randn(D, k, generator=g, dtype=F64))
    return 3.0 * rot.T + torch.randn(D, generator=g, dtype=F64)


@pytest.mark.parametrize(("k", "D"), [(33, 512), (64, 1024), (33, 1024), (64, 512)])
def test_regular_simplex_support_of_33_and_64_points(k: int, D: int) -> None:
    pts = regular_simplex(k, D, seed=k + D)
    c, r = minimum_enclosing_ball(pts)
    exact = 3.0 * math.sqrt(1.0 - 1.0 / k)
    # before: ValueError "support of more than 13 points"; tolerance: module docstring (+ the rounding of the
    # rotated vertices themselves, ~√D·u relative, inside the bound's D·u)
    assert abs(float(r) - exact) <= radius_rtol(k, D) * exact, (float(r), exact)
    centre = pts.mean(0)  # the simplex's circumcentre is its centroid
    assert float((c - centre).norm()) <= 1e-12 * exact  # the centre is sqrt(2·R·|R − r*|)-accurate at worst


def antipodal_sphere(pairs: int, D: int, radius: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """2·pairs points on the sphere of ``radius`` around a random centre c0, in antipodal pairs (c0 is the midpoint
    of each pair, hence in their convex hull: the MEB is that sphere; its support is affinely dependent)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(pairs, D, generator=g, dtype=F64)
    u = u / u.norm(dim=-1, keepdim=True)
    c0 = 4.0 * torch.randn(D, generator=g, dtype=F64)
    return torch.cat([c0 + radius * u, c0 - radius * u]), c0


@pytest.mark.parametrize(("pairs", "D"), [(32, 512), (16, 1024), (500, 3), (4, 2)])
def test_points_on_a_known_sphere(pairs: int, D: int) -> None:
    pts, c0 = antipodal_sphere(pairs, D, radius=2.0, seed=pairs + D)
    c, r = minimum_enclosing_ball(pts)
    # the points sit on the sphere up to the rounding of c0 ± 2u (|c0| ~ 4√D): relative ~ 4√D·u / 2, inside
    # radius_rtol's D·u term; n = 1000 points in R^3 (a support of ~1000 affinely dependent points) included
    assert abs(float(r) - 2.0) <= radius_rtol(2 * pairs, D) * 2.0 + 8 * math.sqrt(D) * U * float(c0.abs().max())
    assert float((c - c0).norm()) <= 1e-5  # √(2·R·ΔR) with ΔR <= 1e-11: the centre is far less sensitive in practice


@pytest.mark.parametrize(("n", "D", "unit"), [(33, 512, True), (64, 1024, True), (1000, 512, False), (300, 8, False)])
def test_random_sets_pass_an_independent_kkt_check(n: int, D: int, unit: bool) -> None:
    """Random Gaussian sets (supports of tens to hundreds of points): the returned centre lies in the convex hull of
    the points on its sphere (scipy NNLS), so weak duality brackets r* within ~1e-12."""
    p = torch.randn(n, D, generator=torch.Generator().manual_seed(n + D), dtype=F64)
    if unit:
        p = p / p.norm(dim=-1, keepdim=True)
    c, r = minimum_enclosing_ball(p)
    r_lo, r_up = kkt_lower_bound(p.numpy(), c.numpy())
    # r_up = max distance from c recomputed in numpy: equals r up to the distances' rounding (radius_rtol's term);
    # r_lo <= r* <= r_up, and r_lo is short of r_up by the NNLS check's sphere threshold 1e-13 plus the same rounding
    tol = radius_rtol(n, D)
    assert abs(float(r) - r_up) <= tol * r_up
    assert r_up - r_lo <= (tol + 1e-13) * r_up, (r_up, r_lo, (r_up - r_lo) / r_up)


def test_many_points_low_dimension_match_welzl() -> None:
    """n = 400 points in R^4 (a small support among many points) against Welzl's recursion."""
    p = torch.randn(2, 400, 4, generator=torch.Generator().manual_seed(7), dtype=F64)
    _, r = minimum_enclosing_ball(p)
    for i in range(2):
        _, r_ref, _ = welzl_meb(p[i].numpy(), seed=i)
        # Welzl's own containment slack is 1e-12·r (reference_meb.py), plus the certificate bound
        assert abs(float(r[i]) - r_ref) <= (radius_rtol(400, 4) + 1e-12) * r_ref


def test_large_isotropic_support_is_solved() -> None:
    """30 points spread isotropically in 100-d have a support of ~all 30 points (before: ValueError)."""
    pts = torch.randn(3, 30, 100, generator=torch.Generator().manual_seed(0), dtype=F64)
    c, r = minimum_enclosing_ball(pts)
    for i in range(3):
        r_lo, r_up = kkt_lower_bound(pts[i].numpy(), c[i].numpy())
        assert r_up - r_lo <= (radius_rtol(30, 100) + 1e-13) * r_up and abs(float(r[i]) - r_up) <= 1e-12 * r_up


def test_divergence_radius_of_many_perturbations_is_defined() -> None:
    """R_dr of 41 embeddings (m = 40) in 1280-d spread like unrelated images: no support limit any more."""
    z = torch.randn(2, 41, 1280, generator=torch.Generator().manual_seed(1), dtype=F64)
    r = divergence_radius(z)
    assert bool(((r > 0.5) & (r <= 1.0)).all())


def test_deprecated_limits_warn_and_change_nothing() -> None:
    pts = torch.randn(2, 20, 30, generator=torch.Generator().manual_seed(2), dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default call warns about nothing
        c, r = minimum_enclosing_ball(pts)
    with pytest.warns(FutureWarning, match="max_support is deprecated and has no effect.*drop the argument"):
        c2, r2 = minimum_enclosing_ball(pts, max_support=3)
    with pytest.warns(FutureWarning, match="max_enumerate is deprecated"):
        minimum_enclosing_ball(pts, max_enumerate=4)
    assert torch.equal(c, c2) and torch.equal(r, r2)


def test_kkt_check_rejects_a_wrong_centre() -> None:
    """The independent check is not vacuous: a centre off by 1e-6 leaves a visible gap."""
    p = torch.randn(40, 64, generator=torch.Generator().manual_seed(3), dtype=F64)
    c, _ = minimum_enclosing_ball(p)
    r_lo, r_up = kkt_lower_bound(p.numpy(), c.numpy() + 1e-6)
    assert r_up - r_lo > 1e-9 * r_up
    assert np.isfinite(r_lo)


def test_gram_entry_point_matches_the_points_entry_point() -> None:
    """meb_radius_from_gram (kept for compatibility) recovers points from G = QQᵀ by eigh: same radius."""
    from src.divergence_radius.meb import meb_radius_from_gram

    q = torch.randn(3, 12, 40, generator=torch.Generator().manual_seed(4), dtype=F64)
    q = q - q.mean(1, keepdim=True)
    lam, r = meb_radius_from_gram(q @ q.transpose(1, 2))
    _, r_ref = minimum_enclosing_ball(q)
    # eigh is backward stable: q'q'ᵀ = G + E with ‖E‖ ~ n·u·‖G‖ (no eigenvalue gap involved; negative rounding
    # eigenvalues clamped to 0 are of that size too), so r² moves by ~n²·u·max G_ii ≈ 3e-14 r²; 1e-10 is generous
    assert torch.allclose(r, r_ref, rtol=1e-10, atol=0) and torch.allclose(lam.sum(-1), torch.ones(3, dtype=F64))


def test_active_set_step_alone_reaches_the_certificate() -> None:
    """Step 3 (active set) from the worst start, uniform weights on all points (most must leave the support, and
    it must add points back), ends certified at Welzl's radius; normally it only repairs a misread support."""
    from src.divergence_radius.meb import _active_set, _certificate

    p = torch.randn(3, 25, 3, generator=torch.Generator().manual_seed(5), dtype=F64)
    q = p - p[:, :1]
    G = q @ q.transpose(1, 2)
    d = torch.diagonal(G, dim1=-2, dim2=-1)
    cert = lambda lam: _certificate(G, d, lam)  # noqa: E731
    lam = _active_set(G, d, torch.full((3, 25), 1 / 25, dtype=F64), cert, CERT_RTOL)
    _, R2, gap = cert(lam)
    assert bool((gap <= CERT_RTOL * R2).all()) and bool((lam >= 0).all())
    for i in range(3):
        _, r_ref, _ = welzl_meb(p[i].numpy(), seed=i)
        assert abs(float(R2[i].sqrt()) - r_ref) <= (radius_rtol(25, 3) + 1e-12) * r_ref  # Welzl's slack 1e-12
