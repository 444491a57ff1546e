"""Depth data modules: images with a ground-truth depth map each, batches ``(x, depth, index)`` with ``x`` (B, 3, S, S)
in [0, 1] and ``depth`` (B, 1, S, S) in metres (0 where there is no ground truth). The DivergenceRadius depth task
(Liu et al., arXiv:2604.14973, App. D–F) and its head (``python -m src.train experiment=depth_synthetic``):

* :class:`SyntheticDepthDataModule` — procedurally generated scenes with exact depth
  (:mod:`src.images.depth_scenes`), offline, seconds to make: the default;
* :class:`~src.data.nyu_depth.NYUDepthV2DataModule` — NYU-Depth V2's labelled set, the paper's data.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import Dataset, TensorDataset

from ..images.depth_scenes import depth_scenes
from ..utils.checks import check_int
from ..utils.numerics import mix_seed
from .common import IndexedDataset, SplitsDataModule

__all__ = ["DepthTensors", "SyntheticDepthDataModule"]


class DepthTensors(Dataset):
    """(image float (3, S, S) in [0, 1], depth float (1, S, S)) pairs from stored tensors: uint8 images are divided by
    255 when an item is read (a data set of real photos keeps a quarter of the memory)."""

    def __init__(self, images: Tensor, depth: Tensor) -> None:
        if images.shape[0] != depth.shape[0] or depth.dim() != 4 or depth.shape[1] != 1:
            raise ValueError(
                f"need images (N, 3, H, W) and depth (N, 1, H, W), got {tuple(images.shape)}, {tuple(depth.shape)}"
            )
        self.images, self.depth = images, depth

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        x = self.images[index]
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x
        return x, self.depth[index]


class SyntheticDepthDataModule(SplitsDataModule):
    """Synthetic scenes with exact per-pixel depth (:func:`src.images.depth_scenes.depth_scenes`): ``num_train``,
    ``num_val`` and ``num_test`` scenes at ``image_size``, each split its own seeded stream (split k: scenes of seed
    (seed, k)), made once in ``setup`` (1.7 s for 1000 scenes of 64 px on an idle 2-core machine). Depths lie in
    (0, 9.5] m."""

    def __init__(
        self,
        image_size: int = 64,
        num_train: int = 1000,
        num_val: int = 200,
        num_test: int = 200,
        batch_size: int = 32,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.image_size = check_int(image_size, "data.image_size", 16, meaning="pixels per side")
        self.num_train, self.num_val, self.num_test = (
            check_int(v, f"data.{k}", 1, meaning="scenes") for k, v in
            (("num_train", num_train), ("num_val", num_val), ("num_test", num_test))
        )  # fmt: skip
        self.batch_size = batch_size
        self.seed = check_int(seed, "data.seed", fix="set seed=<integer> (data.seed follows it)")
        self.num_workers = num_workers

    def setup(self, stage: str | None = None) -> None:
        """Render the three splits (idempotent)."""
        if self.train_dataset is not None:
            return
        splits = {}
        for k, (split, n) in enumerate((("train", self.num_train), ("val", self.num_val), ("test", self.num_test))):
            x, depth = depth_scenes(n, self.image_size, mix_seed(self.seed, k))
            splits[split] = IndexedDataset(TensorDataset(x, depth))
        self.train_dataset, self.val_dataset, self.test_dataset = splits["train"], splits["val"], splits["test"]

    def probe_images(self, split: str = "val") -> Tensor:
        """All images of a split as one tensor (N, 3, S, S) (e.g. a fixed probe set for a callback)."""
        self.setup()
        return getattr(self, f"{split}_dataset").base.tensors[0]
