"""The study's report: Markdown (``monitor_study.md``), CSV/JSON tables and PNG figures, through the project's one
report shape (:class:`~src.utils.report_writer.Report`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..utils.report_writer import Report
from .analysis import CRITERIA, TARGET, collapse_detection, regret_table, series, within_run_agreement

__all__ = ["study_report"]


def _f(v: Any, digits: int = 3) -> str:
    if isinstance(v, float):
        return "–" if not math.isfinite(v) else f"{v:.{digits}f}"
    return str(v)


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(_f(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def _figures(records: Sequence[Mapping[str, Any]], tau: list[dict], regret: list[dict]) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    figs = {}
    objectives = sorted({r["objective"] for r in records})
    fig, axes = plt.subplots(1, len(objectives), figsize=(5.5 * len(objectives), 3.6), squeeze=False)
    for ax, obj in zip(axes[0], objectives):
        rows = [r for r in tau if r["objective"] == obj and math.isfinite(r["mean_tau"])]
        y = range(len(rows))
        err = [[r["mean_tau"] - r["low"] for r in rows], [r["high"] - r["mean_tau"] for r in rows]]
        err = [[0 if not math.isfinite(v) else v for v in e] for e in err]
        ax.barh(list(y), [r["mean_tau"] for r in rows], xerr=err, color="C0")
        ax.set_yticks(list(y), [r["criterion"] for r in rows], fontsize=8)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlim(-1, 1)
        ax.set_xlabel("mean Kendall τ with linear-probe accuracy across epochs (95 % bootstrap)")
        ax.set_title(f"(a) within-run agreement — {obj}", fontsize=9)
    fig.tight_layout()
    figs["agreement.png"] = fig

    fig, axes = plt.subplots(1, len(objectives), figsize=(5.5 * len(objectives), 4.2), squeeze=False)
    for ax, obj in zip(axes[0], objectives):
        rows = [r for r in regret if r["objective"] == obj and math.isfinite(r["mean_regret"])]
        y = range(len(rows))
        colors = ["C2" if r["labelled"] else ("C7" if r["criterion"] == "random pick" else "C1") for r in rows]
        se = [0 if not math.isfinite(r["se"]) else r["se"] for r in rows]
        ax.barh(list(y), [r["mean_regret"] for r in rows], xerr=se, color=colors)
        ax.set_yticks(list(y), [r["criterion"] for r in rows], fontsize=8)
        ax.set_xlabel("regret in linear-probe accuracy (mean ± SE over seeds; lower is better)")
        ax.set_title(f"(b, d) the learning rate each criterion picks — {obj}", fontsize=9)
    fig.tight_layout()
    figs["regret.png"] = fig

    keys = [("linear-probe acc", TARGET), ("SynBench", "val/synbench/score"), ("RankMe", "val/spectrum/rankme"),
            ("R_dr", "val/divergence_radius/mean")]  # fmt: skip
    fig, axes = plt.subplots(len(objectives), len(keys), figsize=(3.3 * len(keys), 2.8 * len(objectives)),
                             squeeze=False)  # fmt: skip
    lrs = sorted({r["lr"] for r in records})
    seed0 = min(r["seed"] for r in records)
    for i, obj in enumerate(objectives):
        for j, (title, key) in enumerate(keys):
            ax = axes[i][j]
            for k, lr in enumerate(lrs):
                run = next((r for r in records if r["objective"] == obj and r["lr"] == lr and r["seed"] == seed0), None)
                if run is None:
                    continue
                pts = series(run, key)
                if pts:
                    ax.plot(*zip(*pts), marker="o", ms=3, color=f"C{k}", label=f"lr {lr:g}")
            ax.set_title(f"{title} — {obj}", fontsize=8)
            ax.set_xlabel("epoch (-1: before training)", fontsize=7)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    figs["curves.png"] = fig
    return figs


def study_report(
    records: Sequence[Mapping[str, Any]], *, collapse_drop: float = 0.15, n_boot: int = 1000, level: float = 0.95
) -> Report:
    """(a)-(d) of the records as one :class:`Report` (``monitor_study.md`` / ``.csv`` / ``.json``, ``agreement.csv``,
    ``collapse.csv``, ``runs.csv``, ``agreement.png``, ``regret.png``, ``curves.png``)."""
    tau = within_run_agreement(records, n_boot=n_boot, level=level)
    regret = regret_table(records) + [r for r in regret_table(records, delta=True) if r["criterion"] != "random pick"]
    collapse = collapse_detection(records, collapse_drop=collapse_drop)
    runs = [{
        "objective": r["objective"], "lr": r["lr"], "seed": r["seed"], "seconds": r.get("seconds"),
        "final_linear_acc": (series(r, TARGET) or [(0, math.nan)])[-1][1],
        "min_linear_acc_after_init": min((v for e, v in series(r, TARGET) if e >= 0), default=math.nan),
    } for r in records]  # fmt: skip
    regret_cols = [
        ("objective", "objective"),
        ("criterion", "criterion"),
        ("direction", "direction"),
        ("mean_regret", "regret (mean)"),
        ("se", "SE"),
        ("seeds", "seeds"),
        ("picks", "picks (lr per seed)"),
    ]
    tau_cols = [
        ("objective", "objective"),
        ("criterion", "criterion"),
        ("mean_tau", "mean τ_b"),
        ("low", "low"),
        ("high", "high"),
        ("share_positive", "share τ > 0"),
        ("runs", "runs"),
    ]
    col_cols = [("objective", "objective"), ("rule", "rule"), ("collapsed", "collapsed run-epochs"),
                ("flagged", "flagged"), ("true_positives", "hits"), ("precision", "precision"), ("recall", "recall"),
                ("collapsed_runs_warned", "collapsed runs warned"), ("collapsed_runs_missed", "missed"),
                ("mean_epochs_of_warning", "epochs of warning")]  # fmt: skip
    n_runs, seconds = len(records), sum(float(r.get("seconds") or 0.0) for r in records)
    md = "\n\n".join([
        "# Monitoring study: do label-free monitors guide pretraining?",
        f"{n_runs} runs ({seconds / 60:.1f} min of training and monitoring). Target: held-out linear-probe accuracy "
        f"(`{TARGET}`). Criteria and their declared directions: "
        + ", ".join(f"{c.name} ({c.direction}{', labelled' if c.labelled else ''})" for c in CRITERIA) + ".",
        "## (b) The learning rate each criterion picks, and its regret",
        "Regret = best linear-probe accuracy over the learning rates of a seed − the accuracy of the criterion's pick "
        "(after the last epoch); mean ± standard error over seeds. `random pick` is the expected regret of a blind "
        "choice: a criterion that does not beat it does not guide. `Δ` rows (d) pick by the change from the value "
        "before training.",
        _table([r for r in regret if r["seeds"]], regret_cols),
        "## (a) Within-run agreement with downstream accuracy",
        "Kendall τ_b of the raw value and the linear-probe accuracy across the epochs of one run (before training "
        "included), averaged over runs, with a bootstrap interval over runs. Its sign is the observed relation, "
        "whatever the criterion's declared direction.",
        _table(tau, tau_cols),
        "## (c) Collapse detection",
        f"A run-epoch is collapsed when its linear-probe accuracy fell at least {collapse_drop} below its value before "
        "training (the probe of a random network is already at 0.93–0.97; an epoch whose own classifier is at chance "
        "still probes at 0.5–0.8). Each rule is "
        "one condition of `CollapseAlarm`, judged epoch by epoch; precision and recall over run-epochs; epochs of "
        "warning over the runs that collapsed (0: flagged in the collapsing epoch).",
        _table(collapse, col_cols),
    ])  # fmt: skip
    data = {"records": list(records), "agreement": tau, "regret": regret, "collapse": collapse}
    return Report(
        method="monitor_study",
        rows=[{k: v for k, v in r.items() if k != "picks"} | {"picks": " ".join(f"{p:g}" for p in r["picks"])}
              for r in regret],
        markdown=md,
        data=data,
        tables={"agreement.csv": tau, "collapse.csv": collapse, "runs.csv": runs},
        figures=lambda: _figures(records, tau, regret),
    )  # fmt: skip
