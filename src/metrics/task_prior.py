"""Task-Prior torchmetrics (Patel & Balestriero, "Task Priors", arXiv:2507.09871).

``TaskPriorMoments``: E[Tr(MG)] and Var(Tr(MG)) of Thm 2.3 for a FIXED image set of ``num_samples`` images, where M
is the evaluated model's centred cosine kernel and G ~ μ_K, the Task Prior of a prior kernel K (Def. 2.1)::

    metric = TaskPriorMoments(num_samples=n, eval_dim=D, prior_dim=D_K)   # T, scales: convention="repbench"
    metric.update(eval_features, prior_features, indices)   # rows of the image set, each index exactly once overall
    metric.compute()   # {"mean": E, "var": Var, "z": E / √Var}; every rank calls it

DDP: the states are the (n, D) feature tables and a seen-count per index, all sum-reduced. Each index is fed by
exactly one rank and the other ranks hold zeros there, so the sum is an exact gather. ``compute`` then checks that
every index was seen exactly once, splits the moment's row blocks round-robin over the ranks (``Shard``) and
all-reduces the partial sums (``src.utils.distributed``): every rank joins the same single collective, also when it
owns no block (more ranks than blocks), so no rank count can deadlock.

``TaskAccuracies``: per-task correct counts of many probes (sum-reduced), summarised as mean, variance and
quantiles of accuracy across tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ..methods.table import METHODS
from ..task_prior.config import TaskPriorConfig
from ..task_prior.conventions import TaskPriorConvention, resolve_convention
from ..task_prior.moments import kernel_scale, kernel_source, sharded_moment_sums
from ..task_prior.probing import DEFAULT_QUANTILES, accuracy_summary
from ..task_prior.validation import check_block_size
from ..utils.checks import check_int, check_tensor
from ..utils.distributed import Shard, no_reduce, process_seams
from ._plot import PlotMixin

__all__ = ["TaskAccuracies", "TaskPriorMoments"]

F64 = torch.float64


class TaskPriorMoments(PlotMixin, Metric):
    """Closed-form Task-Prior moments (Thm 2.3) of a fixed image set, streamed in any order and sharding.

    Args:
        num_samples: n, the size of the fixed image set (indices passed to ``update`` lie in [0, n)).
        eval_dim: D of the evaluated features; prior_dim: D of the prior features.
        temperature: T > 0 of the Gibbs measure μ_K(G) ∝ exp(Tr(GK)/T); None = the convention's.
        block_size: rows of the (block, n) kernel slabs (memory O(block · n), never n × n).
        eval_scale, prior_scale: ``"frobenius"`` (divide the kernel by its Frobenius norm) or ``"none"``; None = the
            convention's.
        convention: ``"repbench"`` (default: T = 0.01, M/‖M‖_F, raw K; docs/task_prior.md, "Scales"), ``"paper"``,
            ``"authors"`` or a ``TaskPriorConvention``: the preset of the three options above, as in
            ``src.task_prior.task_prior_moments``; an explicit value (not None) wins.
    """

    is_differentiable = False
    higher_is_better = METHODS["task_prior"].metric_direction()  # None: E and z up, Var none (src.methods)
    full_state_update = False

    def __init__(
        self,
        num_samples: int,
        eval_dim: int,
        prior_dim: int,
        temperature: float | None = None,
        *,
        block_size: int = TaskPriorConfig.block_size,
        eval_scale: str | None = None,
        prior_scale: str | None = None,
        convention: str | TaskPriorConvention = TaskPriorConfig.convention,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.num_samples = check_int(num_samples, "num_samples", 1)
        self.eval_dim = check_int(eval_dim, "eval_dim", 1)
        self.prior_dim = check_int(prior_dim, "prior_dim", 1)
        #: T and the kernel scales, resolved and checked once (src.task_prior.conventions)
        self.settings = resolve_convention(
            convention, temperature=temperature, eval_scale=eval_scale, prior_scale=prior_scale
        )
        self.temperature = self.settings.temperature
        self.eval_scale, self.prior_scale = self.settings.eval_scale, self.settings.prior_scale
        self.block_size = check_block_size(block_size)
        self.add_state("eval_features", torch.zeros(self.num_samples, self.eval_dim, dtype=F64), dist_reduce_fx="sum")
        self.add_state("prior_features", torch.zeros(self.num_samples, self.prior_dim, dtype=F64), dist_reduce_fx="sum")
        self.add_state("seen", torch.zeros(self.num_samples, dtype=F64), dist_reduce_fx="sum")

    def update(self, eval_features: Tensor, prior_features: Tensor, indices: Tensor) -> None:  # type: ignore[override]
        """Write rows ``indices`` of the image set: eval_features (B, eval_dim), prior_features (B, prior_dim)."""
        check_tensor(eval_features, "eval_features", f"(B, {self.eval_dim})")
        check_tensor(prior_features, "prior_features", f"(B, {self.prior_dim})")
        indices = torch.as_tensor(indices).reshape(-1).to(device=self.seen.device, dtype=torch.long)
        b = indices.numel()
        for name, f, d in (
            ("eval_features", eval_features, self.eval_dim),
            ("prior_features", prior_features, self.prior_dim),
        ):
            if f.dim() != 2 or f.shape != (b, d):
                raise ValueError(
                    f"{name} must have shape ({b}, {d}) for {b} indices, got {tuple(f.shape)}; eval and prior features "
                    "must describe the same images, one row per index"
                )
            if not torch.isfinite(f).all():
                raise ValueError(f"{name} contain NaN/inf; check the backbone output (e.g. a diverged training run)")
        if b == 0:
            return
        if int(indices.min()) < 0 or int(indices.max()) >= self.num_samples:
            raise ValueError(
                f"indices must lie in [0, {self.num_samples}) (num_samples), got [{int(indices.min())}, "
                f"{int(indices.max())}]"
            )
        if indices.unique().numel() != b or bool((self.seen[indices] > 0).any()):
            raise ValueError("an index was given twice: feed every image of the fixed set exactly once per reset()")
        self.eval_features[indices] = eval_features.detach().to(self.eval_features.device, F64)
        self.prior_features[indices] = prior_features.detach().to(self.prior_features.device, F64)
        self.seen[indices] += 1.0

    def _check_complete(self) -> None:
        missing = (self.seen == 0).nonzero().reshape(-1)
        twice = (self.seen > 1).nonzero().reshape(-1)
        if len(missing) or len(twice):
            raise RuntimeError(
                f"TaskPriorMoments needs every index in [0, {self.num_samples}) exactly once across all ranks: "
                f"{len(missing)} missing (e.g. {missing[:5].tolist()}), {len(twice)} given more than once "
                f"(e.g. {twice[:5].tolist()}); give each rank a disjoint share of the fixed image set"
            )

    def compute(self) -> dict[str, Tensor]:
        self._check_complete()  # the synced states are identical on every rank: all raise or none does
        # synced states are complete on every rank: split the row blocks over the ranks and sum; unsynced (one
        # process, or sync_on_compute=False) the local states are the whole set: compute every block here
        shard, reduce = process_seams() if self._is_synced else (Shard(), no_reduce)
        msrc = kernel_source(self.eval_features, None, "eval")
        ksrc = kernel_source(self.prior_features, None, "prior")
        sums = sharded_moment_sums(
            msrc,
            ksrc,
            self.temperature,
            shard=shard,
            block_size=self.block_size,
            eval_norm=kernel_scale(msrc, self.eval_scale, "eval_scale"),
            prior_norm=kernel_scale(ksrc, self.prior_scale, "prior_scale"),
        )
        sums = reduce(sums.to(F64))
        mean, var = sums[0], sums[1]
        z = mean / var.sqrt() if float(var) > 0 else torch.tensor(float("inf"), dtype=F64)
        return {"mean": mean, "var": var, "z": z}


def _check_logits_and_labels(logits: Tensor, labels: Tensor) -> None:
    """Finite logits and integer labels in [0, q) (q = logits.shape[-1]); else a ValueError naming the fix.

    A NaN row's argmax is index 0 (it would count as correct for label 0) and a label outside [0, q) can never be
    predicted (it would count as wrong): both would bias the accuracy silently."""
    if not bool(torch.isfinite(logits).all()):
        bad = int((~torch.isfinite(logits)).any(-1).sum())
        raise ValueError(
            f"TaskAccuracies: logits contain NaN/inf in {bad} row(s); the argmax of such a row is meaningless. "
            "Check the probe (e.g. a diverged training run: lower the learning rate) before scoring it"
        )
    q = logits.shape[-1]
    if labels.numel() == 0:
        return
    lab = labels.to(torch.float64) if labels.is_floating_point() else labels
    ok = (lab >= 0) & (lab < q)
    if labels.is_floating_point():
        ok &= lab == lab.round()
    if not bool(ok.all()):
        raise ValueError(
            f"TaskAccuracies: labels must be integer classes in [0, {q}) (q = logits.shape[-1] = {q}), got values in "
            f"[{float(lab.min())}, {float(lab.max())}]; remap the labels to 0..q-1 or give the logits q columns"
        )


class TaskAccuracies(PlotMixin, Metric):
    """Held-out accuracy of ``num_tasks`` probes at once: states ``correct`` (num_tasks,) and ``total`` (sum-reduced).

    ``update(logits (T, B, q), labels (T, B))``; ``compute()`` -> {"acc_mean", "acc_var", "acc_std", "acc_q10", ...}
    (population variance and linear-interpolation quantiles across tasks, ``accuracy_summary``).
    ``accuracies()`` gives the per-task vector.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    plot_lower_bound = 0.0  # accuracies (and their quantiles) lie in [0, 1]
    plot_upper_bound = 1.0

    def __init__(self, num_tasks: int, quantiles: Sequence[float] = DEFAULT_QUANTILES, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_tasks = check_int(num_tasks, "num_tasks", 1)
        self.quantiles = tuple(float(q) for q in quantiles)
        self.add_state("correct", torch.zeros(self.num_tasks, dtype=F64), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros((), dtype=F64), dist_reduce_fx="sum")

    def update(self, logits: Tensor, labels: Tensor) -> None:  # type: ignore[override]
        """Add a batch: ``logits`` (num_tasks, B, q) finite scores, ``labels`` (num_tasks, B) classes in [0, q)."""
        for name, t in (("logits", logits), ("labels", labels)):
            if not isinstance(t, Tensor):
                raise TypeError(f"TaskAccuracies.update: {name} must be a torch.Tensor, got {type(t).__name__}")
        if logits.dim() != 3 or logits.shape[0] != self.num_tasks or labels.shape != logits.shape[:2]:
            raise ValueError(
                f"expected logits ({self.num_tasks}, B, q) and labels ({self.num_tasks}, B), got "
                f"{tuple(logits.shape)} and {tuple(labels.shape)}"
            )
        _check_logits_and_labels(logits, labels)
        self.correct += (logits.argmax(-1) == labels).sum(-1).to(F64)
        self.total += labels.shape[1]

    def accuracies(self) -> Tensor:
        if float(self.total) <= 0:
            raise RuntimeError("TaskAccuracies has no samples: update() was never called with a non-empty batch")
        return self.correct / self.total

    def compute(self) -> dict[str, Tensor]:
        return {k: torch.tensor(v, dtype=F64) for k, v in accuracy_summary(self.accuracies(), self.quantiles).items()}
