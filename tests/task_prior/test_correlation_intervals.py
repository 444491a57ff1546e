"""Bootstrap intervals of the Task-Prior correlations (Task Priors, arXiv:2507.09871, Fig. 3: 95 % intervals), from
src.stats.rank_agreement.agreement: over backbones, and over each backbone's sampled tasks when they are known."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from src.task_prior.report import correlation_intervals, correlations, rows_report


def _row(name: str, mean: float, var: float, acc_mean: float, acc_var: float, **extra) -> dict:
    return {"backbone": name, "mean": mean, "var": var, "acc_mean": acc_mean, "acc_var": acc_var, **extra}


def test_fig3_perfectly_correlated_rows_give_a_degenerate_interval_at_one():
    # E and Var exact increasing linear functions of the accuracy columns, no per-task accuracies: every resample
    # with >= 3 distinct backbones has r = τ_b = 1 (up to float64 round-off of r, ~1e-15)
    rows = [_row(f"b{i}", 2.0 * i + 1.0, 0.5 * i, 0.5 + 0.05 * i, 0.01 + 0.002 * i) for i in range(6)]
    got = correlation_intervals(rows)
    assert got["resampled"] == "backbones" and got["level"] == 0.95
    for key in ("mean_vs_acc_mean", "var_vs_acc_var"):
        e = got[key]
        for name in ("pearson", "pearson_low", "pearson_high"):
            assert e[name] == pytest.approx(1.0, abs=1e-12)
        assert e["kendall"] == e["kendall_low"] == e["kendall_high"] == 1.0  # τ_b from integer counts: exact
        assert e["p_value"] == pytest.approx(2 / math.factorial(6))  # the two perfect orderings of 720
        assert 0 < e["defined_fraction"] <= 1


def test_fig3_noise_rows_give_an_interval_containing_zero():
    rng = np.random.default_rng(3)
    rows = [_row(f"b{i}", *rng.normal(size=4).tolist()) for i in range(7)]  # four unrelated columns
    got = correlation_intervals(rows)
    for key in ("mean_vs_acc_mean", "var_vs_acc_var"):
        e = got[key]
        assert e["pearson_low"] < 0 < e["pearson_high"] and e["kendall_low"] < 0 < e["kendall_high"]
        assert e["pearson_low"] <= e["pearson"] <= e["pearson_high"]


def test_fig3_tasks_are_resampled_within_each_backbone_when_known():
    # acc_mean ranks exactly as E, but each backbone's 4 tasks spread over ±0.2 (more than the 0.05 steps between
    # backbones): redrawing the tasks reorders backbones, so the interval is no longer the degenerate [1, 1]
    rows = []
    for i in range(6):
        acc = [0.5 + 0.05 * i + d for d in (-0.2, -0.1, 0.1, 0.2)]
        rows.append(_row(f"b{i}", float(i), float(i), float(np.mean(acc)), float(np.var(acc)), accuracies=acc))
    got = correlation_intervals(rows)
    assert got["resampled"] == "backbones, and tasks within each backbone"
    e = got["mean_vs_acc_mean"]
    assert e["pearson"] == pytest.approx(1.0, abs=1e-12)  # the point estimate is the rows' own
    assert e["kendall_low"] < 1.0 and e["pearson_low"] < 0.99
    without = correlation_intervals([{k: v for k, v in r.items() if k != "accuracies"} for r in rows])
    assert without["mean_vs_acc_mean"]["kendall_low"] == 1.0


def test_fig3_undefined_with_two_backbones_and_shown_in_the_report(tmp_path):
    rows = [_row("a", 1.0, 1.0, 0.6, 0.01), _row("b", 2.0, 0.5, 0.7, 0.02)]
    got = correlation_intervals(rows)
    assert math.isnan(got["mean_vs_acc_mean"]["pearson_low"]) and math.isnan(got["mean_vs_acc_mean"]["p_value"])
    rows = [_row(f"b{i}", float(i), float(-i), 0.5 + 0.1 * i, 0.1 - 0.01 * i) for i in range(4)]
    report = rows_report(rows)
    assert report.data["correlations"] == correlations(rows)  # the four point estimates, unchanged
    assert "95% bootstrap intervals (2000 resamples of the backbones)" in report.markdown
    assert "Kendall τ_b +1.00 [+1.00, +1.00]" in report.markdown
    saved = json.loads(report.write(tmp_path, figures=False)["json"].read_text())
    assert saved["correlation_intervals"]["var_vs_acc_var"]["kendall"] == 1.0
