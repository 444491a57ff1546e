"""Shared data helpers: indexed datasets, seeded stratified splits, and loaders that are reproducible and DDP-correct.

Batches in RepBench are ``(x, y, index)``: ``index`` (int64) is the position of the sample in its split's dataset,
which the probe's feature cache keys on.

Sampling policy (``make_loader``):

* training, single process: :class:`SeededRandomSampler`, whose order is a pure function of ``(seed, epoch)``.
  Lightning calls ``set_epoch`` on every sampler that has it at the start of each epoch (``_set_sampler_epoch`` in the
  fit loop), so a run killed and resumed from a checkpoint sees exactly the order of the uninterrupted run.
* training under DDP: a plain ``shuffle=True`` loader, left to Lightning, which replaces its ``RandomSampler`` by
  ``DistributedSampler(shuffle=True, seed=PL_GLOBAL_SEED)`` (set by ``seed_everything``) and calls ``set_epoch`` every
  epoch -- also a function of (seed, epoch). (A custom sampler would instead be wrapped in Lightning's
  ``DistributedSamplerWrapper`` with ``shuffle=False`` and never get ``set_epoch``: the same order every epoch.)
* evaluation under DDP: :class:`~lightning.pytorch.overrides.distributed.UnrepeatedDistributedSampler`, which shards
  without padding duplicates, so metrics cover exactly the dataset (ranks may differ by one sample / one batch: sync
  metrics with torchmetrics at ``compute()``, not collectives per step). Lightning leaves ``DistributedSampler``
  subclasses alone. The choice is made when the loader is built, i.e. inside ``val_dataloader()``, which Lightning calls
  after the process group is initialised.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = ["IndexedDataset", "SeededRandomSampler", "stratified_split", "make_loader", "distributed_world"]


class IndexedDataset(Dataset):
    """Wrap any ``(x, y)`` dataset so that item ``i`` is ``(x, y, i)``."""

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int):
        x, y = self.base[index]
        return x, y, index


def _mix_seed(*values: int) -> int:
    """A well-mixed 63-bit seed from integers (so that (seed, epoch) and (seed + 1, epoch - 1) differ)."""
    entropy = [int(v) & 0xFFFFFFFFFFFFFFFF for v in values]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]) >> 1


class SeededRandomSampler(Sampler[int]):
    """A random permutation of ``range(n)`` that depends only on ``(seed, epoch)``; call ``set_epoch`` each epoch."""

    def __init__(self, n: int, seed: int = 0) -> None:
        if int(n) < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self.n = int(n)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(_mix_seed(self.seed, self.epoch))
        return iter(torch.randperm(self.n, generator=g).tolist())


def _apportion(total: int, fractions: Sequence[float]) -> np.ndarray:
    """Integer sizes summing to ``total``, proportional to ``fractions`` (largest remainder)."""
    exact = np.asarray(fractions, dtype=np.float64) * total
    sizes = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - sizes), kind="stable")
    sizes[order[: total - int(sizes.sum())]] += 1
    return sizes


def stratified_split(
    labels: Sequence[int] | np.ndarray | Tensor, fractions: Sequence[float], seed: int = 0
) -> list[Tensor]:
    """Split ``range(len(labels))`` into ``len(fractions)`` parts, stratified by label, fixed by ``seed``.

    Split sizes are exactly ``round(fraction * n)`` (largest remainder); every class is spread in proportion, within
    less than 2 samples of ``fraction * n_class`` per split (classes are laid out one after another and each position
    goes to the split furthest behind its quota). Which samples of a class go where is a seeded random permutation.
    Returns sorted int64 index tensors.
    """
    y = np.asarray(labels.cpu() if isinstance(labels, Tensor) else labels).reshape(-1)
    f = np.asarray(fractions, dtype=np.float64)
    if f.ndim != 1 or len(f) < 1 or (f < 0).any() or abs(float(f.sum()) - 1.0) > 1e-6:
        raise ValueError(f"fractions must be >= 0 and sum to 1, got {list(fractions)}")
    n = len(y)
    g = torch.Generator().manual_seed(_mix_seed(seed, 0x5EED))
    order = []
    for cls in np.unique(y):
        members = np.flatnonzero(y == cls)
        order.append(members[torch.randperm(len(members), generator=g).numpy()])
    order = np.concatenate(order) if order else np.zeros(0, dtype=np.int64)
    quota = _apportion(n, f)
    counts = np.zeros(len(f), dtype=np.int64)
    assignment = np.empty(n, dtype=np.int64)
    for position in range(n):
        behind = (position + 1) * f - counts
        behind[counts >= quota] = -np.inf  # never exceed the exact split size
        split = int(np.argmax(behind))
        assignment[position] = split
        counts[split] += 1
    return [torch.from_numpy(np.sort(order[assignment == s])).long() for s in range(len(f))]


def distributed_world() -> tuple[int, int]:
    """``(world_size, rank)`` of the initialised default process group, ``(1, 0)`` without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


def make_loader(
    dataset: Dataset,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    num_workers: int = 0,
    drop_last: bool = False,
) -> DataLoader:
    """A DataLoader following the sampling policy of this module (see the module docstring).

    ``shuffle=True``: training order from :class:`SeededRandomSampler` (single process) or Lightning's
    ``DistributedSampler`` (DDP). ``shuffle=False``: sequential, sharded without duplicates under DDP.
    """
    world_size, rank = distributed_world()
    kwargs = dict(
        batch_size=int(batch_size),
        num_workers=int(num_workers),
        drop_last=drop_last,
        persistent_workers=int(num_workers) > 0,
        pin_memory=torch.cuda.is_available(),
    )
    if shuffle:
        if world_size > 1:  # Lightning injects DistributedSampler(shuffle=True, seed=PL_GLOBAL_SEED) + set_epoch
            return DataLoader(dataset, shuffle=True, **kwargs)
        return DataLoader(dataset, sampler=SeededRandomSampler(len(dataset), seed), **kwargs)  # type: ignore[arg-type]
    if world_size > 1:
        from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

        sampler = UnrepeatedDistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
        return DataLoader(dataset, sampler=sampler, **kwargs)
    return DataLoader(dataset, shuffle=False, **kwargs)


def check_num_classes(expected: int | None, actual: int, name: str) -> None:
    """The config's ``data.num_classes`` (feeds ``model.num_classes``) must match the data."""
    if expected is not None and int(expected) != int(actual):
        raise ValueError(f"{name} has {actual} classes but data.num_classes={expected}; set data.num_classes={actual}")


class SplitsDataModule(L.LightningDataModule):
    """Base for RepBench data modules: subclasses fill ``train_dataset``/``val_dataset``/``test_dataset`` in
    ``setup`` and set ``batch_size``, ``seed``, ``num_workers``; the loaders follow :func:`make_loader`'s policy
    (seeded, resumable training order; exact, duplicate-free evaluation shards under DDP)."""

    train_dataset: Dataset | None = None
    val_dataset: Dataset | None = None
    test_dataset: Dataset | None = None
    batch_size: int = 64
    seed: int = 0
    num_workers: int = 0

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        self.setup()
        return make_loader(getattr(self, f"{split}_dataset"), self.batch_size, shuffle, self.seed, self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)
