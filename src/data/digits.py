"""scikit-learn's bundled digits (1797 gray 8x8 images, 10 classes) as [0, 1] RGB images: the offline default set."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..images.digits import _INTERPOLATIONS, load_digits_tensors, upsample_digits
from ..utils.checks import check_image_size, check_int
from .common import IndexedDataset, SplitsDataModule, carve_splits, check_fractions, check_num_classes

__all__ = ["DigitsDataModule", "UpsampledDigits", "check_image_size", "upsample_digits"]


class UpsampledDigits(Dataset):
    """Digits at ``image_size``: item i is ``(x (3, S, S) float [0, 1], label int)``.

    Up to ``PRECOMPUTE_MAX_SIZE`` pixels a side the gray images are upsampled once (1797 × 128² floats = 118 MB at
    most) and items are 3-channel views of them, so loading costs almost nothing (a cached-feature probe epoch is
    then dominated by the head, not the data); larger sizes resize lazily per item (1797 × 3 × 224² floats would
    be 1 GiB).
    """

    PRECOMPUTE_MAX_SIZE = 128

    def __init__(self, images: Tensor, labels: Tensor, image_size: int, interpolation: str = "bilinear") -> None:
        check_image_size(image_size)
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(f"unknown interpolation {interpolation!r}; expected one of {_INTERPOLATIONS}")
        self.images = images  # (N, 1, 8, 8) float32 in [0, 1]
        self.labels = labels  # (N,) int64
        self.image_size = int(image_size)
        self.interpolation = interpolation
        self.upsampled: Tensor | None = None  # (N, 1, S, S) when precomputed
        if self.image_size <= self.PRECOMPUTE_MAX_SIZE:
            self.upsampled = (
                torch.cat(
                    [
                        upsample_digits(images[i : i + 256], self.image_size, interpolation)[:, :1]
                        for i in range(0, len(images), 256)
                    ]
                )
                if len(images)
                else images
            )

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        if self.upsampled is not None:
            return self.upsampled[index].expand(3, -1, -1), int(self.labels[index])
        x = upsample_digits(self.images[index : index + 1], self.image_size, self.interpolation)[0]
        return x, int(self.labels[index])


class DigitsDataModule(SplitsDataModule):
    """scikit-learn digits as a LightningDataModule; batches ``(x, y, index)`` with x (B, 3, S, S) in [0, 1].

    Split: three disjoint parts, stratified and fixed by ``seed``: train ``1 - val_fraction - test_fraction`` (60 %,
    1078 images) / val ``val_fraction`` (20 %, 360 images: the per-epoch metrics and the best-checkpoint choice) /
    test ``test_fraction`` (20 %, 359 images: held out, touched only by the test stage). ``train_indices`` /
    ``val_indices`` / ``test_indices`` give the positions in ``load_digits()`` order; ``index`` in a batch is the
    position within the split.
    Training order is a function of (seed, epoch) (see ``src.data.common``).
    """

    num_classes = 10
    class_names = [str(d) for d in range(10)]

    def __init__(
        self,
        image_size: int = 64,
        batch_size: int = 64,
        val_fraction: float = 0.2,
        test_fraction: float = 0.2,
        seed: int = 0,
        num_workers: int = 0,
        interpolation: str = "bilinear",
        num_classes: int | None = None,
    ) -> None:
        super().__init__()
        check_num_classes(num_classes, 10, "digits")
        check_fractions({"val": val_fraction, "test": test_fraction})  # a clear error now, not at setup
        check_image_size(image_size, "data.image_size")
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(f"unknown interpolation {interpolation!r}; expected one of {_INTERPOLATIONS}")
        self.image_size = int(image_size)
        self.batch_size = batch_size  # checked by the property (1.5 refused, not truncated)
        self.val_fraction, self.test_fraction = float(val_fraction), float(test_fraction)
        self.seed = check_int(seed, "data.seed", fix="set seed=<integer> (data.seed follows it)")
        self.num_workers = num_workers
        self.interpolation = interpolation
        self.train_dataset: IndexedDataset | None = None
        self.val_dataset: IndexedDataset | None = None
        self.test_dataset: IndexedDataset | None = None
        self.train_indices: Tensor | None = None  # positions in load_digits() order, set by setup()
        self.val_indices: Tensor | None = None
        self.test_indices: Tensor | None = None

    def setup(self, stage: str | None = None) -> None:
        """Load and split (idempotent: later calls do nothing)."""
        if self.train_dataset is not None:
            return
        images, labels = load_digits_tensors()
        parts = carve_splits(labels, {"val": self.val_fraction, "test": self.test_fraction}, self.seed, "digits")
        self.train_indices, self.val_indices, self.test_indices = parts["train"], parts["val"], parts["test"]
        self.train_dataset, self.val_dataset, self.test_dataset = (
            self._split_dataset(images, labels, parts[split]) for split in ("train", "val", "test")
        )

    def _split_dataset(self, images: Tensor, labels: Tensor, idx: Tensor) -> IndexedDataset:
        return IndexedDataset(UpsampledDigits(images[idx], labels[idx], self.image_size, self.interpolation))
