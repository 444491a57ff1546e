"""In-memory cache of frozen-backbone features keyed by dataset index (standard linear probing, ε = 0)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = ["FeatureCache", "find_random_transforms"]


class FeatureCache:
    """Rows of a growable (capacity, D) tensor plus a filled mask.

    Valid only when the inputs for a given index never change (no random augmentation), which is what
    ``RobustLinearProbe`` checks at fit start (:func:`find_random_transforms`; the cache is turned off with a
    logged warning otherwise). Not saved in checkpoints: refilled lazily after a resume.
    """

    def __init__(self) -> None:
        self.features: Tensor | None = None
        self.filled: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.filled is None else int(self.filled.sum())

    def clear(self) -> None:
        self.features = self.filled = None

    def _grow(self, needed: int, dim: int, like: Tensor) -> None:
        cap = 0 if self.features is None else self.features.shape[0]
        if needed <= cap:
            return
        new_cap = max(needed, 2 * cap, 256)
        feats = like.new_zeros(new_cap, dim)
        filled = torch.zeros(new_cap, dtype=torch.bool, device=like.device)
        if self.features is not None:
            feats[:cap] = self.features
            filled[:cap] = self.filled
        self.features, self.filled = feats, filled

    def lookup(self, index: Tensor) -> tuple[Tensor | None, Tensor]:
        """(features or None, hit mask) for a batch of indices."""
        if self.filled is None:
            return None, torch.zeros_like(index, dtype=torch.bool)
        index = index.to(self.filled.device)
        in_range = index < self.filled.shape[0]
        hit = torch.zeros_like(index, dtype=torch.bool)
        hit[in_range] = self.filled[index[in_range]]
        return self.features[index.clamp(max=self.filled.shape[0] - 1)], hit

    def store(self, index: Tensor, features: Tensor) -> None:
        features = features.detach()
        index = index.to(features.device)
        self._grow(int(index.max()) + 1, features.shape[1], features)
        self.features[index] = features
        self.filled[index] = True


# class names of torchvision / timm / albumentations-style random augmentations
_RANDOM_NAME = re.compile(
    r"random|flip|jitter|augment|augmix|mixup|cutmix|erasing|elastic|trivialaugment|randaug|gaussiannoise", re.I
)
_DETERMINISTIC_TRANSFORM_NAMES = (None, "none", "center_crop", "resize", "deterministic")
_CHILD_ATTRS = ("dataset", "datasets", "base", "base_dataset", "subset", "transform", "transforms", "target_transform")


def _walk(obj: Any, seen: set[int], depth: int) -> Iterator[Any]:
    """``obj`` and what it wraps: loader -> dataset(s) -> base datasets -> transform(s) -> sub-transforms."""
    if obj is None or id(obj) in seen or depth > 8 or isinstance(obj, (str, bytes, int, float, Tensor)):
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, Mapping):
        children: list[Any] = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    else:
        children = [getattr(obj, a, None) for a in _CHILD_ATTRS]
        if isinstance(obj, nn.Module):  # torchvision v2 / timm transforms are modules
            children += list(obj.children())
    for child in children:
        yield from _walk(child, seen, depth + 1)


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a.shape != b.shape or not torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) != set(b) or any(_differs(a[k], b[k]) for k in a)
    return False


def find_random_transforms(loaders: Any, datamodule: Any = None, draws: int = 3) -> list[str]:
    """Why the images behind ``loaders`` (a DataLoader, a dataset, or a list/dict of them) may be random, or [].

    Three checks: (1) a transform whose class name says it is random (``RandomResizedCrop``, ``RandomHorizontalFlip``,
    ``ColorJitter``, ``RandAugment``, ...) anywhere in the dataset/transform tree; (2) a datamodule whose
    ``train_transform`` is not a deterministic one (e.g. ``data.train_transform=flip_crop``); (3) the first item of
    each dataset read ``draws`` times and compared (catches custom random transforms with other names).
    """
    reasons: list[str] = []
    name = getattr(datamodule, "train_transform", None)
    if isinstance(name, str) and name not in _DETERMINISTIC_TRANSFORM_NAMES:
        reasons.append(f"data.train_transform={name}")
    datasets = []
    for obj in _walk(loaders, set(), 0):
        cls = type(obj).__name__
        if callable(obj) and _RANDOM_NAME.search(cls) and not isinstance(obj, (Dataset, DataLoader, Sampler)):
            reasons.append(f"transform {cls}")
        if isinstance(obj, Dataset):
            datasets.append(obj)
    for ds in datasets[:1]:  # the outermost dataset (what the loader reads)
        try:
            if len(ds) == 0:  # type: ignore[arg-type]
                continue
            first = ds[0]
            if any(_differs(first, ds[0]) for _ in range(draws - 1)):
                reasons.append(f"{type(ds).__name__}[0] differs between two reads")
        except Exception:  # an unreadable or unsized dataset says nothing either way
            continue
    return list(dict.fromkeys(reasons))
