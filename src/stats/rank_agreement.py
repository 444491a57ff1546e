"""Rank agreement of scores with accuracies across backbones (the one owner of Pearson / Spearman / Kendall in RepBench) (the SynBench paper's
Figure 4 analysis: Ko et al., ICML 2024, arXiv:2210.02989, §4.1), with the uncertainty a handful of backbones leaves.

For a score column x and an accuracy column y over the same n backbones: Pearson's r, Kendall's τ_b, a bootstrap
interval for each (backbones resampled with replacement, and — when a score has several seeds per backbone — one
seed drawn per backbone in each resample), and the exact permutation p-value of τ_b (all n! orderings for n <= 8).
With n = 5 backbones no p-value can be below 2/120 ≈ 0.017 and a bootstrap interval is wide: the verdict says so
instead of reading a ranking into noise.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..utils.checks import check_int

__all__ = [
    "Agreement",
    "agreement",
    "check_agreement_options",
    "kendall_tau_b",
    "pearson",
    "permutation_p_value",
    "spearman",
]

MAX_EXACT = 8  # n! orderings enumerated up to n = 8 (40,320); Monte Carlo beyond


def check_agreement_options(n_boot: object, level: object, prefix: str = "") -> tuple[int, float]:
    """(``n_boot``, ``level``) of :func:`agreement` checked: ``n_boot`` an integer >= 1 (with 0 resamples every
    interval is NaN and every verdict "cannot separate", however clear the ranking), ``level`` a number in (0, 1);
    else a TypeError / ValueError naming ``<prefix>n_boot`` / ``<prefix>level`` (the report's keys:
    ``prefix="agreement."``)."""
    n = check_int(
        n_boot,
        f"{prefix}n_boot",
        1,
        meaning="bootstrap resamples of the backbones",
        fix=f"set {prefix}n_boot=2000 (say)",
    )
    bad = isinstance(level, bool | str) or not isinstance(level, int | float | np.floating | np.integer)
    if bad or not 0 < float(level) < 1:  # type: ignore[arg-type]
        raise ValueError(
            f"{prefix}level must be in (0, 1) (the coverage of the bootstrap intervals), got {level!r}; "
            f"set {prefix}level=0.9 (say)"
        )
    return n, float(level)  # type: ignore[arg-type]


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r; NaN (undefined) with fewer than 3 values or a constant column."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.size < 3 or a.size != b.size:
        return math.nan
    a, b = a - a.mean(), b - b.mean()
    den = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / den if den > 0 else math.nan


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ: Pearson's r of the average ranks (ties share their mean rank); NaN where r is undefined."""
    from scipy.stats import rankdata

    if len(x) != len(y):
        return math.nan
    return pearson(rankdata(x), rankdata(y))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's τ_b = (C − D) / √((n₀ − n₁)(n₀ − n₂)) (ties in either column handled); NaN with fewer than 3
    values or a constant column. Computed from all pairs (n is a number of backbones: tens at most)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = a.size
    if n < 3 or n != b.size:
        return math.nan
    i, j = np.triu_indices(n, 1)
    sa, sb = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    n0 = i.size
    ta, tb = int((sa == 0).sum()), int((sb == 0).sum())
    den = math.sqrt((n0 - ta) * (n0 - tb))
    return float((sa * sb).sum()) / den if den > 0 else math.nan


def permutation_p_value(x: Sequence[float], y: Sequence[float], rng: np.random.Generator | None = None) -> float:
    """Two-sided p-value of τ_b under the null of no association: the fraction of orderings of y with |τ_b| at least
    the observed one (all n! orderings for n <= MAX_EXACT, else 20,000 random ones). NaN where τ_b is undefined."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    t = kendall_tau_b(a, b)
    if math.isnan(t):
        return math.nan
    if a.size <= MAX_EXACT:
        perms = (np.asarray(p) for p in itertools.permutations(range(a.size)))
    else:
        rng = rng or np.random.default_rng(0)
        perms = (rng.permutation(a.size) for _ in range(20_000))
    hits = total = 0
    for p in perms:
        total += 1
        hits += abs(kendall_tau_b(a, b[p])) >= abs(t) - 1e-12  # ties of |τ| count as extreme (conservative)
    return hits / total


@dataclass(frozen=True)
class Agreement:
    """Agreement of one score with one accuracy across ``n`` backbones (NaN/None = undefined)."""

    score: str
    target: str
    n: int
    pearson: float
    pearson_low: float
    pearson_high: float
    kendall: float
    kendall_low: float
    kendall_high: float
    p_value: float
    defined_fraction: float  # bootstrap resamples where both statistics were defined
    higher_is_better: bool | None
    verdict: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _verdict(n: int, tau: float, low: float, high: float, p: float, higher_is_better: bool | None, level: float) -> str:
    """A plain-language reading of the numbers: a score "agrees" (or "ranks against") only when its bootstrap
    interval excludes 0 AND the permutation p-value is at most 1 − level; otherwise it cannot be told apart from no
    agreement with this many backbones (the statistics decide, the text only names what they show)."""
    if math.isnan(tau):
        return "undefined (fewer than 3 backbones, or a constant column)"
    sign = 1.0 if higher_is_better in (True, None) else -1.0
    floor = 2.0 / math.factorial(n) if n <= MAX_EXACT else 0.0
    if math.isnan(low) or low <= 0.0 <= high or p > 1 - level:
        extra = f"; with {n} backbones no p-value can be below {floor:.3f}" if floor > 1 - level else ""
        return f"cannot separate from no agreement (τ_b {tau:+.2f}, p = {p:.2f}{extra})"
    what = "agrees with" if sign * tau > 0 else "ranks against"
    return f"{what} the downstream ranking (τ_b {tau:+.2f}, p = {p:.3f})"


def agreement(
    scores: Mapping[str, Sequence[float]] | Sequence[float],
    accuracy: Mapping[str, float] | Sequence[float],
    *,
    score_name: str = "score",
    target_name: str = "accuracy",
    higher_is_better: bool | None = None,
    n_boot: int = 2000,
    level: float = 0.9,
    seed: int = 0,
) -> Agreement:
    """Agreement of ``scores`` with ``accuracy`` across backbones.

    ``scores``: one value per backbone, or {backbone: [value per seed]} (seeds resampled too); ``accuracy``: one value
    per backbone in the same order (or {backbone: value}, matched by name). Percentile bootstrap intervals at
    ``level`` over ``n_boot`` resamples of the backbones (resamples where a statistic is undefined — fewer than 3
    distinct backbones drawn or a constant column — are left out; ``defined_fraction`` says how many were kept)."""
    if isinstance(scores, Mapping):
        names = list(scores)
        if isinstance(accuracy, Mapping):
            missing = [k for k in names if k not in accuracy]
            if missing:
                raise ValueError(f"accuracy has no value for backbones {missing}")
            acc = np.array([float(accuracy[k]) for k in names])
        else:
            acc = np.asarray(accuracy, dtype=np.float64)
        per_seed = [np.atleast_1d(np.asarray(scores[k], dtype=np.float64)) for k in names]
    else:
        per_seed = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in scores]
        acc = np.asarray(list(accuracy.values()) if isinstance(accuracy, Mapping) else accuracy, dtype=np.float64)
    n = len(per_seed)
    if acc.shape != (n,):
        raise ValueError(f"{n} backbones of scores but {acc.size} accuracies")
    if any(v.size == 0 for v in per_seed) or not all(np.isfinite(v).all() for v in per_seed):
        raise ValueError(f"{score_name}: every backbone needs at least one finite value")
    if not np.isfinite(acc).all():
        raise ValueError(f"{target_name}: accuracies must be finite, got {acc.tolist()}")
    n_boot, level = check_agreement_options(n_boot, level)
    x = np.array([v.mean() for v in per_seed])
    r, tau = pearson(x, acc), kendall_tau_b(x, acc)
    rng = np.random.default_rng(seed)
    rs, taus = [], []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        xb = np.array([per_seed[i][rng.integers(0, per_seed[i].size)] for i in idx])
        rb, tb = pearson(xb, acc[idx]), kendall_tau_b(xb, acc[idx])
        if not (math.isnan(rb) or math.isnan(tb)):
            rs.append(rb)
            taus.append(tb)
    q = [(1 - level) / 2, (1 + level) / 2]
    r_lo, r_hi = np.quantile(rs, q).tolist() if rs else [math.nan, math.nan]
    t_lo, t_hi = np.quantile(taus, q).tolist() if taus else [math.nan, math.nan]
    p = permutation_p_value(x, acc)
    return Agreement(
        score=score_name,
        target=target_name,
        n=n,
        pearson=r,
        pearson_low=r_lo,
        pearson_high=r_hi,
        kendall=tau,
        kendall_low=t_lo,
        kendall_high=t_hi,
        p_value=p,
        defined_fraction=len(rs) / n_boot,
        higher_is_better=higher_is_better,
        verdict=_verdict(n, tau, t_lo, t_hi, p, higher_is_better, level),
    )
