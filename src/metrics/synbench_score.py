"""``SynBenchScore``: SynBench-Score (synbench_icml2024.txt eq. 3, Algorithm 1) as a torchmetric, on sum-reduced
sufficient statistics so that it is exact under DDP.

Algorithm 1 is two-pass per s value: the robust Bayes classifier is fitted on the training features, then scored on
the test features. Protocol, for every s index ``i`` of ``s_values``::

    metric.update_train(z, y)          # any number of batches, each rank its own shard
    metric.fit(i)                      # all-reduces the training statistics (count, sums, outer products), builds W
    metric.update(z, y, i)             # test batches of s_i; states: n_correct, sum_bound, n_total (sum-reduced)
    metric.compute()                   # {"score": ..., "score_eps_<e>": ..., "best_eps": ...}; all ranks call it

Training statistics are accumulated about a zero shift in float64 (every rank must agree on the shift for a
sum-reduction; float64 keeps ~8 significant digits of the covariance even when |mean| is 10⁴ × the spread).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from src.synbench.bayes import (
    LinearClassifiers,
    TrainStats,
    classifier_from_statistics,
    finalize_test_statistics,
    test_statistics,
)
from src.synbench.config import SynBenchConfig
from src.synbench.runner import SynBenchResult, reference_prior, sampling_plan
from src.synbench.sampling import sample_chunk
from src.synbench.theory import reference_curve
from src.utils import format_eps

__all__ = ["SynBenchScore", "shard_batches", "synbench_distributed"]

F64 = torch.float64


def _all_reduce_sum(t: Tensor) -> Tensor:
    if (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    ):
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return t


class SynBenchScore(Metric):
    """SynBench-Score of a representation from streamed features (see module docstring for the protocol).

    Args:
        config: the protocol (s grid, ε grid, a_T, eps_mode, integral, norm, covariance divisor, eig_tol, τ).
        margin_scale: κ of the reference for a non-identity pixel covariance (1 for Gaussian-I).
        input_shape: recorded in :meth:`result` only.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(
        self,
        config: SynBenchConfig | None = None,
        *,
        margin_scale: float = 1.0,
        input_shape: Sequence[int] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config = config or SynBenchConfig()
        self.input_shape = tuple(int(v) for v in input_shape)
        tau = reference_prior(self.config)
        ref_a, ref_b = reference_curve(torch.tensor(self.config.s_values, dtype=F64), tau, margin_scale)
        self.ref_a, self.ref_b = ref_a.cpu(), ref_b.cpu()
        n_s, n_e = len(self.config.s_values), len(self.config.eps)
        self.add_state("n_correct", torch.zeros(n_s, n_e, dtype=F64), dist_reduce_fx="sum")
        self.add_state("sum_bound", torch.zeros(n_s, n_e, dtype=F64), dist_reduce_fx="sum")
        self.add_state("n_total", torch.zeros(n_s, dtype=F64), dist_reduce_fx="sum")
        self._train: TrainStats | None = None
        self._classifiers: dict[int, LinearClassifiers] = {}
        self.feature_dim = 0
        self.last_result: SynBenchResult | None = None

    # ------------------------------------------------------------------ training pass of one s
    def update_train(self, z: Tensor, y: Tensor) -> None:
        """Add a batch of training features (N, D) with labels in {0, 1} (1 <-> +μ)."""
        z = z.reshape(z.shape[0], -1)
        if self._train is None:
            self._train = TrainStats.zeros(z.shape[1], device=self.n_total.device)
        self._train.update(z, y)

    def fit(self, s_index: int) -> LinearClassifiers:
        """All-reduce the training statistics of s_index, build the ε-robust classifiers, drop the statistics."""
        if self._train is None:
            # a rank without training samples still joins the all-reduce with zeros of the right size
            if not self.feature_dim:
                raise ValueError("fit() before any update_train(): no training features for this s")
            self._train = TrainStats.zeros(self.feature_dim, device=self.n_total.device)
        st = self._train
        for t in (st.count, st.sum, st.sum_outer):
            _all_reduce_sum(t)
        cfg = self.config
        tau = reference_prior(cfg)
        clf = classifier_from_statistics(
            st, cfg.eps, cfg.eps_mode, norm=cfg.norm, eig_tol=cfg.eig_tol, cov_divisor=cfg.cov_divisor, class_prior=tau
        )
        self.feature_dim = st.shift.numel()
        self._classifiers[int(s_index)] = clf
        self._train = None
        return clf

    # ------------------------------------------------------------------ test pass (torchmetrics states)
    def update(self, z: Tensor, y: Tensor, s_index: int) -> None:  # type: ignore[override]
        """Add a batch of test features of s value ``s_index`` (after :meth:`fit` for that index)."""
        if int(s_index) not in self._classifiers:
            raise RuntimeError(f"call fit({s_index}) after the training batches of s index {s_index} before update()")
        ts = test_statistics(z.reshape(z.shape[0], -1), y, self._classifiers[int(s_index)])
        self.n_correct[s_index] += ts.n_correct.to(self.n_correct.device)
        self.sum_bound[s_index] += ts.sum_bound.to(self.sum_bound.device)
        self.n_total[s_index] += ts.n_total.to(self.n_total.device)

    def compute(self) -> dict[str, Tensor]:
        """Scores at every ε for a_T = config.a_T[0]: ``score`` (ε = config.eps[0]), ``score_eps_<ε>``, ``best_eps``."""
        if not bool((self.n_total > 0).all()):
            missing = [s for s, n in zip(self.config.s_values, self.n_total.tolist()) if n <= 0]
            raise RuntimeError(f"SynBenchScore has no test samples for s = {missing}")
        from src.synbench.bayes import TestStats

        acc = torch.empty_like(self.n_correct)
        bnd = torch.empty_like(self.sum_bound)
        for i in range(len(self.config.s_values)):
            acc[i], bnd[i] = finalize_test_statistics(TestStats(self.n_correct[i], self.sum_bound[i], self.n_total[i]))
        self.last_result = SynBenchResult(
            self.config, self.input_shape, self.feature_dim, acc.cpu(), bnd.cpu(), self.ref_a, self.ref_b, {}
        )
        scores = {e: self.last_result.score(e) for e in self.config.eps}
        out = {f"score_eps_{format_eps(e)}": torch.tensor(v, dtype=F64) for e, v in scores.items()}
        out["score"] = torch.tensor(scores[self.config.eps[0]], dtype=F64)
        out["best_eps"] = torch.tensor(self.last_result.best_eps(), dtype=F64)
        return out

    def reset(self) -> None:
        super().reset()
        self._train = None
        self._classifiers = {}


def shard_batches(n: int, rank: int, world_size: int, **sample_kwargs: Any) -> Iterator[tuple[Tensor, Tensor]]:
    """This rank's chunks (rank, rank + world, ...) of samples 0..n−1 of one split: the same samples as the
    single-process runner, whatever the number of processes."""
    cs = int(sample_kwargs["chunk_size"])
    for chunk in range(rank, math.ceil(n / cs), world_size):
        x, y = sample_chunk(chunk, **sample_kwargs)
        keep = min(cs, n - chunk * cs)
        yield x[:keep], y[:keep]


def _finite(z: Tensor, s: float) -> Tensor:
    if not torch.isfinite(z).all():
        raise FloatingPointError(f"SynBench: the feature function returned NaN/inf features on synthetic data (s={s})")
    return z.reshape(z.shape[0], -1)


def synbench_distributed(
    feature_fn: Callable[[Tensor], Tensor],
    input_shape: Sequence[int],
    config: SynBenchConfig,
    *,
    device: Any = "cpu",
    rank: int = 0,
    world_size: int = 1,
) -> tuple[dict[str, float], SynBenchResult]:
    """Algorithm 1 with the synthetic data sharded over ``world_size`` ranks (all must call it) and a
    :class:`SynBenchScore` all-reducing the statistics; returns (its ``compute()`` as floats, the result).

    Samples are those of :func:`src.synbench.synbench` (same seed, chunks, normalization), so a single process
    reproduces the runner exactly; the feature function runs under ``torch.no_grad`` in the caller's mode.
    """
    cfg, shape = config, tuple(int(v) for v in input_shape)
    common, kappa = sampling_plan(cfg, shape, feature_fn)
    metric = SynBenchScore(cfg, margin_scale=kappa, input_shape=shape).to(device)
    with torch.no_grad():
        for i, s in enumerate(cfg.s_values):
            for x, y in shard_batches(cfg.n_train, rank, world_size, s=s, split="train", **common):
                metric.update_train(_finite(feature_fn(x.to(device)), s), y.to(device))
            metric.fit(i)
            for x, y in shard_batches(cfg.n_test, rank, world_size, s=s, split="test", **common):
                metric.update(_finite(feature_fn(x.to(device)), s), y.to(device), i)
        out = {k: float(v) for k, v in metric.compute().items()}
    return out, metric.last_result
