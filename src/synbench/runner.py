"""``synbench()``: score a representation with SynBench in one process (ICML 2024 paper, Algorithm 1).

A thin adapter over THE protocol loop (:func:`src.synbench.protocol.run_protocol`) with the single-process seams
(``Shard()``, ``no_reduce``). Per s: sample train batches → features → additive float64 statistics → one
eigendecomposition → W for every ε → sample test batches → accuracy and mean scaled bound per ε. Only one s's
statistics (a D×D matrix) live at a time, so peak memory does not grow with the number of s values.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from ..utils.distributed import Shard, no_reduce
from .config import SynBenchConfig
from .plan import MeanStd, SamplingPlan, pixel_transform, reference_prior, resolve_backbone_mean_std
from .protocol import frozen, make_extract, run_protocol
from .proxy import proxy_accuracy
from .result import SynBenchResult

Tensor = torch.Tensor

__all__ = [
    "synbench",
    "SynBenchResult",
    "pixel_transform",
    "reference_prior",
    "resolve_backbone_mean_std",
    "sampling_device",
]


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[int], None]]:
    """rich progress bar when requested and importable, else a no-op."""
    if enabled:
        try:
            from rich.progress import Progress
        except ImportError:  # pragma: no cover - rich is a dependency
            enabled = False
    if not enabled:
        yield lambda n: None
        return
    with Progress(transient=True) as bar:
        task = bar.add_task("SynBench", total=total)
        yield lambda n: bar.advance(task, n)


def sampling_device(cfg: SynBenchConfig, device: Any) -> torch.device:
    """Where samples are drawn: the feature device. The chunks' Philox streams give the same samples on every device
    (:mod:`src.synbench.sampling`), so drawing where the features are computed costs no reproducibility and saves the
    host-to-device copy; ``cfg.sample_on_device`` is deprecated and has no effect."""
    return torch.device(device)


def synbench(
    feature_fn: Callable[[Tensor], Tensor],
    *,
    input_shape: Sequence[int],
    config: SynBenchConfig | None = None,
    device: Any = "cpu",
    progress: bool = False,
    backbone_mean_std: MeanStd | None = None,
    extractor: Mapping[str, Any] | None = None,
) -> SynBenchResult:
    """Run SynBench (Algorithm 1) on ``feature_fn``: (B, *input_shape) float → (B, D) (a Backbone's ``embed``).

    ``backbone_mean_std``: the (mean, std) ``feature_fn`` normalises with internally; None auto-detects a
    Backbone's ``mean``/``std`` (pass ((0,)*C, (1,)*C) for a plain function that normalises nothing). It
    matters only for how ``config.normalization`` is realised, see :func:`pixel_transform`. An nn.Module
    behind ``feature_fn`` is put in eval mode for the run and restored afterwards. ``extractor``: options of
    :class:`src.features.FeatureExtractor` (``max_batch`` defaults to ``config.batch_size``). With ``config.proxy``
    set, the result also holds the paper's Table 1 SA / RA of a linear probe on the proxy task
    (:func:`src.synbench.proxy.proxy_accuracy`, ``result.proxy``; its time in ``timings["proxy_s"]``).
    """
    cfg = config or SynBenchConfig()
    dev = torch.device(device)
    plan = SamplingPlan.from_config(cfg, input_shape, feature_fn, backbone_mean_std, sampling_device(cfg, dev))
    clock = [0.0]
    extract = make_extract(feature_fn, dev, dict(extractor or {}), cfg.batch_size, clock)
    t0 = time.perf_counter()
    proxy = None
    with frozen(feature_fn), _progress(progress, len(cfg.s_values) * (cfg.n_train + cfg.n_test)) as advance:
        stats = run_protocol(extract, plan, cfg, Shard(), no_reduce, advance, dev)
        timings = {"total_s": time.perf_counter() - t0, "forward_s": clock[0]}
        if cfg.proxy is not None:  # the paper's Table 1 SA / RA on the proxy task (src/synbench/proxy.py)
            proxy = proxy_accuracy(feature_fn, plan, cfg, extract, backbone_mean_std)
            timings["proxy_s"] = proxy["seconds"]
    result = SynBenchResult.from_sums(
        cfg,
        plan.input_shape,
        stats.feature_dim,
        stats.n_correct,
        stats.sum_bound,
        stats.n_total,
        plan.margin_scale,
        timings,
    )
    result.proxy = proxy
    return result
