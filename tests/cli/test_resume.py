"""Kill-and-resume through ``ckpt_path=`` ends exactly where an uninterrupted run ends."""

from __future__ import annotations

import lightning as L
import pytest
import torch

import src.train as train_mod

OVERRIDES = [
    "data.image_size=32",
    "data.batch_size=128",
    "trainer.max_epochs=3",
    "model.epsilon=0.05",
    "attack.steps=1",
    "model.eval_attack.steps=1",
    "test=false",
    "callbacks.rich_progress_bar=null",
    "logger=csv",
    "callbacks.synbench=null",
]


class _Killed(RuntimeError):
    pass


class _KillAtEpoch(L.Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            raise _Killed(f"simulated kill at the start of epoch {self.epoch}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_and_resume_matches_uninterrupted(tmp_path, monkeypatch) -> None:
    from .conftest import compose_cfg

    full_metrics, full = train_mod.train(compose_cfg("train.yaml", OVERRIDES, tmp_path / "full"))

    orig = train_mod.instantiate_list
    monkeypatch.setattr(
        train_mod,
        "instantiate_list",
        lambda c: orig(c) + ([_KillAtEpoch(2)] if c is not None and "model_checkpoint" in c else []),
    )
    with pytest.raises(_Killed):
        train_mod.train(compose_cfg("train.yaml", OVERRIDES, tmp_path / "killed"))
    monkeypatch.setattr(train_mod, "instantiate_list", orig)
    ckpts = tmp_path / "killed" / "checkpoints"
    assert (ckpts / "last.ckpt").is_file() and (ckpts / "on_exception.ckpt").is_file()

    resumed_metrics, resumed = train_mod.train(
        compose_cfg("train.yaml", OVERRIDES + [f"ckpt_path={ckpts / 'last.ckpt'}"], tmp_path / "killed")
    )
    assert resumed["trainer"].current_epoch == full["trainer"].current_epoch == 3
    torch.testing.assert_close(resumed["model"].head.weight, full["model"].head.weight, rtol=0, atol=1e-6)
    for key in ("val/acc", "val/adv/acc_l2_0p05", "val/loss"):
        assert resumed_metrics[key] == pytest.approx(full_metrics[key], abs=1e-6), key
