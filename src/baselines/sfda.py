"""SFDA (Shao et al., "Not All Models Are Equal: Predicting Model Transferability in a Self-challenging Fisher
Space", ECCV 2022, arXiv:2207.03036): a regularised Fisher discriminant with the paper's adaptive shrinkage, the
self-challenging ConfMix step and a second, challenged discriminant whose mean probability of the true class is the
score. Higher is better; the score lies in (0, 1).

Steps (as the official TencentARC/SFDA ``SFDA_Score``):

1. priors π_c = n_c/n, class means μ_c, within-class scatter S_w = Σ_c π_c Cov_c (divisor n_c) and total scatter
   S_t = Cov (divisor n);
2. shrinkage λ_s = max(exp(−5·λ_max(S_w)), 1e-10) and S ↦ (1 − λ_s) S + λ_s tr(S)/D · I for S_w and S_t;
3. the discriminant: the generalised eigenvectors W of (S_b, S_w^λ) (S_b = S_t^λ − S_w^λ) with WᵀS_w^λW = I, all of
   them kept, so the class weights μ_c W Wᵀ = μ_c (S_w^λ)⁻¹ and p(c|x) = softmax_c(xᵀ(S_w^λ)⁻¹μ_c
   − ½ μ_cᵀ(S_w^λ)⁻¹μ_c + log π_c);
4. ConfMix: p'(·|x) = softmax(p(·|x)) ("soften"), and each sample moves towards the mean of the other classes' means
   (unweighted): x ↦ p'(y|x)·x + (1 − p'(y|x))·mean_{c≠y} μ_c;
5. steps 1 and 3 on the mixed samples with the SAME λ_s; the score is mean_i p(y_i | x_i) (no log, as the code).

Deviations: (a) λ_max(S_w) is the exact largest eigenvalue; the official code estimates it by 3 steps of its power
iteration started at S_w·1 (``authors=True`` reproduces that estimate); (b) (S_w^λ)⁻¹μ_c by a Cholesky solve instead
of the full generalised eigendecomposition (the same matrix, W Wᵀ = (S_w^λ)⁻¹; S_b does not enter the score);
(c) a class without samples, or features without within-class variance (S_w = 0), is refused with a ValueError
(the official code divides by zero). The shrinkage depends on the feature scale (exp(−5·λ_max)), as the paper's.

Few samples in many dimensions (n < D): the score is computed exactly in n dimensions, never forming a D×D matrix
(at D = 20 000 each would take 3.2 GB in float64). With the centred, weighted rows R (n, D), S_w = RᵀR (weights
π_c/n_c = 1/n), so λ_max(S_w) = λ_max(RRᵀ) (the same non-zero eigenvalues) and, with a = 1 − λ_s and
b = λ_s·tr(S_w)/D > 0, S_w^λ = b·I + a·RᵀR. By Woodbury,

    (S_w^λ)⁻¹ = (I − a·Rᵀ (b·I_n + a·RRᵀ)⁻¹ R) / b,

so μ_c(S_w^λ)⁻¹ = (μ_c − a·(μ_c Rᵀ)(b·I_n + a·G)⁻¹ R) / b with the n×n Gram matrix G = RRᵀ: the discriminant acts
as (S_w^λ)⁻¹ within the span of the centred data and as 1/b on its orthogonal complement (where the class means
reach beyond it). Memory O(nD + n²), time O(n²D) instead of O(nD² + D³); equal to the D-dimensional computation up
to rounding (tests/baselines/test_sfda.py). The ``authors`` power estimate is taken through the same factor
(A·v = Rᵀ(R·v)).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..utils.checks import check_features, check_labels, check_real

F64 = torch.float64

__all__ = ["sfda", "sfda_shrinkage"]

_MIN_SHRINKAGE = 1e-10  # official: max(np.exp(-5 * largest_evals_w), 1e-10)
_POWER_STEPS = 3  # official: iterative_A(Sw, max_iterations=3)


def _class_moments(x: Tensor, y: Tensor, c: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(priors (C,), means (C, D), centred rows x − μ_y (n, D), row weights π_y/n_y (n,))."""
    onehot = torch.nn.functional.one_hot(y, c).to(F64)
    counts = onehot.sum(0)
    means = (onehot.T @ x) / counts[:, None]
    priors = counts / len(y)
    return priors, means, x - means[y], priors[y] / counts[y]


def _class_stats(x: Tensor, y: Tensor, c: int) -> tuple[Tensor, Tensor, Tensor]:
    """(priors (C,), means (C, D), within-class scatter S_w (D, D)) with divisor n_c per class."""
    priors, means, centred, weights = _class_moments(x, y, c)
    sw = (centred * weights[:, None]).T @ centred  # Σ_c π_c Σ_{i∈c} (x−μ_c)(x−μ_c)ᵀ / n_c
    return priors, means, (sw + sw.T) / 2


def _class_factor(x: Tensor, y: Tensor, c: int) -> tuple[Tensor, Tensor, Tensor]:
    """(priors (C,), means (C, D), R (n, D)) with S_w = RᵀR: the centred rows times √(π_y/n_y)."""
    priors, means, centred, weights = _class_moments(x, y, c)
    return priors, means, centred * weights.sqrt()[:, None]


def _gram_form(n: int, d: int) -> bool:
    """Whether SFDA runs in n dimensions (the Woodbury form of the module docstring): when n < D, where it is cheaper
    and forms no D×D matrix."""
    return n < d


def _shrunk(s: Tensor, shrinkage: float) -> Tensor:
    """(1 − λ_s) S + λ_s tr(S)/D · I."""
    d = s.shape[0]
    return (1.0 - shrinkage) * s + shrinkage * (torch.trace(s) / d) * torch.eye(d, dtype=F64, device=s.device)


def _power_estimate(a: Tensor) -> float:
    """The official estimate of λ_max(A): x = A·1, then 3 times (y = Ax/‖Ax‖, x = Ay/‖Ay‖), returning xᵀAy."""
    x = a.sum(1)
    y = x
    for _ in range(_POWER_STEPS):
        y = a @ x
        y = y / y.norm()
        x = a @ y
        x = x / x.norm()
    return float(x @ a @ y)


def _power_estimate_factor(r: Tensor) -> float:
    """:func:`_power_estimate` of A = RᵀR without forming A (A·v = Rᵀ(R·v)); xᵀAy = (Rx)·(Ry)."""
    x = r.T @ r.sum(1)
    y = x
    for _ in range(_POWER_STEPS):
        y = r.T @ (r @ x)
        y = y / y.norm()
        x = r.T @ (r @ y)
        x = x / x.norm()
    return float((r @ x) @ (r @ y))


def sfda_shrinkage(sw: Tensor, authors: bool = False) -> float:
    """λ_s = max(exp(−5·λ_max(S_w)), 1e-10) (exact λ_max; ``authors``: the official 3-step power estimate)."""
    top = _power_estimate(sw) if authors else float(torch.linalg.eigvalsh(sw)[-1])
    return max(math.exp(-5.0 * top), _MIN_SHRINKAGE)


def _factor_shrinkage(r: Tensor, authors: bool = False) -> float:
    """:func:`sfda_shrinkage` of S_w = RᵀR from R (n, D): λ_max(RᵀR) = λ_max(RRᵀ), an n×n eigenproblem."""
    top = _power_estimate_factor(r) if authors else float(torch.linalg.eigvalsh(r @ r.T)[-1])
    return max(math.exp(-5.0 * top), _MIN_SHRINKAGE)


def _no_variance() -> ValueError:
    return ValueError(
        "SFDA: the features have no within-class variance (S_w = 0), so the Fisher discriminant is undefined; "
        "check that the features are not constant within each class"
    )


def _coefficients_scatter(means: Tensor, sw: Tensor, shrinkage: float) -> Tensor:
    """μ_c (S_w^λ)⁻¹ (C, D) by a Cholesky solve of the D×D shrunk scatter."""
    chol = torch.linalg.cholesky(_shrunk(sw, shrinkage))
    return torch.cholesky_solve(means.T, chol).T


def _coefficients_gram(means: Tensor, r: Tensor, shrinkage: float) -> Tensor:
    """μ_c (S_w^λ)⁻¹ (C, D) for S_w = RᵀR in n dimensions (Woodbury, module docstring):
    (μ_c − a·(μ_c Rᵀ)(b·I_n + a·RRᵀ)⁻¹ R) / b, a = 1 − λ_s, b = λ_s·tr(S_w)/D."""
    n, d = r.shape
    gram = r @ r.T
    gram = (gram + gram.T) / 2
    a, b = 1.0 - shrinkage, shrinkage * float(torch.trace(gram)) / d
    inner = a * gram + b * torch.eye(n, dtype=F64, device=r.device)
    z = torch.cholesky_solve((means @ r.T).T, torch.linalg.cholesky(inner))  # (n, C): (b·I + a·G)⁻¹ R μ_cᵀ
    return (means - a * (z.T @ r)) / b


def _probabilities(x: Tensor, y: Tensor, c: int, shrinkage: float, gram: bool = False) -> tuple[Tensor, Tensor]:
    """(p(c|x) (n, C) of the shrunk discriminant, class means (C, D)); ``gram``: in n dimensions."""
    if gram:
        priors, means, r = _class_factor(x, y, c)
        if float(r.square().sum()) <= 0.0:
            raise _no_variance()
        coef = _coefficients_gram(means, r, shrinkage)
    else:
        priors, means, sw = _class_stats(x, y, c)
        if float(torch.trace(sw)) <= 0.0:
            raise _no_variance()
        coef = _coefficients_scatter(means, sw, shrinkage)  # (C, D): μ_c (S_w^λ)⁻¹
    intercept = -0.5 * (means * coef).sum(1) + priors.log()
    return torch.softmax(x @ coef.T + intercept, dim=1), means


def sfda(
    features: Tensor,
    labels: Tensor,
    *,
    num_classes: int | None = None,
    shrinkage: float | None = None,
    authors: bool = False,
) -> float:
    """SFDA score of ``features`` (n, D) (any float dtype; float64 math) for ``labels`` (n,) in [0, C), every class
    present, C ≥ 2 (module docstring). ``shrinkage``: a fixed λ_s in (0, 1] instead of the adaptive one;
    ``authors``: the official λ_max estimate. Higher is better. With fewer samples than dimensions (n < D) the score
    is computed exactly in n dimensions (Woodbury, module docstring): no D×D matrix is formed, so
    ``sfda(torch.randn(20, 20000), labels)`` needs megabytes, not the 3.2 GB of each D×D float64 scatter."""
    x = check_features(features, min_rows=2, dtype=F64)
    y, c = check_labels(labels, x.shape[0], num_classes)
    counts = torch.bincount(y, minlength=c)
    if c < 2 or bool((counts == 0).any()):
        raise ValueError(
            f"SFDA needs at least 2 classes, each with a sample; got class counts {counts.tolist()}; relabel the "
            "present classes to 0 … C-1"
        )
    return _score(x, y, c, shrinkage, authors, _gram_form(*x.shape))


def _score(x: Tensor, y: Tensor, c: int, shrinkage: float | None, authors: bool, gram: bool) -> float:
    """The SFDA score of checked inputs, in n dimensions (``gram``) or in D (the scatter matrices)."""
    if shrinkage is None:
        shrinkage = (
            _factor_shrinkage(_class_factor(x, y, c)[2], authors)
            if gram
            else (sfda_shrinkage(_class_stats(x, y, c)[2], authors))
        )
    else:
        shrinkage = check_real(shrinkage, "shrinkage", low=0.0, high=1.0)
    prob, means = _probabilities(x, y, c, shrinkage, gram)
    soft = torch.softmax(prob, dim=1)  # ConfMix: soften before mixing
    others = (means.sum(0, keepdim=True) - means) / (c - 1)  # mean of the other classes' means, per class
    keep = soft.gather(1, y[:, None])
    mixed = keep * x + (1.0 - keep) * others[y]
    prob2, _ = _probabilities(mixed, y, c, shrinkage, gram)
    return float(prob2.gather(1, y[:, None]).mean())
