"""``SynBenchScore``: SynBench-Score (Ko et al., ICML 2024, arXiv:2210.02989, eq. 3, Algorithm 1) as a
torchmetric over sum-reduced test statistics, exact under DDP.

``update(feature_fn)`` runs THE protocol loop (:func:`src.synbench.protocol.run_protocol`) with this process's
seams (:func:`src.utils.distributed.process_seams`): each rank draws only its round-robin chunks, the training
statistics of every s are summed across ranks inside the loop (the classifier needs all of them before any test
sample is scored), and this rank's test sums are added to the states (``dist_reduce_fx="sum"``). ``compute()``
(every rank calls it) sums the states and returns the scores. Results equal :func:`src.synbench.synbench` on the
same samples, whatever the number of processes (up to float summation order).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ..methods.table import METHODS
from ..synbench.config import SynBenchConfig
from ..synbench.plan import MeanStd, SamplingPlan, check_input_shape, check_normalization_shape, margin_scale
from ..synbench.protocol import frozen, make_extract, run_protocol
from ..synbench.result import SynBenchResult
from ..synbench.runner import sampling_device
from ..utils import format_eps
from ..utils.distributed import process_seams
from ._plot import PlotMixin

__all__ = ["SynBenchScore", "synbench_distributed", "scores_of", "score_values"]

F64 = torch.float64


def score_values(result: SynBenchResult) -> dict[str, float]:
    """The scores at a_T = config.a_T[0] (higher is better): ``score_eps_<ε>`` per ε and ``score`` (ε = eps[0])."""
    eps = result.config.eps
    out = {f"score_eps_{format_eps(e)}": result.score(e) for e in eps}
    out["score"] = result.score(eps[0])
    return out


def scores_of(result: SynBenchResult) -> dict[str, float]:
    """What the callback logs: :func:`score_values` and ``best_eps``, the ε of the largest score (a choice of ε,
    not a score: it is not "higher is better")."""
    return {**score_values(result), "best_eps": result.best_eps()}


class SynBenchScore(PlotMixin, Metric):
    """SynBench-Score of a feature function on the protocol ``config`` (see module docstring).

    Args:
        config: the protocol (s grid, ε grid, a_T, eps_mode, integral, norm, covariance divisor, eig_tol, τ, ...).
        input_shape: shape of one synthetic sample: (C, H, W) images or any other, e.g. (d,) vectors with
            ``normalization="none"`` (:func:`~src.synbench.plan.check_input_shape`).
        backbone_mean_std: the normalisation inside ``feature_fn`` (None: auto-detected, see ``synbench()``).
        extractor: options of :class:`src.features.FeatureExtractor`.

    States (all sum-reduced): ``n_correct`` (S, E), ``sum_bound`` (S, E), ``n_total`` (S,), ``feature_dim`` (1,)
    (the dimension times the number of updating ranks' contributions; see :meth:`result`).

    Outputs: :meth:`compute` gives the scores only (``higher_is_better`` refers to them; >= 0, 1 = the reference); the ε that
    maximises the score is a separate output, :meth:`best_eps` (``scores_of`` adds it for logging).

    Why ``update`` takes a feature function and no feature tensors: SynBench scores a representation on ITS OWN
    synthetic data. For every s the protocol draws class-conditional Gaussian images from the config's seeds (each
    rank its chunks), forwards them, and needs the training statistics of ALL ranks (summed) before any test sample
    is scored with the ε-robust classifiers. Features of other images are not SynBench, and a tensor form per s
    (``update_features(s, train_z, train_y, test_z, test_y)``) would need the per-s body of
    :func:`src.synbench.protocol.run_protocol` (train statistics -> classifiers -> test sums) as a function of its
    own; until then the protocol stays in one loop (design: "one loop per protocol").
    """

    is_differentiable = False
    higher_is_better = METHODS["synbench"].metric_direction()  # True: the scores; best_eps() is not a score
    full_state_update = False
    plot_lower_bound = 0.0  # scores are >= 0; no upper bound: a finite-sample score can exceed 1 (synbench/score.py)

    def __init__(
        self,
        config: SynBenchConfig | None = None,
        *,
        input_shape: Sequence[int] = (3, 32, 32),
        backbone_mean_std: MeanStd | None = None,
        extractor: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config = config or SynBenchConfig()
        if self.config.proxy is not None:  # never silently ignored: only synbench() computes it
            raise ValueError(
                "SynBenchConfig.proxy (the proxy task's SA / RA, the paper's Table 1) is computed by synbench() (python "
                "-m src.synbench, the report), not by SynBenchScore or SynBenchCallback; set proxy=None here"
            )
        self.input_shape = check_input_shape(input_shape)
        check_normalization_shape(self.config.normalization, self.input_shape)
        self.backbone_mean_std = backbone_mean_std
        self.extractor = dict(extractor or {})
        n_s, n_e = len(self.config.s_values), len(self.config.eps)
        self.add_state("n_correct", torch.zeros(n_s, n_e, dtype=F64), dist_reduce_fx="sum")
        self.add_state("sum_bound", torch.zeros(n_s, n_e, dtype=F64), dist_reduce_fx="sum")
        self.add_state("n_total", torch.zeros(n_s, dtype=F64), dist_reduce_fx="sum")
        self.add_state("n_updates", torch.zeros(1, dtype=F64), dist_reduce_fx="sum")
        self.add_state("dim_sum", torch.zeros(1, dtype=F64), dist_reduce_fx="sum")

    def update(self, feature_fn: Callable[[Tensor], Tensor]) -> None:  # type: ignore[override]
        """Run the protocol on ``feature_fn`` (an nn.Module behind it runs in eval mode, modes restored) with this
        process's shard; every process of the group must call it (the training statistics are all-reduced)."""
        cfg, dev = self.config, self.n_total.device
        shard, reduce = process_seams()
        plan = SamplingPlan.from_config(
            cfg, self.input_shape, feature_fn, self.backbone_mean_std, sampling_device(cfg, dev)
        )
        extract = make_extract(feature_fn, dev, self.extractor, cfg.batch_size)
        with frozen(feature_fn):
            stats = run_protocol(extract, plan, cfg, shard, reduce, device=dev)
        self.n_correct += stats.n_correct.to(dev)
        self.sum_bound += stats.sum_bound.to(dev)
        self.n_total += stats.n_total.to(dev)
        self.n_updates += 1.0
        self.dim_sum += float(stats.feature_dim)

    def _result(self) -> SynBenchResult:
        if not bool((self.n_updates > 0).all()):
            raise RuntimeError("SynBenchScore.compute() before any update(feature_fn)")
        dim = int(round(float(self.dim_sum) / float(self.n_updates)))
        return SynBenchResult.from_sums(
            self.config,
            self.input_shape,
            dim,
            self.n_correct,
            self.sum_bound,
            self.n_total,
            margin_scale(self.config, self.input_shape),
        )

    def result(self) -> SynBenchResult:
        """The :class:`SynBenchResult` of the summed states (synchronised: every process must call it)."""
        with self.sync_context():
            return self._result()

    def compute(self) -> dict[str, Tensor]:
        """Scores at a_T = config.a_T[0] (float64, higher is better): ``score`` (ε = eps[0]) and ``score_eps_<ε>``.
        The maximising ε is :meth:`best_eps`."""
        return {k: torch.tensor(v, dtype=F64) for k, v in score_values(self._result()).items()}

    def best_eps(self) -> float:
        """The ε of the largest score at a_T = config.a_T[0] (:meth:`SynBenchResult.best_eps`; synchronised like
        :meth:`result`): an input choice, reported next to the scores, not a score to maximise."""
        return self.result().best_eps()


def synbench_distributed(
    feature_fn: Callable[[Tensor], Tensor],
    input_shape: Sequence[int],
    config: SynBenchConfig,
    *,
    device: Any = "cpu",
    backbone_mean_std: MeanStd | None = None,
    extractor: Mapping[str, Any] | None = None,
) -> tuple[dict[str, float], SynBenchResult]:
    """SynBench sharded over this process group (every process must call it; one process: ``synbench()``):
    returns (:func:`scores_of` the result, the result)."""
    metric = SynBenchScore(
        config, input_shape=input_shape, backbone_mean_std=backbone_mean_std, extractor=extractor
    ).to(device)
    metric.update(feature_fn)
    result = metric.result()
    return scores_of(result), result
