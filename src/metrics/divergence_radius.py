"""``DivergenceRadius`` and ``CosineRobustness`` torchmetrics: mean per-image robustness per perturbation
(Liu et al., "Robustness of Vision Foundation Models to Common Perturbations", arXiv:2604.14973, §3.1, §3.3).

States are per-perturbation sums of values and counts (float64, ``dist_reduce_fx="sum"``), so the result under DDP
equals the single-process one whatever the split of images over ranks (a rank with no images holds zeros and still
joins the sync in ``compute()``).

    metric = DivergenceRadius(["jpeg_compression", "fog"])
    metric.update(embeddings)            # (N, P, n, D): per image, per perturbation, the clean + m perturbed embeddings
    metric.update(emb, "fog")            # or (N, n, D) for one perturbation
    metric.update_values(r_dr)           # or precomputed per-image values (N, P) (e.g. SweepOutput.r_dr)
    metric.compute()                     # {"jpeg_compression": ..., "fog": ..., "mean": ...}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ..divergence_radius.config import DivergenceRadiusConfig
from ..divergence_radius.metrics import cosine_robustness, divergence_radius
from ..divergence_radius.protocol import PerturbationCache, robustness_sweep
from ..features import FeatureExtractor
from ..methods.table import METHODS
from ..utils.distributed import Shard, all_reduce_sum, no_reduce, raise_if_any_failed
from ._plot import PlotMixin

__all__ = ["DivergenceRadius", "CosineRobustness", "robustness_metrics"]

F64 = torch.float64

#: Rounding slack of a per-image value computed elsewhere (e.g. in float32). R_cs = (1 − cos)/2 and R_dr of unit
#: vectors lie in [0, 1] exactly; a float32 dot product of two unit vectors of dimension D errs by at most
#: γ_D ≈ D·u (Higham, "Accuracy and Stability of Numerical Algorithms", Thm 3.1; u = 2^-24), i.e. <= 2^-10 for
#: D <= 2^14. Values within this slack of [0, 1] are rounding and are clipped to it; anything further out is a bug.
VALUE_SLACK = 2.0**-10


class _PerPerturbationMean(PlotMixin, Metric):
    is_differentiable = False
    higher_is_better = METHODS["divergence_radius"].metric_direction()  # False: larger = less robust
    full_state_update = False
    plot_lower_bound = 0.0  # R_dr and R_cs lie in [0, 1]
    plot_upper_bound = 1.0
    _value_fn: Callable[[Tensor], Tensor]
    _meaning: str  # what one per-image value is, and why it lies in [0, 1] (for the range error)

    def __init__(self, perturbations: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        names = tuple(perturbations)
        if not names or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"perturbations must be distinct non-empty names, got {list(perturbations)}")
        self.names = names
        self.add_state("total", torch.zeros(len(names), dtype=F64), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros(len(names), dtype=F64), dist_reduce_fx="sum")

    def _column(self, perturbation: str) -> int:
        if perturbation not in self.names:
            raise ValueError(f"unknown perturbation {perturbation!r}; this metric tracks {list(self.names)}")
        return self.names.index(perturbation)

    def update_values(self, values: Tensor, perturbation: str | None = None) -> None:
        """Add per-image values: (N, P) in the order of ``perturbations``, or (N,) for one ``perturbation``.

        Values must lie in [0, 1] (the range of R_dr and R_cs); values within :data:`VALUE_SLACK` of it (float
        rounding) are clipped to it, others raise a ValueError."""
        self.update(None, perturbation, values=values)

    def update(  # type: ignore[override]
        self, embeddings: Tensor | None = None, perturbation: str | None = None, *, values: Tensor | None = None
    ) -> None:
        """Add embeddings: (N, P, n, D) for every perturbation, or (N, n, D) for one ``perturbation``; each set of n
        points holds the clean embedding and the m perturbed ones (normalised inside). Or precomputed per-image
        ``values`` (see :meth:`update_values`)."""
        if (embeddings is None) == (values is None):
            raise ValueError("pass either embeddings or values=")
        if embeddings is not None:
            if not isinstance(embeddings, Tensor):
                raise TypeError(f"embeddings must be a tensor, got {type(embeddings).__name__}")
            want = 3 if perturbation is not None else 4
            if embeddings.dim() != want:
                shape = "(N, n, D) for one perturbation" if perturbation is not None else "(N, P, n, D)"
                raise ValueError(f"embeddings must be {shape}, got {tuple(embeddings.shape)}")
            values = type(self)._value_fn(embeddings)
        v = _check_range(
            torch.as_tensor(values).to(device=self.total.device, dtype=F64), type(self).__name__, self._meaning
        )
        if perturbation is None:
            if v.dim() != 2 or v.shape[1] != len(self.names):
                raise ValueError(
                    f"values must be (N, {len(self.names)}) (one column per perturbation {list(self.names)}), "
                    f"got {tuple(v.shape)}; pass perturbation=<name> for a single column"
                )
            self.total += v.sum(0)
            self.count += v.shape[0]
        else:
            if v.dim() != 1:
                raise ValueError(f"values for one perturbation must be (N,), got {tuple(v.shape)}")
            j = self._column(perturbation)
            self.total[j] += v.sum()
            self.count[j] += v.shape[0]

    def compute(self) -> dict[str, Tensor]:
        """{perturbation: mean over images, "mean": mean over perturbations}; raises if a perturbation saw no image."""
        if not bool((self.count > 0).all()):
            missing = [n for n, c in zip(self.names, self.count.tolist()) if c <= 0]
            raise RuntimeError(f"{type(self).__name__}: no images were added for perturbation(s) {missing}")
        means = self.total / self.count
        out = {name: means[i] for i, name in enumerate(self.names)}
        out["mean"] = means.mean()
        return out


def _check_range(v: Tensor, metric: str, meaning: str) -> Tensor:
    """Per-image values ``v`` inside [0, 1] up to :data:`VALUE_SLACK` (then clipped to [0, 1]), else a ValueError."""
    if not bool(torch.isfinite(v).all()):
        raise ValueError(f"{metric}: non-finite per-image values (NaN/inf); check the embeddings that produced them")
    if v.numel() and not bool(((v >= -VALUE_SLACK) & (v <= 1.0 + VALUE_SLACK)).all()):
        raise ValueError(
            f"{metric}: per-image values must lie in [0, 1], got values in [{float(v.min())}, {float(v.max())}]; "
            f"each value is {meaning}, so it cannot leave [0, 1]. Pass the values of "
            "src.divergence_radius.divergence_radius / cosine_robustness (or SweepOutput.r_dr / r_cs), in the column order "
            "of `perturbations`"
        )
    return v.clamp(0.0, 1.0)


class DivergenceRadius(_PerPerturbationMean):
    """Mean DivergenceRadius R_dr (radius of the minimum enclosing ball of the unit embeddings; §3.3, eq. 10)."""

    _value_fn = staticmethod(divergence_radius)
    _meaning = (
        "R_dr, the radius of the minimum enclosing ball of unit-normalised embeddings (>= 0, and <= 1 because the "
        "origin is within distance 1 of every unit vector)"
    )


class CosineRobustness(_PerPerturbationMean):
    """Mean cosine robustness R_cs = (1 − min pairwise cos) / 2 (§3.1, eq. 6)."""

    _value_fn = staticmethod(cosine_robustness)
    _meaning = "R_cs = (1 − min pairwise cosine)/2, and a cosine lies in [−1, 1]"


def robustness_metrics(
    images: Tensor,
    feature_fn: Callable[[Tensor], Tensor] | FeatureExtractor,
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    perturbations: Sequence[str] | None = None,
    m: int | None = None,
    mode: str | None = None,
    seed: int | None = None,
    chunk_size: int | None = None,
    rank: int = 0,
    world_size: int = 1,
    device: str | torch.device | None = None,
    perturbed: PerturbationCache | None = None,
) -> dict[str, float]:
    """The sweep of ``config`` (:class:`~src.divergence_radius.config.DivergenceRadiusConfig`, a mapping of its fields or
    None for its defaults; the keyword arguments override its fields when not None) on this rank's chunks of
    ``images`` through both metrics; every rank must call it (``compute`` syncs). Returns
    {"divergence_radius/<name>", "divergence_radius/mean", "cosine_robustness/<name>", ...}.

    ``perturbed``: the perturbed versions of ``images`` drawn once by
    :func:`~src.divergence_radius.protocol.cache_perturbations` with the same config, ``shard=Shard(rank,
    world_size)`` and ``device`` (then only the forwards and MEBs run; the values are bit-identical). A cache of
    other images, config, shard or device is refused (ValueError, raised on every rank)."""
    error: BaseException | None = None
    try:
        cfg = DivergenceRadiusConfig.coerce(
            config, perturbations=perturbations, m=m, mode=mode, seed=seed, chunk_size=chunk_size
        )
        out = robustness_sweep(
            images, feature_fn, cfg, shard=Shard(rank, world_size), device=device, perturbed=perturbed
        )
    except Exception as exc:  # every rank learns of it below instead of blocking in the metrics' sync
        error = exc
    raise_if_any_failed(error, all_reduce_sum if world_size > 1 else no_reduce)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    result: dict[str, float] = {}
    for family, metric, values in (
        ("divergence_radius", DivergenceRadius(out.names).to(dev), out.r_dr),
        ("cosine_robustness", CosineRobustness(out.names).to(dev), out.r_cs),
    ):
        metric.update_values(values)
        result.update({f"{family}/{k}": float(v) for k, v in metric.compute().items()})
    return result
