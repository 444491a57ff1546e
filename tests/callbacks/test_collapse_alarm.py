"""CollapseAlarm: fires on the collapsing lr = 1e-1 monitor_pretraining run and not on lr = 2e-3 (a real, short run:
5 training steps per epoch in train mode, RankMe + the alarm's probe cosine; measured after 2 epochs: RankMe 1.35 vs
41.4, probe cosine 0.9997 vs 0.945; lr 2e-2 sits between, RankMe 2.86), and its pure pieces."""

from __future__ import annotations

import warnings

import pytest
import torch

from src.callbacks import CollapseAlarm, CollapseAlarmWarning, RepresentationCollapseWarning, mean_cross_cosine
from src.train import train
from tests.cli.conftest import compose_cfg


def _run(tmp_path, lr: str):
    overrides = [
        "experiment=monitor_pretraining",
        "callbacks=[spectrum,collapse_alarm]",  # the alarm after the monitor it reads
        f"model.lr={lr}",
        "trainer.max_epochs=2",
        "+trainer.limit_train_batches=5",
        "+trainer.limit_val_batches=1",
        "+trainer.enable_progress_bar=false",
        "logger=csv",
        "test=false",
        "callbacks.spectrum.progress=false",
        "callbacks.collapse_alarm.stop=true",
    ]
    cfg = compose_cfg("train.yaml", overrides, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics, objects = train(cfg)
    return metrics, objects["trainer"], [w for w in caught if issubclass(w.category, CollapseAlarmWarning)]


def test_alarm_fires_on_lr_1e1_and_stops_the_run(tmp_path):
    metrics, trainer, alarms = _run(tmp_path, "1e-1")
    assert metrics["val/collapse/alarm"] == 1.0
    assert trainer.current_epoch == 1  # stop=True: the run ended after its first epoch of max_epochs=2
    assert len(alarms) == 1 and "RankMe" in str(alarms[0].message)


def test_alarm_stays_silent_on_lr_2e3(tmp_path):
    metrics, trainer, alarms = _run(tmp_path, "2e-3")
    assert metrics["val/collapse/alarm"] == 0.0 and not alarms
    assert trainer.current_epoch == 2  # both epochs ran


def test_judge_conditions():
    alarm = CollapseAlarm(synbench_floor=0.2, task_prior_drop=0.5)
    assert CollapseAlarm().synbench_floor is None  # off by default (docs/monitoring.md: it false-alarms)
    assert alarm.judge({"val/synbench/score": 0.0}, None)[0].startswith("SynBench-Score 0.000")
    assert alarm.judge({"val/synbench/score": 0.43, "val/spectrum/rankme": 7.6}, None) == []
    # R_dr -> 0 alone is not a collapse (a robust model), only with near-1 cosine between different images
    assert alarm.judge({"val/divergence_radius/mean": 0.001}, 0.90) == []
    assert "R_dr" in alarm.judge({"val/divergence_radius/mean": 0.001}, 0.9999)[0]
    assert alarm.judge({"val/task_prior/z": 4.0}, None) == []  # the first z sets the best
    assert "Task-Prior z" in alarm.judge({"val/task_prior/z": 1.9}, None)[0]  # 1.9 <= 0.5 x 4.0


def test_alarm_warning_is_a_collapse_warning_and_thresholds_are_checked():
    assert issubclass(CollapseAlarmWarning, RepresentationCollapseWarning)
    with pytest.raises(ValueError, match=r"radius_floor and cosine_ceiling arm one condition together"):
        CollapseAlarm(radius_floor=0.02, cosine_ceiling=None)
    with pytest.raises(ValueError, match=r"cosine_ceiling must lie in \[-1.0, 1.0\]"):
        CollapseAlarm(cosine_ceiling=1.5)
    with pytest.raises(ValueError, match=r"unknown keys \['rank'\]"):
        CollapseAlarm(keys={"rank": "val/x"})


def test_mean_cross_cosine():
    same = torch.ones(5, 3)
    assert mean_cross_cosine(same) == pytest.approx(1.0, abs=1e-12)  # float64 sums of 5 unit vectors: ~1e-15
    assert mean_cross_cosine(torch.eye(4)) == pytest.approx(0.0, abs=1e-12)  # orthogonal: exactly 0
    z = torch.randn(6, 4)
    u = torch.nn.functional.normalize(z.double(), dim=1)
    brute = ((u @ u.T).sum() - 6) / 30  # the mean of the 30 off-diagonal cosines
    assert mean_cross_cosine(z) == pytest.approx(float(brute), abs=1e-12)  # same float64 sums, other order
