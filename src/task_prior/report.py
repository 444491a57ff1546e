"""Per-backbone table of the Task-Prior probe study (Patel & Balestriero, "Task Priors", arXiv:2507.09871, Fig. 2
and App. D.1, Figs. 4/5): for each evaluated backbone, the mean and variance of held-out linear-probe accuracy over
labelings sampled from a prior backbone's Task Prior, the closed-form E[Tr(MG)] and Var[Tr(MG)] (Thm 2.3), and the
correlation of E with mean accuracy and of Var with accuracy variance across backbones.

Two producers of rows, one table (:func:`rows_report`, written by :meth:`~src.utils.report_writer.Report.write` as
``task_prior.{md,csv,json}`` and ``e_vs_accuracy.png``):
* :func:`~src.task_prior.compare.compare_backbones` (``python -m src.task_prior``): every backbone in one process on
  the same images, the same sampled labelings and the same train/test split (prior features and labels computed
  once); :func:`~src.task_prior.compare.compare_features` is the same study on given features;
* ``python -m src.train experiment=task_prior`` (one ``TaskPriorProbe`` per run, ``task_prior_row.json`` in its run
  directory); :func:`collect_rows` reads a run or multirun directory and ``python -m src.task_prior
  aggregate=<dir>`` or the Hydra callback ``src.hydra_callbacks.TaskPriorTableCallback`` writes the table
  (:func:`write_table`).
"""

from __future__ import annotations

import json
import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from ..stats.rank_agreement import agreement, kendall_tau_b, pearson, permutation_p_value, spearman
from ..utils.checks import check_image_size, check_int
from ..utils.report_writer import Report
from . import matrix as prior_matrices

__all__ = [
    "COLUMNS",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_NUM_IMAGES",
    "FIGURE",
    "INTERVAL_LEVEL",
    "collect_rows",
    "comparison_figures",
    "correlation_intervals",
    "correlations",
    "digits_images",
    "markdown_table",
    "read_row",
    "rows_report",
    "write_table",
]

log = logging.getLogger("repbench")

METHOD = "task_prior"  # the file stem of the report: task_prior.{md,csv,json}
ROW_FILE = "task_prior_row.json"
FIGURE = "e_vs_accuracy.png"
COLUMNS = ("backbone", "acc_mean", "acc_var", "acc_q10", "acc_q50", "acc_q90", "mean", "var", "z")
REQUIRED_NUMBERS = ("acc_mean", "acc_var", "mean", "var")  # what the table and the correlations need of a row
#: the images of ``compare_backbones(images=None)`` (and of ``python -m src.task_prior``): the first 600 bundled
#: digits at 32 px (a CPU budget: 6 backbones in minutes on 2 cores)
DEFAULT_NUM_IMAGES = 600
DEFAULT_IMAGE_SIZE = 32
#: the bootstrap intervals of the correlations: 95 % as in the paper's Fig. 3, 2000 resamples
INTERVAL_LEVEL = 0.95
INTERVAL_RESAMPLES = 2000
#: the correlated pairs: (name, closed-form column, probe-accuracy column)
CORRELATED = (("mean_vs_acc_mean", "mean", "acc_mean"), ("var_vs_acc_var", "var", "acc_var"))


def digits_images(
    num_images: int = DEFAULT_NUM_IMAGES, image_size: int = DEFAULT_IMAGE_SIZE, *, prefix: str = ""
) -> Tensor:
    """The first ``num_images`` scikit-learn digits as (N, 3, S, S) images in [0, 1] (offline); a ValueError naming
    ``<prefix>num_images`` / ``<prefix>image_size`` for values out of range (no silent clamp to the 1797 digits)."""
    from ..images.digits import load_digits_tensors, upsample_digits

    size = check_image_size(image_size, f"{prefix}image_size")
    images, _ = load_digits_tensors()
    num_images = check_int(num_images, f"{prefix}num_images", 2, len(images), meaning="the bundled digits")
    return upsample_digits(images[:num_images], size).contiguous()


def rows_report(
    rows: Sequence[Mapping[str, Any]], method: str = METHOD, *, prior_matrix: Mapping[str, Any] | None = None
) -> Report:
    """The Report of Task-Prior rows (from :func:`compare_backbones` or collected ``task_prior_row.json`` files):
    CSV = :data:`COLUMNS`, Markdown = :func:`markdown_table` and the intervals, JSON = {"rows", "correlations",
    "correlation_intervals" (:func:`correlation_intervals`)} (null = undefined),
    ``results`` = {backbone: row}, figure :data:`FIGURE`; with ``prior_matrix`` (a
    :func:`~src.task_prior.matrix.prior_matrix` result) also JSON ``prior_matrix``, its Markdown tables and figure
    ``prior_matrix.png``. A ValueError for no rows."""
    if not rows:
        raise ValueError("no rows to write: no backbone was evaluated (or no task_prior_row.json was found)")
    rows = [dict(r) for r in rows]
    corr = correlations(rows)
    intervals = correlation_intervals(rows)
    data: dict[str, Any] = {"rows": rows, "correlations": corr, "correlation_intervals": intervals}
    markdown = markdown_table(rows, corr) + "\n" + intervals_markdown(intervals)

    def figures() -> dict[str, Any]:
        figs = comparison_figures(rows)
        if prior_matrix is not None:
            figs[prior_matrices.PRIOR_MATRIX_FIGURE] = prior_matrices.prior_matrix_figure(prior_matrix)
        return figs

    if prior_matrix is not None:
        data["prior_matrix"] = prior_matrices.prior_matrix_data(prior_matrix)
        markdown += "\n" + prior_matrices.prior_matrix_markdown(prior_matrix)
    return Report(
        method=method,
        rows=rows,
        markdown=markdown,
        data=data,
        results={str(r["backbone"]): r for r in rows},
        figures=figures,
        columns=COLUMNS,
    )


def comparison_figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """{:data:`FIGURE`: E[Tr(MG)] and z = E/√Var (Thm 2.3) against the mean probe accuracy over tasks, one point per
    backbone (the paper's Fig. 2 view)}; a backbone with Var = 0 (z infinite) is left out of the z panel."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    for ax, key, label in zip(fig.subplots(1, 2), ("mean", "z"), ("E[Tr(MG)]", "z = E / √Var")):
        for r in rows:
            x, y = r.get(key), float(r["acc_mean"])
            if isinstance(x, numbers.Real) and math.isfinite(x):  # a row file may lack z, or hold null (Var = 0)
                ax.scatter(x, y)
                ax.annotate(str(r["backbone"]), (x, y), fontsize=7)
        ax.set_xlabel(label)
        ax.set_ylabel("mean probe accuracy over tasks")
    fig.suptitle("Task Priors: closed-form moments vs probes on sampled tasks")
    return {FIGURE: fig}


def correlations(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Pearson and Spearman correlations across backbones (the paper's Fig. 2 analysis): E vs mean accuracy and
    Var vs accuracy variance; NaN with fewer than 3 backbones or a constant column."""
    e, v = [r["mean"] for r in rows], [r["var"] for r in rows]
    am, av = [r["acc_mean"] for r in rows], [r["acc_var"] for r in rows]
    return {
        "pearson_mean_vs_acc_mean": pearson(e, am),
        "spearman_mean_vs_acc_mean": spearman(e, am),
        "pearson_var_vs_acc_var": pearson(v, av),
        "spearman_var_vs_acc_var": spearman(v, av),
    }


def _task_replicates(rows: Sequence[Mapping[str, Any]], n_boot: int, seed: int) -> dict[str, list[Any]] | None:
    """{"acc_mean": [per backbone: n_boot means], "acc_var": [... population variances]} of the per-task accuracies
    resampled with replacement within each backbone (as many tasks as it has); None when a row has no per-task
    ``accuracies`` (e.g. an older row file) or any is not finite."""
    import numpy as np

    accs = [r.get("accuracies") for r in rows]
    if any(not isinstance(a, Sequence) or len(a) == 0 for a in accs):
        return None
    arrays = [np.asarray(a, dtype=np.float64) for a in accs]
    if not all(np.isfinite(a).all() for a in arrays):
        return None
    rng = np.random.default_rng(seed)
    out: dict[str, list[Any]] = {"acc_mean": [], "acc_var": []}
    for a in arrays:
        draws = a[rng.integers(0, a.size, (n_boot, a.size))]
        out["acc_mean"].append(draws.mean(1))
        out["acc_var"].append(draws.var(1))  # ddof 0, as accuracy_summary's acc_var
    return out


def correlation_intervals(
    rows: Sequence[Mapping[str, Any]],
    *,
    level: float = INTERVAL_LEVEL,
    n_boot: int = INTERVAL_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """Bootstrap intervals of the correlations across backbones (the paper's Fig. 3 shows 95 % intervals): for E vs
    mean accuracy and Var vs accuracy variance, Pearson's r and Kendall's τ_b with percentile intervals at ``level``
    from :func:`~src.stats.rank_agreement.agreement` (``n_boot`` resamples of the backbones; where every row holds
    its per-task ``accuracies``, each resample also redraws each backbone's tasks with replacement, so the interval
    includes the sampling of the tasks), and the exact permutation p-value of τ_b. Point estimates are those of the
    rows as given. NaN = undefined (fewer than 3 backbones, a constant or non-finite column)."""
    replicates = _task_replicates(rows, n_boot, seed)
    out: dict[str, Any] = {
        "level": level,
        "n_boot": n_boot,
        "resampled": "backbones" if replicates is None else "backbones, and tasks within each backbone",
    }
    names = [str(i) for i in range(len(rows))]  # positions: labels may repeat across collected runs
    for key, closed, probe in CORRELATED:
        x = [float(r[closed]) for r in rows]
        y = [float(r[probe]) for r in rows]
        point = {"pearson": pearson(x, y), "kendall": kendall_tau_b(x, y)}
        entry = {**point, "pearson_low": math.nan, "pearson_high": math.nan, "kendall_low": math.nan}
        entry.update(kendall_high=math.nan, p_value=math.nan, defined_fraction=0.0)
        if all(math.isfinite(v) for v in x + y):
            # τ_b and r are symmetric: the probe column, with its task replicates, takes agreement's per-seed side
            probe_side = {n: (y[i] if replicates is None else replicates[probe][i]) for i, n in enumerate(names)}
            a = agreement(probe_side, dict(zip(names, x)), level=level, n_boot=n_boot, seed=seed)
            entry.update(pearson_low=a.pearson_low, pearson_high=a.pearson_high, kendall_low=a.kendall_low)
            entry.update(kendall_high=a.kendall_high, defined_fraction=a.defined_fraction)
            entry["p_value"] = permutation_p_value(x, y)
        out[key] = entry
    return out


def intervals_markdown(intervals: Mapping[str, Any]) -> str:
    """One line per correlation: r [low, high], τ_b [low, high], p (n/a = undefined)."""

    def f(v: float) -> str:
        return "n/a" if not math.isfinite(v) else f"{v:+.2f}"

    lines = [
        f"{100 * intervals['level']:.0f}% bootstrap intervals ({intervals['n_boot']} resamples of the "
        f"{intervals['resampled']}):"
    ]
    for key, title in (("mean_vs_acc_mean", "E vs mean accuracy"), ("var_vs_acc_var", "Var vs accuracy variance")):
        e = intervals[key]
        p = "n/a" if not math.isfinite(e["p_value"]) else f"{e['p_value']:.3f}"
        lines.append(
            f"- {title}: Pearson r {f(e['pearson'])} [{f(e['pearson_low'])}, {f(e['pearson_high'])}], "
            f"Kendall τ_b {f(e['kendall'])} [{f(e['kendall_low'])}, {f(e['kendall_high'])}], permutation p = {p}"
        )
    return "\n".join(lines) + "\n"


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


def write_table(rows: Sequence[Mapping[str, Any]], out_dir: str | Path, stem: str = METHOD) -> dict[str, Path]:
    """``<stem>.csv`` (COLUMNS), ``<stem>.md`` (table + correlations), ``<stem>.json`` (rows incl. per-task
    accuracies, and the correlations) and :data:`FIGURE` in ``out_dir``: :func:`rows_report` written by
    :meth:`Report.write <src.utils.report_writer.Report.write>`."""
    return rows_report(rows, stem).write(out_dir)


def read_row(path: str | Path) -> dict[str, Any]:
    """One ``task_prior_row.json`` (written by ``TaskPriorProbe(results_file=...)``): a JSON object with a
    ``backbone`` name and the numbers of ``REQUIRED_NUMBERS``; a ValueError naming the file and what is wrong
    (truncated or not JSON, not an object, keys missing, not numbers) otherwise."""
    path = Path(path)
    fix = "re-run that job or delete the file to leave it out of the table"
    try:
        row = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:  # random bytes fail UTF-8 decoding before the parse
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
