"""The study's analysis: pure functions on the runs' records (no Lightning, no Hydra).

A record is ``{"objective", "lr", "seed", "epochs": [{"epoch": e, "metrics": {name: value}}]}`` with epoch -1 for
the values before training. The labelled reference is ``TARGET`` (held-out linear-probe accuracy); every criterion of
:data:`CRITERIA` maps a logged name to a number where higher means "better" by the criterion's own declared
direction (not fitted to the study's outcome).

* (a) :func:`within_run_agreement`: per run, Kendall τ_b between a criterion's raw value and the target across
  epochs (the raw, signed relation); per objective the mean τ over runs with a bootstrap interval over runs.
* (b) :func:`regret_table`: per objective and seed, the learning rate each criterion picks (its best oriented value
  after the last epoch) and the regret = best target over the learning rates − target of the pick; mean ± standard
  error over seeds. The expected regret of a random pick is the reference a criterion must beat.
* (d) the same with ``delta=True``: the criterion's change from its value before training (within one run a constant
  shift does not change τ, so (d) matters for choices across runs).
* (c) :func:`collapse_detection`: run-epochs whose target fell at least ``collapse_drop`` below its value before
  training are collapsed (a linear probe on standardised features of a random network is already far above chance:
  0.93–0.97 on the digits; a collapsed epoch, the module's own accuracy at chance, still probes at 0.5–0.8); each rule
  (one condition of :class:`~src.callbacks.CollapseAlarm`, the owner of the rules) flags run-epochs; precision,
  recall and the epochs of warning.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..stats.rank_agreement import kendall_tau_b

__all__ = [
    "CRITERIA",
    "Criterion",
    "TARGET",
    "ALARM_RULES",
    "collapse_detection",
    "regret_table",
    "series",
    "within_run_agreement",
]

#: the labelled reference: held-out linear-probe accuracy (DownstreamProbeCallback)
TARGET = "val/downstream/linear_acc"


@dataclass(frozen=True)
class Criterion:
    """A logged value as a selection criterion: ``orient(value)`` is higher-is-better by the declared direction."""

    name: str
    key: str
    orient: Callable[[float], float]
    direction: str
    labelled: bool = False


def _up(v: float) -> float:
    return v


def _down(v: float) -> float:
    return -v


def _near_one(v: float) -> float:  # α-ReQ: an exponent near 1 is best (Agrawal et al., NeurIPS 2022)
    return -abs(v - 1.0)


#: every criterion of the study, with the direction its own method declares
CRITERIA: tuple[Criterion, ...] = (
    Criterion("SynBench", "val/synbench/score", _up, "max"),
    Criterion("RankMe", "val/spectrum/rankme", _up, "max"),
    Criterion("α-ReQ", "val/spectrum/alpha_req", _near_one, "near 1"),
    Criterion("R_dr", "val/divergence_radius/mean", _down, "min"),
    Criterion("R_cs", "val/cosine_robustness/mean", _down, "min"),
    Criterion("Task-Prior E", "val/task_prior/mean", _up, "max"),
    Criterion("Task-Prior z", "val/task_prior/z", _up, "max"),
    Criterion("val loss", "val/loss", _down, "min"),  # the objective's own held-out loss (labelled for supervised CE)
    Criterion("k-NN acc", "val/downstream/knn_acc", _up, "max", labelled=True),
    Criterion("val acc", "val/acc", _up, "max", labelled=True),  # the supervised module's own validation accuracy
)


def series(run: Mapping[str, Any], key: str) -> list[tuple[int, float]]:
    """(epoch, value) of ``key`` in a run, finite values only, in epoch order."""
    out = []
    for e in run["epochs"]:
        v = e["metrics"].get(key)
        if v is not None and math.isfinite(float(v)):
            out.append((int(e["epoch"]), float(v)))
    return sorted(out)


def _value(run: Mapping[str, Any], key: str, epoch: int) -> float | None:
    for e, v in series(run, key):
        if e == epoch:
            return v
    return None


def _last_epoch(run: Mapping[str, Any]) -> int:
    return max(int(e["epoch"]) for e in run["epochs"])


def _bootstrap_mean(values: Sequence[float], n_boot: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile interval of the mean of ``values`` over ``n_boot`` resamples (with replacement)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 or n_boot < 1:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def within_run_agreement(
    runs: Sequence[Mapping[str, Any]],
    criteria: Sequence[Criterion] = CRITERIA,
    *,
    target: str = TARGET,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """(a): one row per (objective, criterion): runs with a defined τ_b (>= 3 common epochs, neither series
    constant), mean τ_b of the raw value against the target across epochs, its bootstrap interval over runs, and the
    share of runs with τ_b > 0. τ is of the raw value: its sign is the observed relation, whatever the direction."""
    rows = []
    for objective in sorted({r["objective"] for r in runs}):
        mine = [r for r in runs if r["objective"] == objective]
        for c in criteria:
            taus = []
            for r in mine:
                acc = dict(series(r, target))
                pairs = [(v, acc[e]) for e, v in series(r, c.key) if e in acc]
                if len(pairs) >= 3:
                    t = kendall_tau_b([p[0] for p in pairs], [p[1] for p in pairs])
                    if math.isfinite(t):
                        taus.append(t)
            low, high = _bootstrap_mean(taus, n_boot, level, seed)
            rows.append({
                "objective": objective, "criterion": c.name, "runs": len(taus),
                "mean_tau": float(np.mean(taus)) if taus else math.nan, "low": low, "high": high,
                "share_positive": float(np.mean([t > 0 for t in taus])) if taus else math.nan,
            })  # fmt: skip
    return rows


def regret_table(
    runs: Sequence[Mapping[str, Any]],
    criteria: Sequence[Criterion] = CRITERIA,
    *,
    target: str = TARGET,
    delta: bool = False,
) -> list[dict[str, Any]]:
    """(b) / (d): one row per (objective, criterion): per seed the learning rate the criterion picks after the last
    epoch (``delta``: by its change from before training) and its regret against the best target over the learning
    rates of that seed; mean and standard error over seeds, the picks, and a ``random pick`` row per objective (the
    mean regret over all learning rates) as the reference. Criteria without a value for some learning rate of a seed
    (e.g. no value before training for ``delta``) skip that seed."""
    rows = []
    for objective in sorted({r["objective"] for r in runs}):
        mine = [r for r in runs if r["objective"] == objective]
        seeds = sorted({r["seed"] for r in mine})
        finals = {}
        for s in seeds:
            rs = [r for r in mine if r["seed"] == s]
            accs = {r["lr"]: _value(r, target, _last_epoch(r)) for r in rs}
            if any(v is None for v in accs.values()):
                continue
            finals[s] = (rs, accs, max(accs.values()))
        random_regret = [float(np.mean([best - a for a in accs.values()])) for _, accs, best in finals.values()]
        rows.append(_row(objective, "random pick", "-", False, random_regret, []))
        for c in criteria:
            regrets, picks = [], []
            for rs, accs, best in finals.values():
                scored = {}
                for r in rs:
                    v = _value(r, c.key, _last_epoch(r))
                    if v is not None and delta:
                        v0 = _value(r, c.key, -1)
                        v = None if v0 is None else v - v0
                    if v is not None:
                        scored[r["lr"]] = c.orient(v)
                if len(scored) != len(rs):
                    continue
                pick = max(sorted(scored), key=lambda lr: scored[lr])  # ties: the smallest learning rate
                picks.append(pick)
                regrets.append(best - accs[pick])
            name = f"Δ {c.name}" if delta else c.name
            rows.append(_row(objective, name, c.direction, c.labelled, regrets, picks))
    return rows


def _row(objective: str, name: str, direction: str, labelled: bool, regrets: list[float], picks: list) -> dict:
    n = len(regrets)
    se = float(np.std(regrets, ddof=1) / math.sqrt(n)) if n >= 2 else math.nan
    return {
        "objective": objective, "criterion": name, "direction": direction, "labelled": labelled, "seeds": n,
        "mean_regret": float(np.mean(regrets)) if n else math.nan, "se": se, "picks": list(picks),
    }  # fmt: skip


#: the alarm rules checked: one condition of CollapseAlarm each (its thresholds' defaults, SynBench's former 0.2)
ALARM_RULES: dict[str, dict[str, Any]] = {
    "RankMe < 2": {"rankme_floor": 2.0},
    "R_dr <= 0.08 and cosine >= 0.999": {"radius_floor": 0.08, "cosine_ceiling": 0.999},
    "SynBench <= 0.2": {"synbench_floor": 0.2},
    "Task-Prior z drop >= 15 %": {"task_prior_drop": 0.15},
}


def _alarm(rule: Mapping[str, Any]):
    from ..callbacks.collapse_alarm import CollapseAlarm

    off = {"synbench_floor": None, "rankme_floor": None, "radius_floor": None, "cosine_ceiling": None}
    return CollapseAlarm(**{**off, **dict(rule)}, images="photos")


def collapse_detection(
    runs: Sequence[Mapping[str, Any]],
    rules: Mapping[str, Mapping[str, Any]] = ALARM_RULES,
    *,
    target: str = TARGET,
    collapse_drop: float = 0.15,
    cosine_key: str = "val/collapse/cosine",
) -> list[dict[str, Any]]:
    """(c): one row per (objective, rule): collapsed run-epochs (after an epoch of training, the target at least
    ``collapse_drop`` below its value before training), flagged run-epochs (the rule's condition holds, judged by CollapseAlarm.judge epoch by epoch, its
    running best Task-Prior z included), true positives, precision, recall, and over the runs that collapsed the
    mean epochs of warning (first collapsed epoch − first flagged epoch at or before it; > 0 = early)."""
    rows = []
    for objective in sorted({r["objective"] for r in runs}):
        mine = [r for r in runs if r["objective"] == objective]
        for name, rule in rules.items():
            collapsed = flagged = hits = 0
            leads, missed = [], 0
            for r in mine:
                alarm = _alarm(rule)
                first_collapse = first_flag = None
                init = _value(r, target, -1)
                for e in sorted(r["epochs"], key=lambda e: e["epoch"]):
                    if int(e["epoch"]) < 0:
                        continue
                    m = {k: float(v) for k, v in e["metrics"].items() if v is not None}
                    is_collapsed = init is not None and target in m and m[target] <= init - collapse_drop
                    fired = bool(alarm.judge(m, m.get(cosine_key)))
                    collapsed += is_collapsed
                    flagged += fired
                    hits += is_collapsed and fired
                    if is_collapsed and first_collapse is None:
                        first_collapse = int(e["epoch"])
                    if fired and first_flag is None:
                        first_flag = int(e["epoch"])
                if first_collapse is not None:
                    if first_flag is not None and first_flag <= first_collapse:
                        leads.append(first_collapse - first_flag)
                    else:
                        missed += 1
            rows.append({
                "objective": objective, "rule": name, "collapsed": collapsed, "flagged": flagged, "true_positives": hits,
                "precision": hits / flagged if flagged else math.nan, "recall": hits / collapsed if collapsed else math.nan,
                "collapsed_runs_warned": len(leads), "collapsed_runs_missed": missed,
                "mean_epochs_of_warning": float(np.mean(leads)) if leads else math.nan,
            })  # fmt: skip
    return rows
