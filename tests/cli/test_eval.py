"""``python -m src.eval``: rebuilds a checkpoint with weights_only=True and reports clean and PGD accuracy."""

from __future__ import annotations

import json

import pytest

from src.eval import evaluate
from src.train import train

from .conftest import compose_cfg


@pytest.mark.timeout(300)
def test_eval_reproduces_training_metrics_and_adds_epsilons(tmp_path) -> None:
    common = ["data.image_size=32", "data.batch_size=128"]
    train_cfg = compose_cfg(
        "train.yaml",
        common
        + [
            "trainer.max_epochs=1",
            "model.epsilon=0.0",
            "test=false",
            "model.eval_epsilons=[0.05]",
            "model.eval_attack.steps=2",
            "callbacks.synbench=null",
            "callbacks.rich_progress_bar=null",
            "logger=csv",
        ],
        tmp_path / "train",
    )
    metrics, _ = train(train_cfg)
    ckpt = tmp_path / "train" / "checkpoints" / "last.ckpt"
    eval_cfg = compose_cfg(
        "eval.yaml",
        common + [f"ckpt_path={ckpt}", "eval.attack.steps=2", "eval.epsilons=[0.05,0.1]"],
        tmp_path / "eval",
    )
    out = evaluate(eval_cfg)
    assert out["test/acc"] == pytest.approx(metrics["val/acc"], abs=1e-6)  # test = val for digits
    assert out["test/adv/acc_l2_0p05"] == pytest.approx(metrics["val/adv/acc_l2_0p05"], abs=1e-6)
    assert out["test/adv/acc_l2_0p1"] <= out["test/adv/acc_l2_0p05"] + 1e-6
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert saved["metrics"] == pytest.approx(out)


def test_missing_checkpoint_is_named(tmp_path) -> None:
    cfg = compose_cfg("eval.yaml", [f"ckpt_path={tmp_path / 'nope.ckpt'}"], tmp_path)
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        evaluate(cfg)
