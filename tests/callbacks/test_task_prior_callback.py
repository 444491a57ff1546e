"""TaskPriorCallback: logs the closed-form Task-Prior moments of the training backbone, restores its mode."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import TaskPriorCallback
from src.task_prior import TaskPriorConfig, task_prior_moments
from tests._lightning import quiet_trainer

U64 = np.finfo(np.float64).eps


class TinyBackbone(nn.Module):
    embed_dim = 6

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 6)

    def embed(self, x):
        return self.fc(self.bn(self.conv(x)).relu().mean((2, 3)))


class TinyModule(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = TinyBackbone()
        self.head = nn.Linear(6, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.head(self.backbone.embed(x)), y)
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _data(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, 12, 12, generator=g), torch.randint(0, 2, (n,), generator=g)


def test_logs_the_closed_form_moments_of_the_trained_backbone() -> None:
    torch.manual_seed(0)
    images, _ = _data(20, seed=1)
    prior = torch.randn(20, 5, generator=torch.Generator().manual_seed(2))
    cb = TaskPriorCallback(every_n_epochs=1, temperature=0.5, prior_backbone=None, prior_features=prior, images=images)
    x, y = _data()
    model = TinyModule()
    trainer = quiet_trainer(max_epochs=2, callbacks=[cb])
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=8))
    assert [e for e, _ in cb.history] == [0, 1] and cb.computations == 2  # weights change every epoch
    assert model.backbone.training  # the callback restored train mode
    with torch.no_grad():
        z = model.backbone.eval().embed(images)
    e, v = task_prior_moments(z, prior, 0.5)
    # the same float64 blocked sums of n² = 400 terms over bit-identical features: only the order of a few block
    # sums may differ, |Δ| <= n²·u·Σ|terms| <= 400·u·(Σ|M| + ΣM²) <= 400·u·2n (|M_ij| <= 1 after Frobenius scaling)
    tol = 400 * U64 * 2 * 20
    assert abs(cb.last["mean"] - e) <= tol * (1 + abs(e)) and abs(cb.last["var"] - v) <= tol * (1 + abs(v))
    # Lightning stores logged scalars in float32: relative rounding 2^-24 ≈ 6e-8; 1e-6 leaves margin
    logged = trainer.callback_metrics
    assert float(logged["val/task_prior/mean"]) == pytest.approx(e, rel=1e-6)
    assert float(logged["val/task_prior/var"]) == pytest.approx(v, rel=1e-6)
    assert float(logged["val/task_prior/z"]) == pytest.approx(e / v**0.5, rel=1e-6)


def test_skips_unchanged_weights_and_restores_eval_mode() -> None:
    images, _ = _data(10)
    prior = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    cb = TaskPriorCallback(temperature=1.0, prior_backbone=None, prior_features=prior, images=images)
    model = TinyModule()
    model.backbone.train()
    running = model.backbone.bn.running_mean.clone()

    class _T:  # the two trainer attributes compute() reads
        global_rank, world_size, current_epoch = 0, 1, 0

    out = cb.compute(_T(), model)
    assert set(out) == {"mean", "var", "z"} and np.isfinite(list(out.values())).all()
    assert model.backbone.training and torch.equal(model.backbone.bn.running_mean, running)  # no BN drift


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="temperature"):
        TaskPriorCallback(temperature=0.0, prior_features=torch.zeros(4, 2))
    with pytest.raises(ValueError, match="prior_backbone .* or prior_features .* not both"):
        TaskPriorCallback(prior_backbone="embedded:efficientnet_lite0", prior_features=torch.zeros(4, 2))
    with pytest.raises(TypeError, match=r"unknown TaskPriorConfig option\(s\) \['prior'\]"):
        TaskPriorCallback(config={"prior": "x"})
    with pytest.raises(ValueError, match="every_n_epochs"):
        TaskPriorCallback(every_n_epochs=0)
    cb = TaskPriorCallback(prior_backbone=None, prior_features=torch.randn(5, 2), images=torch.rand(8, 3, 8, 8))

    class _T:
        global_rank, world_size, current_epoch = 0, 1, 0

    with pytest.raises(ValueError, match="same images"):
        cb.compute(_T(), TinyModule())
    with pytest.raises(ValueError, match="images must be"):
        TaskPriorCallback(prior_backbone=None, prior_features=torch.randn(5, 2), images="nope").compute(
            _T(), TinyModule()
        )


def test_config_and_keywords_merge_once() -> None:
    """config= plus keyword overrides (not None) give the same options as the merged config (one door)."""
    cfg = {"convention": "paper", "temperature": 0.5, "block_size": 7}
    a = TaskPriorCallback(config=cfg, temperature=0.25, prior_features=torch.zeros(4, 2))
    assert a.options == TaskPriorConfig(convention="paper", temperature=0.25, block_size=7)
    assert (a.temperature, a.block_size, a.prior_backbone) == (0.25, 7, None)
    b = TaskPriorCallback()
    assert b.prior_backbone == TaskPriorConfig().prior_backbone and b.settings == TaskPriorConfig().settings


def test_digits_images_beyond_the_bundled_set_are_refused() -> None:
    """images='digits' with num_images above the 1797 bundled digits once silently used 1797 images; now refused
    when the callback is made (src.images.probe_images owns the check)."""
    opts = dict(prior_backbone=None, prior_features=torch.randn(6, 2), images="digits", image_size=8)
    with pytest.raises(ValueError, match=r"num_images must be an integer in \[1, 1797\] .*got 5000"):
        TaskPriorCallback(num_images=5000, **opts)
    cb = TaskPriorCallback(num_images=6, **opts)
    cb._ready(SimpleNamespace(global_rank=0, world_size=1, datamodule=None), TinyModule())
    assert cb.images.shape == (6, 3, 8, 8)


def _nan_on_rank_one(rank: int, world_size: int) -> str:
    """TaskPriorCallback.compute in a 2-process group where only rank 1's features are NaN."""
    images = torch.rand(8, 3, 8, 8, generator=torch.Generator().manual_seed(0))

    def features(module, x):
        z = x.flatten(1)[:, :6].double()
        return z * float("nan") if torch.distributed.get_rank() == 1 else z

    cb = TaskPriorCallback(
        images=images, num_images=8, prior_features=torch.randn(8, 4, dtype=torch.float64), feature_fn=features,
        progress=False,
    )  # fmt: skip
    trainer = SimpleNamespace(global_rank=rank, world_size=world_size, datamodule=None, current_epoch=3)
    try:
        module = SimpleNamespace(device=torch.device("cpu"), backbone=nn.Linear(1, 1))
        cb.compute(trainer, module)
    except FloatingPointError as err:
        return str(err)
    return "no error"


@pytest.mark.slow
def test_nan_features_on_one_rank_fail_every_rank_without_a_hang() -> None:
    """Bad features on one rank only: the count travels in the width all-reduce, so both ranks raise together
    (before the fix rank 1 raised before the collective and rank 0 waited in it until the timeout)."""
    from tests._multiprocess import run_in_processes

    for res in run_in_processes(_nan_on_rank_one, 2, timeout=120):
        assert "NaN/inf features for 4 Task-Prior images" in res and "epoch 3" in res


def test_a_prior_that_embeds_the_images_as_zeros_is_refused_before_training_and_prior_image_size_fixes_it() -> None:
    """EfficientNet-Lite2 embeds inputs of <= 32 px as exact zeros: the callback once died after the first epoch with
    "prior_features has a zero-norm row"; now setup refuses it, naming prior_image_size=, which resizes the images
    for the prior only (the trained backbone still sees 16 px)."""
    x, y = _data()
    images = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    module = TinyModule()
    cb = TaskPriorCallback(prior_backbone="embedded:efficientnet_lite2", images=images, num_images=8, progress=False)
    with pytest.raises(ValueError, match=r"embeds 8 of the 8 fixed images \(16 x 16 px.*Fix: prior_image_size=64"):
        quiet_trainer(max_epochs=1, callbacks=[cb]).fit(module, DataLoader(TensorDataset(x, y), batch_size=8))
    assert module.trainer.global_step == 0  # refused in setup: no training step was wasted
    fixed = TaskPriorCallback(
        prior_backbone="embedded:efficientnet_lite2", images=images, num_images=8, progress=False, prior_image_size=64
    )
    trainer = quiet_trainer(max_epochs=1, callbacks=[fixed])
    trainer.fit(TinyModule(), DataLoader(TensorDataset(x, y), batch_size=8))
    assert all(np.isfinite(v) for v in fixed.last.values()) and fixed.last["var"] > 0
    assert fixed._identity()["prior_image_size"] == 64


class _ValImages(L.LightningDataModule):
    """CIFAR-size (32 x 32) validation images in [0, 1] as a data module's ``val_dataset``; training on ``_data``."""

    def __init__(self) -> None:
        super().__init__()
        self.val_dataset = TensorDataset(torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(4)))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(*_data()), batch_size=8)


def test_default_prior_on_32px_validation_images_names_prior_image_size_before_training() -> None:
    """CB28's reproduction: the defaults (prior embedded:efficientnet_lite2, images='val') on 32-px validation images
    once died after the first epoch with "prior_features has a zero-norm row" (no prior_features were given); setup
    refuses it, naming the cause and prior_image_size=."""
    module = TinyModule()
    cb = TaskPriorCallback(progress=False, num_images=8)
    pattern = r"embedded:efficientnet_lite2' embeds 6 of the 6 fixed images \(32 x 32 px.*Fix: prior_image_size=64"
    with pytest.raises(ValueError, match=pattern + r".*images='photos' or 'digits'"):
        quiet_trainer(max_epochs=1, callbacks=[cb]).fit(module, datamodule=_ValImages())
    assert module.trainer.global_step == 0  # refused in setup: no training step was wasted
