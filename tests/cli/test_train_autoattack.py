"""``python -m src.train autoattack=true``: torchattacks' port of AutoAttack after the test stage, on the tested
weights, named as ``python -m src.eval eval.autoattack=true`` names it — so an ε-robust probing run (the SynBench
paper's Tables 2 / 10: ``model.epsilon=0,auto``) is one command with its AutoAttack accuracy."""

from __future__ import annotations

import pytest

from src.train import train

from .conftest import compose_cfg
from .test_eval import TINY


def test_autoattack_after_the_test_stage(tmp_path, monkeypatch) -> None:
    import src.attacks.autoattack as aa

    calls = []
    monkeypatch.setattr(aa, "autoattack_accuracy", lambda model, x, y, **kw: calls.append((len(y), kw)) or 0.25)
    overrides = [
        *TINY,
        "attack=pgd_linf",
        "model.epsilon=0.0",
        "model.eval_epsilons=[0.01]",
        "model.eval_attack.steps=1",
    ]
    cfg = compose_cfg("train.yaml", [*overrides, "test=true", "autoattack=true", "autoattack_samples=4"], tmp_path)
    metrics, _ = train(cfg)
    assert metrics["test/adv/acc_autoattack_torchattacks_standard_linf_0p01"] == 0.25
    assert [(n, kw["norm"], kw["eps"], kw["version"]) for n, kw in calls] == [(4, "linf", 0.01, "standard")]
    assert "test/acc" in metrics  # after the test stage


def test_autoattack_off_by_default_and_refused_without_a_test(tmp_path, monkeypatch) -> None:
    import src.attacks.autoattack as aa

    monkeypatch.setattr(aa, "autoattack_accuracy", lambda *a, **kw: pytest.fail("AutoAttack ran by default"))
    cfg = compose_cfg("train.yaml", [*TINY, "model.eval_attack.steps=1"], tmp_path / "a")
    assert cfg.autoattack is False
    metrics, _ = train(cfg)
    assert not any("autoattack" in k for k in metrics)
    refused = compose_cfg("train.yaml", [*TINY, "autoattack=true", "test=false"], tmp_path / "b")
    with pytest.raises(ValueError, match=r"autoattack=true runs AutoAttack after the test stage.*set test=true"):
        train(refused)
