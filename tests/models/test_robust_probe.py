"""RobustLinearProbe: frozen backbone, feature cache, PGD training, input validation."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from src.backbones import create_backbone
from src.models import RobustLinearProbe
from tests._lightning import quiet_trainer


class _Toy(Dataset):
    """(x, y, index) with a class-dependent mean, images in [0, 1]."""

    def __init__(self, n: int = 48, size: int = 16, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.y = torch.arange(n) % 2
        self.x = (
            0.5 + 0.15 * (2 * self.y.float() - 1).view(-1, 1, 1, 1) + 0.1 * torch.randn(n, 3, size, size, generator=g)
        ).clamp(0, 1)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i], i


def _probe(**kw) -> RobustLinearProbe:
    torch.manual_seed(0)
    bb = create_backbone("timm:test_efficientnet", pretrained=False)
    return RobustLinearProbe(backbone=bb, num_classes=2, scheduler=None, **kw)


def _trainer(epochs: int = 2, **kw) -> L.Trainer:
    return quiet_trainer(max_epochs=epochs, inference_mode=False, num_sanity_val_steps=0, **kw)


def test_backbone_stays_frozen_and_in_eval_mode() -> None:
    model = _probe(epsilon=0.1, attack={"steps": 1})
    model.train()
    assert not model.backbone.training and model.head.training
    assert not any(p.requires_grad for p in model.backbone.parameters())
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    _trainer(1).fit(model, DataLoader(_Toy(), batch_size=16))
    after = model.backbone.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "frozen backbone changed (BatchNorm drift?)"


def test_feature_cache_skips_backbone_after_first_epoch() -> None:
    model = _probe(epsilon=0.0, feature_cache=True)
    calls = []
    orig = model.backbone.forward_normalized
    model.backbone.forward_normalized = lambda x: (calls.append((model.current_epoch, len(x))), orig(x))[1]
    ds = _Toy()
    _trainer(3).fit(model, DataLoader(ds, batch_size=16, shuffle=True))
    per_epoch = {e: sum(n for ep, n in calls if ep == e) for e in range(3)}
    assert per_epoch == {0: len(ds), 1: 0, 2: 0}, per_epoch


def test_cached_and_uncached_training_agree() -> None:
    ds = _Toy()
    heads = []
    for cache in (True, False):
        L.seed_everything(0)
        model = _probe(epsilon=0.0, feature_cache=cache)
        _trainer(2).fit(model, DataLoader(ds, batch_size=16))
        heads.append(model.head.weight.detach().clone())
    torch.testing.assert_close(heads[0], heads[1], rtol=1e-5, atol=1e-6)


def test_adversarial_training_updates_only_the_head_and_logs_robust_accuracy() -> None:
    model = _probe(epsilon=0.5, attack={"steps": 2}, eval_epsilons=[0.5], eval_attack={"steps": 2})
    head0 = model.head.weight.detach().clone()
    trainer = _trainer(1, limit_train_batches=2)
    trainer.fit(model, DataLoader(_Toy(), batch_size=16), DataLoader(_Toy(seed=1), batch_size=16))
    assert not torch.equal(head0, model.head.weight)
    assert all(p.grad is None for p in model.backbone.parameters())
    m = trainer.callback_metrics
    assert {"train/loss", "val/acc", "val/adv/acc_pgd2_l2_0p5"} <= set(m)  # the attack and its steps in the name
    assert not any(k.startswith("val/adv/acc_l2") for k in m)  # the old name, which hid the number of steps
    assert 0.0 <= float(m["val/adv/acc_pgd2_l2_0p5"]) <= float(m["val/acc"]) + 1e-6


def test_pgd_evaluation_under_inference_mode_is_a_clear_error() -> None:
    model = _probe(epsilon=0.0, eval_epsilons=[0.5], eval_attack={"steps": 1})
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=True)
    with pytest.raises(RuntimeError, match="inference_mode"):
        trainer.validate(model, DataLoader(_Toy(), batch_size=16))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": -0.1}, "epsilon must be a finite number >= 0"),
        ({"epsilon": float("nan")}, "epsilon must be a finite number >= 0"),
        ({"epsilon": "big"}, "'auto'"),
        ({"eval_epsilons": [-1.0]}, "eval_epsilons"),
        ({"num_classes": 1}, "num_classes"),
        ({"num_classes": 2.5}, r"model.num_classes must be an integer >= 2"),  # not truncated to 2 classes
        ({"num_classes": True}, r"model.num_classes must be an integer"),
        ({"attack": {"norm": "l1"}}, "norm"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    args = {"epsilon": 0.0, "num_classes": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        RobustLinearProbe(backbone=create_backbone("timm:test_efficientnet", pretrained=False), scheduler=None, **args)


def test_label_count_mismatch_is_named() -> None:
    ds = _Toy()
    ds.y = ds.y * 4  # labels {0, 4} with num_classes=2
    with pytest.raises(ValueError, match="model.num_classes"):
        _trainer(1).fit(_probe(), DataLoader(ds, batch_size=16))


@pytest.mark.parametrize(
    "mutate, err, match",
    [
        (lambda ds: setattr(ds, "x", ds.x * 255), ValueError, r"\[0, 1\]"),
        (lambda ds: setattr(ds, "x", (ds.x * 255).to(torch.uint8)), TypeError, "float"),
        (lambda ds: setattr(ds, "x", ds.x[:, :1]), ValueError, "shape"),
    ],
)
def test_bad_images_are_named(mutate, err, match) -> None:
    ds = _Toy()
    mutate(ds)
    with pytest.raises(err, match=match):
        _trainer(1).fit(_probe(), DataLoader(ds, batch_size=16))


def test_nan_features_are_an_error_not_a_logged_nan() -> None:
    model = _probe(epsilon=0.0)
    model.backbone.forward_normalized = lambda x: torch.full((len(x), model.backbone.embed_dim), float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite"):
        _trainer(1).fit(model, DataLoader(_Toy(), batch_size=16))


@pytest.mark.parametrize("num_classes", [2.5, 1, "ten"])
def test_supervised_pretraining_refuses_a_bad_class_count(num_classes) -> None:
    """SupervisedPretraining's head: an integer >= 2, named model.num_classes (2.5 was truncated to 2)."""
    from src.models import SupervisedPretraining

    with pytest.raises(ValueError, match=r"model.num_classes must be an integer >= 2"):
        SupervisedPretraining(
            backbone=create_backbone("timm:test_efficientnet", pretrained=False), num_classes=num_classes
        )
