"""Seeds of the synthetic parts in the report: the table shows their mean, the agreement resamples them."""

from __future__ import annotations

import pytest

from src.report.audit import AuditConfig, AuditResults
from src.report.render import agreements, score_rows, seed_values


def _results(logme: dict[str, tuple[float, float]], acc: dict[str, float]) -> AuditResults:
    cfg = AuditConfig(parts=("baselines", "downstream"), seeds=(7,))
    values = {
        k: {
            "baselines": {"values": {"logme": a}},
            "baselines#7": {"values": {"logme": b}},
            "downstream": {"digits": {"clean_acc": acc[k]}},
        }
        for k, (a, b) in logme.items()
    }
    labels = list(logme)
    return AuditResults(cfg, labels, values, {k: {} for k in labels}, {k: {} for k in labels}, ["digits"])


def test_table_mean_and_per_seed_agreement() -> None:
    res = _results(
        {"a": (0.1, 0.3), "b": (0.5, 0.7), "c": (0.9, 1.1), "d": (0.2, 0.6)}, {"a": 0.2, "b": 0.6, "c": 0.9, "d": 0.5}
    )
    rows = score_rows(res)
    assert [r["logme"] for r in rows] == pytest.approx([0.2, 0.6, 1.0, 0.4])  # means of two exact binary fractions
    assert seed_values(res)["d"]["logme"] == [0.2, 0.6]
    (a,) = agreements(rows, n_boot=200, per_seed=seed_values(res))
    assert a.kendall == 1.0  # seed means order a < d < b < c, as the accuracies
    # seeds resampled: a resample may draw d's 0.6 against b's 0.5, so the interval is not degenerate at 1
    assert a.kendall_low < 1.0


def test_seeds_must_differ_from_the_main_seed() -> None:
    with pytest.raises(ValueError, match=r"seeds must be distinct integers >= 0 other than synbench.seed \(0\)"):
        AuditConfig(seeds=(0, 1))
