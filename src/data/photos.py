"""Offline real photos (``src.images.photos``: scikit-image, scikit-learn, matplotlib) cut into random square crops:
unlabeled fine-tuning and probe images for the perturbation-robustness work.

Sources, all bundled with installed packages (no download): scikit-image ``skimage.data`` photographs, scikit-learn's
``load_sample_images`` (china, flower) and matplotlib's ``grace_hopper.jpg``. Gray photos are repeated to RGB.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from ..images.photos import PHOTO_NAMES, load_photo, random_crops
from ..utils.checks import check_int
from ..utils.numerics import mix_seed
from .common import IndexedDataset, SplitsDataModule

__all__ = ["PHOTO_NAMES", "PhotosDataModule", "load_photo", "random_crops"]


class PhotosDataModule(SplitsDataModule):
    """Random square crops of bundled real photos; batches ``(x, y, index)`` with ``y`` the source photo's index in
    ``photos`` (not a class label: the fine-tuning is unsupervised).

    Three disjoint sets of photos: validation crops come from ``val_photos`` only, test crops from ``test_photos``
    only (held out: only the test stage sees them), training crops from the other photos, so utility is measured
    on unseen photos. Each split's crops are a pure function of ``(seed, split)`` (computed once in ``setup``).
    """

    def __init__(
        self,
        image_size: int = 64,
        num_train: int = 256,
        num_val: int = 64,
        num_test: int = 64,
        batch_size: int = 32,
        photos: Sequence[str] | None = None,
        val_photos: Sequence[str] = ("chelsea", "coffee", "china"),
        test_photos: Sequence[str] = ("astronaut", "rocket"),
        min_scale: float = 0.25,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        photos = list(PHOTO_NAMES if photos is None else photos)
        unknown = sorted(set(photos) - set(PHOTO_NAMES))
        if unknown:
            raise ValueError(f"unknown photos {unknown}; known: {', '.join(PHOTO_NAMES)}")
        val, test = list(val_photos), list(test_photos)
        for key, names in (("val_photos", val), ("test_photos", test)):
            if not names or not set(names) <= set(photos):
                raise ValueError(
                    f"{key} must be a non-empty subset of photos; {sorted(set(names) - set(photos)) or 'none'} are not "
                    f"in photos ({', '.join(photos)})"
                )
        if set(val) & set(test):
            raise ValueError(f"photos {sorted(set(val) & set(test))} are in both val_photos and test_photos")
        if not set(photos) - set(val) - set(test):
            raise ValueError("every photo is a validation or test photo: leave at least one for training")
        image_size = check_int(image_size, "data.image_size", 16, meaning="pixels per side")
        num_train, num_val, num_test = (
            check_int(v, f"data.{k}", 1, meaning="crops") for k, v in
            (("num_train", num_train), ("num_val", num_val), ("num_test", num_test))
        )  # fmt: skip
        if not 0.0 < float(min_scale) <= 1.0:
            raise ValueError(f"min_scale must be in (0, 1], got {min_scale}")
        self.photos, self.val_photos, self.test_photos = photos, val, test
        self.image_size, self.num_train, self.num_val, self.num_test = image_size, num_train, num_val, num_test
        self.min_scale = float(min_scale)
        self.batch_size = batch_size  # checked by the property (1.5 refused, not truncated)
        self.seed = check_int(seed, "data.seed", fix="set seed=<integer> (data.seed follows it)")
        self.num_workers = num_workers

    def setup(self, stage: str | None = None) -> None:
        """Load the photos and cut the crops (idempotent)."""
        if self.train_dataset is not None:
            return
        held_out = set(self.val_photos) | set(self.test_photos)
        splits = {}
        for k, (split, names, n) in enumerate(
            (
                ("train", [p for p in self.photos if p not in held_out], self.num_train),
                ("val", self.val_photos, self.num_val),
                ("test", self.test_photos, self.num_test),
            )
        ):
            g = torch.Generator().manual_seed(mix_seed(self.seed, k))
            imgs = [load_photo(p) for p in names]
            x, src = random_crops(imgs, n, self.image_size, self.min_scale, g)
            label = torch.tensor([self.photos.index(names[int(i)]) for i in src], dtype=torch.long)
            splits[split] = IndexedDataset(TensorDataset(x, label))
        self.train_dataset, self.val_dataset, self.test_dataset = splits["train"], splits["val"], splits["test"]

    def probe_images(self, split: str = "val") -> Tensor:
        """All images of a split as one tensor (N, 3, S, S) (e.g. a fixed probe set for a callback)."""
        self.setup()
        ds = getattr(self, f"{split}_dataset")
        return ds.base.tensors[0]
