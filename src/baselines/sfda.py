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
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import F64, check_features, check_labels, check_real

__all__ = ["sfda", "sfda_shrinkage"]

_MIN_SHRINKAGE = 1e-10  # official: max(np.exp(-5 * largest_evals_w), 1e-10)
_POWER_STEPS = 3  # official: iterative_A(Sw, max_iterations=3)


def _class_stats(x: Tensor, y: Tensor, c: int) -> tuple[Tensor, Tensor, Tensor]:
    """(priors (C,), means (C, D), within-class scatter S_w (D, D)) with divisor n_c per class."""
    onehot = torch.nn.functional.one_hot(y, c).to(F64)
    counts = onehot.sum(0)
    means = (onehot.T @ x) / counts[:, None]
    centred = x - means[y]
    priors = counts / len(y)
    sw = (centred * (priors[y] / counts[y])[:, None]).T @ centred  # Σ_c π_c Σ_{i∈c} (x−μ_c)(x−μ_c)ᵀ / n_c
    return priors, means, (sw + sw.T) / 2


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


def sfda_shrinkage(sw: Tensor, authors: bool = False) -> float:
    """λ_s = max(exp(−5·λ_max(S_w)), 1e-10) (exact λ_max; ``authors``: the official 3-step power estimate)."""
    top = _power_estimate(sw) if authors else float(torch.linalg.eigvalsh(sw)[-1])
    return max(math.exp(-5.0 * top), _MIN_SHRINKAGE)


def _probabilities(x: Tensor, y: Tensor, c: int, shrinkage: float) -> tuple[Tensor, Tensor]:
    """(p(c|x) (n, C) of the shrunk discriminant, class means (C, D))."""
    priors, means, sw = _class_stats(x, y, c)
    if float(torch.trace(sw)) <= 0.0:
        raise ValueError(
            "SFDA: the features have no within-class variance (S_w = 0), so the Fisher discriminant is undefined; "
            "check that the features are not constant within each class"
        )
    chol = torch.linalg.cholesky(_shrunk(sw, shrinkage))
    coef = torch.cholesky_solve(means.T, chol).T  # (C, D): μ_c (S_w^λ)⁻¹
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
    ``authors``: the official λ_max estimate. Higher is better."""
    x = check_features(features)
    y, c = check_labels(labels, x.shape[0], num_classes)
    counts = torch.bincount(y, minlength=c)
    if c < 2 or bool((counts == 0).any()):
        raise ValueError(
            f"SFDA needs at least 2 classes, each with a sample; got class counts {counts.tolist()}; relabel the "
            "present classes to 0 … C-1"
        )
    if shrinkage is None:
        shrinkage = sfda_shrinkage(_class_stats(x, y, c)[2], authors)
    else:
        shrinkage = check_real(shrinkage, "shrinkage", low=0.0, high=1.0)
    prob, means = _probabilities(x, y, c, shrinkage)
    soft = torch.softmax(prob, dim=1)  # ConfMix: soften before mixing
    others = (means.sum(0, keepdim=True) - means) / (c - 1)  # mean of the other classes' means, per class
    keep = soft.gather(1, y[:, None])
    mixed = keep * x + (1.0 - keep) * others[y]
    prob2, _ = _probabilities(mixed, y, c, shrinkage)
    return float(prob2.gather(1, y[:, None]).mean())
