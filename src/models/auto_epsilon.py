"""SynBench-guided ε for ε-robust linear probing (synbench_icml2024.txt §4.3): ε = argmax_ε SynBench-Score.

The paper transfers the arg-max of the (relative, representation-space) SynBench ε grid to the probe's ε as the
same number (ViT-B/16: the score peaks at 0.2, and 0.2-robust probing gives the best trade-off). We do the same;
``scale`` multiplies it for users who calibrate differently (the two budgets live in different spaces).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import lightning as L

from src.metrics.synbench_score import synbench_distributed
from src.synbench import SynBenchConfig
from src.utils.modes import eval_mode

__all__ = ["AUTO_DEFAULTS", "select_epsilon"]

log = logging.getLogger("repbench")

# input_size / scale are ours; every other key is a SynBenchConfig field (defaults: a CPU-sized budget)
AUTO_DEFAULTS: dict[str, Any] = dict(
    input_size=64,
    scale=1.0,
    s_values=(0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
    n_train=2048,
    n_test=512,
    eps=(0.0, 0.2, 0.4, 0.6, 0.8),
    a_T=(0.7,),
)


def select_epsilon(module: L.LightningModule, options: Mapping[str, Any] | None = None) -> float:
    """Score ``module.backbone`` over the ε grid and return scale · argmax_ε SynBench-Score(ε, a_T[0]).

    Sets ``module.auto_epsilon_scores`` ({ε: score}) and ``module.auto_epsilon_result`` (the SynBenchResult).
    Sharded over DDP ranks like :class:`~callbacks.SynBenchCallback` (every rank calls it from ``setup``).
    """
    opts = {**AUTO_DEFAULTS, **dict(options or {})}
    size, scale = opts.pop("input_size"), float(opts.pop("scale"))
    if not scale > 0:
        raise ValueError(f"auto_epsilon.scale must be > 0, got {scale}")
    cfg = SynBenchConfig(**opts)
    shape = (3, size, size) if isinstance(size, int) else tuple(size)
    trainer = getattr(module, "_trainer", None)
    rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
    backbone = module.backbone
    with eval_mode(backbone):
        out, result = synbench_distributed(
            backbone.embed, shape, cfg, device=module.device, rank=rank, world_size=world
        )
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
