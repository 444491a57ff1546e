"""``python -m src.sweep_report <multirun dir>``: the table of a Hydra sweep's trials, the Pareto front of two
metrics, its plot and the chosen configuration (docs/sweep_report.md).

Reads every job folder ``<multirun dir>/<job>/`` holding ``metrics.json`` (written by ``python -m src.train``) and
``.hydra/overrides.yaml`` (what the job changed). The directions of the two metrics come from the metrics that log
them (``higher_is_better``, :func:`src.callbacks.metric_direction`); a name without one takes ``--direction
name=max``. The chosen configuration: among the front's points whose second metric passes ``--floor`` (at least it
for a maximised metric, at most for a minimised one), the one best on the first metric; without ``--floor``, the
knee: the front point nearest the ideal corner after scaling both metrics to [0, 1] over the front. ``--limit
name=value`` (the worst acceptable value of a metric) and the trials OptunaPruning stopped (``pruned_epoch``) keep
trials off the front; they stay in the table. Writes
``sweep_report.md``, ``.csv``, ``.json`` and ``pareto.png`` through :class:`src.utils.report_writer.Report`.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .callbacks.checkpointing import metric_direction
from .stats import pareto as _pareto
from .utils.report_writer import Report

__all__ = ["choose", "load_trials", "main", "pareto_front", "run", "sweep_report"]


def _overrides(job: Path) -> list[str]:
    """The job's ``.hydra/overrides.yaml`` (a YAML list of ``key=value`` strings), or [] when absent."""
    path = job / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    import yaml

    try:
        items = yaml.safe_load(path.read_text()) or []
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path} is not valid YAML ({e}); it is Hydra's record of the job's overrides: restore it or move the job "
            f"folder {job} out of the multirun folder"
        ) from e
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a YAML list of key=value overrides, got {type(items).__name__}")
    return [str(i) for i in items]


def _read_metrics(job: Path) -> Any:
    """The parsed ``<job>/metrics.json``; a ValueError naming the file and the fix when it is not JSON (truncated,
    corrupt)."""
    path = job / "metrics.json"
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path} is not valid JSON ({e}): a truncated or corrupt file; rerun the job (python -m src.train writes "
            f"it at the end) or move the job folder {job} out of the multirun folder"
        ) from e


def load_trials(multirun_dir: str | Path) -> list[dict[str, Any]]:
    """One row per job folder with a ``metrics.json``: {"job", "overrides": {key: value}, **metrics}, sorted by job
    name. Raises a FileNotFoundError naming the folder when no job has metrics."""
    root = Path(multirun_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"multirun folder {root} does not exist; give logs/<task>/multiruns/<time>_<id>")
    rows = []
    for job in sorted(p for p in root.iterdir() if (p / "metrics.json").is_file()):
        payload = _read_metrics(job)
        metrics = payload.get("metrics") if isinstance(payload, Mapping) else None
        if not isinstance(metrics, Mapping):
            raise ValueError(f"{job / 'metrics.json'}: no 'metrics' mapping (write it with python -m src.train)")
        pairs = [o.split("=", 1) for o in _overrides(job)]
        overrides = {p[0]: p[1] if len(p) > 1 else "" for p in pairs}
        pruned = payload.get("pruned_epoch")  # OptunaPruning stopped the run (a collapsed trial): not a finished trial
        rows.append({"job": job.name, "overrides": overrides, "pruned_epoch": pruned, **metrics})
    if not rows:
        raise FileNotFoundError(
            f"no job folder of {root} holds a metrics.json; is it a multirun folder of python -m src.train -m ...?"
        )
    return rows


def pareto_front(
    points: Sequence[tuple[float, float]], modes: tuple[str, str], limits: Sequence[float | None] | None = None
) -> list[int]:
    """Indices of the acceptable points no other acceptable point dominates (:func:`src.stats.pareto.pareto_front`)."""
    return _pareto.pareto_front(points, modes, limits)


def choose(
    points: Sequence[tuple[float, float]], front: Sequence[int], modes: tuple[str, str], floor: float | None = None
) -> tuple[int, str]:
    """(index, rule) of the chosen front point: best first metric among those whose second passes ``floor``, else
    (no floor) the knee. A ValueError when no front point passes the floor."""
    if not front:
        raise ValueError("the Pareto front is empty: no trial is finished, finite and within the limits")
    if floor is not None and (
        isinstance(floor, bool) or not isinstance(floor, numbers.Real) or not math.isfinite(floor)
    ):
        raise ValueError(
            f"floor must be a finite number (the worst acceptable second metric), got {floor!r}; a NaN floor passes "
            "no comparison, so it would choose nothing it names"
        )
    if floor is not None:
        passing = [i for i in front if not _pareto.better(floor, points[i][1], modes[1])]  # at least the floor
        if not passing:
            raise ValueError(f"no Pareto point has its second metric {'>=' if modes[1] == 'max' else '<='} {floor}")
        best = max(passing, key=lambda i: points[i][0] if modes[0] == "max" else -points[i][0])
        return (
            best,
            f"best first metric among the front points with second metric {'>=' if modes[1] == 'max' else '<='} {floor}",
        )
    scaled = []
    for k in range(2):
        vals = [points[i][k] for i in front]
        lo, hi = min(vals), max(vals)
        span = hi - lo or 1.0
        scaled.append(
            {i: (points[i][k] - lo) / span if modes[k] == "max" else (hi - points[i][k]) / span for i in front}
        )
    knee = min(front, key=lambda i: math.hypot(1 - scaled[0][i], 1 - scaled[1][i]))
    return knee, "knee: the front point nearest the ideal corner, both metrics scaled to [0, 1] over the front"


_BOOKKEEPING = {"job", "overrides", "pruned_epoch"}  # the keys of a load_trials row that are not metrics


def _check_logged(trials: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """A KeyError naming the fix when a metric of ``names`` is missing from every job (a typo: the logged names are
    listed) or from some jobs (they are named)."""
    for name in names:
        if all(name not in t for t in trials):
            logged = sorted({k for t in trials for k in t} - _BOOKKEEPING)
            raise KeyError(
                f"metric {name!r} is missing from every job's metrics.json; the jobs logged {logged} (--x / --y)"
            )
    missing = [t["job"] for t in trials if any(n not in t for n in names)]
    if missing:
        raise KeyError(
            f"jobs {missing} did not log {names[0]!r} and {names[1]!r}; pick metrics every job's metrics.json holds"
        )


def _mode(name: str, directions: Mapping[str, str] | None) -> str:
    """:func:`metric_direction`, whose message for an unknown direction also names the CLI's fix
    (``--direction name=min|max``)."""
    try:
        return metric_direction(name, directions)
    except ValueError as e:
        if name in (directions or {}):
            raise  # a given direction that is invalid or contradicts the metric's own: its message names the fix
        raise ValueError(f"{e}; on the command line: --direction {name}=min|max") from e


def _value(trial: Mapping[str, Any], name: str) -> float:
    """The job's value of metric ``name`` as a float (NaN allowed: off the front); a ValueError naming the job and
    the metric when it is null or not a number."""
    value = trial[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"job {trial['job']!r} logged {name!r} = {json.dumps(value)} in its metrics.json, not a number; rerun "
            "the job or move its folder out of the multirun folder"
        )
    return float(value)


def sweep_report(
    multirun_dir: str | Path,
    x: str,
    y: str,
    directions: Mapping[str, str] | None = None,
    floor: float | None = None,
    limits: Mapping[str, float] | None = None,
) -> Report:
    """The :class:`Report` of a multirun folder: trials (rows), Pareto front of ``x`` and ``y``, chosen job.

    ``limits``: the worst acceptable value of ``x`` and/or ``y`` ({name: value}); trials beyond a limit, and trials
    OptunaPruning stopped (``pruned_epoch`` in metrics.json), are listed but neither on the front nor chosen."""
    trials = load_trials(multirun_dir)
    _check_logged(trials, (x, y))
    modes = (_mode(x, directions), _mode(y, directions))
    limits = dict(limits or {})
    unknown = sorted(set(limits) - {x, y})
    if unknown:
        raise KeyError(f"limits name {unknown}, which are not the report's metrics {x!r} and {y!r}")
    points = [(_value(t, x), _value(t, y)) for t in trials]
    nan = (float("nan"), float("nan"))
    finished = [p if t.get("pruned_epoch") is None else nan for t, p in zip(trials, points)]
    front = pareto_front(finished, modes, (limits.get(x), limits.get(y)))
    chosen, rule = choose(points, front, modes, floor)
    # the overrides that differ between trials (hparams_search=..., paths.log_dir=... are the same in all)
    keys = sorted(
        k for k in {k for t in trials for k in t["overrides"]} if len({t["overrides"].get(k) for t in trials}) > 1
    )
    rows = [
        {"job": t["job"], **{k: t["overrides"].get(k, "") for k in keys}, x: points[i][0], y: points[i][1],
         "pruned_epoch": t.get("pruned_epoch"), "pareto": i in front, "chosen": i == chosen}
        for i, t in enumerate(trials)
    ]  # fmt: skip
    head = ["job", *keys, f"{x} ({modes[0]})", f"{y} ({modes[1]})", "pruned", "pareto", "chosen"]
    lines = [f"# Sweep report: {Path(multirun_dir)}", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [
            r["job"],
            *(str(r[k]) for k in keys),
            f"{r[x]:.4g}",
            f"{r[y]:.4g}",
            "" if r["pruned_epoch"] is None else f"epoch {r['pruned_epoch']}",
            "yes" if r["pareto"] else "",
            "**chosen**" if r["chosen"] else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if limits:
        lines += [
            "",
            "Limits (worst acceptable values): "
            + ", ".join(
                f"{k} {'>=' if (modes[0] if k == x else modes[1]) == 'max' else '<='} {v}" for k, v in limits.items()
            )
            + ".",
        ]
    lines += [
        "",
        f"Chosen: `{trials[chosen]['job']}` ({' '.join(f'{k}={v}' for k, v in trials[chosen]['overrides'].items())}); rule: {rule}.",
        "",
    ]

    def figures() -> dict[str, Any]:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 4))
        ax.scatter([p[0] for p in points], [p[1] for p in points], c="0.6", label="trials")
        order = sorted(front, key=lambda i: points[i][0])
        ax.plot([points[i][0] for i in order], [points[i][1] for i in order], "o-", c="C0", label="Pareto front")
        ax.scatter([points[chosen][0]], [points[chosen][1]], s=160, facecolors="none", edgecolors="C3", label="chosen")
        ax.set_xlabel(f"{x} ({modes[0]})")
        ax.set_ylabel(f"{y} ({modes[1]})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        return {"pareto.png": fig}

    data = {"multirun_dir": str(multirun_dir), "metrics": [x, y], "modes": list(modes), "front": [trials[i]["job"] for i in front],
            "chosen": trials[chosen], "rule": rule, "limits": limits, "trials": trials}  # fmt: skip
    return Report("sweep_report", rows, "\n".join(lines), data, figures=figures)


def _direction(text: str) -> tuple[str, str]:
    name, _, mode = text.rpartition("=")
    if not name or mode not in ("max", "min"):
        raise argparse.ArgumentTypeError(f"--direction takes name=max or name=min, got {text!r}")
    return name, mode


def _finite(text: str) -> float:
    """``--floor``'s value: a finite number (``nan`` or ``inf`` would make the floor void: every point passes)."""
    try:
        number = float(text)
    except ValueError:
        number = float("nan")
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"--floor takes a finite number, e.g. --floor 0.8, got {text!r}")
    return number


def _limit(text: str) -> tuple[str, float]:
    name, _, value = text.rpartition("=")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not name or not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"--limit takes name=<finite number>, e.g. val/utility=0.8, got {text!r}")
    return name, number


def run(argv: Sequence[str] | None = None) -> Path:
    """The CLI's work; returns the output folder."""
    ap = argparse.ArgumentParser(prog="python -m src.sweep_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("multirun_dir", type=Path)
    ap.add_argument("--x", default="val/synbench/score", help="first metric (the one the choice maximises/minimises)")
    ap.add_argument("--y", default="val/divergence_radius/mean", help="second metric (the one --floor bounds)")
    ap.add_argument(
        "--direction",
        type=_direction,
        action="append",
        default=[],
        help="name=max|min for a metric without a direction",
    )
    ap.add_argument(
        "--floor", type=_finite, default=None, help="choose the best --x among front points with --y at least this good"
    )
    ap.add_argument(
        "--limit",
        type=_limit,
        action="append",
        default=[],
        help="name=value: worst acceptable value of --x or --y; trials beyond it are off the front",
    )
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: <multirun_dir>/sweep_report)")
    args = ap.parse_args(argv)
    report = sweep_report(args.multirun_dir, args.x, args.y, dict(args.direction), args.floor, dict(args.limit))
    out = args.out or args.multirun_dir / "sweep_report"
    report.write(out)
    print(report.markdown)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m src.sweep_report`` / ``repbench-sweep-report`` (exit status 0 on success)."""
    run(argv)


if __name__ == "__main__":
    main()
