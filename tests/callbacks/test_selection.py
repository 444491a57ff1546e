"""Model selection in a plain Trainer: ScoreCheckpoint / ScoreEarlyStopping on RepBench scores, the direction from
the metrics' ``higher_is_better``. A fake monitor logs a designed value per epoch exactly as the real monitors do
(``pl_module.log(..., logger=False)`` in ``on_train_epoch_end``), so the right epoch is known."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from src.callbacks import ScoreCheckpoint, ScoreEarlyStopping, SelectionCriterion, metric_direction
from tests._lightning import quiet_trainer


class _Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(2, 2)

    def training_step(self, batch, batch_idx):
        return self.backbone(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=4)


class _Designed(L.Callback):
    """Logs ``values[name][epoch]`` for every name at the end of each training epoch, as the monitors do."""

    def __init__(self, values: dict[str, list[float]]) -> None:
        self.values = values

    def on_train_epoch_end(self, trainer, pl_module):
        for name, seq in self.values.items():
            pl_module.log(name, seq[trainer.current_epoch], on_step=False, on_epoch=True, logger=False)


def _fit(tmp_path: Path, values: dict[str, list[float]], callback: L.Callback) -> L.Trainer:
    epochs = len(next(iter(values.values())))
    trainer = quiet_trainer(
        max_epochs=epochs,
        callbacks=[callback, _Designed(values)],
        enable_checkpointing=isinstance(callback, ScoreCheckpoint),
        default_root_dir=tmp_path,
    )
    trainer.fit(_Tiny())  # the monitor is listed after the checkpoint: Lightning still checks after it
    return trainer


def _best_epoch(ckpt: ScoreCheckpoint) -> int:
    return int(torch.load(ckpt.best_model_path, weights_only=False)["epoch"])


def test_directions_come_from_the_metrics():
    assert metric_direction("val/synbench/score") == "max"  # SynBenchScore.higher_is_better = True
    assert metric_direction("val/divergence_radius/mean") == "min"  # DivergenceRadius: larger = less robust
    assert metric_direction("probe/spectrum/rankme") == "max"  # any prefix
    assert metric_direction("val/downstream/linear_acc") == metric_direction("val/downstream/knn_acc") == "max"
    assert metric_direction("val/loss", {"val/loss": "min"}) == "min"
    # robust accuracies as the probes log them (src.attacks.naming): a sweep report on the probe sweep needs them
    assert metric_direction("val/adv/acc_pgd5_l2_0p05") == "max"
    assert metric_direction("test/adv/acc_autoattack_torchattacks_standard_linf_0p03") == "max"
    with pytest.raises(ValueError, match=r"direction of 'val/task_prior/var' is unknown.*directions="):
        metric_direction("val/task_prior/var")  # Var has no direction (src.methods.METHODS); E and z have
    assert metric_direction("val/task_prior/z") == metric_direction("val/task_prior/mean") == "max"
    with pytest.raises(ValueError, match=r"contradicts DivergenceRadius.higher_is_better=False"):
        ScoreCheckpoint(monitor="val/divergence_radius/mean", mode="max")


def test_checkpoint_on_synbench_keeps_the_best_epoch(tmp_path):
    # epoch 2 (0-based) holds the highest score; a 'min' mode would pick epoch 3, the last 'max' of val/acc epoch 4
    values = {"val/synbench/score": [0.60, 0.70, 0.75, 0.00, 0.10], "val/acc": [0.1, 0.2, 0.3, 0.4, 0.5]}
    ckpt = ScoreCheckpoint(monitor="val/synbench/score", dirpath=tmp_path, filename="best-{epoch}")
    _fit(tmp_path, values, ckpt)
    assert ckpt.mode == "max"
    assert _best_epoch(ckpt) == 2
    assert float(ckpt.best_model_score) == pytest.approx(0.75)  # the logged float32 value: rel 1e-6 >> 2^-24


def test_checkpoint_on_divergence_radius_minimises(tmp_path):
    values = {"val/divergence_radius/mean": [0.30, 0.12, 0.20, 0.25]}
    ckpt = ScoreCheckpoint(monitor="val/divergence_radius/mean", dirpath=tmp_path)
    _fit(tmp_path, values, ckpt)
    assert ckpt.mode == "min" and _best_epoch(ckpt) == 1


def test_combined_criterion_keeps_the_best_tradeoff(tmp_path):
    # score - R_dr per epoch: 0.50, 0.55, 0.40 -> epoch 1, although the score alone peaks at epoch 2
    values = {"val/synbench/score": [0.60, 0.70, 0.80], "val/divergence_radius/mean": [0.10, 0.15, 0.40]}
    monitor = {"val/synbench/score": 1.0, "val/divergence_radius/mean": 1.0}
    ckpt = ScoreCheckpoint(monitor=monitor, dirpath=tmp_path)
    trainer = _fit(tmp_path, values, ckpt)
    assert _best_epoch(ckpt) == 1
    # 0.8 - 0.4 in float32 arithmetic of the logged values: error <= a few 2^-24, far below 1e-6
    assert float(trainer.callback_metrics["val/selection/score"]) == pytest.approx(0.40, abs=1e-6)


def test_early_stopping_on_synbench_stops_after_the_collapse(tmp_path):
    values = {"val/synbench/score": [0.90, 0.00, 0.00, 0.00, 0.00, 0.00]}
    stop = ScoreEarlyStopping(monitor="val/synbench/score", patience=2)
    trainer = _fit(tmp_path, values, stop)
    assert stop.mode == "max"
    assert trainer.current_epoch == 3  # best at epoch 0, two epochs without improvement: stopped after epoch 2


def test_combined_criterion_refuses_bad_weights_and_modes():
    with pytest.raises(ValueError, match=r"weights must be finite numbers > 0"):
        SelectionCriterion({"val/synbench/score": -1.0})
    with pytest.raises(ValueError, match=r"combined monitor is always maximised"):
        ScoreEarlyStopping(monitor={"val/synbench/score": 1.0}, mode="min")
    with pytest.raises(ValueError, match=r"direction of 'val/utility' is unknown"):
        ScoreCheckpoint(monitor={"val/utility": 1.0, "val/divergence_radius/mean": 1.0})
    crit = SelectionCriterion(
        {"val/utility": 1.0, "val/divergence_radius/mean": 2.0}, directions={"val/utility": "max"}
    )
    assert crit.value({"val/utility": 0.9}) is None  # a term missing: nothing to compare yet
    assert crit.value({"val/utility": 0.9, "val/divergence_radius/mean": 0.2}) == pytest.approx(0.5)  # 0.9 - 2 * 0.2


@pytest.mark.parametrize("option", ["select_synbench", "select_tradeoff"])
def test_selection_configs_instantiate(option, tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    configs = Path(__file__).resolve().parents[2] / "configs"
    with initialize_config_dir(version_base="1.3", config_dir=str(configs)):
        cfg = compose("train.yaml", overrides=[f"callbacks=[default,{option}]", f"paths.output_dir={tmp_path}"])
    made = instantiate(cfg.callbacks.select_checkpoint)
    assert isinstance(made, ScoreCheckpoint) and made.mode == "max"
    if option == "select_tradeoff":
        assert made.criterion.signs == {"val/synbench/score": 1.0, "val/divergence_radius/mean": -1.0}
