"""Exact minimum enclosing ball (MEB) of point sets, batched, polynomial in the number of points.

Problem (Liu et al., "Robustness of Vision Foundation Models to Common Perturbations", arXiv:2604.14973, §3.3.1,
eq. 10): ``min r s.t. ∃c: ‖p_i − c‖ ≤ r ∀i``. Its dual is the concave QP over the probability simplex

    max_λ f(λ) = Σ λ_i ‖p_i‖² − ‖Σ λ_i p_i‖²   (λ ≥ 0, Σλ = 1),   centre c(λ) = Σ λ_i p_i,

and f(λ) = Σ λ_i ‖p_i − c(λ)‖². **Certificate (weak duality).** For every feasible λ,
``f(λ) = min_x Σ λ_i ‖p_i − x‖² ≤ Σ λ_i ‖p_i − c*‖² ≤ r*²``, and for every centre c, ``max_j ‖p_j − c‖ ≥ r*``. So a
feasible λ brackets the optimum: ``f(λ) ≤ r*² ≤ R(λ)² := max_j ‖p_j − c(λ)‖²``; the returned radius is R(λ) (the
ball encloses every point) and the gap ``R² − f`` bounds its error: ``0 ≤ R − r* ≤ (R² − f) / (2R)``. The solver
returns only once ``R² − f ≤ CERT_RTOL · R²`` for every set (by KKT this is the case exactly when the support
points, λ_i > 0, lie on the sphere and all other points inside it).

Algorithm (all sets of a batch at once, fixed shapes, float64):

1. *Interior point.* A primal-dual path-following method with Mehrotra's predictor-corrector on the QP above
   (``min λᵀGλ − dᵀλ``; one Cholesky solve of the n×n matrix 2G + diag(z/λ) per step), from the centre of the
   simplex to a duality gap λᵀz of ``_IPM_EARLY_GAP`` (~10 steps, independent of the support size), continued
   to ``_IPM_GAP`` for the sets whose step 2 fails the certificate.
2. *Exact polish.* The support S = {i: λ_i > z_i} (strict complementarity) is read off and the KKT system of S —
   equal distances to c for i ∈ S, c ∈ aff(S): ``2 G_SS λ_S + μ·1 = diag(G)_S, Σ λ_S = 1`` — is solved for the
   correction to the interior-point λ (two steps of iterative refinement; a minimum-norm pseudo-inverse solve where
   S is affinely dependent, e.g. the 8 vertices of a cube, whose λ is not unique).
3. *Active set.* Sets whose polished λ is not certified (a support point misread near a tie) continue with the
   primal active-set method on the same KKT systems: move towards the solution on S (along a null ray of f when S
   is affinely dependent), drop a point whose weight reaches 0, add the farthest point when the solution on S is
   feasible but does not enclose it; each step does not decrease f, and the loop ends with the certificate (or, after
   4n + 20 steps, a RuntimeError asking for the input: never a silent uncertified ball).

Everything after the Gram matrix (and the centre c = Σ λ_i q_i) is D-independent: distances are the expansion
‖q_j − c‖² = G_jj − 2(Gλ)_j + λᵀGλ (rounding bound in :func:`_certificate`). Points are centred at the set's first
point (which removes the common offset of points clustered on the unit sphere; identical points become exact zeros,
radius exactly 0).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from ..utils.checks import check_int
from ..utils.numerics import pow2_exponent, times_pow2

__all__ = ["minimum_enclosing_ball", "meb_radius_from_gram"]

F64 = torch.float64

#: Certificate: R² − f(λ) ≤ CERT_RTOL·R² for every set, i.e. the returned radius exceeds the exact one by at most
#: CERT_RTOL/2 relative, plus the rounding of the distances (≤ 6(D + 2n + 4)·u relative worst case, :func:`_certificate`;
#: ~1e-15 measured)
CERT_RTOL = 1e-12
#: interior-point stopping level of the duality gap λᵀz (problem scaled so that max_i G_ii = 1, hence r*² ∈ [1/4, 1]):
#: an inactive point at squared distance r*² − δ gets z_i ≈ δ and λ_i ≈ λᵀz / δ, so S = {λ_i > z_i} is the support
#: unless some point lies within ~1e-7 (relative, in r²) of the sphere — then the active-set step 3 fixes S.
#: Random unit vectors in R^512 (n = 1000) put hundreds of points that close, which 1e-11 misreads; the steps from
#: 1e-11 to 1e-14 cost ~3 more Cholesky solves.
_IPM_GAP = 1e-14
#: first reading of S at this gap (~4 steps fewer): certified sets stop there, the others continue to _IPM_GAP
_IPM_EARLY_GAP = 1e-9
#: stationarity/feasibility residual level (rounding of Qλ is ~n·u ≈ 2e-13 at n = 1000; the polish removes the rest)
_IPM_RES = 1e-12
_IPM_MAX_STEPS = 80


def _check_points(points: object, name: str = "points") -> Tensor:
    if not isinstance(points, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (..., n, D), got {type(points).__name__}")
    if points.dim() < 2:
        raise ValueError(
            f"{name} must have shape (..., n, D) (n points of dimension D), got {tuple(points.shape)}; "
            "a single point set of shape (D,) needs points[None]"
        )
    if points.shape[-2] < 1 or points.shape[-1] < 1:
        raise ValueError(f"{name} must hold at least one point of dimension >= 1, got shape {tuple(points.shape)}")
    if points.is_complex() or points.dtype == torch.bool:
        raise TypeError(f"{name} must be a real-valued tensor, got dtype {points.dtype}")
    # one pass without a temporary: the sum of finite values is finite unless it overflows (then counted exactly)
    if points.numel() and not bool(torch.isfinite(points.sum())) and not bool(torch.isfinite(points).all()):
        bad = int((~torch.isfinite(points)).sum())
        raise ValueError(
            f"{name} contain {bad} non-finite (NaN or inf) value(s); the enclosing ball of non-finite points is "
            "undefined: check the feature function (e.g. NaN pixels or a diverged backbone)"
        )
    return points


#: |coordinates| in [2^-250, 2^250]: squared distances (<= 4·D·2^500) and Gram entries stay far inside float64's
#: normal range, so rescaling (exact, but a pass over the points) is skipped; it would change no bit of the result
#: (power-of-two scaling commutes with rounding in the normal range)
SAFE_EXPONENT = 250


def _check_limit(value: object, name: str, minimum: int) -> None:
    """The deprecated solver options ``max_enumerate``/``max_support``: validated, then a FutureWarning (no effect)."""
    if value is None:
        return
    fix = "it is deprecated and has no effect (the solver handles any support size): drop the argument"
    check_int(value, name, minimum, fix=fix)
    warnings.warn(
        f"minimum_enclosing_ball: {name} is deprecated and has no effect (the exact solver is polynomial in the "
        "support size, with no enumeration limit); drop the argument",
        FutureWarning,
        stacklevel=3,
    )


def _chol_solve(L: Tensor, rhs: Tensor) -> Tensor:
    """(L Lᵀ)⁻¹ rhs for a batched lower Cholesky factor L (B, n, n) and rhs (B, n, k): two triangular solves."""
    y = torch.linalg.solve_triangular(L, rhs, upper=False)
    return torch.linalg.solve_triangular(L.transpose(1, 2), y, upper=True)


def _newton_step(
    m_inv_h: Tensor, m_one: Tensor, r_p: Tensor, r_c: Tensor, lam: Tensor, z: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """(Δλ, Δz, Δν) of the interior-point Newton system, given M⁻¹h (h = −r_d + r_c/λ) and M⁻¹·1, M = Q + Z/Λ.

    Eliminating Δz = (r_c − zΔλ)/λ leaves M Δλ − Δν·1 = h, 1ᵀΔλ = −r_p, so Δλ = M⁻¹h + Δν M⁻¹1.
    """
    d_nu = (-r_p - m_inv_h.sum(-1, keepdim=True)) / m_one.sum(-1, keepdim=True)
    d_lam = m_inv_h + d_nu * m_one
    return d_lam, (r_c - z * d_lam) / lam, d_nu


def _max_step(x: Tensor, dx: Tensor) -> Tensor:
    """The largest t in [0, 1] with x + t·dx >= 0 (x > 0), per set (B, 1)."""
    ratio = torch.where(dx < 0, -x / dx, torch.full_like(x, float("inf")))
    return ratio.amin(-1, keepdim=True).clamp(max=1.0)


def _ipm(G: Tensor, d: Tensor, gap: float, state: tuple[Tensor, ...] | None = None) -> tuple[Tensor, ...]:
    """Interior point for ``min λᵀGλ − dᵀλ`` over the simplex (G (B, n, n) PSD scaled to max d = 1) down to the
    duality gap λᵀz <= ``gap``, from ``state`` = (λ, z, ν) of an earlier call or the simplex's centre: (λ, z, ν).

    Mehrotra predictor-corrector: KKT ``Qλ − d − ν·1 − z = 0`` (Q = 2G), ``1ᵀλ = 1``, ``λ∘z = 0``, λ, z >= 0.
    """
    B, n, _ = G.shape
    Q = 2.0 * G
    if state is None:  # the centre of the simplex, unit slacks
        lam = torch.full((B, n), 1.0 / n, dtype=G.dtype, device=G.device)
        state = (lam, torch.ones_like(lam), torch.zeros(B, 1, dtype=G.dtype, device=G.device))
    lam, z, nu = state
    eye = torch.eye(n, dtype=G.dtype, device=G.device)
    active = torch.ones(B, dtype=torch.bool, device=G.device)
    for _ in range(_IPM_MAX_STEPS):
        r_d = (Q @ lam[..., None])[..., 0] - d - nu - z
        r_p = lam.sum(-1, keepdim=True) - 1.0
        mu = (lam * z).mean(-1, keepdim=True)
        active &= ~((mu[:, 0] * n <= gap) & (r_d.abs().amax(-1) <= _IPM_RES) & (r_p[:, 0].abs() <= _IPM_RES))
        if not bool(active.any()):
            break
        L, info = torch.linalg.cholesky_ex(Q + eye * (z / lam)[:, None, :])
        active &= info == 0  # numerically singular: stop this set here (the polish and the certificate decide)
        L = torch.where(active[:, None, None], L, eye)
        r_c = -lam * z  # predictor (affine scaling); one solve for it and for M⁻¹·1
        both = _chol_solve(L, torch.stack([-r_d + r_c / lam, torch.ones_like(lam)], -1))
        m_one = both[..., 1]
        dl, dz, _ = _newton_step(both[..., 0], m_one, r_p, r_c, lam, z)
        a_aff = torch.minimum(_max_step(lam, dl), _max_step(z, dz))
        sigma = (((lam + a_aff * dl) * (z + a_aff * dz)).mean(-1, keepdim=True) / mu) ** 3
        r_c = sigma * mu - lam * z - dl * dz  # corrector
        m_inv_h = _chol_solve(L, (-r_d + r_c / lam)[..., None])[..., 0]
        dl, dz, dn = _newton_step(m_inv_h, m_one, r_p, r_c, lam, z)
        alpha = 0.99 * torch.minimum(_max_step(lam, dl), _max_step(z, dz))
        alpha = torch.where(active[:, None], alpha, torch.zeros_like(alpha))
        lam, z, nu = lam + alpha * dl, z + alpha * dz, nu + alpha * dn
    return lam, z, nu


def _solve_on_support(G: Tensor, d: Tensor, lam0: Tensor, S: Tensor) -> Tensor:
    """λ solving the KKT system of the support mask S (B, n) (λ = 0 off S), as a correction of ``lam0``.

    Rows i ∈ S: ``2 (Gλ)_i + μ = d_i``, ``Σ λ = 1``; rows i ∉ S: ``λ_i = 0``. Adding 1 to every G_ij of the S block
    changes only μ (by 2, as Σλ = 1) and makes the block A = 2(G_SS + 11ᵀ) positive definite exactly when S is
    affinely independent (vᵀ(G + 11ᵀ)v = ‖Σ v_i q_i‖² + (Σ v_i)²), so A is Cholesky-factored (batched LU/solve of
    torch 2.14's CPU build returns invalid pivots for batches of n >= 200) and the border eliminated; two steps of
    iterative refinement follow. Sets whose Cholesky fails (S affinely dependent, e.g. the 8 vertices of a cube,
    whose λ is not unique) or whose correction is non-finite take the pseudo-inverse's minimum-norm correction.
    """
    B, n, _ = G.shape
    Sf = S.to(G.dtype)
    A = 2.0 * (G + 1.0) * Sf[:, :, None] * Sf[:, None, :] + torch.diag_embed(1.0 - Sf)
    K = torch.zeros(B, n + 1, n + 1, dtype=G.dtype, device=G.device)
    K[:, :n, :n] = A
    K[:, :n, n] = Sf
    K[:, n, :n] = Sf
    rhs = torch.cat([d * Sf, torch.ones(B, 1, dtype=G.dtype, device=G.device)], -1)
    x = torch.cat([lam0 * Sf, torch.zeros(B, 1, dtype=G.dtype, device=G.device)], -1)
    x[:, n] = ((d - (A @ x[:, :n, None])[..., 0]) * Sf).sum(-1) / Sf.sum(-1).clamp_min(1.0)
    L, info = torch.linalg.cholesky_ex(A)
    bad = info != 0
    L = torch.where(bad[:, None, None], torch.eye(n, dtype=G.dtype, device=G.device), L)
    a_s = _chol_solve(L, Sf[..., None])[..., 0]  # A⁻¹s
    pinv = None
    for _ in range(3):  # one solve and two refinement steps (the residual is recomputed in float64)
        res = rhs - (K @ x[..., None])[..., 0]
        a_r = _chol_solve(L, res[:, :n, None])[..., 0]
        m = ((Sf * a_r).sum(-1, keepdim=True) - res[:, n:]) / (Sf * a_s).sum(-1, keepdim=True)
        delta = torch.cat([a_r - m * a_s, m], -1)
        bad = bad | ~torch.isfinite(delta).all(-1)
        if bool(bad.any()):
            if pinv is None:
                pinv = torch.linalg.pinv(K[bad])  # SVD (MKL's symmetric eigh with vectors is ~10x slower here)
            delta = delta.clone()
            delta[bad] = (pinv @ res[bad][..., None])[..., 0]
        x = x + delta
    return x[:, :n]


def _certificate(G: Tensor, d: Tensor, lam: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """For feasible λ (B, n): (d² (B, n), R² (B,), gap R² − f (B,)) from the Gram matrix G (B, n, n), d = diag(G).

    d²_j = ‖q_j − c‖² = G_jj − 2(Gλ)_j + λᵀGλ: O(n²) per set, independent of D. Rounding: G's entries carry
    ≤ D·u·max_i G_ii (the Gram product) and the expansion adds ≤ (2n + 4)·u·max_i G_ii (λ >= 0, Σλ = 1, |G_ij| <=
    max_i G_ii); with points centred at a point of the set, max_i G_ii <= (2r*)², so d² is off by at most
    4(D + 2n + 4)·u·r*² (worst case; ~√(D + n)·u in practice).
    """
    Gl = (G @ lam[..., None])[..., 0]
    d2 = (d - 2.0 * Gl + (Gl * lam).sum(-1, keepdim=True)).clamp_min(0.0)
    R2 = d2.amax(-1)
    return d2, R2, R2 - (lam * d2).sum(-1)


def _feasible(lam: Tensor) -> Tensor:
    """λ projected onto the simplex by dropping negative weights (tiny ones after a polish) and renormalising."""
    lam = lam.clamp_min(0.0)
    return lam / lam.sum(-1, keepdim=True)


def _relative_gap(cert: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]], lam: Tensor) -> Tensor:
    _, R2, gap = cert(lam)
    return torch.where(R2 > 0, gap / R2, torch.zeros_like(R2))


def _polish(G: Tensor, d: Tensor, state: tuple[Tensor, ...], cert: Callable) -> Tensor:
    """The feasible λ with the smaller certified gap: the interior point's or its exact polish on S = {λ_i > z_i}."""
    lam_ipm, z, _ = state
    polished = _feasible(_solve_on_support(G, d, lam_ipm, lam_ipm > z))
    ipm = _feasible(lam_ipm)
    return torch.where((_relative_gap(cert, ipm) < _relative_gap(cert, polished))[:, None], ipm, polished)


def _solve(q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Certified MEB of centred point sets q (B, n, D): (λ (B, n), centre (B, D), radius (B,))."""
    B, n, _ = q.shape
    G = q @ q.transpose(1, 2)
    d = torch.diagonal(G, dim1=-2, dim2=-1)
    scale = d.amax(-1)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # all points identical: radius 0, any λ
    Gs, ds = G / scale[:, None, None], d / scale[:, None]
    cert = partial(_certificate, Gs, ds)
    if n == 1:
        lam = torch.ones(B, 1, dtype=q.dtype, device=q.device)
    else:
        state = _ipm(Gs, ds, _IPM_EARLY_GAP)
        lam = _polish(Gs, ds, state, cert)
        late = _relative_gap(cert, lam) > CERT_RTOL
        if bool(late.any()):  # a support point misread at the early gap: continue these sets, read S again
            state = _ipm(Gs[late], ds[late], _IPM_GAP, tuple(x[late] for x in state))
            lam[late] = _polish(Gs[late], ds[late], state, partial(_certificate, Gs[late], ds[late]))
        lam = _active_set(Gs, ds, lam, cert, CERT_RTOL)
    _, R2, _ = _certificate(G, d, lam)  # unscaled: the radius in the points' units
    return lam, (lam[:, None, :] @ q)[:, 0], R2.sqrt()


def _ascent_ray(G: Tensor, d: Tensor, lam: Tensor, S: Tensor, target: Tensor) -> Tensor:
    """``target`` where S is affinely independent; elsewhere a point beyond the first zero weight along a null ray.

    For affinely dependent S the KKT system of S has no solution unless S is co-spherical (f is linear along the
    null directions v of G + 11ᵀ on S: Σ v_i = 0, Σ v_i q_i = 0, slope vᵀ(d − 2Gλ)). The ray λ + t·v with the
    non-negative slope does not decrease f and, as Σ v_i = 0, meets a zero weight; the returned point lies at twice
    that distance, so the caller's blocking step stops at the zero and drops that point.
    """
    B, n, _ = G.shape
    Sf = S.to(G.dtype)
    mask = Sf[:, :, None] * Sf[:, None, :]
    # off S a diagonal above the S block's largest eigenvalue (<= 2n, as |G_ij| <= 1): the smallest one lives on S
    M = (G + 1.0) * mask + torch.diag_embed((1.0 - Sf) * (2.0 * n + 1.0))
    L, info = torch.linalg.cholesky_ex(M)
    # numerically dependent too: a pivot L_ii² below 1e-10 of the largest (rounding alone leaves ~n·u ≈ 1e-14 on an
    # exactly dependent S; the KKT solve of such an S would amplify rounding by > 1e10 anyway)
    pivots = torch.diagonal(L, dim1=-2, dim2=-1).square()
    dep = (info != 0) | ~(pivots.amin(-1) > 1e-10 * pivots.amax(-1))
    if not bool(dep.any()):
        return target
    v = torch.linalg.svd(M[dep])[2][:, -1, :] * Sf[dep]  # right singular vector of the smallest singular value
    slope = (v * (d[dep] - 2.0 * (G[dep] @ lam[dep][..., None])[..., 0])).sum(-1, keepdim=True)
    v = torch.where(slope < 0, -v, v)
    t = torch.where(v < 0, lam[dep] / -v, torch.full_like(v, float("inf"))).amin(-1, keepdim=True)
    target = target.clone()
    target[dep] = lam[dep] + 2.0 * t * v
    return target


def _active_set(
    G: Tensor, d: Tensor, lam: Tensor, cert: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]], rtol: float
) -> Tensor:
    """Primal active-set iterations from feasible λ until every set's relative gap (``cert``) is <= ``rtol``."""
    B, n, _ = G.shape
    for _ in range(4 * n + 20):
        todo = _relative_gap(cert, lam) > rtol
        if not bool(todo.any()):
            return lam
        S = lam > 0
        target = _ascent_ray(G, d, lam, S, _solve_on_support(G, d, lam, S))
        neg = S & (target < 0)
        # blocking step: the largest t in [0, 1] keeping λ + t (target − λ) >= 0; the blocking point leaves S
        ratio = torch.where(neg, lam / (lam - target), torch.full_like(lam, float("inf")))
        t, block = ratio.min(-1)
        moved = lam + t.clamp(max=1.0)[:, None] * (target - lam)
        blocked = neg.any(-1, keepdim=True) & (torch.arange(n, device=G.device) == block[:, None])
        moved = _feasible(torch.where(S & ~blocked, moved, torch.zeros_like(moved)))
        # no blocking point: λ solves S; the farthest point enters S with a weight of 1e-300 (any positive one)
        d2, _, _ = cert(moved)
        enters = ~neg.any(-1, keepdim=True) & (torch.arange(n, device=G.device) == d2.argmax(-1, keepdim=True))
        moved = torch.where(enters & (moved == 0), torch.full_like(moved, 1e-300), moved)
        lam = torch.where(todo[:, None], moved, lam)
    worst = float(_relative_gap(cert, lam).max())
    raise RuntimeError(
        f"minimum_enclosing_ball: the active-set iteration ended without a certificate (relative duality gap "
        f"{worst:.1e} > {rtol:.0e}); please report this input (shape {tuple(G.shape)})"
    )


def meb_radius_from_gram(
    G: Tensor, max_enumerate: int | None = None, max_support: int | None = None
) -> tuple[Tensor, Tensor]:
    """Deprecated entry point kept for compatibility: the certified MEB of points with Gram matrices G (B, n, n).

    The points are recovered as q = V·diag(√w) from the eigendecomposition G = V diag(w) Vᵀ (rank ≤ n, exact up to
    rounding); returns (λ (B, n) barycentric weights of the centre, radius (B,)). Prefer ``minimum_enclosing_ball``.
    """
    _check_limit(max_enumerate, "max_enumerate", 1)
    _check_limit(max_support, "max_support", 2)
    w, V = torch.linalg.eigh(G.to(F64))
    q = V * w.clamp_min(0.0).sqrt()[:, None, :]
    lam, _, radius = _solve(q - q[:, :1])
    return lam, radius


def minimum_enclosing_ball(
    points: Tensor, *, max_enumerate: int | None = None, max_support: int | None = None
) -> tuple[Tensor, Tensor]:
    """Exact minimum enclosing ball of each point set: ``points`` (..., n, D) -> (centre (..., D), radius (...)).

    Solved in float64 (results are returned in the input's floating dtype, float64 for integer input), on each set
    divided by the power of two 2^e of its largest |coordinate| (exact) and scaled back, so finite float64 input at
    any scale (1e-200 or 1e200, where squared distances would under/overflow) gets its exact ball. One point
    gives its own ball of radius 0; identical or duplicated points are fine (radius 0 when all coincide, never NaN).
    Any number of points and any support size (e.g. all 64 vertices of a regular simplex in R^1024): cost one Gram
    matrix (O(n²D)) and ~10–20 batched n×n Cholesky solves (O(n³)); the returned ball encloses every point and its
    radius exceeds the exact one by at most ``CERT_RTOL``/2 = 5e-13 relative plus rounding (duality-gap certificate,
    module docstring). ``max_enumerate`` and ``max_support`` are deprecated no-ops (FutureWarning).
    """
    points = _check_points(points)
    _check_limit(max_enumerate, "max_enumerate", 1)
    _check_limit(max_support, "max_support", 2)
    out_dtype = points.dtype if points.is_floating_point() else F64
    *batch, n, D = points.shape
    p = points.reshape(-1, n, D).to(F64)
    if p.shape[0] == 0:
        return points.new_zeros(*batch, D, dtype=out_dtype), points.new_zeros(*batch, dtype=out_dtype)
    largest = torch.maximum(p.amax((1, 2), keepdim=True), -p.amin((1, 2), keepdim=True))  # max |p|, no temporary
    e = pow2_exponent(largest, (1, 2))  # (B, 1, 1)
    if bool((e.abs() > SAFE_EXPONENT).any()):  # else squared distances neither overflow nor underflow: no pass
        p = times_pow2(p, -e)
    else:
        e = torch.zeros_like(e)
    anchor = p[:, :1]
    q = p - anchor
    _, center, radius = _solve(q)
    center = times_pow2(center + anchor[:, 0], e[:, 0])
    radius = times_pow2(radius, e[:, 0, 0])  # e = 0 (factors 1) on the fast path
    return center.reshape(*batch, D).to(out_dtype), radius.reshape(batch).to(out_dtype)
