"""Every experiment config composes and runs end to end with fast_dev_run (one batch per stage)."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.train import train

EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "experiment").glob("*.yaml"))
# the papers' experiments need real weights and data: tests/configs/test_robust_finetune_paper.py runs each on tiny ones
PAPER = {"robust_finetune_paper"}
EXPERIMENTS = [e for e in EXPERIMENTS if e not in PAPER]
FAST = ["debug=fast_dev_run", "data.image_size=32", "data.batch_size=8", "callbacks=none", "attack.steps=1"]


def _fast(cfg):
    """One PGD step wherever the model attacks (probe models only)."""
    from omegaconf import open_dict

    with open_dict(cfg):
        if "eval_attack" in cfg.model:
            cfg.model.eval_attack.steps = 1
    return cfg


def test_experiment_list_is_not_empty() -> None:
    assert "probe_digits" in EXPERIMENTS and "monitor_pretraining" in EXPERIMENTS
    # the default run (no experiment) is the robust probe; an experiment equal to it would only duplicate it
    assert "robust_probe_digits" not in EXPERIMENTS


@pytest.mark.parametrize("experiment", [None, *EXPERIMENTS])
def test_experiment_fast_dev_run(make_cfg, experiment) -> None:
    overrides = list(FAST) + ([f"experiment={experiment}"] if experiment else [])
    cfg = _fast(make_cfg(overrides))
    metrics, objs = train(cfg)
    assert objs["trainer"].state.finished
    assert "train/loss" in metrics and all(v == v for v in metrics.values())  # finite, no NaN


def test_overrides_reach_the_model(make_cfg) -> None:
    cfg = _fast(make_cfg(FAST + ["model.epsilon=0.25", "backbone=timm_tiny_random", "trainer.max_epochs=3"]))
    assert cfg.model.epsilon == 0.25 and cfg.backbone.name == "timm:test_efficientnet"
    _, objs = train(cfg)
    assert objs["model"].epsilon == 0.25 and objs["model"].backbone.name == "timm:test_efficientnet"
