"""Every bundled data module has a real held-out test split: disjoint from train and val, fixed by the seed (once the
test split was the validation split, unsaid, so `test/...` metrics re-reported the data that picked the checkpoint)."""

from __future__ import annotations

import pytest
import torch

from src.data import DigitsDataModule, GaussianTaskDataModule, PhotosDataModule, TorchvisionDataModule
from src.data.common import carve_splits


def _rows(dataset) -> set[bytes]:
    return {x.numpy().tobytes() for x in dataset.base.tensors[0]}


def test_digits_test_split_is_held_out_and_seeded() -> None:
    a, b, other = (DigitsDataModule(image_size=8, seed=seed) for seed in (3, 3, 4))
    for dm in (a, b, other):
        dm.setup()
    train, val, test = (set(getattr(a, f"{s}_indices").tolist()) for s in ("train", "val", "test"))
    assert not (test & train) and not (test & val) and not (train & val)
    assert len(test) >= 359 and a.test_dataset is not a.val_dataset
    assert torch.equal(a.test_indices, b.test_indices) and not torch.equal(a.test_indices, other.test_indices)
    assert sum(len(y) for _, y, _ in a.test_dataloader()) == len(test)  # the test stage reads the test split


def test_gaussian_test_split_is_held_out_and_seeded() -> None:
    kwargs = dict(image_size=4, n_train=64, n_val=32, n_test=48)
    a, b = GaussianTaskDataModule(seed=1, **kwargs), GaussianTaskDataModule(seed=1, **kwargs)
    a.setup()
    b.setup()
    assert len(a.test_dataset) == 48 and len(a.val_dataset) == 32
    test = _rows(a.test_dataset)
    assert not (test & _rows(a.val_dataset)) and not (test & _rows(a.train_dataset))  # continuous draws: disjoint
    assert torch.equal(a.test_dataset.base.tensors[0], b.test_dataset.base.tensors[0])
    more = GaussianTaskDataModule(seed=1, **{**kwargs, "n_test": 8})
    more.setup()  # val does not depend on n_test (counter-based draws)
    assert torch.equal(more.val_dataset.base.tensors[0], a.val_dataset.base.tensors[0])
    with pytest.raises(ValueError, match=r"n_test must be an integer >= 1 .*data\.n_test"):
        GaussianTaskDataModule(n_test=0)


def test_photos_test_split_is_held_out_and_seeded() -> None:
    kwargs = dict(image_size=16, num_train=8, num_val=4, num_test=6, val_photos=["coffee"], test_photos=["camera"])
    a, b = PhotosDataModule(seed=2, **kwargs), PhotosDataModule(seed=2, **kwargs)
    a.setup()
    b.setup()
    photo = {name: a.photos.index(name) for name in ("coffee", "camera")}
    assert set(a.test_dataset.base.tensors[1].tolist()) == {photo["camera"]}
    assert photo["camera"] not in a.train_dataset.base.tensors[1].tolist() + a.val_dataset.base.tensors[1].tolist()
    assert torch.equal(a.probe_images("test"), b.probe_images("test")) and a.probe_images("test").shape[0] == 6
    with pytest.raises(ValueError, match=r"\['coffee'\] are in both val_photos and test_photos"):
        PhotosDataModule(val_photos=["coffee"], test_photos=["coffee"])
    with pytest.raises(ValueError, match=r"test_photos must be a non-empty subset of photos; \['lena'\]"):
        PhotosDataModule(test_photos=["lena"])


def test_imagefolder_carves_a_held_out_test_split(tmp_path) -> None:
    from PIL import Image

    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for k in range(10):
            Image.new("RGB", (8, 8), (25 * k, 0, 0)).save(tmp_path / c / f"{k}.png")
    dm = TorchvisionDataModule("imagefolder", root=str(tmp_path), image_size=8, val_fraction=0.2, test_fraction=0.3)
    dm.setup()
    train, val, test = (set(getattr(dm, f"{s}_dataset").base.indices) for s in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (10, 4, 6) and not (test & train) and not (test & val)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            dict(val_fraction=0.5, test_fraction=0.5),
            r"val_fraction \+ test_fraction = 1.0 >= 1 leaves nothing to train",
        ),
        (dict(test_fraction=0.0), r"test_fraction must be in \(0, 1\), got 0.0; set data.test_fraction"),
        (dict(val_fraction=1.2), r"val_fraction must be in \(0, 1\)"),
    ],
)
def test_bad_split_fractions_are_refused_at_construction(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        DigitsDataModule(**kwargs)


def test_an_empty_split_names_its_fraction() -> None:
    with pytest.raises(ValueError, match=r"digits: the test split of 20 samples is empty .*raise data.test_fraction"):
        carve_splits(torch.arange(20) % 2, {"val": 0.2, "test": 0.01}, 0, "digits")
