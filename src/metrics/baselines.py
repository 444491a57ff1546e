"""torchmetrics of the baseline scores whose sufficient statistics are sums (``dist_reduce_fx="sum"``), so that they
are exact under DDP: each equals its functional (:mod:`src.baselines`) on the union of the batches, in any order and
any split over processes (up to float64 summation order).

* :class:`RankMe`: Σ zzᵀ (D, D) and n — RankMe's singular values of the UNCENTRED embedding matrix are the square
  roots of the eigenvalues of ZᵀZ (the paper does not centre; neither do we).
* :class:`AlphaReQ`: Σ zzᵀ, Σ z (D,) and n — the covariance is (Σzzᵀ − ΣzΣzᵀ/n)/(n − 1) (raw float64 moments).
* :class:`LogME`: FᵀF (D, D), FᵀY (D, C) with Y one-hot, the class counts ‖y_c‖² (C,) and n — the evidence of each
  class depends on F and y only through the eigen-decomposition of FᵀF, the projections Fᵀy_c and ‖y_c‖²
  (:func:`src.baselines.logme_from_moments`).

Their ``higher_is_better`` is the direction of the baseline's row in :data:`src.baselines.BASELINES`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ..baselines import BASELINES, alpha_req_from_moments, logme_from_moments, rankme_from_gram
from ..baselines.spectral import DEFAULT_FIT_RANGE
from ..utils.checks import check_features, check_int, check_labels
from ._plot import PlotMixin

__all__ = ["AlphaReQ", "LogME", "RankMe"]

F64 = torch.float64


class _SecondMoments(PlotMixin, Metric):
    """Σ zzᵀ, Σ z and n of (B, D) feature batches, sum-reduced."""

    is_differentiable = False
    full_state_update = False

    def __init__(self, num_features: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_features = check_int(num_features, "num_features", 1)
        d = self.num_features
        self.add_state("sum_outer", torch.zeros(d, d, dtype=F64), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros(d, dtype=F64), dist_reduce_fx="sum")
        self.add_state("n", torch.zeros((), dtype=F64), dist_reduce_fx="sum")

    def _batch(self, features: Tensor) -> Tensor:
        z = check_features(features, dtype=F64).to(self.sum_outer.device)
        if z.shape[1] != self.num_features:
            raise ValueError(f"features have {z.shape[1]} columns but num_features={self.num_features}")
        return z

    def update(self, features: Tensor) -> None:  # type: ignore[override]
        """Add a batch of features (B, D) (any float dtype, float64 sums)."""
        z = self._batch(features)
        self.sum_outer += z.T @ z
        self.total += z.sum(0)
        self.n += z.shape[0]

    def _count(self, minimum: int) -> int:
        n = int(round(float(self.n)))
        if n < minimum:
            raise ValueError(f"{type(self).__name__} needs at least {minimum} samples across all updates, got {n}")
        return n


class RankMe(_SecondMoments):
    """RankMe (Garrido et al., ICML 2023, arXiv:2210.02885) of all features seen: exp of the entropy of
    σ_k/‖σ‖₁ + ε, σ the singular values of the uncentred feature matrix (:func:`src.baselines.rankme`)."""

    higher_is_better = BASELINES["rankme"].higher_is_better  # True
    plot_lower_bound = 0.0

    def __init__(self, num_features: int, eps: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self.eps = eps

    def compute(self) -> Tensor:
        return torch.tensor(rankme_from_gram(self.sum_outer, self._count(1), self.eps), dtype=F64)


class AlphaReQ(_SecondMoments):
    """α-ReQ (Agrawal et al., NeurIPS 2022) of all features seen: the power-law exponent of the covariance
    eigenspectrum over ranks ``fit_range`` (:func:`src.baselines.alpha_req`). α near 1 is best, so there is no
    monotone direction (``higher_is_better = None``)."""

    higher_is_better = BASELINES["alpha_req"].higher_is_better  # None

    def __init__(self, num_features: int, fit_range: tuple[int, int] = DEFAULT_FIT_RANGE, **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self.fit_range = tuple(fit_range)

    def compute(self) -> Tensor:
        n = self._count(2)
        return torch.tensor(alpha_req_from_moments(self.sum_outer, self.total, n, self.fit_range), dtype=F64)


class LogME(PlotMixin, Metric):
    """LogME (You et al., ICML 2021, arXiv:2102.11005) of all (features, labels) seen, from FᵀF, FᵀY, the class
    counts and n (module docstring); equal to :func:`src.baselines.logme` (default mode) on the same samples."""

    is_differentiable = False
    higher_is_better = BASELINES["logme"].higher_is_better  # True
    full_state_update = False

    def __init__(self, num_features: int, num_classes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_features = check_int(num_features, "num_features", 1)
        self.num_classes = check_int(num_classes, "num_classes", 2)
        d, c = self.num_features, self.num_classes
        self.add_state("gram", torch.zeros(d, d, dtype=F64), dist_reduce_fx="sum")
        self.add_state("fty", torch.zeros(d, c, dtype=F64), dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(c, dtype=F64), dist_reduce_fx="sum")

    def update(self, features: Tensor, labels: Tensor) -> None:  # type: ignore[override]
        """Add a batch: features (B, D) (any float dtype), labels (B,) int in [0, num_classes)."""
        f = check_features(features, dtype=F64).to(self.gram.device)
        if f.shape[1] != self.num_features:
            raise ValueError(f"features have {f.shape[1]} columns but num_features={self.num_features}")
        y, _ = check_labels(labels, f.shape[0], self.num_classes)
        onehot = torch.nn.functional.one_hot(y.to(f.device), self.num_classes).to(F64)
        self.gram += f.T @ f
        self.fty += f.T @ onehot
        self.counts += onehot.sum(0)

    def compute(self) -> Tensor:
        n = int(round(float(self.counts.sum())))
        if n < 2:
            raise ValueError(f"LogME needs at least 2 samples across all updates, got {n}")
        return torch.tensor(logme_from_moments(self.gram, self.fty, self.counts, n), dtype=F64)
