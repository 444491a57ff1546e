"""SynBench-guided ε for ε-robust linear probing (Ko et al., ICML 2024, arXiv:2210.02989, §4.3):
ε = argmax_ε SynBench-Score.

The paper transfers the arg-max of the (relative, representation-space) SynBench ε grid to the probe's ε as the
same number (ViT-B/16: the score peaks at 0.2, and 0.2-robust probing gives the best trade-off). We do the same;
``scale`` multiplies it for users who calibrate differently (the two budgets live in different spaces).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import lightning as L

from ..metrics.synbench_score import synbench_distributed
from ..synbench import SynBenchConfig
from ..utils.modes import eval_mode

__all__ = ["auto_epsilon_defaults", "select_epsilon"]

log = logging.getLogger("repbench")


# epsilon=auto's defaults: ``input_size``, ``scale`` and SynBenchConfig fields; the ``auto_epsilon`` block of
# configs/model/robust_probe.yaml repeats them (tests/test_defaults.py checks they are equal).
AUTO_EPSILON_DEFAULTS: dict[str, Any] = {
    "input_size": 64,
    "scale": 1.0,  # probe epsilon = scale x argmax SynBench epsilon (the paper uses the number as is)
    "s_values": [0.5, 1.0, 1.5, 2.0, 3.0, 4.0],
    "n_train": 2048,
    "n_test": 512,
    "eps": [0.0, 0.2, 0.4, 0.6, 0.8],
    "a_T": [0.7],
}


def auto_epsilon_defaults() -> dict[str, Any]:
    """A copy of :data:`AUTO_EPSILON_DEFAULTS`."""
    return copy.deepcopy(AUTO_EPSILON_DEFAULTS)


def select_epsilon(module: L.LightningModule, options: Mapping[str, Any] | None = None) -> float:
    """Score ``module.backbone`` over the ε grid and return scale · argmax_ε SynBench-Score(ε, a_T[0]).

    Sets ``module.auto_epsilon_scores`` ({ε: score}) and ``module.auto_epsilon_result`` (the SynBenchResult).
    Sharded over DDP ranks like :class:`~callbacks.SynBenchCallback` (every rank calls it from ``setup``).
    """
    opts = {**auto_epsilon_defaults(), **dict(options or {})}
    size, scale = opts.pop("input_size"), float(opts.pop("scale"))
    if not scale > 0:
        raise ValueError(f"auto_epsilon.scale must be > 0, got {scale}")
    cfg = SynBenchConfig(**opts)
    shape = (3, size, size) if isinstance(size, int) else tuple(size)
    backbone = module.backbone
    # In ``setup`` Lightning reports the device the model is about to move to (``module.device`` is faked to the
    # strategy's root device) while the weights are still on the CPU: move the frozen backbone there first (the
    # strategy moves the whole module right after setup anyway), so that samples, statistics and weights agree.
    device = module.device
    backbone.to(device)
    with eval_mode(backbone):
        _, result = synbench_distributed(backbone.embed, shape, cfg, device=device)
    scores = {e: result.score(e) for e in cfg.eps}
    best = result.best_eps()
    module.auto_epsilon_scores, module.auto_epsilon_result = scores, result
    log.info(
        "epsilon=auto: SynBench-Score by eps (a_T=%s): %s -> eps = %g x %g = %g",
        cfg.a_T[0],
        {e: round(v, 4) for e, v in scores.items()},
        best,
        scale,
        best * scale,
    )
    return best * scale
