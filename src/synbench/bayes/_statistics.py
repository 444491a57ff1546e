"""Additive sufficient statistics: training (class counts, shifted sums and outer products, Algorithm 1 line
12) and test (correct count, sum of scaled bounds, total; lines 14-16)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

Tensor = torch.Tensor
F64 = torch.float64


@dataclass
class TrainStats:
    """Additive training statistics, all float64, relative to a fixed ``shift`` c (shifted-data algorithm):
    count (2,) = [n₀, n₁]; sum (2, D) = Σ_{y=c}(z − c); sum_outer (D, D) = Σ_all (z − c)(z − c)ᵀ.

    Shifting by c ≈ the feature mean (the runner uses the first batch's mean) avoids the catastrophic
    cancellation of raw moments when |mean| ≫ spread. Stats with equal shift add component-wise (DDP:
    sum-reduce count/sum/sum_outer with a shift agreed by all ranks, e.g. zeros); :func:`merge` re-shifts.
    """

    count: Tensor
    sum: Tensor
    sum_outer: Tensor
    shift: Tensor

    @classmethod
    def zeros(cls, dim: int, shift: Tensor | None = None, device: Any = "cpu") -> TrainStats:
        sh = (
            torch.zeros(dim, dtype=F64, device=device)
            if shift is None
            else torch.as_tensor(shift, dtype=F64, device=device).clone()
        )
        return cls(
            torch.zeros(2, dtype=F64, device=device),
            torch.zeros(2, dim, dtype=F64, device=device),
            torch.zeros(dim, dim, dtype=F64, device=device),
            sh,
        )

    def update(self, z: Tensor, y: Tensor) -> TrainStats:
        """Add a batch in place (one float64 matmul for the outer products); returns self.

        NaN/inf features are detected once per fit (they reach the float64 sums), not per batch, to keep
        the streaming cost to one pass over the batch: :func:`fit_gaussian` raises for them."""
        zc = _check_batch(z, y, finite=False).to(self.shift.device, F64) - self.shift
        y = y.to(self.shift.device).long()
        onehot = torch.stack([1 - y, y], 1).to(F64)  # (B, 2): class sums by one small matmul
        self.count += onehot.sum(0)
        self.sum += onehot.T @ zc
        self.sum_outer.addmm_(zc.T, zc)
        return self

    def reshift(self, shift: Tensor) -> TrainStats:
        """The same statistics expressed relative to another shift c' (exact algebra, new object)."""
        delta = self.shift - torch.as_tensor(shift, dtype=F64, device=self.shift.device)
        tot = self.sum.sum(0)
        n = self.count.sum()
        outer = self.sum_outer + torch.outer(tot, delta) + torch.outer(delta, tot) + n * torch.outer(delta, delta)
        return TrainStats(self.count.clone(), self.sum + self.count[:, None] * delta, outer, self.shift - delta)

    def __add__(self, other: TrainStats) -> TrainStats:
        return merge(self, other)


_NONFINITE = "features contain NaN or inf values"


def _check_batch(z: Tensor, y: Tensor, finite: bool = True) -> Tensor:
    if z.ndim != 2 or y.ndim != 1 or z.shape[0] != y.shape[0]:
        raise ValueError(f"expected features (N, D) and labels (N,), got {tuple(z.shape)} and {tuple(y.shape)}")
    if finite and not torch.isfinite(z).all():
        raise ValueError(_NONFINITE)
    if y.numel() and not bool(((y == 0) | (y == 1)).all()):
        raise ValueError("labels must be in {0, 1} (1 <-> +mu)")
    return z


def train_statistics(z: Tensor, y: Tensor, shift: Tensor | None = None) -> TrainStats:
    """Training statistics of one batch; ``shift`` defaults to the batch mean."""
    _check_batch(z, y)
    sh = z.to(F64).mean(0) if shift is None else shift
    return TrainStats.zeros(z.shape[1], sh, z.device).update(z, y)


def merge(a: TrainStats, b: TrainStats) -> TrainStats:
    """a + b (re-shifting b to a's shift when they differ)."""
    if not torch.equal(a.shift, b.shift):
        b = b.reshift(a.shift)
    return TrainStats(a.count + b.count, a.sum + b.sum, a.sum_outer + b.sum_outer, a.shift.clone())


def _divisor(cov_divisor: Any, n: float) -> float:
    table = {"n-2": n - 2.0, "n-1": n - 1.0, "n": n}
    d = table[cov_divisor] if isinstance(cov_divisor, str) else float(cov_divisor)
    if not d > 0:
        raise ValueError(f"covariance divisor {cov_divisor!r} = {d} must be > 0 (too few training samples)")
    return d


def fit_gaussian(stats: TrainStats, cov_divisor: Any = "n-2") -> tuple[Tensor, Tensor, Tensor]:
    """Algorithm 1 line 12: class means μ₁ (y = 1), μ₀ (y = 0) and the pooled covariance
    Σ' = Σ_c Σ_{y=c}(z − μ_c)(z − μ_c)ᵀ / divisor; divisor "n-2" (official code), "n-1" (paper text),
    "n" or a number. Returns (μ₁, μ₀, Σ') in float64."""
    if not (torch.isfinite(stats.sum).all() and torch.isfinite(torch.diagonal(stats.sum_outer)).all()):
        raise ValueError(_NONFINITE)  # any NaN/inf feature reaches Σ(z − c) and the diagonal Σ(z − c)²
    for c in (0, 1):
        if stats.count[c] <= 0:
            raise ValueError(f"class {c} has no training samples")
    m = stats.sum / stats.count[:, None]
    scatter = stats.sum_outer - stats.count[0] * torch.outer(m[0], m[0]) - stats.count[1] * torch.outer(m[1], m[1])
    cov = scatter / _divisor(cov_divisor, float(stats.count.sum()))
    return stats.shift + m[1], stats.shift + m[0], 0.5 * (cov + cov.T)


class LinearClassifiers(NamedTuple):
    """ε-robust classifiers sign((z − m)ᵀw_e − threshold): W (E, D), m (D,), μ̃ (D,), threshold = q/2."""

    W: Tensor
    m: Tensor
    mu_tilde: Tensor
    threshold: float = 0.0


class TestStats(NamedTuple):
    """Additive test statistics: n_correct (E,) (ties count 1/2), sum_bound (E,) over correct samples, n_total."""

    n_correct: Tensor
    sum_bound: Tensor
    n_total: Tensor
    __test__ = False  # not a pytest test class

    def __add__(self, other: TestStats) -> TestStats:  # type: ignore[override]
        return TestStats(
            self.n_correct + other.n_correct, self.sum_bound + other.sum_bound, self.n_total + other.n_total
        )


def test_statistics(z: Tensor, y: Tensor, clf: LinearClassifiers) -> TestStats:
    """Algorithm 1 lines 14-15 on one batch: prediction sign((z − m)ᵀw − q/2) and the scaled bound of
    Theorem 3.1 (ii) |(z − m)ᵀw| / |μ̃ᵀw| (A.3 (ii) with a prior threshold: 2|u| / (|μ̃ᵀw − q/2| + |μ̃ᵀw + q/2|))."""
    _check_batch(z, y, finite=False)
    W, m, mu_t, thr = clf
    u = (z.to(W.device, F64) - m) @ W.T - thr
    if not torch.isfinite(u).all():  # NaN/inf in z always reaches u (0·inf = NaN): one (N, E) check
        raise ValueError(_NONFINITE)
    proj = W @ mu_t
    denom = 0.5 * ((proj - thr).abs() + (proj + thr).abs())
    margin = u * (2.0 * y.to(W.device, F64) - 1.0)[:, None]
    correct, tie = margin > 0, margin == 0
    bound = torch.where(denom > 0, u.abs() / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(u))
    return TestStats(
        correct.sum(0).to(F64) + 0.5 * tie.sum(0).to(F64),
        (bound * correct).sum(0),
        torch.tensor(float(z.shape[0]), dtype=F64, device=W.device),
    )


test_statistics.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def finalize_test_statistics(ts: TestStats) -> tuple[Tensor, Tensor]:
    """(accuracy, mean scaled bound of correct samples) per ε; the mean is 0 where nothing is correct."""
    if ts.n_total <= 0:
        raise ValueError("no test samples")
    acc = ts.n_correct / ts.n_total
    mean = torch.where(ts.n_correct > 0, ts.sum_bound / ts.n_correct.clamp_min(1e-300), torch.zeros_like(acc))
    return acc, mean
