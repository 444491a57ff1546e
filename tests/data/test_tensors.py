"""src.utils.data_tensors: a configs/data option -> (images, labels) for the report CLIs; the missing files, unset keys
and sizes beyond a split are refused naming the setting and the fix."""

from __future__ import annotations

import pytest
import torch

from src.utils.data_tensors import data_options, dataset_tensors, load_data_config, open_splits, split_tensors


class _Items:
    """A map-style dataset of (x, y, index) items: x = a 3x2x2 image filled with i / n, y = i % 3."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.full((3, 2, 2), i / self.n), i % 3, i


def test_dataset_tensors_every_item_in_order() -> None:
    x, y = dataset_tensors(_Items(6))
    assert x.shape == (6, 3, 2, 2) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert y.tolist() == [0, 1, 2, 0, 1, 2] and torch.equal(x[:, 0, 0, 0], torch.arange(6) / 6)


def test_dataset_tensors_count_is_a_seeded_draw_in_dataset_order() -> None:
    a, ya = dataset_tensors(_Items(50), 10, seed=3)
    b, _ = dataset_tensors(_Items(50), 10, seed=3)
    c, _ = dataset_tensors(_Items(50), 10, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    first = a[:, 0, 0, 0]
    assert torch.all(first[1:] > first[:-1])  # distinct items, kept in the dataset's order
    assert len(set(ya.tolist())) > 1  # not the first 10 of a class-sorted set


@pytest.mark.parametrize("count", [7, -1, 2.5, True])
def test_dataset_tensors_count_outside_the_split_is_refused(count) -> None:
    with pytest.raises(ValueError, match=r"n_test must be an integer in \[2, 6\] \(the images of that split\)"):
        dataset_tensors(_Items(6), count, key="n_test", minimum=2)


def test_split_tensors_of_the_digits_module_keep_the_split_sizes() -> None:
    dm = load_data_config("digits", seed=0, image_size=8)
    sets = split_tensors(dm, ("train", "test"))
    assert sets["train"][0].shape == (1078, 3, 8, 8) and sets["test"][0].shape == (359, 3, 8, 8)  # 60/20/20 of 1797
    assert 0.0 <= float(sets["train"][0].min()) and float(sets["train"][0].max()) <= 1.0
    capped = split_tensors(dm, ("train", "test"), {"train": 20, "test": None}, seed=1)
    assert capped["train"][0].shape[0] == 20 and capped["test"][0].shape[0] == 359


def test_load_data_config_takes_options_mappings_and_targets() -> None:
    assert {"cifar10", "digits", "imagefolder"} <= set(data_options())
    dm = load_data_config({"option": "digits", "val_fraction": 0.1}, seed=0, image_size=8)
    assert dm.val_fraction == 0.1 and dm.image_size == 8
    dm = load_data_config({"_target_": "src.data.DigitsDataModule", "image_size": 16, "seed": "${seed}"}, seed=5)
    assert dm.image_size == 16 and dm.seed == 5


def test_unknown_option_and_bad_mappings_are_named() -> None:
    with pytest.raises(ValueError, match=r"downstream.sets: no data config 'nosuch'; choose one of \[.*'cifar10'"):
        load_data_config("nosuch", 0, key="downstream.sets")
    with pytest.raises(ValueError, match=r"data: a data mapping needs option: <configs/data name>"):
        load_data_config({"root": "/x"}, 0)
    with pytest.raises(TypeError, match=r"data must be a configs/data option name or a mapping"):
        load_data_config(3, 0)


def test_unset_image_folder_keys_are_named_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"leaves \['num_classes', 'root'\] unset; set them: \{option: imagefolder"):
        load_data_config("imagefolder", 0, key="downstream.sets")


def test_missing_files_fail_naming_the_folder_and_the_fix(tmp_path) -> None:
    dm = load_data_config("cifar10", 0, 32, paths={"data_dir": str(tmp_path / "nodata")}, key="data")
    with pytest.raises(FileNotFoundError, match=r"data: cifar10 \(train split\) not found in .*nodata\. Fix: pass"):
        open_splits(dm, ("train",), key="data")
    dm = load_data_config({"option": "imagefolder", "root": str(tmp_path / "nofolder"), "num_classes": 3}, 0, 16)
    with pytest.raises(FileNotFoundError, match=r"imagefolder: folder .*nofolder does not exist\. Fix: pass root="):
        split_tensors(dm)


def test_unknown_split_is_refused() -> None:
    with pytest.raises(ValueError, match=r"split must be 'train', 'val' or 'test', got 'dev'"):
        open_splits(load_data_config("digits", 0, 8), ("dev",))
