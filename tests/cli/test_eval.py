"""``python -m src.eval``: rebuilds a checkpoint with weights_only=True (registered classes only) and reports clean and
PGD accuracy with the checkpoint's own attack unless ``eval.attack`` overrides it."""

from __future__ import annotations

import json

import pytest
import torch

from src.eval import evaluate
from src.models import RobustLinearProbe, SupervisedPretraining
from src.train import train
from src.utils.checkpoint import MODULE_KEY, CheckpointError, load_module, registered_modules

from .conftest import compose_cfg

# tiny and fast: a random tiny timm backbone, 16 px digits, one short epoch, no callbacks
TINY = [
    "backbone=timm_tiny_random",
    "data.image_size=16",
    "data.batch_size=128",
    "trainer.max_epochs=1",
    "test=false",
    "callbacks=none",
    "logger=csv",
]


def _last_ckpt(run_dir):
    """last.ckpt, else the newest checkpoint anywhere under ``run_dir`` (with callbacks=none Lightning's own
    ModelCheckpoint writes into the logger's folder)."""
    ckpts = sorted(run_dir.rglob("*.ckpt"), key=lambda p: (p.stem == "last", p.stat().st_mtime))
    assert ckpts, f"no checkpoint written under {run_dir}"
    return ckpts[-1]


@pytest.fixture(scope="module")
def linf_probe(tmp_path_factory):
    """An l-inf-trained probe checkpoint (epsilon 0 training keeps it fast; the attack config is what matters)."""
    root = tmp_path_factory.mktemp("linf")
    cfg = compose_cfg(
        "train.yaml",
        TINY
        + [
            "attack=pgd_linf",
            "model.epsilon=0.0",
            "model.eval_epsilons=[0.01]",
            "model.eval_attack.steps=1",
        ],
        root,
    )
    metrics, _ = train(cfg)
    return metrics, _last_ckpt(root)


@pytest.mark.timeout(300)
def test_eval_reproduces_training_metrics_and_adds_epsilons(tmp_path) -> None:
    common = ["data.image_size=16", "data.batch_size=128"]
    train_cfg = compose_cfg(
        "train.yaml",
        TINY + ["model.epsilon=0.0", "model.eval_epsilons=[0.05]", "model.eval_attack.steps=2", "test=true"],
        tmp_path / "train",
    )
    metrics, _ = train(train_cfg)  # its test stage: the final weights (one epoch) on the test split
    ckpt = _last_ckpt(tmp_path / "train")
    eval_cfg = compose_cfg(
        "eval.yaml",
        common + [f"ckpt_path='{ckpt}'", "eval.attack.steps=2", "eval.epsilons=[0.05,0.1]"],
        tmp_path / "eval",
    )
    out = evaluate(eval_cfg)
    # same weights, same test samples, same deterministic attack: the accuracies are the same integer counts divided
    # by the number of test images -> equal; 1e-6 only absorbs the float32 division
    assert out["test/acc"] == pytest.approx(metrics["test/acc"], abs=1e-6)
    # the same attack (PGD-2, no random start) at the same budget has the same name in training and in src.eval
    assert out["test/adv/acc_pgd2_l2_0p05"] == pytest.approx(metrics["test/adv/acc_pgd2_l2_0p05"], abs=1e-6)
    assert out["test/adv/acc_pgd2_l2_0p1"] <= out["test/adv/acc_pgd2_l2_0p05"] + 1e-6
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert saved["metrics"] == pytest.approx(out)


@pytest.mark.timeout(300)
def test_eval_attacks_with_the_checkpoints_norm(tmp_path, linf_probe) -> None:
    """An l-inf-trained probe is evaluated with l-inf (the attack group default is l2); eval.attack.norm overrides."""
    _, ckpt = linf_probe
    base = ["data.image_size=16", "data.batch_size=128", f"ckpt_path='{ckpt}'", "eval.attack.steps=1"]
    out = evaluate(compose_cfg("eval.yaml", base, tmp_path / "a"))
    assert "test/adv/acc_pgd1_linf_0p01" in out and not any("_l2_" in k for k in out), out
    saved = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert saved["attack"]["norm"] == "linf" and saved["attack"]["steps"] == 1
    out = evaluate(compose_cfg("eval.yaml", base + ["eval.attack.norm=l2"], tmp_path / "b"))
    assert "test/adv/acc_pgd1_l2_0p01" in out and not any("_linf_" in k for k in out), out


def test_missing_checkpoint_is_named(tmp_path) -> None:
    cfg = compose_cfg("eval.yaml", [f"ckpt_path={tmp_path / 'nope.ckpt'}"], tmp_path)
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        evaluate(cfg)


def test_corrupt_checkpoint_is_named(tmp_path) -> None:
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_module(bad)


@pytest.mark.parametrize("target", ["os:system", "src.attacks.pgd:pgd_attack", "src.models.robust_probe:Nope", ""])
def test_checkpoint_naming_an_unregistered_class_is_refused(tmp_path, linf_probe, target) -> None:
    _, ckpt = linf_probe
    data = torch.load(ckpt, map_location="cpu", weights_only=True)
    data[MODULE_KEY] = target
    forged = tmp_path / "forged.ckpt"
    torch.save(data, forged)
    match = "not a registered RepBench module" if target else "not written by a RepBench module"
    with pytest.raises(CheckpointError, match=match):
        load_module(forged)


def test_registry_holds_the_project_modules() -> None:
    names = {k.rpartition(":")[2] for k in registered_modules()}
    assert {"RobustLinearProbe", "SupervisedPretraining"} <= names


def test_checkpoint_of_another_class_is_a_clear_error(linf_probe) -> None:
    _, ckpt = linf_probe
    assert isinstance(load_module(ckpt, expected=RobustLinearProbe), RobustLinearProbe)
    with pytest.raises(CheckpointError, match="holds a RobustLinearProbe checkpoint, but a SupervisedPretraining"):
        load_module(ckpt, expected=SupervisedPretraining)
    # an architecture override that no longer fits the stored weights: named, not a bare size mismatch
    with pytest.raises(CheckpointError, match="does not match the stored weights"):
        load_module(ckpt, num_classes=3)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_non_default_backbones_round_trip_through_eval(tmp_path) -> None:
    """Both module classes keep their backbone spec in hparams: a lite1 probe and a monitor_pretraining run (random
    resnet10t) evaluate without rebuilding the default backbone (formerly "Unexpected key(s)" / missing weights)."""
    runs = {
        "lite1": [
            "backbone=embedded_lite1",
            "data.image_size=32",
            "data.batch_size=256",
            "trainer.max_epochs=1",
            "+trainer.limit_train_batches=1",
            "model.epsilon=0.0",
            "model.eval_epsilons=[]",
        ],
        "monitor": [
            "experiment=monitor_pretraining",
            "data.batch_size=256",
            "trainer.max_epochs=1",
            "+trainer.limit_train_batches=1",
        ],
    }
    for name, overrides in runs.items():
        cfg = compose_cfg("train.yaml", overrides + ["test=true", "callbacks=none", "logger=csv"], tmp_path / name)
        metrics, objs = train(cfg)
        ckpt = _last_ckpt(tmp_path / name)
        hp = torch.load(ckpt, map_location="cpu", weights_only=True)["hyper_parameters"]
        assert hp["backbone"]["name"] == cfg.backbone.name
        data = [o for o in overrides if o.startswith(("data.", "experiment="))]
        out = evaluate(compose_cfg("eval.yaml", data + [f"ckpt_path='{ckpt}'"], tmp_path / f"{name}_eval"))
        # the training run's test stage: same weights, same test split, deterministic forward -> the same counts /
        # number of test images (1e-6: float32 division)
        assert out["test/acc"] == pytest.approx(metrics["test/acc"], abs=1e-6), name


def test_default_validation_and_eval_attacks_have_different_names(tmp_path) -> None:
    """Validation runs PGD-5 and src.eval PGD-10 by default: the metric names say so (formerly both were
    ``.../adv/acc_l2_0p05``)."""
    from hydra.utils import instantiate

    from src.eval import attack_overrides
    from src.utils.hydra_utils import to_container

    train_cfg = compose_cfg("train.yaml", ["backbone=timm_tiny_random"], tmp_path / "t")
    probe = instantiate(train_cfg.model, _convert_="all")
    assert probe.adv_name("val", 0.05) == "val/adv/acc_pgd5_l2_0p05"
    eval_cfg = compose_cfg("eval.yaml", ["ckpt_path=unused.ckpt"], tmp_path / "e")
    hparams = dict(probe.hparams)
    evaluated = RobustLinearProbe(**{**hparams, **attack_overrides(hparams, to_container(eval_cfg.eval))})
    assert evaluated.adv_name("test", 0.05) == "test/adv/acc_pgd10_l2_0p05"
    assert train_cfg.optimized_metric == "val/acc"  # the sweepers' metric is unchanged


def test_autoattack_metric_names_the_torchattacks_port(tmp_path, linf_probe, monkeypatch) -> None:
    import src.attacks.autoattack as aa

    calls = []
    monkeypatch.setattr(aa, "autoattack_accuracy", lambda model, x, y, **kw: calls.append(kw) or 0.25)
    _, ckpt = linf_probe
    overrides = ["data.image_size=16", f"ckpt_path='{ckpt}'", "eval.attack.steps=1", "eval.autoattack=true"]
    out = evaluate(compose_cfg("eval.yaml", overrides + ["eval.autoattack_samples=4"], tmp_path))
    assert out["test/adv/acc_autoattack_torchattacks_standard_linf_0p01"] == 0.25
    assert [kw["norm"] for kw in calls] == ["linf"] and not any("/autoattack/" in k for k in out)
