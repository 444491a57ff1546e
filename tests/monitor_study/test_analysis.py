"""The monitoring study's analysis on records built by hand, so every number has a known answer."""

from __future__ import annotations

import math

import pytest

from src.monitor_study.analysis import (
    CRITERIA,
    TARGET,
    Criterion,
    collapse_detection,
    regret_table,
    within_run_agreement,
)

SB, RANKME, COS, RDR = "val/synbench/score", "val/spectrum/rankme", "val/collapse/cosine", "val/divergence_radius/mean"


def _run(objective, lr, seed, accs, **scores):
    """A record: epochs -1..len(accs)-2, the target and the given score series (None: not logged that epoch)."""
    epochs = []
    for i, acc in enumerate(accs):
        m = {TARGET: acc}
        for key, values in scores.items():
            if values[i] is not None:
                m[key.replace("__", "/")] = values[i]
        epochs.append({"epoch": i - 1, "metrics": m})
    return {"objective": objective, "lr": lr, "seed": seed, "epochs": epochs}


def test_within_run_agreement_is_the_signed_tau_over_runs() -> None:
    acc = [0.1, 0.5, 0.7, 0.9]
    runs = [
        _run("sup", 1e-3, 0, acc, val__synbench__score=[0.9, 0.6, 0.3, 0.1], val__spectrum__rankme=[1, 2, 3, 4]),
        _run("sup", 1e-2, 0, acc, val__synbench__score=[0.9, 0.7, 0.6, 0.2], val__spectrum__rankme=[1, 3, 2, 4]),
        _run("sup", 1e-1, 0, acc, val__synbench__score=[0.5] * 4, val__spectrum__rankme=[1, 2, None, 3]),
    ]
    rows = {r["criterion"]: r for r in within_run_agreement(runs, n_boot=200)}
    assert rows["SynBench"]["mean_tau"] == -1.0 and rows["SynBench"]["runs"] == 2  # the constant series: no τ
    # RankMe: τ_b = 1, 2/3 (one discordant pair of 6) and 1 (3 common epochs): mean 8/9
    assert rows["RankMe"]["mean_tau"] == pytest.approx(8 / 9, abs=1e-12) and rows["RankMe"]["runs"] == 3
    assert rows["RankMe"]["low"] <= 8 / 9 <= rows["RankMe"]["high"] and rows["RankMe"]["share_positive"] == 1.0
    assert rows["val loss"]["runs"] == 0 and math.isnan(rows["val loss"]["mean_tau"])


def test_regret_picks_by_the_declared_direction_and_delta_from_init() -> None:
    # seed 0: the best final accuracy is at lr 1e-2 (0.9); SynBench is highest at 1e-1 (accuracy 0.5): regret 0.4;
    # RankMe is highest at 1e-2: regret 0. R_dr is a "min" criterion: lowest at 1e-3 (accuracy 0.7): regret 0.2.
    runs = [
        _run("sup", 1e-3, 0, [0.1, 0.7], val__synbench__score=[0.5, 0.3], val__spectrum__rankme=[5, 50],
             val__divergence_radius__mean=[0.4, 0.1]),
        _run("sup", 1e-2, 0, [0.1, 0.9], val__synbench__score=[0.2, 0.5], val__spectrum__rankme=[5, 90],
             val__divergence_radius__mean=[0.4, 0.3]),
        _run("sup", 1e-1, 0, [0.1, 0.5], val__synbench__score=[0.8, 0.9], val__spectrum__rankme=[5, 10],
             val__divergence_radius__mean=[0.4, 0.2]),
    ]  # fmt: skip
    rows = {r["criterion"]: r for r in regret_table(runs)}
    assert rows["SynBench"]["picks"] == [1e-1] and rows["SynBench"]["mean_regret"] == pytest.approx(0.4)
    assert rows["RankMe"]["picks"] == [1e-2] and rows["RankMe"]["mean_regret"] == 0.0
    assert rows["R_dr"]["picks"] == [1e-3] and rows["R_dr"]["mean_regret"] == pytest.approx(0.2)
    assert rows["random pick"]["mean_regret"] == pytest.approx((0.2 + 0.0 + 0.4) / 3)
    assert rows["k-NN acc"]["seeds"] == 0  # not logged: no pick
    # (d): by the change from before training SynBench picks 1e-2 (+0.3 beats +0.1 and -0.2): regret 0
    delta = {r["criterion"]: r for r in regret_table(runs, delta=True)}
    assert delta["Δ SynBench"]["picks"] == [1e-2] and delta["Δ SynBench"]["mean_regret"] == 0.0
    # mean and standard error over seeds
    runs2 = runs + [
        _run("sup", lr, 1, [0.1, a], val__synbench__score=[0.0, s])
        for lr, a, s in ((1e-3, 0.8, 0.1), (1e-2, 0.6, 0.2), (1e-1, 0.4, 0.3))
    ]
    row = next(r for r in regret_table(runs2) if r["criterion"] == "SynBench")
    assert row["picks"] == [1e-1, 1e-1] and row["mean_regret"] == pytest.approx(0.4)  # 0.4 and 0.8 - 0.4
    assert row["se"] == pytest.approx(0.0, abs=1e-12)


def test_alpha_req_is_judged_by_its_distance_to_one() -> None:
    alpha = next(c for c in CRITERIA if c.name == "α-ReQ")
    assert alpha.orient(1.1) > alpha.orient(0.7) > alpha.orient(2.0)
    assert isinstance(alpha, Criterion) and alpha.direction == "near 1"


def test_collapse_detection_counts_hits_and_warning_epochs() -> None:
    runs = [
        # collapses in epoch 1 (probe accuracy 0.6, more than collapse_drop = 0.15 below its 0.9 before training;
        # epoch 0's 0.8 is a drop of 0.1 only); RankMe flags epochs 0 and 1 (epoch 0 one epoch early: a false alarm
        # by run-epoch, a warning of 1 epoch by run)
        _run("sup", 1e-1, 0, [0.9, 0.8, 0.6, 0.9], val__spectrum__rankme=[5, 1.5, 1.2, 30],
             val__divergence_radius__mean=[0.3, 0.3, 0.01, 0.3], val__collapse__cosine=[None, 0.9, 0.9999, 0.5]),
        # healthy: never below its accuracy before training, never flagged by RankMe
        _run("sup", 1e-3, 0, [0.9, 0.92, 0.95, 0.97], val__spectrum__rankme=[5, 40, 60, 80],
             val__divergence_radius__mean=[0.3, 0.2, 0.3, 0.4], val__collapse__cosine=[None, 0.9, 0.9, 0.9]),
    ]  # fmt: skip
    rows = {r["rule"]: r for r in collapse_detection(runs)}
    rank = rows["RankMe < 2"]
    assert (rank["collapsed"], rank["flagged"], rank["true_positives"]) == (1, 2, 1)
    assert rank["precision"] == 0.5 and rank["recall"] == 1.0
    assert rank["collapsed_runs_warned"] == 1 and rank["mean_epochs_of_warning"] == 1.0
    cos = rows["R_dr <= 0.08 and cosine >= 0.999"]
    assert (cos["flagged"], cos["true_positives"], cos["precision"]) == (1, 1, 1.0)
    assert cos["mean_epochs_of_warning"] == 0.0  # flagged in the collapsing epoch itself
    syn = rows["SynBench <= 0.2"]  # not logged: never flags, the collapse is missed
    assert syn["flagged"] == 0 and syn["collapsed_runs_missed"] == 1 and math.isnan(syn["precision"])
