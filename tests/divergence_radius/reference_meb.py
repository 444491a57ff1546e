"""An independent exact minimum-enclosing-ball solver for tests and benchmarks: Welzl's randomized recursion
(E. Welzl, "Smallest enclosing disks (balls and ellipsoids)", 1991) in numpy float64, with the boundary ball of a
set R computed as R's circumsphere in aff(R) by least squares. Exponential only in the support size, so fine for the
small point sets used here. Returns (centre, radius, support indices)."""

from __future__ import annotations

import numpy as np


def _circumsphere(P: np.ndarray, R: list[int]) -> tuple[np.ndarray | None, float]:
    if not R:
        return None, -1.0
    p0 = P[R[0]]
    if len(R) == 1:
        return p0.copy(), 0.0
    V = P[R[1:]] - p0  # (k-1, D)
    A = V @ V.T
    beta = np.linalg.lstsq(2.0 * A, np.diag(A), rcond=None)[0]
    c = p0 + beta @ V
    return c, float(np.sqrt(max(((P[R] - c) ** 2).sum(1).max(), 0.0)))


def welzl_meb(points: np.ndarray, seed: int = 0, rtol: float = 1e-12) -> tuple[np.ndarray, float, list[int]]:
    P = np.asarray(points, dtype=np.float64)
    order = list(np.random.default_rng(seed).permutation(len(P)))
    D = P.shape[1]

    def rec(idx: list[int], R: list[int]) -> tuple[np.ndarray | None, float, list[int]]:
        if not idx or len(R) == D + 1:
            c, r = _circumsphere(P, R)
            return c, r, R
        p, rest = idx[-1], idx[:-1]
        c, r, S = rec(rest, R)
        if c is not None and np.linalg.norm(P[p] - c) <= r * (1 + rtol) + 1e-300:
            return c, r, S
        return rec(rest, R + [p])

    c, r, S = rec(order, [])
    return c, r, S


def kkt_lower_bound(points: np.ndarray, centre: np.ndarray, on_sphere_rtol: float = 1e-13) -> tuple[float, float]:
    """An independent optimality check of a claimed MEB centre: (lower bound r_lo <= r*, upper bound r_up >= r*).

    r_up = max_j ‖p_j − c‖ (the claimed ball encloses every point). For the lower bound, the points T within
    ``on_sphere_rtol`` (relative) of that sphere are written as a convex combination λ >= 0 reproducing c, by
    scipy's non-negative least squares (Lawson–Hanson) on [p_i − c; w·1] λ ≈ [0; w]; then, for the normalised λ
    and c(λ) = Σ λ_i p_i, weak duality of the MEB gives r*² >= Σ λ_i ‖p_i − c(λ)‖² =: r_lo². If c is the MEB centre,
    c ∈ conv(T) (KKT), the NNLS residual is ~0 and r_lo = r_up up to ``on_sphere_rtol`` and rounding; any other c
    leaves a gap. Cost: one NNLS of size D × |T| (numpy/scipy only, independent of the solver under test).
    """
    from scipy.optimize import nnls

    P = np.asarray(points, dtype=np.float64)
    c = np.asarray(centre, dtype=np.float64)
    dist = np.sqrt(((P - c) ** 2).sum(1))
    r_up = float(dist.max())
    T = P[dist >= r_up * (1.0 - on_sphere_rtol)]
    w = r_up if r_up > 0 else 1.0  # the sum-to-one row at the scale of the coordinates' differences
    A = np.vstack([(T - c).T, np.full((1, len(T)), w)])
    b = np.concatenate([np.zeros(P.shape[1]), [w]])
    lam = nnls(A, b, maxiter=50 * max(len(T), 10))[0]
    lam = lam / lam.sum()
    c_lam = lam @ T
    return float(np.sqrt(max((lam * ((T - c_lam) ** 2).sum(1)).sum(), 0.0))), r_up
