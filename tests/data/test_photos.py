"""PhotosDataModule: offline photos, seeded crops, split by photo, loader batches."""

from __future__ import annotations

import pytest
import torch

from src.data import PhotosDataModule
from src.data.photos import PHOTO_NAMES, load_photo, random_crops


def test_every_photo_loads_offline():
    for name in PHOTO_NAMES:
        img = load_photo(name)
        assert img.ndim == 3 and img.shape[0] == 3 and min(img.shape[1:]) >= 128, name
        assert img.dtype == torch.float32 and float(img.min()) >= 0 and float(img.max()) <= 1, name
        assert float(img.std()) > 0.02, name  # a real photo, not a constant


def test_crops_are_seeded_and_in_range():
    photos = [load_photo("astronaut"), load_photo("china")]
    a, src_a = random_crops(photos, 6, 32, 0.25, torch.Generator().manual_seed(0))
    b, _ = random_crops(photos, 6, 32, 0.25, torch.Generator().manual_seed(0))
    c, _ = random_crops(photos, 6, 32, 0.25, torch.Generator().manual_seed(1))
    assert a.shape == (6, 3, 32, 32) and torch.equal(a, b) and not torch.equal(a, c)
    assert src_a.tolist() == [0, 1, 0, 1, 0, 1]
    assert float(a.min()) >= 0 and float(a.max()) <= 1


def test_datamodule_splits_by_photo():
    dm = PhotosDataModule(image_size=32, num_train=20, num_val=6, batch_size=8, val_photos=["coffee"], seed=3)
    dm.setup()
    x, y, idx = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 3, 32, 32) and idx.dtype == torch.int64
    coffee = dm.photos.index("coffee")
    assert coffee not in dm.train_dataset.base.tensors[1].tolist()
    assert set(dm.val_dataset.base.tensors[1].tolist()) == {coffee}
    assert dm.probe_images().shape == (6, 3, 32, 32)
    dm2 = PhotosDataModule(image_size=32, num_train=20, num_val=6, batch_size=8, val_photos=["coffee"], seed=3)
    dm2.setup()
    assert torch.equal(dm.probe_images("train"), dm2.probe_images("train"))


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown photos"):
        PhotosDataModule(photos=["lena"])
    with pytest.raises(ValueError, match="not in photos"):
        PhotosDataModule(photos=["astronaut", "china"], val_photos=["coffee"])
    with pytest.raises(ValueError, match="leave at least one"):
        PhotosDataModule(photos=["coffee", "china"], val_photos=["coffee"], test_photos=["china"])
    with pytest.raises(ValueError, match="image_size"):
        PhotosDataModule(image_size=8)
