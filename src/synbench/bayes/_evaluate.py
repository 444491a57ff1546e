"""Classifier construction from statistics (Algorithm 1 lines 12-13) and the one-call evaluation."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ._directions import robust_bayes_directions
from ._eig import retained_eig
from ._eps import check_eps
from ._statistics import (
    LinearClassifiers,
    TrainStats,
    finalize_test_statistics,
    fit_gaussian,
    test_statistics,
    train_statistics,
)

Tensor = torch.Tensor
F64 = torch.float64


def classifier_from_statistics(
    stats: TrainStats,
    eps_list: Any,
    eps_mode: str = "relative",
    *,
    norm: str = "l2",
    eig_tol: float = 1e-6,
    cov_divisor: Any = "n-2",
    class_prior: float | None = None,
    eig_threads: int | None = None,
    eig_tol_mode: str = "absolute",
) -> LinearClassifiers:
    """Algorithm 1 lines 12-13 from sufficient statistics: one eigendecomposition, W for every ε.

    ``class_prior`` τ (None or 0.5: official, no threshold) adds the prior threshold q/2, q = ln((1−τ)/τ)
    of eq. 5 (Theorem A.3). Warns when a classifier is degenerate (w = 0; module docstring).
    ``eig_threads``: see :func:`retained_eig`; ``eig_tol_mode``: see :func:`~._eig.eig_cutoff` (warns when the
    cut-off drops more than 1 % of the covariance's variance).
    """
    mu1, mu0, cov = fit_gaussian(stats, cov_divisor)
    m = stats.sum / stats.count[:, None]
    mu_tilde = 0.5 * (m[1] - m[0])
    eig = retained_eig(cov, eig_tol, eig_threads, eig_tol_mode)
    W, _ = robust_bayes_directions(
        mu_tilde, cov, eps_list, eps_mode == "relative", eig=eig, eig_tol=eig_tol, norm=norm, eig_tol_mode=eig_tol_mode
    )
    if (W == 0).all(1).any():
        warnings.warn(
            "SynBench: the robust Bayes classifier is degenerate (w = 0: constant features, or no class "
            "mean difference inside the retained covariance subspace); reporting accuracy 0.5 and "
            "scaled bound 0 for it",
            RuntimeWarning,
            stacklevel=2,
        )
    thr = 0.0 if class_prior in (None, 0.5) else 0.5 * math.log((1.0 - class_prior) / class_prior)
    return LinearClassifiers(W, 0.5 * (mu1 + mu0), mu_tilde, thr)


def evaluate_representation(
    train_z: Tensor,
    train_y: Tensor,
    test_z: Tensor,
    test_y: Tensor,
    eps_list: Sequence[float],
    eps_mode: str = "relative",
    *,
    norm: str = "l2",
    eig_tol: float = 1e-6,
    cov_divisor: Any = "n-2",
    class_prior: float | None = None,
    eig_tol_mode: str = "absolute",
) -> tuple[Tensor, Tensor]:
    """Algorithm 1 lines 12-16: (accuracy, mean scaled bound of correct test samples), one value per ε.

    Composes :func:`train_statistics`, :func:`classifier_from_statistics`, :func:`test_statistics`,
    :func:`finalize_test_statistics`. The mean is over all correct test samples (the paper's definition;
    the official code averages per-batch means with drop_last, a small difference).
    """
    check_eps(eps_list, eps_mode)
    stats = train_statistics(train_z, train_y)
    clf = classifier_from_statistics(
        stats,
        eps_list,
        eps_mode,
        norm=norm,
        eig_tol=eig_tol,
        cov_divisor=cov_divisor,
        class_prior=class_prior,
        eig_tol_mode=eig_tol_mode,
    )
    return finalize_test_statistics(test_statistics(test_z, test_y, clf))
