"""Per-backbone table of the Task-Prior probe study (Patel & Balestriero, "Task Priors", arXiv:2507.09871, Fig. 2
and App. D.1, Figs. 4/5): for each evaluated backbone, the mean and variance of held-out linear-probe accuracy over
labelings sampled from a prior backbone's Task Prior, the closed-form E[Tr(MG)] and Var[Tr(MG)] (Thm 2.3), and the
correlation of E with mean accuracy and of Var with accuracy variance across backbones.

Two producers of rows, one table:
* :func:`compare_backbones` (``python -m src.taskprior``): every backbone in one process on the same images, the
  same sampled labelings and the same train/test split (prior features and labels computed once);
* ``python -m src.train experiment=task_prior`` (one ``TaskPriorProbe`` per run, ``task_prior_row.json`` in its run
  directory); :func:`collect_rows` reads a run or multirun directory and ``python -m src.taskprior
  aggregate=<dir>`` or :class:`TaskPriorTableCallback` (a Hydra callback) writes the table.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .conventions import resolve_convention
from .moments import task_prior_moments
from .probing import DEFAULT_QUANTILES, accuracy_summary, evaluate_task_probes, random_split
from .sampler import sample_task_labels

__all__ = [
    "COLUMNS",
    "collect_rows",
    "read_row",
    "compare_backbones",
    "compare_features",
    "correlations",
    "markdown_table",
    "write_table",
    "TaskPriorTableCallback",
]

log = logging.getLogger("repbench")

ROW_FILE = "task_prior_row.json"
COLUMNS = ("backbone", "acc_mean", "acc_var", "acc_q10", "acc_q50", "acc_q90", "mean", "var", "z")
REQUIRED_NUMBERS = ("acc_mean", "acc_var", "mean", "var")  # what the table and the correlations need of a row


def compare_features(
    features: Mapping[str, Tensor],
    prior_features: Tensor,
    *,
    num_tasks: int = 32,
    task_classes: int = 2,
    convention: str | None = None,
    sample_temperature: float | None = None,
    temperature: float | None = None,
    order: str | None = None,
    test_fraction: float = 0.3,
    epochs: int = 100,
    lr: float = 1e-2,
    weight_decay: float = 0.0,
    eval_scale: str | None = None,
    prior_scale: str | None = None,
    sampler_scale: str | None = None,
    probe_metric: str | None = None,
    probe_split: str | None = None,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per entry of ``features`` ({name: (n, D)}), all on the same n images as ``prior_features``: the same
    sampled labelings (num_tasks, n) and the same seeded split for every backbone.

    ``convention`` (``"paper"`` | ``"authors"`` | ``"repbench"``, None = ``"repbench"``) sets the kernel scales,
    temperatures, sampler and probe score (:mod:`src.taskprior.conventions`); any of those options given explicitly
    (not None) overrides the preset."""
    conv = resolve_convention(
        convention,
        sample_temperature=sample_temperature,
        temperature=temperature,
        order=order,
        eval_scale=eval_scale,
        prior_scale=prior_scale,
        sampler_scale=sampler_scale,
        probe_metric=probe_metric,
        probe_split=probe_split,
    )
    labels = sample_task_labels(
        prior_features,
        task_classes,
        num_tasks=num_tasks,
        generator=torch.Generator().manual_seed(seed),
        convention=conv,
    )
    train_idx, test_idx = random_split(prior_features.shape[0], test_fraction, seed=seed)
    rows = []
    for name, feats in features.items():
        if feats.shape[0] != prior_features.shape[0]:
            raise ValueError(f"{name}: {feats.shape[0]} feature rows but {prior_features.shape[0]} prior rows")
        acc = evaluate_task_probes(feats, labels, train_idx, test_idx, task_classes, metric=conv.probe_metric,
                                   split=conv.probe_split, epochs=epochs, lr=lr, weight_decay=weight_decay,
                                   seed=seed)  # fmt: skip
        mean, var = task_prior_moments(feats, prior_features, convention=conv)
        rows.append(
            {
                "backbone": name,
                "convention": conv.name,
                **accuracy_summary(acc, quantiles),
                "mean": mean,
                "var": var,
                "z": mean / math.sqrt(var) if var > 0 else math.inf,
                "accuracies": acc.tolist(),
            }
        )
    return rows


def _name(spec: Any) -> str:
    return spec if isinstance(spec, str) else str(dict(spec)["name"])


def compare_backbones(
    backbones: Sequence[str | Mapping[str, Any]],
    prior_backbone: str | Mapping[str, Any],
    images: Tensor,
    *,
    max_batch: int = 256,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> tuple[list[dict[str, Any]], dict[str, Tensor]]:
    """Features of every backbone (and the prior) on ``images`` through ``FeatureExtractor``, then
    :func:`compare_features`. Returns (rows, {name: features})."""
    from ..backbones.spec import build_backbone
    from ..features import FeatureExtractor

    def embed(spec: Any) -> Tensor:
        t0 = time.perf_counter()
        bb = build_backbone(spec).to(device).eval()
        z = FeatureExtractor(bb.embed, device=device, max_batch=max_batch)(images).float().cpu()
        if progress:
            progress(f"features {_name(spec)}: {tuple(z.shape)} in {time.perf_counter() - t0:.1f} s")
        return z

    prior = embed(prior_backbone)
    feats = {_name(s): embed(s) for s in backbones}
    rows = compare_features(feats, prior, **options)
    for row in rows:
        row["prior_backbone"] = _name(prior_backbone)
    return rows, feats


def _pearson(a: Sequence[float], b: Sequence[float]) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    from scipy.stats import rankdata

    return _pearson(rankdata(a), rankdata(b))


def correlations(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Pearson and Spearman correlations across backbones (the paper's Fig. 2 analysis): E vs mean accuracy and
    Var vs accuracy variance; NaN with fewer than 3 backbones or a constant column."""
    e, v = [r["mean"] for r in rows], [r["var"] for r in rows]
    am, av = [r["acc_mean"] for r in rows], [r["acc_var"] for r in rows]
    return {
        "pearson_mean_vs_acc_mean": _pearson(e, am),
        "spearman_mean_vs_acc_mean": _spearman(e, am),
        "pearson_var_vs_acc_var": _pearson(v, av),
        "spearman_var_vs_acc_var": _spearman(v, av),
    }


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e-3 and v != 0 else f"{v:.4f}"
    return str(v)


def markdown_table(rows: Sequence[Mapping[str, Any]], corr: Mapping[str, float] | None = None) -> str:
    corr = correlations(rows) if corr is None else corr
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c, "")) for c in COLUMNS) + " |")
    lines.append("")
    lines.append("Correlation across backbones (Pearson / Spearman):")

    def c(key: str) -> str:  # NaN = undefined: fewer than 3 backbones or a constant column
        return "n/a" if math.isnan(corr[key]) else f"{corr[key]:.3f}"

    lines.append(
        f"E vs mean accuracy {c('pearson_mean_vs_acc_mean')} / {c('spearman_mean_vs_acc_mean')}; "
        f"Var vs accuracy variance {c('pearson_var_vs_acc_var')} / {c('spearman_var_vs_acc_var')}"
    )
    if any(math.isnan(v) for v in corr.values()):
        lines.append("(n/a: a correlation needs at least 3 backbones and columns that are not constant)")
    return "\n".join(lines) + "\n"


def write_table(rows: Sequence[Mapping[str, Any]], out_dir: str | Path, stem: str = "task_prior") -> dict[str, Path]:
    """``<stem>.csv`` (COLUMNS), ``<stem>.md`` (table + correlations) and ``<stem>.json`` (rows incl. per-task
    accuracies, and the correlations) in ``out_dir``."""
    if not rows:
        raise ValueError("no rows to write: no backbone was evaluated (or no task_prior_row.json was found)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corr = correlations(rows)
    paths = {"csv": out / f"{stem}.csv", "md": out / f"{stem}.md", "json": out / f"{stem}.json"}
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for r in rows:
            writer.writerow([r.get(c, "") for c in COLUMNS])
    paths["md"].write_text(markdown_table(rows, corr))
    defined = {k: (None if math.isnan(v) else v) for k, v in corr.items()}  # JSON has no NaN: null = undefined
    paths["json"].write_text(json.dumps({"rows": list(rows), "correlations": defined}, indent=1))
    return paths


def read_row(path: str | Path) -> dict[str, Any]:
    """One ``task_prior_row.json`` (written by ``TaskPriorProbe(results_file=...)``): a JSON object with a
    ``backbone`` name and the numbers of ``REQUIRED_NUMBERS``; a ValueError naming the file and what is wrong
    (truncated or not JSON, not an object, keys missing, not numbers) otherwise."""
    path = Path(path)
    fix = "re-run that job or delete the file to leave it out of the table"
    try:
        row = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON (truncated or corrupt? {err}); {fix}") from err
    if not isinstance(row, dict):
        raise ValueError(
            f"{path} holds a JSON {type(row).__name__}, not a Task-Prior row object "
            f"({{'backbone': ..., {', '.join(repr(k) + ': ...' for k in REQUIRED_NUMBERS)}}}); {fix}"
        )
    missing = [k for k in ("backbone", *REQUIRED_NUMBERS) if k not in row]
    if missing:
        raise ValueError(f"{path} is not a Task-Prior row: keys {missing} are missing (has {sorted(row)}); {fix}")
    bad = {k: row[k] for k in REQUIRED_NUMBERS if isinstance(row[k], bool) or not isinstance(row[k], int | float)}
    if bad:
        raise ValueError(f"{path}: {bad} must be numbers; {fix}")
    return row


def collect_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every ``task_prior_row.json`` under ``run_dir`` (a run or a multirun directory), sorted by path, each checked
    by :func:`read_row` (a broken file is an error naming it, not a missing or garbled row)."""
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory; pass a (multi)run directory of experiment=task_prior")
    return [read_row(p) for p in sorted(root.rglob(ROW_FILE))]


try:  # Hydra callback: aggregate a multirun of experiment=task_prior into one table
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover
    _HydraCallback = object  # type: ignore[misc,assignment]


class TaskPriorTableCallback(_HydraCallback):  # type: ignore[misc,valid-type]
    """``hydra.callbacks``: write ``task_prior.{csv,md,json}`` into the run (or sweep) directory at its end."""

    def _write(self, directory: str) -> None:
        rows = collect_rows(directory)
        if rows:
            paths = write_table(rows, directory)
            log.info("Task-Prior table (%d backbones):\n%s", len(rows), paths["md"].read_text())

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        self._write(config.hydra.runtime.output_dir)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        self._write(config.hydra.sweep.dir)
