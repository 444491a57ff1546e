"""From :class:`~src.report.audit.AuditResults` to the ranking table, the rank agreement of every score with the
downstream accuracies, the budget-consistency table and the figures — and the files: ``report.html`` (self-contained),
``report.md``, ``report.csv``, ``report.json`` and the PNG figures."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from ..methods import METHODS, AuditPart, column_direction, descriptive_columns
from ..methods.audit_parts import config_settings
from ..stats.rank_agreement import Agreement, agreement
from ..utils.atomic_write import atomic_write_bytes
from ..utils.report_writer import Report
from .audit import DEPTH_SETTINGS, AuditResults
from .html import figure_html, format_value, markdown_table, page, page_table_html, table_html

__all__ = ["direction", "score_rows", "agreements", "budget_choices", "audit_report", "write_audit"]


def direction(column: str) -> bool | None:
    """The direction of a table column: higher is better (True), lower (False), none (None) — the paper's reading of
    each score, stated once in :data:`src.methods.METHODS` (the baselines: :data:`src.baselines.BASELINES`; ``sdl@1``
    reads ``sdl``). Downstream accuracies (``<set>/<metric>``): higher is better."""
    if "/" in column:
        return True
    return column_direction(column)


def _method_parts(results: AuditResults, synthetic: bool | None = None) -> list[AuditPart]:
    """The audit parts of the methods that ran (table order); ``synthetic`` picks the repeated ones (or the rest)."""
    return [
        p
        for spec in METHODS.values()
        for p in spec.audit_parts
        if p.name in results.config.parts and (synthetic is None or p.synthetic == synthetic)
    ]


def _synthetic_columns(results: AuditResults, v: Mapping[str, Any], suffix: str = "") -> dict[str, float]:
    """The synthetic parts' columns of one backbone from its values ``<part><suffix>`` (``synbench#1``, ...)."""
    cols: dict[str, float] = {}
    for part in _method_parts(results, synthetic=True):
        if f"{part.name}{suffix}" in v:
            cols.update(part.call("columns", v[f"{part.name}{suffix}"]))
    return cols


def censored_cells(results: AuditResults, suffixes: Sequence[str] | None = None) -> dict[str, set[str]]:
    """{backbone: columns whose value is only a lower bound}: SDL / ε-SC when the loss-data curve never reaches ε
    (the baselines part records them as ``lower_bounds``), in the main run or any extra seed (``suffixes``: the
    parts' suffixes to read; None = the main run and every seed)."""
    suffixes = ["", *(f"#{k}" for k in results.config.seeds)] if suffixes is None else list(suffixes)
    out: dict[str, set[str]] = {}
    for label in results.labels:
        cols: set[str] = set()
        for suffix in suffixes:
            value = results.values[label].get(f"baselines{suffix}")
            if isinstance(value, Mapping):
                cols.update(value.get("lower_bounds") or ())
        out[label] = cols
    return out


#: the verdict of a column without a direction (α-ReQ, Task-Prior Var): τ_b is shown, no reading of it
NO_DIRECTION = "no direction: τ_b shown, no verdict"


def seed_values(results: AuditResults) -> dict[str, dict[str, list[float]]]:
    """{backbone: {column: [value per seed]}} of the synthetic columns (the config's seed first, then ``seeds``)."""
    out: dict[str, dict[str, list[float]]] = {}
    for label in results.labels:
        v = results.values[label]
        per = [_synthetic_columns(results, v)] + [_synthetic_columns(results, v, f"#{k}") for k in results.config.seeds]
        out[label] = {c: [p[c] for p in per if c in p and _is_number(p[c])] for c in per[0]}
    return out


def score_rows(results: AuditResults) -> list[dict[str, Any]]:
    """One flat row per backbone: every score (synthetic ones: the mean over seeds), the external ground truth
    (``<task>/external``, ``downstream.external``) and every downstream accuracy (``<set>/<metric>``), and the time of
    each part (``time_<part>_s``)."""
    rows = []
    seeds = seed_values(results)
    for label in results.labels:
        v, row = results.values[label], {"backbone": label}
        first = _synthetic_columns(results, v)
        for col, vals in seeds[label].items():
            row[col] = sum(vals) / len(vals) if vals and results.config.seeds else first.get(col)
        for part in _method_parts(results, synthetic=False):
            if part.name in v:
                row.update(part.call("columns", v[part.name]))
        if results.external is not None:
            row.update(results.external.values.get(label, {}))
        for name, accs in v.get("downstream", {}).items():
            row.update({f"{name}/{k}": a for k, a in accs.items()})
        for part, sec in results.seconds[label].items():
            row[f"time_{part}_s"] = sec
        rows.append(row)
    return rows


def time_notes(results: AuditResults) -> str:
    """The audit parts' notes under the time table (e.g. SynBench's cost against the baselines'), one per line."""
    notes = [p.call("note", results) for p in _method_parts(results) if p.note is not None]
    return "\n".join(n for n in notes if n)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def score_columns(rows: Sequence[Mapping[str, Any]], with_descriptive: bool = False) -> list[str]:
    """The task-agnostic score columns (every column but the backbone, accuracies and times; the descriptive ones, :func:`src.methods.descriptive_columns`, only
    with ``with_descriptive``)."""
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols and k != "backbone" and "/" not in k and not k.startswith("time_"):
                if with_descriptive or k not in descriptive_columns():
                    cols.append(k)
    return cols


def target_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ground-truth columns: the external ones first (``<task>/external``, their average leading), then the
    downstream accuracies (``<set>/<metric>``), each in order of appearance."""
    from .external import SUFFIX

    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if "/" in k and k not in cols]
    return sorted(cols, key=lambda c: not c.endswith("/" + SUFFIX))


def agreements(
    rows: Sequence[Mapping[str, Any]],
    n_boot: int = 2000,
    level: float = 0.9,
    per_seed: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    censored: Mapping[str, set[str]] | None = None,
) -> list[Agreement]:
    """Agreement of every score column with every downstream column across the backbones that have a value of that
    downstream column (an external accuracy may be missing for some; the agreement's n says how many), a score
    column with a missing or non-finite value for one of them being left out (the report lists it as undefined). ``per_seed``: {backbone:
    {column: values}} — those columns are resampled over seeds within each backbone too. ``censored``: {backbone:
    columns that are only lower bounds}: such a column is left out (:func:`censored_columns` says why on the page).
    A column without a direction gets τ_b but no verdict (:data:`NO_DIRECTION`)."""
    cut = {c for cols in (censored or {}).values() for c in cols}
    out = []
    every = rows
    for target in target_columns(every):
        rows = [r for r in every if _is_number(r.get(target))]
        for col in (c for c in score_columns(rows) if c not in cut):
            xs, ys = [r.get(col) for r in rows], [r.get(target) for r in rows]
            if not all(_is_number(x) for x in xs) or not all(_is_number(y) for y in ys):
                continue
            if per_seed and all(len(per_seed.get(r["backbone"], {}).get(col, ())) > 1 for r in rows):
                x: Any = {r["backbone"]: list(per_seed[r["backbone"]][col]) for r in rows}
                y: Any = {r["backbone"]: float(r[target]) for r in rows}
            else:
                x, y = [float(v) for v in xs], [float(v) for v in ys]
            a = agreement(x, y, score_name=col, target_name=target, higher_is_better=direction(col),
                          n_boot=n_boot, level=level)  # fmt: skip
            out.append(a if direction(col) is not None else dataclasses.replace(a, verdict=NO_DIRECTION))
    return out


def agreement_matrix(agree: Sequence[Agreement]) -> list[dict[str, Any]]:
    """The agreement as a score × downstream-column matrix of short cells: ``τ_b [low, high] p`` and a mark — ✓ agrees,
    ✗ ranks against, · cannot be separated from no agreement (the verdicts of :func:`src.report.agreement.agreement`)."""
    rows: dict[str, dict[str, Any]] = {}
    for a in agree:
        mark = "✓" if a.verdict.startswith("agrees") else "✗" if a.verdict.startswith("ranks") else "·"
        mark = "–" if a.verdict == NO_DIRECTION else mark
        if math.isnan(a.kendall):
            cell = "n/a"
        else:
            cell = f"{mark} {a.kendall:+.2f} [{a.kendall_low:+.2f}, {a.kendall_high:+.2f}] p {a.p_value:.2f}"
        rows.setdefault(a.score, {"score": a.score})[a.target] = cell
    return list(rows.values())


def budget_choices(results: AuditResults, pair: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The paper's Fig. 5 / Table 8 check: for each synthetic score and each budget n, which backbone of ``pair``
    (default: the config's ``budget_pair``, else the two best by the first ground-truth column, else the first two)
    the score prefers; ``flips`` says whether the choice changes with n."""
    budgets = results.config.budgets
    if not budgets or len(results.labels) < 2:
        return []
    rows = score_rows(results)
    pair = pair or results.config.budget_pair
    if pair is None:
        targets = target_columns(rows)
        has = [r for r in rows if targets and _is_number(r.get(targets[0]))]
        order = sorted(has, key=lambda r: -float(r[targets[0]])) + [r for r in rows if r not in has]
        pair = [order[0]["backbone"], order[1]["backbone"]]
    a, b = pair
    out = []
    per_n: dict[int, dict[str, dict[str, float]]] = {}
    cens: dict[int, dict[str, set[str]]] = {}
    for n in budgets:
        per_n[n] = {}
        cens[n] = censored_cells(results, [f"@{n}"])
        for label in (a, b):
            per_n[n][label] = _synthetic_columns(results, results.values[label], f"@{n}")
    names = [c for c in per_n[budgets[0]][a] if direction(c) is not None]
    for col in names:
        row: dict[str, Any] = {"score": col}
        choices = []
        for n in budgets:
            va, vb = per_n[n][a].get(col), per_n[n][b].get(col)
            if col in cens[n][a] | cens[n][b]:  # a lower bound cannot order the two
                row[f"n={n}"] = "censored (> x)"
                continue
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


# ----------------------------------------------------------------------------------------------- the page
CONTROL_MARK = " (control)"


def page_rows(
    rows: Sequence[Mapping[str, Any]], controls: Sequence[str], censored: Mapping[str, set[str]]
) -> tuple[list[dict[str, Any]], list[int]]:
    """(the rows as the page shows them, the indices of the controls): sorted by the first downstream accuracy, best
    first (a backbone without it last; ties keep the input order); a control's label marked ``(control)``; a
    censored value shown as ``> x`` (text: never "best")."""
    targets = target_columns(rows)
    first = targets[0] if targets else None

    def key(r: Mapping[str, Any]) -> tuple[int, float]:
        v = r.get(first) if first else None
        return (0, -float(v)) if _is_number(v) else (1, 0.0)

    shown, exclude = [], []
    for i, r in enumerate(sorted(rows, key=key) if first else list(rows)):
        row = dict(r)
        for col in censored.get(r["backbone"], ()):
            if _is_number(row.get(col)):
                row[col] = "> " + format_value(float(row[col]))
        if r["backbone"] in controls:
            row["backbone"] = r["backbone"] + CONTROL_MARK
            exclude.append(i)
        shown.append(row)
    return shown, exclude


def control_note(rows: Sequence[Mapping[str, Any]], controls: Sequence[str]) -> str:
    """The score columns on which a random-weight control beats every pretrained backbone, in one sentence (empty
    when none does, or without controls or pretrained backbones)."""
    ctrl = [r for r in rows if r["backbone"] in controls]
    real = [r for r in rows if r["backbone"] not in controls]
    if not ctrl or not real:
        return ""
    beaten = []
    for col in score_columns(rows):
        higher = direction(col)
        if higher is None:
            continue
        sign = 1.0 if higher else -1.0
        best_real = [sign * float(r[col]) for r in real if _is_number(r.get(col))]
        best_ctrl = [sign * float(r[col]) for r in ctrl if _is_number(r.get(col))]
        if best_real and best_ctrl and max(best_ctrl) > max(best_real):
            beaten.append(col)
    if not beaten:
        return f"Controls ({', '.join(controls)}: random weights) score below the pretrained backbones on every score."
    return (
        f"A random-weight control ({', '.join(controls)}) scores better than every pretrained backbone on "
        f"{', '.join(beaten)}: there the score does not measure what pretraining adds."
    )


def censored_note(rows: Sequence[Mapping[str, Any]], censored: Mapping[str, set[str]]) -> str:
    """Which columns hold lower bounds ("> x"), for how many backbones, and what the report does with them."""
    cols = sorted({c for cs in censored.values() for c in cs})
    if not cols:
        return ""
    parts = [f"{c} for {sum(c in cs for cs in censored.values())} of {len(rows)}" for c in cols]
    return (
        f'Lower bounds (shown "> x": the loss-data curve never reached ε): {"; ".join(parts)} backbones. These '
        "columns are left out of the rank agreement and of the budget choices, and are never marked best."
    )


def verdict_lines(agree: Sequence[Agreement], rows: Sequence[Mapping[str, Any]], controls: Sequence[str]) -> list[str]:
    """One line per score against the first downstream accuracy: its verdict (agrees / ranks against / cannot tell,
    with n), and for a score that agrees, the pretrained backbone it picks."""
    targets = target_columns(rows)
    if not targets:
        return []
    real = [r for r in rows if r["backbone"] not in controls]
    lines = []
    for a in (a for a in agree if a.target == targets[0]):
        line = f"{a.score}: {a.verdict} (n = {a.n})"
        higher = direction(a.score)
        if a.verdict.startswith("agrees") and higher is not None:
            vals = [(float(r[a.score]), r["backbone"]) for r in real if _is_number(r.get(a.score))]
            if vals:
                pick = max(vals)[1] if higher else min(vals)[1]
                line += f"; it picks {pick}"
        lines.append(line)
    return lines


# ----------------------------------------------------------------------------------------------- figures
def _figures(results: AuditResults, rows: Sequence[Mapping[str, Any]], agree: Sequence[Agreement]) -> dict[str, Any]:
    import numpy as np
    from matplotlib.figure import Figure

    figs: dict[str, Any] = {}
    labels = results.labels
    for part in _method_parts(results):  # each method's figure over every backbone that has its part
        if part.figure is not None and all(part.name in results.values[lab] for lab in labels):
            figs[part.figure_name] = part.call("figure", {lab: results.values[lab][part.name] for lab in labels})
    targets = target_columns(rows)
    defined = [a for a in agree if a.kendall is not None and math.isfinite(a.kendall)]  # n < 3 or constant: none
    scores = [c for c in score_columns(rows) if any(a.score == c for a in defined)]
    if scores and targets:
        fig = Figure(figsize=(6.5, 0.38 * len(scores) + 1.4))
        ax = fig.add_subplot()
        step = 0.7 / len(targets)
        for t, target in enumerate(targets):  # one marker per downstream column, offset vertically
            found = {a.score: a for a in defined if a.target == target}
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
        ax.legend(fontsize=7, loc="best")  # inside the axes: below them it covered the x label
        ax.set_title("Rank agreement with the downstream accuracies")
        figs["agreement.png"] = fig
    return figs


# ----------------------------------------------------------------------------------------------- files
def audit_report(results: AuditResults, n_boot: int = 2000, level: float = 0.9) -> tuple[Report, str]:
    """(the Report — ``report.{md,csv,json}`` and figures — and the self-contained HTML page)."""
    rows = score_rows(results)
    censored = censored_cells(results)
    agree = agreements(rows, n_boot, level, seed_values(results) if results.config.seeds else None, censored)
    budget = budget_choices(results)
    scores, targets = score_columns(rows, with_descriptive=True), target_columns(rows)
    times = sorted({k for r in rows for k in r if k.startswith("time_")})
    # the page: the ground truth leftmost, rows best-first by it, controls marked and never best, lower bounds "> x"
    main_cols = ["backbone", *targets, *scores]
    shown, controls = page_rows(rows, results.controls, censored)
    verdicts = verdict_lines(agree, rows, results.controls)
    external = results.external.note() if results.external is not None else ""
    notes = [n for n in (external, control_note(rows, results.controls), censored_note(rows, censored)) if n]
    dirs = {c: direction(c) for c in main_cols}
    agree_rows = [a.to_dict() for a in agree]
    cfg = results.config
    synthetic = [
        *([f"SynBench at {cfg.input_size or 'native'} px, {len(cfg.synbench.s_values)} s values x "
           f"({cfg.synbench.n_train} + {cfg.synbench.n_test}) samples"] if "synbench" in cfg.parts else []),
        *([f"baselines on {'the same' if 'synbench' in cfg.parts else 'a SynBench'} proxy task at s = "
           f"{cfg.baseline_s:g}" + (f" ({cfg.baseline_convention} convention: the SynBench paper's code)"
                                     if cfg.baseline_probe else "")] if "baselines" in cfg.parts else []),
    ]  # fmt: skip
    if synthetic and cfg.seeds:
        synthetic.append(f"synthetic scores are means over {1 + len(cfg.seeds)} seeds")
    intro = (
        f"{len(results.labels)} backbones; parts {', '.join(cfg.parts)}."
        + (f" {'; '.join(synthetic)}." if synthetic else "")
        + " Rows best-first by the first ground-truth column (leftmost: downstream.external's, else the first "
        "downstream accuracy). Best value per column in "
        "bold among the pretrained backbones (direction of each score as its paper reads it; none for alpha_req, "
        "tp_var, synbench_best_eps). Agreement intervals are "
        f"{level:.0%} bootstrap intervals over backbones: with a handful of backbones they are wide, and the verdict "
        "says when a score cannot be told apart from no agreement."
    )
    md = [f"# Backbone audit\n\n{intro}\n"]
    if verdicts or notes:
        first = f" (against {targets[0]})" if targets else ""
        md += [f"## Verdict{first}\n", "".join(f"- {line}\n" for line in verdicts), *(f"\n{n}\n" for n in notes)]
    md += ["\n## Ranking\n", markdown_table(shown, main_cols, dirs, controls)]
    matrix = agreement_matrix(agree)
    matrix_cols = ["score", *targets]
    legend = (
        "Kendall τ_b [bootstrap interval] and permutation p per score and downstream column: ✓ agrees, ✗ ranks against, "
        "· cannot be separated from no agreement (interval contains 0 or p > 1 − level), – no direction (no verdict). "
        "Columns holding lower bounds are left out. Pearson's r and every "
        "number: agreement.csv / report.json."
    )
    if not targets:  # no ground truth (parts without downstream, no downstream.external): nothing to agree with
        legend = "No ground-truth column (add the downstream part or downstream.external): no rank agreement."
    md += ["\n## Rank agreement with the downstream accuracies\n", legend + "\n"]
    md += [markdown_table(matrix, matrix_cols)] if targets else []
    if budget:
        md += ["\n## Consistency across synthetic budgets\n", markdown_table(budget, list(budget[0]))]
    cost = time_notes(results)
    md += ["\n## Time per part (s)\n", (cost + "\n") if cost else "", markdown_table(rows, ["backbone", *times])]
    md_text = "\n".join(md)

    def figures() -> dict[str, Any]:
        return _figures(results, rows, agree)

    data = {
        "config": _jsonable_config(cfg),
        "rows": rows,
        "agreement": agree_rows,
        "budget_choices": budget,
        **({"external": dataclasses.asdict(results.external)} if results.external is not None else {}),
        "values": results.values,
        "seconds": results.seconds,
        "cached": results.cached,
    }
    report = Report(method="report", rows=rows, markdown=md_text, data=data, figures=figures,
                    tables={"agreement.csv": agree_rows}, columns=["backbone", *scores, *targets, *times])  # fmt: skip
    sections = []
    if verdicts or notes:
        items = "".join(f"<li>{escape(line)}</li>" for line in verdicts)
        sections.append((
            f"Verdict (against {targets[0]})" if targets else "Verdict",
            (f"<ul>{items}</ul>" if items else "") + "".join(f'<p class="note">{escape(n)}</p>' for n in notes),
        ))  # fmt: skip
    sections += [
        ("Ranking", page_table_html(shown, main_cols, dirs, controls)),
        (
            "Rank agreement with the downstream accuracies",
            f'<p class="note">{legend}</p>' + (table_html(matrix, matrix_cols) if targets else ""),
        ),
    ]
    if budget:
        sections.append(("Consistency across synthetic budgets", table_html(budget, list(budget[0]))))
    cost_html = f'<p class="note">{cost}</p>' if cost else ""
    sections.append(("Time per part (seconds)", cost_html + table_html(rows, ["backbone", *times])))
    figs = figures()
    captions = {p.figure_name: p.caption for p in _method_parts(results) if p.figure is not None}
    captions["agreement.png"] = "Kendall τ_b of each score with each downstream accuracy, with its bootstrap interval"
    sections.append(("Figures", "".join(figure_html(f, captions.get(n, n)) for n, f in figs.items())))
    return report, page("RepBench backbone audit", sections, intro)


def _jsonable_config(cfg: Any) -> Any:
    out = config_settings(cfg)
    if not out.get("methods"):  # no method beyond the built-in three: report.json as before the field existed
        out.pop("methods", None)
    if "depth" not in cfg.parts:  # the opt-in part's settings: only when it runs (a report without it as before)
        for key in DEPTH_SETTINGS:
            out.pop(key, None)
    return out


def write_audit(results: AuditResults, out_dir: str | Path, n_boot: int = 2000, level: float = 0.9) -> dict[str, Path]:
    """Write report.html, report.md, report.csv, report.json, agreement.csv and the figures into ``out_dir``."""
    report, html_text = audit_report(results, n_boot, level)
    paths = report.write(out_dir)
    paths["html"] = Path(out_dir) / "report.html"
    atomic_write_bytes(html_text.encode(), paths["html"])
    return paths
