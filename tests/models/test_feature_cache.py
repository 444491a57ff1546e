"""The probe's feature cache never changes results silently: random training transforms turn it off (logged)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from src.data.torchvision_sets import build_transform
from src.models.feature_cache import FeatureCache, find_random_transforms
from src.train import train

from ..cli.conftest import compose_cfg
from .test_robust_probe import _Toy


class _Images(Dataset):
    """PIL images through a transform, like torchvision's data sets."""

    def __init__(self, transform, n: int = 4) -> None:
        rng = np.random.default_rng(0)
        self.images = [Image.fromarray(rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)) for _ in range(n)]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.transform(self.images[i]), 0, i


class _Noisy(_Toy):
    """A custom augmentation whose class name says nothing: caught by reading an item twice."""

    def __getitem__(self, i: int):
        x, y, i = super().__getitem__(i)
        return (x + 0.01 * torch.rand_like(x)).clamp(0, 1), y, i


def test_detects_random_torchvision_transforms() -> None:
    found = find_random_transforms(DataLoader(_Images(build_transform(16, "flip_crop"))))
    assert any("RandomCrop" in r for r in found) and any("RandomHorizontalFlip" in r for r in found), found
    assert find_random_transforms(DataLoader(_Images(build_transform(16, "none")))) == []


def test_detects_a_datamodules_train_transform_and_unnamed_randomness() -> None:
    class DM:
        train_transform = "flip_crop"

    assert "data.train_transform=flip_crop" in find_random_transforms(None, datamodule=DM())
    assert find_random_transforms([DataLoader(_Toy())]) == []
    assert any("differs between two reads" in r for r in find_random_transforms(DataLoader(_Noisy())))


def test_cache_round_trip() -> None:
    cache = FeatureCache()
    feats = torch.randn(5, 3)
    cache.store(torch.tensor([4, 0, 2, 7, 300]), feats)
    got, hit = cache.lookup(torch.tensor([0, 2, 1, 300, 999]))
    assert hit.tolist() == [True, True, False, True, False]
    torch.testing.assert_close(got[hit], feats[[1, 2, 4]], rtol=0, atol=0)  # stored copies: exact
    assert len(cache) == 5


def _image_folder(root, classes: int = 2, per_class: int = 6) -> None:
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i}.png")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transform, cached", [("flip_crop", False), ("none", True)])
def test_random_train_transform_turns_the_cache_off(tmp_path, caplog, transform, cached) -> None:
    _image_folder(tmp_path / "images")
    cfg = compose_cfg(
        "train.yaml",
        [
            "data=imagefolder",
            f"data.root={tmp_path / 'images'}",
            "data.num_classes=2",
            f"+data.train_transform={transform}",
            "data.image_size=16",
            "data.batch_size=4",
            "data.num_workers=0",
            "+data.val_fraction=0.25",
            "backbone=timm_tiny_random",
            "model.epsilon=0.0",
            "model.eval_epsilons=[]",
            "model.feature_cache=true",
            "trainer.max_epochs=2",
            "callbacks=none",
            "logger=csv",
            "test=false",
        ],
        tmp_path / "run",
    )
    with caplog.at_level(logging.WARNING, logger="repbench"):
        _, objs = train(cfg)
    model = objs["model"]
    warned = [r.getMessage() for r in caplog.records if "feature cache turned off" in r.getMessage()]
    assert model.cache_enabled is cached
    if cached:
        assert not warned and len(model._cache) == len(objs["datamodule"].train_dataset)
    else:
        assert warned and "RandomCrop" in warned[0] and len(model._cache) == 0, warned
