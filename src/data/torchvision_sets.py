"""Standard image-classification sets through torchvision, and image folders, as [0, 1] pixel-space DataModules.

Images: ``transforms.v2`` resize (shorter side to ``image_size / crop_pct``, bicubic, antialias) then center crop
``image_size`` -> float (3, S, S) in [0, 1]; no normalization (it lives in the backbone adapter).

Splits: three disjoint parts. The official held-out split is the test split (cifar10, cifar100, svhn, stl10,
food101: ``test``; imagenette: its official ``val``), and val is a stratified ``val_fraction`` carved from the
official train split (fixed by ``seed``). An image folder (``root``) takes val from ``val_root`` and test from
``test_root`` where given, else carves them from ``root`` (stratified ``val_fraction`` / ``test_fraction``).

Offline: nothing is downloaded unless ``download=True``; missing files raise :class:`DatasetNotFoundError` (a
``FileNotFoundError``) naming the data set, the folder looked in and the fix. With ``download=True`` and no network
(``REPBENCH_OFFLINE=1`` / ``HF_HUB_OFFLINE=1``, or the download host unreachable within 2 s) the same error is raised
at once instead of a long retry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch.utils.data import Dataset

from ..utils.checks import check_int
from ..utils.network import offline_reason as _offline_reason
from .common import IndexedDataset, SplitsDataModule, carve_splits, check_fractions, check_num_classes

__all__ = ["DatasetNotFoundError", "TorchvisionDataModule", "build_transform", "DATASETS"]


class DatasetNotFoundError(FileNotFoundError):
    """The data set's files are not on disk (and could not be downloaded)."""


@dataclass(frozen=True)
class _Spec:
    cls: str  # torchvision.datasets class name
    num_classes: int
    splits: tuple[str, str]  # (official train split, official held-out split)
    has_val: bool  # the official held-out split is named "val" (we use it as the test split)
    layout: str  # what must exist under root


DATASETS: dict[str, _Spec] = {
    "cifar10": _Spec("CIFAR10", 10, ("train", "test"), False, "cifar-10-batches-py/"),
    "cifar100": _Spec("CIFAR100", 100, ("train", "test"), False, "cifar-100-python/"),
    "svhn": _Spec("SVHN", 10, ("train", "test"), False, "train_32x32.mat and test_32x32.mat"),
    "stl10": _Spec("STL10", 10, ("train", "test"), False, "stl10_binary/"),
    "food101": _Spec("Food101", 101, ("train", "test"), False, "food-101/"),
    "imagenette": _Spec("Imagenette", 10, ("train", "val"), True, "imagenette2-320/{train,val}/"),
    "imagefolder": _Spec("ImageFolder", -1, ("train", "val"), False, "<class name>/<image files>"),
}


def build_transform(image_size: int, train_transform: str = "none", crop_pct: float = 0.875) -> Callable:
    """PIL/uint8 image -> float (3, S, S) in [0, 1]: resize shorter side to S / crop_pct (bicubic, antialias), then
    center crop S ("none") or random crop S + horizontal flip ("flip_crop"). Gray images become RGB."""
    from torchvision.transforms import v2

    if train_transform not in ("none", "flip_crop"):
        raise ValueError(f"unknown train_transform {train_transform!r}; expected 'none' or 'flip_crop'")
    size = int(image_size)
    crop = [v2.CenterCrop(size)] if train_transform == "none" else [v2.RandomCrop(size), v2.RandomHorizontalFlip()]
    return v2.Compose(
        [
            v2.ToImage(),
            v2.RGB(),
            v2.Resize(int(round(size / crop_pct)), interpolation=v2.InterpolationMode.BICUBIC, antialias=True),
            *crop,
            v2.ToDtype(torch.float32, scale=True),
        ]
    )


class _TransformedSubset(Dataset):
    """``(transform(image), int(label))`` for ``base[indices[i]]``; one base set can serve several transforms."""

    def __init__(self, base: Dataset, indices: torch.Tensor | None, transform: Callable) -> None:
        self.base, self.transform = base, transform
        self.indices = indices.tolist() if indices is not None else None

    def __len__(self) -> int:
        return len(self.indices) if self.indices is not None else len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[self.indices[i] if self.indices is not None else i]
        return self.transform(image), int(label)


def _labels(dataset: Any) -> list[int]:
    """Labels of a torchvision data set without decoding images."""
    for attr in ("targets", "labels", "_labels"):
        if getattr(dataset, attr, None) is not None:
            return [int(v) for v in getattr(dataset, attr)]
    if hasattr(dataset, "_samples"):  # Imagenette
        return [int(label) for _, label in dataset._samples]
    raise TypeError(f"cannot read labels of {type(dataset).__name__} without loading every image")


def _class_names(dataset: Any, num_classes: int) -> list[str]:
    classes = getattr(dataset, "classes", None)
    if not classes:  # SVHN
        return [str(i) for i in range(num_classes)]
    return [c[0] if isinstance(c, (tuple, list)) else str(c) for c in classes]  # Imagenette: tuples of synonyms


def _download_url(name: str, split: str) -> str:
    import torchvision.datasets as tvd

    cls = getattr(tvd, DATASETS[name].cls)
    if name == "svhn":
        return cls.split_list[split][0]
    if name == "food101":
        return cls._URL
    if name == "imagenette":
        return cls._ARCHIVES["320px"][0]
    return cls.url


def offline_reason(url: str, timeout: float = 2.0) -> str | None:
    """Why ``url`` cannot be downloaded now (an offline env variable, or its host unreachable), or None."""
    parsed = urlparse(url)
    return _offline_reason(parsed.hostname or "", parsed.port or (443 if parsed.scheme == "https" else 80), timeout)


def _not_found(name: str, root: Path, split: str, reason: str = "") -> DatasetNotFoundError:
    layout = DATASETS[name].layout
    return DatasetNotFoundError(
        f"{name} ({split} split) not found in {root.resolve()}{reason}. Fix: pass download=True where there is "
        f"network, or place the files under {root}/ (expected: {layout})"
    )


def _construct(name: str, root: Path, split: str, download: bool) -> Dataset:
    import torchvision.datasets as tvd

    cls = getattr(tvd, DATASETS[name].cls)
    if name in ("cifar10", "cifar100"):
        return cls(str(root), train=split == "train", download=download)
    if name == "imagenette":
        return cls(str(root), split=split, size="320px", download=download)
    return cls(str(root), split=split, download=download)


def open_dataset(name: str, root: str | Path, split: str, download: bool = False) -> Dataset:
    """The torchvision data set ``name`` (untransformed), from disk; downloads only when missing and ``download``."""
    root = Path(root)
    try:
        return _construct(name, root, split, download=False)
    except RuntimeError as err:
        if "not found" not in str(err).lower() and "corrupted" not in str(err).lower():
            raise
        if not download:
            raise _not_found(name, root, split) from err
    reason = offline_reason(_download_url(name, split))
    if reason is not None:
        raise _not_found(name, root, split, f" and download=True cannot fetch it: {reason}")
    return _construct(name, root, split, download=True)


def open_image_folder(root: str | Path) -> Dataset:
    """``torchvision.datasets.ImageFolder`` with a clear error when the folder or its class subfolders are missing."""
    from torchvision.datasets import ImageFolder

    root = Path(root)
    fix = f"pass root=<a folder with one subfolder of images per class> (expected: {root}/<class name>/<image files>)"
    if not root.is_dir():
        raise DatasetNotFoundError(f"imagefolder: folder {root.resolve()} does not exist. Fix: {fix}")
    try:
        return ImageFolder(str(root))
    except FileNotFoundError as err:
        raise DatasetNotFoundError(f"imagefolder: no usable images in {root.resolve()} ({err}). Fix: {fix}") from err


class TorchvisionDataModule(SplitsDataModule):
    """cifar10, cifar100, svhn, stl10, food101, imagenette (320px) or an image folder; batches ``(x, y, index)``.

    See the module docstring for splits, transforms and offline behaviour. ``num_classes`` is known before ``setup``
    (an image folder's class subfolders are counted); ``class_names`` is set by ``setup``. ``prepare_data`` downloads
    when ``download=True`` (Lightning calls it on one process per node); ``setup`` only reads from disk if the files
    are there, so DDP ranks never download concurrently.
    """

    def __init__(
        self,
        name: str,
        root: str = "data",
        image_size: int = 224,
        batch_size: int = 64,
        download: bool = False,
        seed: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        num_workers: int = 0,
        train_transform: str = "none",
        val_root: str | None = None,
        test_root: str | None = None,
        crop_pct: float = 0.875,
        num_classes: int | None = None,
    ) -> None:
        super().__init__()
        self._expected_classes = num_classes
        if name not in DATASETS:
            raise ValueError(f"unknown data set {name!r}; expected one of {sorted(DATASETS)}")
        check_fractions({"val": val_fraction, "test": test_fraction})
        for key, value in (("val_root", val_root), ("test_root", test_root)):
            if value is not None and name != "imagefolder":
                raise ValueError(f"{key} is only for name='imagefolder' ({name} has official splits)")
        self.name, self.root = name, Path(root)
        self.val_root = Path(val_root) if val_root else None
        self.test_root = Path(test_root) if test_root else None
        self.image_size = check_int(image_size, "data.image_size", 1, meaning="pixels per side")
        self.batch_size, self.download = batch_size, bool(download)  # batch_size: checked by the property
        self.seed, self.val_fraction, self.num_workers = (
            check_int(seed, "data.seed", fix="set seed=<integer> (data.seed follows it)"),
            float(val_fraction),
            num_workers,
        )
        self.test_fraction = float(test_fraction)
        self.train_transform, self.crop_pct = train_transform, float(crop_pct)
        self._train_tf = build_transform(self.image_size, train_transform, self.crop_pct)
        self._eval_tf = build_transform(self.image_size, "none", self.crop_pct)
        self.class_names: list[str] | None = None
        self.train_dataset: IndexedDataset | None = None
        self.val_dataset: IndexedDataset | None = None
        self.test_dataset: IndexedDataset | None = None

    @property
    def num_classes(self) -> int:
        if self.name != "imagefolder":
            return DATASETS[self.name].num_classes
        if self.class_names is not None:
            return len(self.class_names)
        from torchvision.datasets.folder import find_classes

        if not self.root.is_dir():
            open_image_folder(self.root)  # raises the clear error
        return len(find_classes(str(self.root))[0])  # class subfolders only, no file scan

    def _open(self, split: str, download: bool) -> Dataset:
        if self.name == "imagefolder":
            return open_image_folder(self.root)  # the training folder (val/test folders: _held_out)
        return open_dataset(self.name, self.root, split, download=download)

    def _held_out(self) -> dict[str, Dataset | None]:
        """{"val": ..., "test": ...}: the data sets given for those splits, None where they are carved from train."""
        if self.name == "imagefolder":
            return {
                "val": open_image_folder(self.val_root) if self.val_root else None,
                "test": open_image_folder(self.test_root) if self.test_root else None,
            }
        return {"val": None, "test": self._open(DATASETS[self.name].splits[1], self.download)}

    def prepare_data(self) -> None:
        """Download missing files when ``download=True`` (one process per node)."""
        if self.download and self.name != "imagefolder":
            for split in DATASETS[self.name].splits:
                self._open(split, download=True)

    def setup(self, stage: str | None = None) -> None:
        """Open and split (idempotent: later calls do nothing)."""
        if self.train_dataset is not None:
            return
        spec = DATASETS[self.name]
        train_base = self._open(spec.splits[0], self.download)
        held_out = self._held_out()
        self.class_names = _class_names(train_base, spec.num_classes)
        for split, base in held_out.items():
            if base is not None and _class_names(base, spec.num_classes) != self.class_names:
                raise ValueError(f"{self.name}: the classes of the {split} data differ from the training data's")
        check_num_classes(self._expected_classes, len(self.class_names), self.name)
        fractions = {"val": self.val_fraction, "test": self.test_fraction}
        carved = {k: f for k, f in fractions.items() if held_out[k] is None}
        parts = carve_splits(_labels(train_base), carved, self.seed, self.name) if carved else {"train": None}
        splits = {"train": _TransformedSubset(train_base, parts["train"], self._train_tf)}
        for split, base in held_out.items():
            splits[split] = (
                _TransformedSubset(train_base, parts[split], self._eval_tf)
                if base is None
                else _TransformedSubset(base, None, self._eval_tf)
            )
        self.train_dataset, self.val_dataset, self.test_dataset = (
            IndexedDataset(splits[k]) for k in ("train", "val", "test")
        )
