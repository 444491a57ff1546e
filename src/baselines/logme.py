"""LogME (You et al., "LogME: Practical Assessment of Pre-trained Models for Transfer Learning", ICML 2021,
arXiv:2102.11005): the log marginal likelihood (evidence) of Bayesian linear regression of each one-hot class target
on the features, maximised over the prior precision α and the noise precision β, divided by n and averaged over
classes. Higher is better.

Model of one class target y ∈ {0, 1}ⁿ: w ~ N(0, α⁻¹ I_D), y | F, w ~ N(F w, β⁻¹ I_n), F (n, D) uncentred features
(no intercept, as the paper). With σ_i the k non-zero eigenvalues of FᵀF (squared singular values of F), u_i the
matching left singular vectors, x_i = u_iᵀ y, r₀ = ‖y‖² − Σ x_i² (the part of y outside the column space of F) and
t = α/β, the evidence is (MacKay; the paper's eq. 2 written in the SVD basis)::

    L(α, β) = D/2 log α + n/2 log β − ½ Σ_{i=1..D} log(α + β σ_i) − β/2 Q(t) − n/2 log 2π,
    Q(t)    = r₀ + Σ_i x_i² t/(t + σ_i)        (= ‖y − F m‖² + t ‖m‖², m the posterior mean).

The D − k zero eigenvalues cancel against D/2 log α. For fixed t the best β is n/Q(t), so the profile is the 1-D

    ℓ(t) = ½ Σ_{i≤k} log(t/(t + σ_i)) + n/2 log(n/Q(t)) − n/2 (1 + log 2π),

whose stationarity condition is MacKay's fixed point t ← γ·res2 / ((n − γ)·m2) with γ = Σ σ_i/(σ_i + t),
m2 = ‖m‖² = Σ σ_i x_i²/(t + σ_i)², res2 = ‖y − F m‖² = r₀ + Σ x_i² t²/(t + σ_i)² (the paper's Algorithm 1, in t).

**No-signal limit (α → ∞).** When the labels carry no linear signal the fixed point runs away, t → ∞ (α → ∞, m → 0):
the first sum of ℓ tends to 0 (each term is −log(1 + σ_i/t)) and Q(t) → ‖y‖², so the supremum is the analytic

    ℓ(∞)/n = −½ (1 + log(2π ‖y‖²/n)),

the evidence of "y is pure noise of variance ‖y‖²/n" (for a class of frequency p, ‖y‖²/n = p). At large t,
ℓ'(t) ≈ (Σσ_i − n‖Fᵀy‖²/‖y‖²)/(2t²), so the limit is the supremum whenever ‖Fᵀy‖²·n/‖y‖² < tr(FᵀF) and no interior
maximum is higher. We return max(ℓ(t*), ℓ(∞)) (plus ℓ(0⁺) when y lies in the column space of F, the interpolation
limit α → 0, where ℓ(0⁺) = −½ Σ log σ_i − n/2 log(Σ x_i²/σ_i) + n/2 log n − n/2 (1 + log 2π)), never a
non-converged iterate, NaN or inf.

Deviations from the official implementation (thuml/LogME ``LogME._fit_fixed_point``, the default there), all
switched off by ``authors=True``, which reproduces it (α = β = 1 start, at most 11 updates, stop when
|Δt|/t ≤ 1e-3, 1e-5 added to the denominators of the α, β updates, evidence evaluated with the last α, β but the
previous t's m2 and res2, and only the k = rank(F) non-zero eigenvalues in log|A| while keeping D/2 log α):

* the iteration starts at the best t of a log grid over [σ_min·1e-8, σ_max·1e8] (8 points per decade), not at
  α = β = 1, so that it climbs the global maximum of ℓ when ℓ has several;
* iterate to convergence (relative change of t ≤ ``tol``, at most ``max_iter`` updates, a RuntimeError naming both
  otherwise) and evaluate the evidence at the fixed point itself;
* no 1e-5 in the denominators; the α → ∞ (and α → 0) limits are returned analytically;
* log|A| sums over all D eigenvalues (zeros included). The official code drops the D − k zero eigenvalues of FᵀF
  from log|A| but keeps D/2 log α, which adds (D − k)/2·log α to the evidence: it matters when n < D or F is rank
  deficient (the official value then grows with α instead of reaching the no-signal limit);
* the rank cut-off: eigenvalues σ_i ≤ 1e-10·σ_max (relative) are dropped (their share of y joins r₀; with
  σ_i ≪ t the two are the same), where the official code keeps singular values > 1e-10 (absolute) when n > D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..utils.checks import check_features, check_int, check_labels, check_real

F64 = torch.float64

__all__ = ["logme", "logme_from_moments", "class_evidence", "RANK_RTOL"]

RANK_RTOL = 1e-10  # eigenvalues of FᵀF at or below RANK_RTOL·σ_max count as zero (rank cut-off)
_DEFAULT_MAX_ITER = 10_000
_AUTHORS_MAX_ITER = 11  # official: ``for _ in range(11)``
_AUTHORS_RTOL = 1e-3  # official: ``abs(t_ - t) / t <= 1e-3``
_AUTHORS_EPS = 1e-5  # official: ``alpha = gamma / (m2 + 1e-5)``, ``beta = (N - gamma) / (res2 + 1e-5)``
_FAR = 1e12  # t beyond σ_max·_FAR (or below σ_min/_FAR) is a run-away to a limit: ℓ there is within ~k/_FAR of it
_LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class _ClassData:
    """One class target in the SVD basis: σ (k,), x² (k,), r₀ = ‖y‖² − Σx², ‖y‖², n, D."""

    sigma: Tensor
    x2: Tensor
    r0: float
    y2: float
    n: int
    d: int


def _profile(c: _ClassData, t: float) -> float:
    """ℓ(t) of the module docstring (total over the n samples, not divided by n)."""
    s, x2 = c.sigma, c.x2
    q = c.r0 + float((x2 * (t / (t + s))).sum())
    return 0.5 * float(torch.log(t / (t + s)).sum()) + 0.5 * c.n * (math.log(c.n / q) - 1.0 - _LOG_2PI)


def _limit_inf(c: _ClassData) -> float:
    """ℓ(∞) = n/2 log(n/‖y‖²) − n/2 (1 + log 2π)."""
    return 0.5 * c.n * (math.log(c.n / c.y2) - 1.0 - _LOG_2PI)


def _limit_zero(c: _ClassData) -> float:
    """ℓ(0⁺) when r₀ = 0 and k = n (y in the column space of F); −inf otherwise (then ℓ → −∞ as t → 0)."""
    if c.r0 > 0 or c.sigma.numel() != c.n:
        return -math.inf
    s, x2 = c.sigma, c.x2
    return -0.5 * float(torch.log(s).sum()) + 0.5 * c.n * (
        math.log(c.n) - math.log(float((x2 / s).sum())) - 1.0 - _LOG_2PI
    )


def _mackay_step(c: _ClassData, t: float) -> tuple[float, float, float]:
    """(γ, m2, res2) at t."""
    s, x2 = c.sigma, c.x2
    gamma = float((s / (s + t)).sum())
    m2 = float((s * x2 / (t + s) ** 2).sum())
    res2 = float((x2 * (t / (t + s)) ** 2).sum()) + c.r0
    return gamma, m2, res2


def _start(c: _ClassData, s_min: float, s_max: float) -> float:
    """The best t of a log grid (8 points per decade over [σ_min·1e-8, σ_max·1e8]): the fixed point starts in the
    basin of the global maximum of ℓ, not at the paper's t = 1."""
    grid = torch.logspace(math.log10(s_min) - 8, math.log10(s_max) + 8, int(8 * (math.log10(s_max / s_min) + 16)) + 1)
    values = [_profile(c, float(t)) for t in grid]
    return float(grid[max(range(len(values)), key=values.__getitem__)])


def _evidence(c: _ClassData, max_iter: int, tol: float) -> float:
    """sup over (α, β) of the evidence (module docstring), total over the n samples."""
    best = max(_limit_inf(c), _limit_zero(c))
    if c.sigma.numel() == 0 or float(c.x2.sum()) == 0.0:
        return best  # no feature direction sees y: the evidence increases towards α → ∞
    s_max, s_min = float(c.sigma.max()), float(c.sigma.min())
    t = _start(c, s_min, s_max)
    for _ in range(max_iter):
        gamma, m2, res2 = _mackay_step(c, t)
        if m2 == 0.0 or t > s_max * _FAR:
            return best  # run-away to α → ∞ (ℓ(t) is within ~k/_FAR of ℓ(∞) there)
        if res2 == 0.0 or t < s_min / _FAR:
            return best  # run-away to α → 0: ℓ(0⁺) is in ``best`` when it is finite
        t_new = gamma * res2 / ((c.n - gamma) * m2)
        if abs(t_new - t) <= tol * t:
            return max(best, _profile(c, t_new))
        t = t_new
    raise RuntimeError(
        f"LogME: the fixed-point iteration did not converge in max_iter={max_iter} updates (last relative change of "
        f"α/β above tol={tol}); raise max_iter or tol"
    )


def _authors_evidence(c: _ClassData) -> float:
    """The official ``_fit_fixed_point`` per-class evidence (module docstring), total over the n samples."""
    s, x2, n, d = c.sigma, c.x2, c.n, c.d
    alpha, beta = 1.0, 1.0
    for _ in range(_AUTHORS_MAX_ITER):
        t = alpha / beta
        gamma = float((s / (s + t)).sum())
        m2 = float((s * x2 / (t + s) ** 2).sum())
        res2 = float((x2 / (1 + s / t) ** 2).sum()) + c.r0
        alpha = gamma / (m2 + _AUTHORS_EPS)
        beta = (n - gamma) / (res2 + _AUTHORS_EPS)
        if abs(alpha / beta - t) / t <= _AUTHORS_RTOL:
            break
    log_det = float(torch.log(alpha + beta * s).sum())
    return (
        d / 2 * math.log(alpha)
        + n / 2 * math.log(beta)
        - 0.5 * log_det
        - beta / 2 * res2
        - alpha / 2 * m2
        - n / 2 * _LOG_2PI
    )


def class_evidence(c: _ClassData, *, max_iter: int | None = None, tol: float = 1e-12, authors: bool = False) -> float:
    """Maximum log evidence / n of one class target (see the module docstring for the two modes)."""
    if authors:
        return _authors_evidence(c) / c.n
    return _evidence(c, _DEFAULT_MAX_ITER if max_iter is None else max_iter, tol) / c.n


def _keep(sigma: Tensor) -> Tensor:
    """Mask of the eigenvalues above the rank cut-off RANK_RTOL·σ_max."""
    top = float(sigma.max()) if sigma.numel() else 0.0
    return sigma > RANK_RTOL * top if top > 0 else torch.zeros_like(sigma, dtype=torch.bool)


def _check_present(counts: Tensor) -> None:
    """At least 2 classes (as SFDA: with one class every label is the same, e.g. a labelling bug that set every
    label to 0, and the "transferability" would be that of a constant target), each with a sample."""
    if counts.numel() < 2:
        raise ValueError(
            "LogME needs at least 2 classes, each with a sample; got class counts "
            f"{[round(v) for v in counts.tolist()]}; every label is the same class: check the labels"
        )
    empty = (counts == 0).nonzero().reshape(-1).tolist()
    if empty:
        raise ValueError(
            f"LogME: class(es) {empty[:10]} have no sample; a one-hot target that is identically 0 has no maximum "
            "evidence (β → ∞). Pass only the classes present (relabel to 0 … C-1) or num_classes=the present count"
        )


def _options(max_iter: int | None, tol: float) -> tuple[int | None, float]:
    return (None if max_iter is None else check_int(max_iter, "max_iter", 1)), check_real(tol, "tol", low=0.0)


def logme(
    features: Tensor,
    labels: Tensor,
    *,
    num_classes: int | None = None,
    max_iter: int | None = None,
    tol: float = 1e-12,
    authors: bool = False,
) -> float:
    """LogME of ``features`` (n, D) (any float dtype; float64 math) for integer ``labels`` (n,) in [0, C): the mean
    over classes of max_{α,β} log p(y_c | F, α, β) / n (module docstring). Higher is better.

    ``num_classes``: C (default: labels.max() + 1); every class must have a sample. ``max_iter`` (default 10 000)
    and ``tol`` (relative change of α/β): the fixed-point iteration, iterated to convergence (a RuntimeError
    naming both when it does not converge). n > D: through FᵀF (:func:`logme_from_moments`, as the official code
    for n > D); n ≤ D: through the thin SVD of F. ``authors=True``: the official stopping rule and evidence formula
    (11 updates, 1e-3, see the module docstring), ``max_iter``/``tol`` unused.
    """
    f = check_features(features, min_rows=2, dtype=F64)
    y, c = check_labels(labels, f.shape[0], num_classes)
    max_iter, tol = _options(max_iter, tol)
    n, d = f.shape
    onehot = torch.nn.functional.one_hot(y, c).to(F64)
    _check_present(onehot.sum(0))
    if n > d and not authors:  # FᵀF (D, D) is the cheaper factorisation, as the official ``truncated_svd``
        return logme_from_moments(f.T @ f, f.T @ onehot, onehot.sum(0), n, max_iter=max_iter, tol=tol)
    u, s, _ = torch.linalg.svd(f, full_matrices=False)
    sigma = s**2
    keep = _keep(sigma) if not authors else (s > 1e-10 if n > d else torch.ones_like(s, dtype=torch.bool))
    u, sigma = u[:, keep], sigma[keep]
    x = u.T @ onehot  # (k, C)
    # part of each target outside the column space of F: exactly 0 when rank(F) = n (U is then square orthogonal)
    resid = onehot - u @ x if u.shape[1] < n else torch.zeros_like(onehot)
    scores = []
    for j in range(c):
        r0 = (
            float((onehot[:, j] @ onehot[:, j]) - (x[:, j] @ x[:, j])) if authors else float(resid[:, j].square().sum())
        )
        data = _ClassData(sigma, x[:, j] ** 2, r0, float(onehot[:, j].sum()), n, d)
        scores.append(class_evidence(data, max_iter=max_iter, tol=tol, authors=authors))
    return float(sum(scores) / c)


def logme_from_moments(
    gram: Tensor, fty: Tensor, y_sq: Tensor, n: int, *, max_iter: int | None = None, tol: float = 1e-12
) -> float:
    """LogME from the sufficient statistics (exact under sums over batches / processes): ``gram`` = FᵀF (D, D),
    ``fty`` = Fᵀ Y (D, C) with Y the one-hot targets, ``y_sq`` = ‖y_c‖² (C,) (the class counts) and ``n``.

    With FᵀF = V diag(σ) Vᵀ, the projections are x_i = v_iᵀ Fᵀ y / √σ_i (for σ_i above the rank cut-off) and
    r₀ = ‖y‖² − Σ x_i², the residual of a projection: ≥ 0 exactly, so a rounding-level negative difference is
    taken as its exact value 0 (and r₀ = 0 when rank(F) = n: y then lies in the column space). Same default mode as :func:`logme` (``authors`` needs the features themselves).
    """
    max_iter, tol = _options(max_iter, tol)
    gram, fty, y_sq = gram.to(F64), fty.to(F64), y_sq.to(F64)
    _check_present(y_sq)
    d = gram.shape[0]
    sigma, v = torch.linalg.eigh((gram + gram.T) / 2)
    keep = _keep(sigma)
    sigma, v = sigma[keep], v[:, keep]
    x = (v.T @ fty) / sigma.sqrt()[:, None]
    scores = []
    for j in range(fty.shape[1]):
        x2 = x[:, j] ** 2
        r0 = max(float(y_sq[j] - x2.sum()), 0.0) if sigma.numel() < n else 0.0
        scores.append(class_evidence(_ClassData(sigma, x2, r0, float(y_sq[j]), int(n), d), max_iter=max_iter, tol=tol))
    return float(sum(scores) / fty.shape[1])
