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
