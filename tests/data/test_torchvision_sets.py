"""TorchvisionDataModule: an image folder end to end, and the clear errors when data is missing offline."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from src.data import DatasetNotFoundError, TorchvisionDataModule

COLORS = {"cat": (200, 40, 10), "dog": (10, 120, 250)}


def _write_folder(root: Path, per_class: int = 5, classes=("cat", "dog")) -> Path:
    """Constant-colour PNGs (one gray, odd sizes) in one subfolder per class."""
    for c in classes:
        (root / c).mkdir(parents=True)
        for k in range(per_class):
            size = (20 + 3 * k, 30 - 2 * k)
            if k == 0:  # a grayscale file: must come out RGB
                Image.new("L", size, 128).save(root / c / f"{k}.png")
            else:
                pixels = np.full((size[1], size[0], 3), COLORS.get(c, (90, 90, 90)), dtype=np.uint8)
                Image.fromarray(pixels).save(root / c / f"{k}.png")
    return root


def _check_batch(batch, size: int) -> None:
    x, y, index = batch
    assert x.dtype == torch.float32 and x.shape[1:] == (3, size, size)
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert y.dtype == torch.int64 and index.dtype == torch.int64 and set(y.tolist()) <= {0, 1}


def test_imagefolder_carves_a_stratified_val_split(tmp_path):
    root = _write_folder(tmp_path / "train")
    dm = TorchvisionDataModule(
        "imagefolder", root=str(root), image_size=16, batch_size=4, val_fraction=0.4, test_fraction=0.2, seed=0
    )
    assert dm.num_classes == 2  # known before setup
    dm.setup("fit")
    assert dm.class_names == ["cat", "dog"]
    assert len(dm.train_dataset) == 4 and len(dm.val_dataset) == 4 and len(dm.test_dataset) == 2
    for loader in (dm.train_dataloader(), dm.val_dataloader()):
        for batch in loader:
            _check_batch(batch, 16)
    val_labels = [dm.val_dataset[i][1] for i in range(4)]
    assert sorted(val_labels) == [0, 0, 1, 1]
    for i in range(len(dm.val_dataset)):  # resize + center crop of a constant image is that constant
        x, y, index = dm.val_dataset[i]
        assert index == i
        colour = torch.tensor(COLORS[dm.class_names[y]], dtype=torch.float32) / 255
        gray = torch.full((3,), 128 / 255)
        mean = x.mean(dim=(1, 2))
        assert torch.allclose(mean, colour, atol=1e-3) or torch.allclose(mean, gray, atol=1e-3)


def test_imagefolder_with_val_root_and_augmentation(tmp_path):
    root = _write_folder(tmp_path / "train", per_class=3)
    val_root = _write_folder(tmp_path / "val", per_class=2)
    test_root = _write_folder(tmp_path / "test", per_class=1)
    dm = TorchvisionDataModule(
        "imagefolder",
        root=str(root),
        val_root=str(val_root),
        test_root=str(test_root),
        image_size=12,
        batch_size=8,
        train_transform="flip_crop",
    )
    dm.setup()
    assert len(dm.train_dataset) == 6 and len(dm.val_dataset) == 4 and len(dm.test_dataset) == 2
    _check_batch(next(iter(dm.train_dataloader())), 12)
    _check_batch(next(iter(dm.test_dataloader())), 12)


def test_imagefolder_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        TorchvisionDataModule("imagefolder", root=str(tmp_path / "nowhere")).setup()
    root = _write_folder(tmp_path / "train", per_class=2)
    val_root = _write_folder(tmp_path / "val", per_class=2, classes=("cat", "cow"))
    with pytest.raises(ValueError, match="classes"):
        TorchvisionDataModule("imagefolder", root=str(root), val_root=str(val_root)).setup()
    with pytest.raises(ValueError, match="unknown data set"):
        TorchvisionDataModule("mnist")


def test_missing_cifar10_names_dataset_folder_and_fix(tmp_path):
    dm = TorchvisionDataModule("cifar10", root=str(tmp_path), download=False)
    with pytest.raises(FileNotFoundError) as info:
        dm.setup()
    message = str(info.value)
    assert "cifar10" in message and str(tmp_path) in message and "download=True" in message
    assert "cifar-10-batches-py" in message
    assert dm.num_classes == 10


def test_download_offline_fails_fast(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("no connection may be attempted when REPBENCH_OFFLINE=1")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setenv("REPBENCH_OFFLINE", "1")
    dm = TorchvisionDataModule("cifar10", root=str(tmp_path), download=True)
    with pytest.raises(FileNotFoundError, match="REPBENCH_OFFLINE"):
        dm.prepare_data()
    with pytest.raises(FileNotFoundError, match="REPBENCH_OFFLINE"):
        dm.setup()
    assert not any(tmp_path.iterdir())  # nothing half-downloaded


def test_download_with_unreachable_host_fails_fast(tmp_path, monkeypatch):
    calls = []

    def unreachable(address, timeout=None, *args, **kwargs):
        calls.append((address, timeout))
        raise OSError("network is unreachable")

    monkeypatch.delenv("REPBENCH_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", unreachable)
    with pytest.raises(FileNotFoundError, match="cannot reach www.cs.toronto.edu"):
        TorchvisionDataModule("cifar100", root=str(tmp_path), download=True).setup()
    assert calls == [(("www.cs.toronto.edu", 443), 2.0)]
