"""From :class:`~src.report.audit.AuditResults` to the ranking table, the rank agreement of every score with the
downstream accuracies, the budget-consistency table and the figures — and the files: ``report.html`` (self-contained),
``report.md``, ``report.csv``, ``report.json`` and the PNG figures."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..utils.atomic_write import atomic_write_bytes
from ..utils.rank_agreement import Agreement, agreement
from ..utils.report_writer import Report
from .audit import AuditResults
from .html import figure_html, markdown_table, page, table_html

__all__ = ["DIRECTIONS", "score_rows", "agreements", "budget_choices", "audit_report", "write_audit"]

#: higher is better (True), lower is better (False), no direction (None) — the paper's reading of each score
#: (SynBench Table 7: "for Val loss, MDL, SDL and ε SC the smaller the better; for LogME, SFDA, SynBench the bigger";
#: DivergenceRadius: a smaller radius is more robust; α-ReQ: best near 1, no monotone direction)
DIRECTIONS: dict[str, bool | None] = {
    "synbench": True,
    "synbench_best_eps": None,
    "logme": True,
    "sfda": True,
    "rankme": True,
    "alpha_req": None,
    "val_loss": False,
    "mdl": False,
    "sdl": False,
    "esc": False,
    "r_dr_mean": False,
    "r_cs_mean": False,
    "tp_mean": True,
    "tp_var": None,
    "tp_z": True,
    "tp_acc_mean": True,
}


def direction(column: str) -> bool | None:
    """The direction of a table column (``sdl@1`` → ``sdl``; downstream accuracies: higher is better)."""
    if "/" in column:
        return True
    return DIRECTIONS.get(column.split("@")[0])


def _synbench_columns(value: Mapping[str, Any]) -> dict[str, float]:
    from ..synbench import SynBenchResult

    res = SynBenchResult.from_dict(dict(value))
    return {"synbench": res.score(res.eps[0]), "synbench_best_eps": res.best_eps()}


def _synthetic_columns(v: Mapping[str, Any], suffix: str = "") -> dict[str, float]:
    """SynBench and baseline columns of one backbone from its parts ``synbench<suffix>`` / ``baselines<suffix>``."""
    cols: dict[str, float] = {}
    if f"synbench{suffix}" in v:
        cols.update(_synbench_columns(v[f"synbench{suffix}"]))
    if f"baselines{suffix}" in v:
        cols.update(v[f"baselines{suffix}"]["values"])
    return cols


def seed_values(results: AuditResults) -> dict[str, dict[str, list[float]]]:
    """{backbone: {column: [value per seed]}} of the synthetic columns (the config's seed first, then ``seeds``)."""
    out: dict[str, dict[str, list[float]]] = {}
    for label in results.labels:
        v = results.values[label]
        per = [_synthetic_columns(v)] + [_synthetic_columns(v, f"#{k}") for k in results.config.seeds]
        out[label] = {c: [p[c] for p in per if c in p and _is_number(p[c])] for c in per[0]}
    return out


def score_rows(results: AuditResults) -> list[dict[str, Any]]:
    """One flat row per backbone: every score (synthetic ones: the mean over seeds), every downstream accuracy
    (``<set>/<metric>``) and the time of each part (``time_<part>_s``)."""
    rows = []
    seeds = seed_values(results)
    for label in results.labels:
        v, row = results.values[label], {"backbone": label}
        for col, vals in seeds[label].items():
            first = _synthetic_columns(v).get(col)
            row[col] = sum(vals) / len(vals) if vals and results.config.seeds else first
        if "divergence_radius" in v:
            row["r_dr_mean"] = v["divergence_radius"]["r_dr_mean"]
            row["r_cs_mean"] = v["divergence_radius"]["r_cs_mean"]
        if "task_prior" in v:
            tp = v["task_prior"]
            row.update({"tp_mean": tp["mean"], "tp_var": tp["var"], "tp_z": tp["z"], "tp_acc_mean": tp["acc_mean"]})
        for name, accs in v.get("downstream", {}).items():
            row.update({f"{name}/{k}": a for k, a in accs.items()})
        for part, sec in results.seconds[label].items():
            row[f"time_{part}_s"] = sec
        rows.append(row)
    return rows


def cost_note(results: AuditResults) -> str:
    """One sentence comparing the cost of SynBench with the baselines' on the same proxy task, per synthetic sample
    (SynBench draws len(s_values)·(n_train + n_test) samples, the baselines n_train + n_test at one s) — the quantity
    behind the paper's "50× cheaper" (Appendix A.9); empty when either part is missing."""
    cfg = results.config.synbench
    ratios = []
    for label in results.labels:
        sec = results.seconds[label]
        if "synbench" in sec and "baselines" in sec and sec["synbench"] > 0:
            per_sb = sec["synbench"] / (len(cfg.s_values) * (cfg.n_train + cfg.n_test))
            per_bl = sec["baselines"] / (cfg.n_train + cfg.n_test)
            ratios.append(per_bl / per_sb)
    if not ratios:
        return ""
    ratios.sort()
    return (
        f"Per synthetic sample, the baselines cost {ratios[0]:.1f}–{ratios[-1]:.1f}× what SynBench costs "
        f"(median {ratios[len(ratios) // 2]:.1f}×; both include the backbone forwards)."
    )


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


#: table columns that describe a backbone but do not score it (left out of the rank agreement)
NOT_SCORES = ("synbench_best_eps",)


def score_columns(rows: Sequence[Mapping[str, Any]], with_descriptive: bool = False) -> list[str]:
    """The task-agnostic score columns (every column but the backbone, accuracies and times; ``NOT_SCORES`` only
    with ``with_descriptive``)."""
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols and k != "backbone" and "/" not in k and not k.startswith("time_"):
                if with_descriptive or k not in NOT_SCORES:
                    cols.append(k)
    return cols


def target_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The downstream accuracy columns (``<set>/<metric>``)."""
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if "/" in k and k not in cols]
    return cols


def agreements(
    rows: Sequence[Mapping[str, Any]],
    n_boot: int = 2000,
    level: float = 0.9,
    per_seed: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
) -> list[Agreement]:
    """Agreement of every score column with every downstream column across backbones (columns with a missing or
    non-finite value for some backbone are left out: the report lists them as undefined). ``per_seed``: {backbone:
    {column: values}} — those columns are resampled over seeds within each backbone too."""
    out = []
    for target in target_columns(rows):
        for col in score_columns(rows):
            xs, ys = [r.get(col) for r in rows], [r.get(target) for r in rows]
            if not all(_is_number(x) for x in xs) or not all(_is_number(y) for y in ys):
                continue
            if per_seed and all(len(per_seed.get(r["backbone"], {}).get(col, ())) > 1 for r in rows):
                x: Any = {r["backbone"]: list(per_seed[r["backbone"]][col]) for r in rows}
                y: Any = {r["backbone"]: float(r[target]) for r in rows}
            else:
                x, y = [float(v) for v in xs], [float(v) for v in ys]
            out.append(agreement(x, y, score_name=col, target_name=target, higher_is_better=direction(col),
                                 n_boot=n_boot, level=level))  # fmt: skip
    return out


def agreement_matrix(agree: Sequence[Agreement]) -> list[dict[str, Any]]:
    """The agreement as a score × downstream-column matrix of short cells: ``τ_b [low, high] p`` and a mark — ✓ agrees,
    ✗ ranks against, · cannot be separated from no agreement (the verdicts of :func:`src.report.agreement.agreement`)."""
    rows: dict[str, dict[str, Any]] = {}
    for a in agree:
        mark = "✓" if a.verdict.startswith("agrees") else "✗" if a.verdict.startswith("ranks") else "·"
        if math.isnan(a.kendall):
            cell = "n/a"
        else:
            cell = f"{mark} {a.kendall:+.2f} [{a.kendall_low:+.2f}, {a.kendall_high:+.2f}] p {a.p_value:.2f}"
        rows.setdefault(a.score, {"score": a.score})[a.target] = cell
    return list(rows.values())


def budget_choices(results: AuditResults, pair: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The paper's Fig. 5 / Table 8 check: for each synthetic score and each budget n, which backbone of ``pair``
    (default: the two best by the first downstream accuracy, else the first two) the score prefers; ``flips`` says
    whether the choice changes with n."""
    budgets = results.config.budgets
    if not budgets or len(results.labels) < 2:
        return []
    rows = score_rows(results)
    if pair is None:
        targets = target_columns(rows)
        order = sorted(rows, key=lambda r: -float(r[targets[0]])) if targets else rows
        pair = [order[0]["backbone"], order[1]["backbone"]]
    a, b = pair
    out = []
    per_n: dict[int, dict[str, dict[str, float]]] = {}
    for n in budgets:
        per_n[n] = {}
        for label in (a, b):
            v, cols = results.values[label], {}
            if f"synbench@{n}" in v:
                cols.update(_synbench_columns(v[f"synbench@{n}"]))
            if f"baselines@{n}" in v:
                cols.update(v[f"baselines@{n}"]["values"])
            per_n[n][label] = cols
    names = [c for c in per_n[budgets[0]][a] if direction(c) is not None]
    for col in names:
        row: dict[str, Any] = {"score": col}
        choices = []
        for n in budgets:
            va, vb = per_n[n][a].get(col), per_n[n][b].get(col)
            if not (_is_number(va) and _is_number(vb)) or va == vb:
                row[f"n={n}"] = "tie / n/a"
                continue
            better_a = (va > vb) == bool(direction(col))
            choice = a if better_a else b
            choices.append(choice)
            row[f"n={n}"] = choice
        row["flips"] = len(set(choices)) > 1
        out.append(row)
    return out


# ----------------------------------------------------------------------------------------------- figures
def _figures(results: AuditResults, rows: Sequence[Mapping[str, Any]], agree: Sequence[Agreement]) -> dict[str, Any]:
    import numpy as np
    from matplotlib.figure import Figure

    figs: dict[str, Any] = {}
    labels = results.labels
    if all("synbench" in results.values[lab] for lab in labels):
        from ..synbench import SynBenchResult
        from ..synbench.compare import comparison_figures

        res = {lab: SynBenchResult.from_dict(dict(results.values[lab]["synbench"])) for lab in labels}
        figs["curves.png"] = comparison_figures(res)["curves.png"]
    if all("divergence_radius" in results.values[lab] for lab in labels):
        from ..divergence_radius.figures import robustness_axis

        names = list(results.values[labels[0]]["divergence_radius"]["r_dr"])
        fig = Figure(figsize=(9, 3.2))
        ax = fig.add_subplot()
        w = 0.8 / len(labels)
        x = np.arange(len(names))
        for i, lab in enumerate(labels):
            r = results.values[lab]["divergence_radius"]["r_dr"]
            ax.bar(x + i * w - 0.4 + w / 2, [r[n] for n in names], w, label=lab)
        ax.set_xticks(x, [n.replace("_", "\n") for n in names], fontsize=7)
        robustness_axis(ax, "mean R_dr\n(lower = more robust)")  # R_dr's fixed [0, 1] range, as every R_dr figure
        ax.legend(fontsize=6, loc="upper right")
        ax.set_title("DivergenceRadius per perturbation")
        fig.tight_layout()  # the y label inside the canvas
        figs["r_dr_by_perturbation.png"] = fig
    if all("task_prior" in results.values[lab] for lab in labels):
        fig = Figure(figsize=(6, 3))
        ax = fig.add_subplot()
        z = [results.values[lab]["task_prior"]["z"] for lab in labels]
        ax.bar(range(len(labels)), [v if v is not None and math.isfinite(v) else 0.0 for v in z])
        ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=20, ha="right")
        ax.set_ylabel("Task-Prior z = E / √Var")
        ax.set_title("Task-Prior z-scores")
        figs["task_prior_z.png"] = fig
    targets = target_columns(rows)
    scores = [c for c in score_columns(rows) if any(a.score == c for a in agree)]
    if scores and targets:
        fig = Figure(figsize=(6.5, 0.38 * len(scores) + 1.4))
        ax = fig.add_subplot()
        step = 0.7 / len(targets)
        for t, target in enumerate(targets):  # one marker per downstream column, offset vertically
            found = {a.score: a for a in agree if a.target == target}
            ys = [i - 0.35 + step * (t + 0.5) for i, c in enumerate(scores) if c in found]
            pts = [found[c] for c in scores if c in found]
            tau = np.array([a.kendall for a in pts])
            lo = np.nan_to_num(tau - np.array([a.kendall_low for a in pts]))
            hi = np.nan_to_num(np.array([a.kendall_high for a in pts]) - tau)
            ax.errorbar(tau, ys, xerr=[lo, hi], fmt="o", capsize=3, label=target, color=f"C{t}")
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks(range(len(scores)), scores, fontsize=7)
        ax.set_xlim(-1.05, 1.05)
        ax.set_xlabel("Kendall τ_b across backbones (bootstrap interval over backbones)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
        ax.set_title("Rank agreement with the downstream accuracies")
        figs["agreement.png"] = fig
    return figs


# ----------------------------------------------------------------------------------------------- files
def audit_report(results: AuditResults, n_boot: int = 2000, level: float = 0.9) -> tuple[Report, str]:
    """(the Report — ``report.{md,csv,json}`` and figures — and the self-contained HTML page)."""
    rows = score_rows(results)
    agree = agreements(rows, n_boot, level, seed_values(results) if results.config.seeds else None)
    budget = budget_choices(results)
    scores, targets = score_columns(rows, with_descriptive=True), target_columns(rows)
    times = sorted({k for r in rows for k in r if k.startswith("time_")})
    main_cols = ["backbone", *scores, *targets]
    dirs = {c: direction(c) for c in main_cols}
    agree_rows = [a.to_dict() for a in agree]
    cfg = results.config
    intro = (
        f"{len(results.labels)} backbones; parts {', '.join(cfg.parts)}. SynBench at {cfg.input_size or 'native'} px, "
        f"{len(cfg.synbench.s_values)} s values x ({cfg.synbench.n_train} + {cfg.synbench.n_test}) samples; baselines on "
        f"the same proxy task at s = {cfg.baseline_s:g}"
        + (f"; synthetic scores are means over {1 + len(cfg.seeds)} seeds" if cfg.seeds else "")
        + ". Best value per column in bold (direction of each score as "
        "its paper reads it; none for alpha_req, tp_var, synbench_best_eps). Agreement intervals are "
        f"{level:.0%} bootstrap intervals over backbones: with a handful of backbones they are wide, and the verdict "
        "says when a score cannot be told apart from no agreement."
    )
    md = [f"# Backbone audit\n\n{intro}\n", "## Ranking\n", markdown_table(rows, main_cols, dirs)]
    matrix = agreement_matrix(agree)
    matrix_cols = ["score", *targets]
    legend = (
        "Kendall τ_b [bootstrap interval] and permutation p per score and downstream column: ✓ agrees, ✗ ranks against, "
        "· cannot be separated from no agreement (interval contains 0 or p > 1 − level). Pearson's r and every "
        "number: agreement.csv / report.json."
    )
    md += ["\n## Rank agreement with the downstream accuracies\n", legend + "\n", markdown_table(matrix, matrix_cols)]
    if budget:
        md += ["\n## Consistency across synthetic budgets\n", markdown_table(budget, list(budget[0]))]
    cost = cost_note(results)
    md += ["\n## Time per part (s)\n", (cost + "\n") if cost else "", markdown_table(rows, ["backbone", *times])]
    md_text = "\n".join(md)

    def figures() -> dict[str, Any]:
        return _figures(results, rows, agree)

    data = {
        "config": _jsonable_config(cfg),
        "rows": rows,
        "agreement": agree_rows,
        "budget_choices": budget,
        "values": results.values,
        "seconds": results.seconds,
        "cached": results.cached,
    }
    report = Report(method="report", rows=rows, markdown=md_text, data=data, figures=figures,
                    tables={"agreement.csv": agree_rows}, columns=["backbone", *scores, *targets, *times])  # fmt: skip
    sections = [
        ("Ranking", table_html(rows, main_cols, dirs)),
        (
            "Rank agreement with the downstream accuracies",
            f'<p class="note">{legend}</p>' + table_html(matrix, matrix_cols),
        ),
    ]
    if budget:
        sections.append(("Consistency across synthetic budgets", table_html(budget, list(budget[0]))))
    cost_html = f'<p class="note">{cost}</p>' if cost else ""
    sections.append(("Time per part (seconds)", cost_html + table_html(rows, ["backbone", *times])))
    figs = figures()
    captions = {
        "curves.png": "SynBench: expected scaled bound E(a_t) at ε = 0 per backbone, with the input-space reference",
        "r_dr_by_perturbation.png": "DivergenceRadius: mean R_dr per perturbation (lower = more robust embeddings)",
        "task_prior_z.png": "Task Priors: z = E / √Var of the kernel alignment under the prior",
        "agreement.png": "Kendall τ_b of each score with each downstream accuracy, with its bootstrap interval",
    }
    sections.append(("Figures", "".join(figure_html(f, captions.get(n, n)) for n, f in figs.items())))
    return report, page("RepBench backbone audit", sections, intro)


def _jsonable_config(cfg: Any) -> Any:
    from .audit import _config_settings

    return _config_settings(cfg)


def write_audit(results: AuditResults, out_dir: str | Path, n_boot: int = 2000, level: float = 0.9) -> dict[str, Path]:
    """Write report.html, report.md, report.csv, report.json, agreement.csv and the figures into ``out_dir``."""
    report, html_text = audit_report(results, n_boot, level)
    paths = report.write(out_dir)
    paths["html"] = Path(out_dir) / "report.html"
    atomic_write_bytes(html_text.encode(), paths["html"])
    return paths
