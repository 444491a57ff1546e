"""The shared monitor helpers: ``first_val_images`` for every item layout and missing validation sets."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch.utils.data import DataLoader, TensorDataset

from src.callbacks._monitor import first_val_images


def _trainer(dm):
    return SimpleNamespace(datamodule=dm)


def test_first_val_images_item_layouts():
    x = torch.rand(5, 3, 8, 8)
    tuples = TensorDataset(x, torch.arange(5))
    dicts = [{"image": x[i], "label": i} for i in range(5)]
    bare = [x[i] for i in range(5)]
    for dataset in (tuples, dicts, bare):
        got = first_val_images(_trainer(SimpleNamespace(val_dataset=dataset)), 3)
        assert torch.equal(got, x[:3])
    # only a val_dataloader: its dataset is used; asking for more than there is gives all of them
    dm = SimpleNamespace(val_dataloader=lambda: DataLoader(tuples, batch_size=2))
    assert torch.equal(first_val_images(_trainer(dm), 10), x)


def test_first_val_images_none_without_validation_set():
    def broken():
        raise RuntimeError("no val split")

    assert first_val_images(None, 4) is None
    assert first_val_images(_trainer(None), 4) is None
    assert first_val_images(_trainer(SimpleNamespace(val_dataloader=broken)), 4) is None
    assert first_val_images(_trainer(SimpleNamespace(val_dataset=[])), 4) is None
