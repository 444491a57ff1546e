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
from ..synbench import SynBenchConfig, synbench_budget
from ..utils.modes import eval_mode

__all__ = ["auto_epsilon_defaults", "guided_epsilon", "select_epsilon"]

log = logging.getLogger("repbench")


# epsilon=auto's defaults: ``input_size``, ``scale`` and the SynBenchConfig fields of the "auto_epsilon" budget of
# src/synbench/config.py (SYNBENCH_BUDGETS, where its a_T order is explained: the paper's threshold accuracy first;
# where every score is 0 there, the official grid's lowest decides, guided_epsilon); the ``auto_epsilon`` block of
# configs/model/robust_probe.yaml repeats them (tests/test_defaults.py checks they are equal).
AUTO_EPSILON_DEFAULTS: dict[str, Any] = {
    "input_size": 64,
    "scale": 1.0,  # probe epsilon = scale x argmax SynBench epsilon (the paper uses the number as is)
    **synbench_budget("auto_epsilon"),
}


def auto_epsilon_defaults() -> dict[str, Any]:
    """A copy of :data:`AUTO_EPSILON_DEFAULTS`."""
    return copy.deepcopy(AUTO_EPSILON_DEFAULTS)


def guided_epsilon(scores: Mapping[float, Mapping[float, float]]) -> tuple[float, float | None]:
    """ε = argmax_ε SynBench-Score(ε, a_T) (paper §4.3; ties: the smallest ε) at the first threshold accuracy a_T, in
    the order given, at which some score is positive.

    ``scores``: {a_T: {ε: score}} in order of preference. A backbone whose representations never reach a_T on the
    synthetic task scores 0 at every ε: those scores do not rank ε, so the next a_T decides. Returns (ε, the a_T that
    decided), or (0.0, None) when every score is 0 at every a_T (standard probing: nothing guides ε).
    """
    for a_T, by_eps in scores.items():
        if any(v > 0 for v in by_eps.values()):
            best = max(by_eps.values())
            return min(e for e, v in by_eps.items() if v == best), a_T
    return 0.0, None


def select_epsilon(module: L.LightningModule, options: Mapping[str, Any] | None = None) -> float:
    """Score ``module.backbone`` over the ε grid and return scale · :func:`guided_epsilon` (argmax_ε SynBench-Score
    at the first of ``a_T`` with a positive score).

    Sets ``module.auto_epsilon_scores`` ({ε: score} at the a_T that decided, else at a_T[0]),
    ``module.auto_epsilon_a_T`` (that a_T, or None) and ``module.auto_epsilon_result`` (the SynBenchResult). Sharded
    over DDP ranks like :class:`~callbacks.SynBenchCallback` (every rank calls it from ``setup``).
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
    by_a_T = {a: {e: result.score(e, a) for e in cfg.eps} for a in cfg.a_T}
    best, decided = guided_epsilon(by_a_T)
    scores = by_a_T[cfg.a_T[0] if decided is None else decided]
    module.auto_epsilon_scores, module.auto_epsilon_a_T, module.auto_epsilon_result = scores, decided, result
    shown = {a: {e: round(v, 4) for e, v in by_eps.items()} for a, by_eps in by_a_T.items()}
    if decided is None:
        log.warning(
            "epsilon=auto: SynBench-Score is 0 at every eps for every a_T in %s (%s): the backbone's representations "
            "do not reach those accuracies on the synthetic task, so the scores do not rank eps; eps = 0 (standard "
            "probing). Lower auto_epsilon.a_T (>= 0.6 on the official grid) or raise auto_epsilon.input_size, or "
            "choose eps on labelled data (hparams_search=robust_probe_optuna)",
            list(cfg.a_T),
            shown,
        )
        return 0.0
    log.info(
        "epsilon=auto: SynBench-Score by a_T and eps: %s -> a_T = %s decides, eps = %g x %g = %g",
        shown,
        decided,
        best,
        scale,
        best * scale,
    )
    return best * scale
