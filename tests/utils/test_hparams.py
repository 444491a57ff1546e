"""src.utils.hparams: TensorBoard's HParams tab shows what a sweep varied first, a short fixed set after it, never a
config group the model does not use, and the headline metrics only (issue 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.utils.hparams import MODEL_KEY_OPTIONS, headline_metrics, log_hparams_with_metrics, run_hparams
from src.utils.hydra_utils import to_container
from tests.cli.conftest import compose_cfg


def _cfg(overrides: list[str], tmp_path: Path) -> dict:
    return to_container(compose_cfg("train.yaml", overrides, tmp_path))


def test_the_overrides_come_first_with_their_types_then_the_fixed_set(tmp_path) -> None:
    overrides = ["debug=fast", "model.lr=0.01", "+optuna_trial=3", "ckpt_path=/x.ckpt", "backbone=timm_tiny_random"]
    cfg = _cfg(["debug=fast", "model.lr=0.01", "backbone=timm_tiny_random"], tmp_path)
    hparams, varied = run_hparams(cfg, overrides)
    assert varied == ["model/lr", "backbone/name"]  # bookkeeping (debug budget, trial number, checkpoint) left out
    assert list(hparams)[:2] == varied
    assert hparams["model/lr"] == 0.01 and hparams["backbone/name"] == "timm:test_efficientnet"
    assert hparams["model"] == "RobustLinearProbe" and hparams["seed"] == 0
    assert {"model/epsilon", "model/attack/norm", "model/attack/steps"} <= set(hparams)
    assert len(hparams) <= 10  # short: TensorBoard shows the first five


def test_a_module_without_an_attack_gets_no_attack_hyperparameters(tmp_path) -> None:
    cfg = _cfg(["experiment=monitor_pretraining"], tmp_path)
    assert "attack" in cfg  # the group is composed, but SupervisedPretraining does not use it
    hparams, varied = run_hparams(cfg, ["experiment=monitor_pretraining"])
    assert varied == ["experiment"] and hparams["model"] == "SupervisedPretraining"
    assert not [k for k in hparams if k.startswith("attack") or "/attack" in k]
    assert {f"model/{k}" for k in MODEL_KEY_OPTIONS["SupervisedPretraining"]} <= set(hparams)


def test_headline_metrics_put_the_objective_first_and_leave_breakdowns_out() -> None:
    names = [
        "train/loss", "lr-Adam", "val/loss", "val/acc", "test/acc", "test/loss", "val/divergence_radius/fog",
        "val/divergence_radius/mean", "val/cosine_robustness/fog", "val/synbench/score",
    ]  # fmt: skip
    assert headline_metrics(names, "val/synbench/score") == [
        "val/synbench/score", "test/acc", "test/loss", "val/acc", "val/divergence_radius/mean", "val/loss",
    ]  # fmt: skip
    assert headline_metrics(names, ["val/acc", "val/divergence_radius/mean"])[:2] == [
        "val/acc",
        "val/divergence_radius/mean",
    ]


def test_the_varied_hyperparameters_are_marked_as_differing(tmp_path) -> None:
    """TensorBoard sorts the HParams columns by (differs, name) and shows five: the overrides must say they differ."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    hparams = {"model/lr": 0.01, "model": "RobustLinearProbe", "backbone/name": "b", "seed": 0}
    logger = TensorBoardLogger(str(tmp_path), name="tb", version=0)
    logger.experiment.add_scalar("val/acc", 0.5, 0)
    logger.experiment.add_scalar("test/acc", 0.4, 0)
    assert log_hparams_with_metrics([logger], hparams, ["val/acc", "test/acc"], varied=["model/lr"]) == 1
    logger.experiment.close()
    acc = EventAccumulator(str(tmp_path / "tb" / "version_0"))
    acc.Reload()
    content = [plugin_data_pb2.HParamsPluginData.FromString(v) for v in acc.PluginTagToContent("hparams").values()]
    experiment = next(c.experiment for c in content if c.HasField("experiment"))
    assert {h.name: h.differs for h in experiment.hparam_infos} == {
        "model/lr": True,
        "model": False,
        "backbone/name": False,
        "seed": False,
    }
    assert [m.name.tag for m in experiment.metric_infos] == ["val/acc", "test/acc"]  # in the given order
    session = next(c.session_start_info for c in content if c.HasField("session_start_info"))
    assert session.hparams["model/lr"].number_value == pytest.approx(0.01)
