"""Exact minimum enclosing ball (MEB) of small point sets, batched.

Problem (Liu et al., "Robustness of Vision Foundation Models to Common Perturbations", arXiv:2604.14973, §3.3.1,
eq. 10): ``min r s.t. ∃c: ‖p_i − c‖ ≤ r ∀i``. Its dual is the concave QP over the simplex
``max_λ Σ λ_i ‖p_i‖² − ‖Σ λ_i p_i‖²`` (λ ≥ 0, Σλ = 1), with ``c = Σ λ_i p_i``; by KKT the support points
(λ_i > 0) all lie at distance r from c and c lies in their affine hull, i.e. **the MEB is the circumscribed ball of
its support set S\\*, centred in aff(S\\*)**, and |S\\*| ≤ min(n, D + 1).

Algorithm (exact, no tolerances in the selection):

1. *Candidates.* For every subset S of a working set W of points, the candidate centre c_S is the circumcentre of S
   in aff(S) (one small linear solve; a subset whose solve is singular is skipped, and an affinely dependent one
   gets a meaningless but harmless centre). The candidate radius is ``ρ_S = max_{j ∈ W} ‖p_j − c_S‖``, which makes every candidate an
   *enclosing* ball of W. Hence ``min_S ρ_S ≥ MEB(W)``, with equality for S = S\\*(W): the minimum over all subsets
   is the MEB of W exactly (up to the rounding of the centre's solve), whatever the conditioning of the other
   subsets.
2. *Working set.* For n ≤ ``max_enumerate`` points W is all points (one enumeration, 2^n − 1 subsets). For larger n
   it starts with a farthest-point traversal and grows: if the farthest point j lies outside MEB(W) then
   W ← S\\*(W) ∪ {j}. MEB(S\\*(W) ∪ {j}) is strictly larger than MEB(W) = MEB(S\\*(W)) (the MEB is unique and j is
   outside it), so no working set repeats and the loop terminates; at the end every point lies within
   ``(1 + 1e-12)·r_W`` of c_W and the returned radius, ``max_j ‖p_j − c_W‖``, is bracketed by
   ``r_W ≤ r* ≤ max_j ‖p_j − c_W‖ ≤ (1 + 1e-12) r_W``. Working sets are padded with duplicate points (which do not
   change an MEB) so that the whole batch is solved with one tensor shape.

Everything after the Gram matrix is D-independent: distances are ``‖p_j − c‖² = G_jj − 2(Gλ)_j + λᵀGλ`` with G the
Gram matrix of the centroid-centred points, in float64 (centring removes the common offset of points clustered on
the unit sphere, so the expansion cancels at the scale of the cloud's spread, not of its norm).
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import torch
from torch import Tensor

from ..utils.numerics import pow2_exponent, times_pow2

__all__ = ["minimum_enclosing_ball", "meb_radius_from_gram"]

F64 = torch.float64
_OUTSIDE_RTOL = 1e-12  # relative slack of the working-set stopping test (the bracket above)


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
    if points.numel() and not bool(torch.isfinite(points).all()):
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


def _check_limit(value: object, name: str, minimum: int) -> int:
    """An integer option of the solver (not a bool) that is at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__}); the defaults "
            "max_enumerate=10, max_support=14 suit every perturbation sweep"
        )
    return value


@lru_cache(maxsize=64)
def _subsets(w: int, k: int) -> Tensor:
    """All k-subsets of range(w) as a (C(w, k), k) int64 tensor (cached per (w, k))."""
    return torch.tensor(list(itertools.combinations(range(w), k)), dtype=torch.long).reshape(-1, k)


def _meb_of_working_set(G: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Exact MEB of each of B point sets given by their Gram matrices ``G`` (B, w, w) (centred coordinates).

    Returns (λ (B, w) barycentric weights of the centre, r² (B,), support mask (B, w) of the minimising subset).
    """
    B, w, _ = G.shape
    diag = torch.diagonal(G, dim1=-2, dim2=-1)  # (B, w)
    best_r2 = torch.full((B,), float("inf"), dtype=G.dtype, device=G.device)
    best_lam = torch.zeros(B, w, dtype=G.dtype, device=G.device)
    best_mask = torch.zeros(B, w, dtype=torch.bool, device=G.device)
    for k in range(1, w + 1):
        subs = _subsets(w, k).to(G.device)  # (C, k)
        C = subs.shape[0]
        lam = torch.zeros(B, C, w, dtype=G.dtype, device=G.device)
        if k == 1:
            lam[:, torch.arange(C, device=G.device), subs[:, 0]] = 1.0
        else:
            a0, rest = subs[:, 0], subs[:, 1:]  # anchor and the other k-1 points of each subset
            # Inner products of the edge vectors v_a = p_a − p_anchor: A_ab = G_ab − G_a0 − G_0b + G_00.
            g_ab = G[:, rest[:, :, None], rest[:, None, :]]  # (B, C, k-1, k-1)
            g_a0 = G[:, rest, a0[:, None]]  # (B, C, k-1)
            g_00 = G[:, a0, a0]  # (B, C)
            A = g_ab - g_a0[..., :, None] - g_a0[..., None, :] + g_00[..., None, None]
            # Circumcentre c = p_anchor + Σ β_a v_a with ‖c − p_a‖ = ‖c − p_anchor‖ ⇔ 2 A β = diag(A).
            rhs = 0.5 * torch.diagonal(A, dim1=-2, dim2=-1)
            # LU solve (a batched pseudo-inverse is ~10x slower on CPU). An affinely dependent subset gives a
            # singular or ill-conditioned A and a meaningless centre; its candidate radius is then large (or
            # non-finite, set to inf below) and loses the minimum. The minimising support S* of an MEB is affinely
            # independent, so its own solve is regular; identical points are covered by the 1-point subsets.
            beta, info = torch.linalg.solve_ex(A, rhs[..., None])
            beta = beta[..., 0]  # (B, C, k-1)
            bad = (info != 0) | ~torch.isfinite(beta).all(-1)
            beta = torch.where(bad[..., None], torch.zeros_like(beta), beta)
            idx = torch.arange(C, device=G.device)
            lam[:, idx, a0] = 1.0 - beta.sum(-1)
            lam.scatter_(2, rest.expand(B, C, k - 1), beta)
        # squared distances of every working point to each candidate centre: G_jj − 2 (Gλ)_j + λᵀGλ
        Gl = lam @ G  # (B, C, w)  (G symmetric)
        lGl = (Gl * lam).sum(-1, keepdim=True)
        d2 = (diag[:, None, :] - 2.0 * Gl + lGl).clamp_min(0.0)
        # Selection uses an upper bound: the expansion's rounding error is ≤ ~4u(1 + ‖λ‖₁)² max_i G_ii, which is
        # negligible for a true support (λ ≥ 0, ‖λ‖₁ = 1) but dominates for the wild centres of nearly affinely
        # dependent subsets, whose clamped distances could otherwise look like 0.
        slack = 8.0 * torch.finfo(G.dtype).eps * (1.0 + lam.abs().sum(-1)) ** 2 * diag.amax(-1)[:, None]
        r2 = d2.amax(-1) + slack  # (B, C): (upper bound of) the radius² of the candidate ball enclosing all of W
        if k > 1:
            r2 = torch.where(bad | ~torch.isfinite(r2), torch.full_like(r2, float("inf")), r2)
        r2_k, arg = r2.min(-1)
        better = r2_k < best_r2
        best_r2 = torch.where(better, r2_k, best_r2)
        lam_k = lam[torch.arange(B, device=G.device), arg]
        best_lam = torch.where(better[:, None], lam_k, best_lam)
        mask_k = torch.zeros(B, w, dtype=torch.bool, device=G.device)
        mask_k.scatter_(1, subs[arg], True)
        best_mask = torch.where(better[:, None], mask_k, best_mask)
    return best_lam, best_r2, best_mask


def _sq_dists_to(G: Tensor, lam: Tensor) -> Tensor:
    """‖p_j − c‖² for all j, c = Σ λ_i p_i (centred Gram G (B, n, n), λ (B, n))."""
    Gl = (G @ lam[..., None])[..., 0]
    return (torch.diagonal(G, dim1=-2, dim2=-1) - 2.0 * Gl + (Gl * lam).sum(-1, keepdim=True)).clamp_min(0.0)


def meb_radius_from_gram(G: Tensor, max_enumerate: int = 10, max_support: int = 14) -> tuple[Tensor, Tensor]:
    """Exact MEB from the Gram matrices ``G`` (B, n, n) of centred points: (λ (B, n), radius (B,)).

    ``λ`` are barycentric weights of the centre (c = Σ λ_i p_i); see the module docstring for the algorithm.
    ``max_enumerate`` >= 1: point sets up to this size are solved by one enumeration; ``max_support`` >= 2: the
    largest working set the iteration may need (a support of ``max_support`` − 1 points plus one outside point).
    """
    _check_limit(max_enumerate, "max_enumerate", 1)
    _check_limit(max_support, "max_support", 2)
    B, n, _ = G.shape
    if n <= max_enumerate:
        lam, _, _ = _meb_of_working_set(G)
        return lam, _sq_dists_to(G, lam).amax(-1).sqrt()
    dev = G.device
    rows = torch.arange(B, device=dev)
    # farthest-point traversal for the initial working set of size w0
    w = min(n, max(2, max_enumerate // 2))
    work = torch.zeros(B, w, dtype=torch.long, device=dev)
    diag = torch.diagonal(G, dim1=-2, dim2=-1)
    d2 = (diag - 2.0 * G[:, :, 0] + G[:, 0, 0][:, None]).clamp_min(0.0)  # distances to point 0
    for t in range(1, w):
        work[:, t] = d2.argmax(-1)
        j = work[:, t]
        dj = (diag - 2.0 * G[rows, :, j] + G[rows, j, j][:, None]).clamp_min(0.0)
        d2 = torch.minimum(d2, dj)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    lam_full = torch.zeros(B, n, dtype=G.dtype, device=dev)
    radius = torch.zeros(B, dtype=G.dtype, device=dev)
    for _ in range(4 * n + 4):  # every iteration strictly grows r_W; the bound is never reached in practice
        Gw = G[rows[:, None, None], work[:, :, None], work[:, None, :]]
        lam_w, r2_w, support = _meb_of_working_set(Gw)
        lam = torch.zeros(B, n, dtype=G.dtype, device=dev).scatter_add_(1, work, lam_w)
        d2_all = _sq_dists_to(G, lam)
        far2, far = d2_all.max(-1)
        finished = far2 <= r2_w * (1.0 + _OUTSIDE_RTOL) ** 2
        newly = finished & ~done
        lam_full = torch.where(newly[:, None], lam, lam_full)
        radius = torch.where(newly, far2.sqrt(), radius)
        done |= finished
        if bool(done.all()):
            return lam_full, radius
        # W ← S*(W) ∪ {farthest}; pad with duplicates of the farthest point; grow w when a support fills W
        n_support = support.sum(-1)
        need = int(n_support[~done].max()) + 1
        if need > max_support:
            raise ValueError(
                f"minimum_enclosing_ball: a point set has an enclosing-ball support of more than {max_support - 1} "
                f"points (of n = {n}); the subset enumeration would need 2^{need} solves. Use fewer points per set "
                "(e.g. a smaller m) or pass a larger max_support"
            )
        w_new = min(max(w, need), n)
        new = far[:, None].expand(B, w_new).clone()
        order = torch.argsort((~support).to(torch.int8), dim=1, stable=True)  # support positions first
        sup_idx = torch.gather(work, 1, order)
        keep = torch.arange(w, device=dev)[None, :] < n_support[:, None]
        new[:, :w] = torch.where(keep, sup_idx, far[:, None])
        # finished items keep a valid (unused) working set
        work = torch.where(done[:, None], new[:, :1].expand(B, w_new), new)
        w = w_new
    raise RuntimeError("minimum_enclosing_ball: working-set iteration did not converge (please report this input)")


def minimum_enclosing_ball(points: Tensor, *, max_enumerate: int = 10, max_support: int = 14) -> tuple[Tensor, Tensor]:
    """Exact minimum enclosing ball of each point set: ``points`` (..., n, D) -> (centre (..., D), radius (...)).

    Solved in float64 (results are returned in the input's floating dtype, float64 for integer input), on each set
    divided by the power of two 2^e of its largest |coordinate| (exact) and scaled back, so finite float64 input at
    any scale (1e-200 or 1e200, where squared distances would under/overflow) gets its exact ball. One point
    gives its own ball of radius 0; identical or duplicated points are fine (radius 0 when all coincide, never NaN).
    Cost: one Gram matrix (O(n²D)) plus an enumeration over the subsets of a working set of at most
    ``max_enumerate`` points (2^w − 1 tiny solves per set; the default 10 keeps it ~1k); larger n use the
    working-set iteration of the module docstring, which grows beyond ``max_enumerate`` only if the MEB's support
    itself is larger; a support of more than ``max_support − 1`` points (e.g. more than ~13 points spread
    isotropically in a high dimension, never the case for perturbation sweeps, whose supports have a few points)
    raises a ValueError rather than running for hours.
    """
    points = _check_points(points)
    _check_limit(max_enumerate, "max_enumerate", 1)
    _check_limit(max_support, "max_support", 2)
    out_dtype = points.dtype if points.is_floating_point() else F64
    *batch, n, D = points.shape
    p = points.reshape(-1, n, D).to(F64)
    if p.shape[0] == 0:
        return points.new_zeros(*batch, D, dtype=out_dtype), points.new_zeros(*batch, dtype=out_dtype)
    e = pow2_exponent(p, (1, 2))  # (B, 1, 1)
    if bool((e.abs() > SAFE_EXPONENT).any()):  # else squared distances neither overflow nor underflow: no pass
        p = times_pow2(p, -e)
    else:
        e = torch.zeros_like(e)
    mean = p.mean(1, keepdim=True)
    q = p - mean
    G = q @ q.transpose(1, 2)
    lam, radius = meb_radius_from_gram(G, max_enumerate=max_enumerate, max_support=max_support)
    center = times_pow2((lam[:, None, :] @ q)[:, 0] + mean[:, 0], e[:, 0])
    radius = times_pow2(radius, e[:, 0, 0])  # e = 0 (factors 1) on the fast path
    return center.reshape(*batch, D).to(out_dtype), radius.reshape(batch).to(out_dtype)
