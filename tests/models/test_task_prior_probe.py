"""TaskPriorProbe: all sampled tasks' probes at once, beside the closed-form moments; bad input fails early.

The batched head's equality with independently trained per-task heads is tested in tests/task_prior/test_probing.py
(the module trains that same head with the same summed loss).
"""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from src.data import DigitsDataModule
from src.features import FeatureExtractor
from src.models import TaskPriorProbe
from src.models.task_prior_probe import dataset_features
from src.task_prior import task_prior_moments
from tests._lightning import quiet_trainer

TINY = {"name": "timm:test_efficientnet", "pretrained": False}


def _trainer(epochs: int) -> L.Trainer:
    return quiet_trainer(max_epochs=epochs, num_sanity_val_steps=0)


def test_fit_on_digits_logs_accuracies_and_moments(tmp_path) -> None:
    torch.manual_seed(0)
    out = tmp_path / "row.json"
    model = TaskPriorProbe(
        backbone=TINY,
        prior_backbone=TINY,
        num_tasks=6,
        sample_temperature=0.05,
        temperature=0.1,
        max_samples=48,
        results_file=str(out),
        seed=1,
    )
    dm = DigitsDataModule(image_size=16, batch_size=32)
    trainer = _trainer(2)
    trainer.fit(model, datamodule=dm)
    m = trainer.callback_metrics
    for key in ("acc_mean", "acc_var", "acc_std", "acc_q10", "acc_q50", "acc_q90", "mean", "var", "z"):
        assert f"val/task_prior/{key}" in m, key
    assert 0.0 <= float(m["val/task_prior/acc_q10"]) <= float(m["val/task_prior/acc_q90"]) <= 1.0
    assert model.backbone.training is False  # frozen means frozen
    # the logged moments are Thm 2.3 on the evaluated features of the first 48 train + 48 val images (the prior is
    # a second random network: its features are recomputed the same way)
    dm.setup()
    sub = [torch.utils.data.Subset(d, range(48)) for d in (dm.train_dataset, dm.val_dataset)]
    feats = torch.cat([dataset_features(d, FeatureExtractor(model.backbone.embed)) for d in sub])
    assert torch.equal(feats, model._eval_all)
    e, v = task_prior_moments(feats, model._prior_all, 0.1)
    # the same float64 blocked sums on identical features: order-of-summation differences only, ~n²·u = 1e-11
    assert model.moments["mean"] == pytest.approx(e, rel=1e-9) and model.moments["var"] == pytest.approx(v, rel=1e-9)
    row = json.loads(out.read_text())
    assert row["backbone"] == "timm:test_efficientnet" and len(row["accuracies"]) == 6
    # float32 logging of float64 values: relative 2^-24; 1e-6 leaves margin
    assert float(m["val/task_prior/mean"]) == pytest.approx(model.moments["mean"], rel=1e-6)
    assert row["acc_mean"] == pytest.approx(sum(row["accuracies"]) / 6, rel=1e-6)


def test_separable_sampled_tasks_are_learned() -> None:
    """Two far-apart clusters: at low temperature each cluster gets one label in every task, and the probes reach
    accuracy 1 on held-out points. The sampler scales K by ‖K‖_F ≈ n = 60 (two clusters of centred cosine ±1), so a
    same-cluster neighbour adds ≈ 1/(60·T) = 17 to a class logit at T = 0.001: a wrong label has odds ≈ e^-17."""
    model = TaskPriorProbe(backbone=TINY, prior_backbone=TINY, num_tasks=4, sample_temperature=0.001, seed=0)
    d = model.backbone.embed_dim
    g = torch.Generator().manual_seed(0)
    n_tr, n_te = 40, 20
    side = torch.cat([torch.ones(n_tr // 2), -torch.ones(n_tr // 2), torch.ones(n_te // 2), -torch.ones(n_te // 2)])
    center = torch.zeros(d)
    center[0] = 5.0
    noise = 0.1 * torch.randn(n_tr + n_te, d, generator=g)
    noise[:, 2:] = 0.0  # constant dimensions (z-scoring would blow isotropic noise up to the signal's scale)
    feats = side[:, None] * center + noise + 3.0 * (torch.arange(d) == 1)
    model.prepare_tasks(feats[:n_tr], feats[n_tr:], feats[:n_tr], feats[n_tr:])
    labels = torch.cat([model._train_y, model._val_y], 1)
    for task in labels:  # one label per cluster
        assert task[side > 0].unique().numel() == 1 and task[side < 0].unique().numel() == 1
    train = DataLoader(TensorDataset(torch.zeros(n_tr, 1), torch.zeros(n_tr), torch.arange(n_tr)), batch_size=20)
    val = DataLoader(TensorDataset(torch.zeros(n_te, 1), torch.zeros(n_te), torch.arange(n_te)), batch_size=20)
    trainer = _trainer(15)
    trainer.fit(model, train, val)
    assert float(trainer.callback_metrics["val/task_prior/acc_mean"]) == 1.0


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="temperature"):
        TaskPriorProbe(backbone=TINY, prior_backbone=TINY, temperature=0.0)
    with pytest.raises(ValueError, match="sample_temperature"):
        TaskPriorProbe(backbone=TINY, prior_backbone=TINY, sample_temperature=-1.0)
    with pytest.raises(ValueError, match="task_classes"):
        TaskPriorProbe(backbone=TINY, prior_backbone=TINY, task_classes=1)
    model = TaskPriorProbe(backbone=TINY, prior_backbone=TINY, num_tasks=2)
    d = model.backbone.embed_dim
    x = torch.randn(10, d)
    with pytest.raises(ValueError, match="rows|same"):  # n mismatch between evaluated and prior features
        model.prepare_tasks(x[:6], x[6:], x[:5], x[6:])
    bad = x.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        model.prepare_tasks(bad[:6], bad[6:], x[:6], x[6:])
    with pytest.raises(ValueError, match="NaN"):
        model.prepare_tasks(x[:6], x[6:], bad[:6], bad[6:])


@pytest.mark.parametrize(
    "yaml_path, target, key",
    [
        ("configs/model/task_prior_probe.yaml", TaskPriorProbe, None),
        ("configs/callbacks/task_prior.yaml", "callbacks.TaskPriorCallback", "task_prior"),
    ],
)
def test_code_defaults_equal_the_yaml(yaml_path, target, key) -> None:
    """Defaults live once in configs/: every literal YAML value equals the code default (backbone specs are
    written as {name, pretrained} mappings in YAML and as names in code: compared by name)."""
    import importlib
    import inspect
    from pathlib import Path

    from omegaconf import OmegaConf

    if isinstance(target, str):
        mod, _, cls = target.rpartition(".")
        target = getattr(importlib.import_module(mod), cls)
    root = Path(__file__).resolve().parents[2]
    cfg = OmegaConf.load(root / yaml_path)
    cfg = cfg[key] if key else cfg
    params = inspect.signature(target.__init__).parameters
    for name, value in OmegaConf.to_container(cfg, resolve=False).items():
        if name == "_target_" or (isinstance(value, str) and value.startswith("${")):
            continue
        default = params[name].default
        if isinstance(value, dict) and "name" in value:
            assert default == value["name"], name
        elif isinstance(value, list):
            assert list(default) == value, name
        else:
            assert default == value, (name, default, value)
