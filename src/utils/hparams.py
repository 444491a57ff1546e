"""TensorBoard's HParams dashboard: a run's hyperparameters next to the metrics that judge them.

Lightning's ``log_hyperparams`` writes the whole config as text; the HParams tab needs scalar-valued hyperparameters
and the names of metric tags. :func:`flat_hparams` picks the scalars out of the composed config;
:func:`log_hparams_with_metrics` writes the HParams summary once the metric tags exist (the dashboard reads each
metric's last value from the run's scalar curves, so nothing is logged twice and no placeholder point is drawn).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["HPARAM_GROUPS", "flat_hparams", "log_hparams_with_metrics"]

HPARAM_GROUPS = ("model", "data", "backbone", "attack", "trainer")
_SKIP = ("_target_", "dirpath", "data_dir", "root", "default_root_dir", "results_file")


def flat_hparams(cfg: Mapping[str, Any], groups: Iterable[str] = HPARAM_GROUPS) -> dict[str, Any]:
    """``{"model/lr": 0.003, "backbone/name": "embedded:...", "seed": 0, ...}``: the scalar leaves (numbers, strings,
    booleans; lists of scalars as their text) of the given config groups, plus ``seed`` and ``experiment``."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if k not in _SKIP:
                    walk(f"{prefix}/{k}", v)
        elif isinstance(node, (list, tuple)):
            if all(isinstance(v, (int, float, str, bool)) or v is None for v in node):
                out[prefix] = str(list(node))
        elif isinstance(node, bool):
            out[prefix] = node
        elif isinstance(node, (int, float, str)):
            out[prefix] = node
        elif node is None:
            out[prefix] = "null"

    for g in groups:
        if g in cfg and cfg[g] is not None:
            walk(g, cfg[g])
    for key in ("seed", "experiment", "task_name"):
        if cfg.get(key) is not None:
            out[key] = cfg[key] if isinstance(cfg[key], (int, float, str, bool)) else str(cfg[key])
    return out


def log_hparams_with_metrics(loggers: Iterable[Any], hparams: Mapping[str, Any], metric_names: Iterable[str]) -> int:
    """Write the HParams summary to every TensorBoard logger; returns how many got it."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    names = sorted(set(metric_names))
    if not names:
        return 0
    written = 0
    for lg in loggers:
        if not isinstance(lg, TensorBoardLogger):
            continue
        exp, ssi, sei = hparams_summary(dict(hparams), dict.fromkeys(names, 0.0))
        writer = lg.experiment._get_file_writer()  # reopened: Lightning closes it when fit/test finalize
        for summary in (exp, ssi, sei):
            writer.add_summary(summary)
        lg.experiment.flush()
        written += 1
    return written
