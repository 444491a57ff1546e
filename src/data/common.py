"""Shared data helpers: indexed datasets, seeded stratified splits, and loaders that are reproducible and DDP-correct.

Batches in RepBench are ``(x, y, index)``: ``index`` (int64) is the position of the sample in its split's dataset,
which the probe's feature cache keys on.

Sampling policy (``make_loader``):

* training, single process: :class:`SeededRandomSampler`, whose order is a pure function of ``(seed, epoch)``, in a
  :class:`ResumableDataLoader`. Lightning calls ``set_epoch`` on every sampler that has it at the start of each epoch
  (``_set_sampler_epoch`` in the fit loop), so a run resumed from an end-of-epoch checkpoint sees exactly the order of
  the uninterrupted run. Mid-epoch checkpoints (a crash, SIGTERM, Ctrl-C) are exact too: Lightning saves the loader's
  ``state_dict()`` -- (epoch, batches already trained, read off the trainer's progress counters) -- in every
  checkpoint and hands it back to ``load_state_dict`` when it restarts mid-epoch; the sampler then skips the batches
  already trained, so the resumed run trains on the same batches in the same order as the uninterrupted one.
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

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from ..utils.checks import check_int
from ..utils.numerics import mix_seed

__all__ = [
    "IndexedDataset",
    "ResumableDataLoader",
    "SeededRandomSampler",
    "check_loader_args",
    "distributed_world",
    "fit_position",
    "make_loader",
    "carve_splits",
    "check_fractions",
    "stratified_split",
]


class IndexedDataset(Dataset):
    """Wrap any ``(x, y)`` dataset so that item ``i`` is ``(x, y, i)``."""

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int):
        x, y = self.base[index]
        return x, y, index


class SeededRandomSampler(Sampler[int]):
    """A random permutation of ``range(n)`` that depends only on ``(seed, epoch)``; call ``set_epoch`` each epoch.

    ``position``: optional ``() -> (epoch, samples already consumed) | None``, asked at the start of every iteration;
    when it answers, the iteration is that epoch's permutation from that offset (a mid-epoch resume). ``len()`` stays
    ``n`` (Lightning counts the batches already trained itself).
    """

    def __init__(self, n: int, seed: int = 0, position: Callable[[], tuple[int, int] | None] | None = None) -> None:
        self.n = check_int(n, "n", 0, meaning="samples to order")
        self.seed = check_int(seed, "seed")
        self.epoch = 0
        self.position = position

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def permutation(self, epoch: int | None = None) -> list[int]:
        """The full order of ``epoch`` (default: the current one)."""
        g = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch if epoch is None else epoch))
        return torch.randperm(self.n, generator=g).tolist()

    def __iter__(self) -> Iterator[int]:
        start = 0
        pos = self.position() if self.position is not None else None
        if pos is not None:
            self.epoch, start = int(pos[0]), int(pos[1])
        return iter(self.permutation()[start:])


def fit_position(trainer: Any) -> tuple[int, int] | None:
    """``(epoch, batches of that epoch already trained)`` of a Lightning trainer's fit loop; None outside ``fit``.

    Read off Lightning's progress counters, which a checkpoint restores: inside an epoch (its
    ``on_train_epoch_start`` hooks have run) it is ``(that epoch, batches whose training step finished)``; between
    epochs ``(next epoch, 0)``. A checkpoint written by a crash inside a training step therefore resumes at that
    batch, one written at the end of a batch (``on_train_batch_end``, SIGTERM) at the next one. Valid both before
    and after Lightning's restart bookkeeping (``reset_on_restart`` sets ``processed`` to ``completed``, which
    equals the raw ``processed`` count once a batch-end restart has been accounted for).
    """
    if trainer is None or not getattr(trainer, "training", False):
        return None
    loop = trainer.fit_loop
    epochs = loop.epoch_progress.current
    if epochs.started > epochs.processed:  # inside epoch `processed`
        return int(epochs.processed), int(loop.epoch_loop.batch_progress.current.processed)
    return int(epochs.processed), 0


class ResumableDataLoader(DataLoader):
    """A DataLoader over a :class:`SeededRandomSampler` that resumes exactly where a checkpoint left off.

    ``position``: ``() -> (epoch, batches already trained) | None`` (see :func:`fit_position`), asked by the sampler
    whenever an epoch's iteration starts, so a resumed run skips the batches the interrupted run already trained.
    (Lightning's own loader-state mechanism, ``state_dict``/``load_state_dict``, is not enough: when
    ``configure_optimizers`` asks for ``trainer.estimated_stepping_batches`` the train loader is built before the
    checkpoint is restored and the saved state is never loaded.) ``state_dict`` reports the position for the
    record; ``load_state_dict`` only checks that seed and batch size did not change.
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        sampler: SeededRandomSampler,
        position: Callable[[], tuple[int, int] | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, sampler=sampler, **kwargs)
        self.position = position
        if position is not None:
            sampler.position = self._sample_position

    def _sample_position(self) -> tuple[int, int] | None:
        pos = self.position() if self.position is not None else None
        return None if pos is None else (pos[0], pos[1] * int(self.batch_size or 1))

    def state_dict(self) -> dict[str, int]:
        pos = self.position() if self.position is not None else None
        if pos is None:
            return {}
        sampler: SeededRandomSampler = self.sampler  # type: ignore[assignment]
        return {"epoch": pos[0], "batches": pos[1], "batch_size": int(self.batch_size or 1), "seed": sampler.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        sampler: SeededRandomSampler = self.sampler  # type: ignore[assignment]
        if state and (int(state["seed"]) != sampler.seed or int(state["batch_size"]) != int(self.batch_size or 1)):
            warnings.warn(
                f"resuming mid-epoch with another data seed or batch size than the checkpoint's (seed "
                f"{state['seed']} -> {sampler.seed}, batch_size {state['batch_size']} -> {self.batch_size}): the "
                "rest of the epoch is not the data the interrupted run would have seen",
                stacklevel=2,
            )


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
    g = torch.Generator().manual_seed(mix_seed(seed, 0x5EED))
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


def check_fractions(fractions: Mapping[str, float]) -> float:
    """The training fraction left by held-out ``fractions`` ({"val": ..., "test": ...}), or a ValueError naming the
    config key (``data.<split>_fraction``) to fix: each must lie in (0, 1) and together they must stay below 1."""
    for key, value in fractions.items():
        if not 0.0 < float(value) < 1.0:
            raise ValueError(f"{key}_fraction must be in (0, 1), got {value}; set data.{key}_fraction to e.g. 0.2")
    total = sum(float(v) for v in fractions.values())
    if total >= 1.0:
        keys = " + ".join(f"{k}_fraction" for k in fractions)
        raise ValueError(
            f"{keys} = {total} >= 1 leaves nothing to train on; lower "
            + " or ".join(f"data.{k}_fraction" for k in fractions)
        )
    return 1.0 - total


def carve_splits(
    labels: Sequence[int] | np.ndarray | Tensor, fractions: Mapping[str, float], seed: int, name: str
) -> dict[str, Tensor]:
    """Disjoint, stratified index tensors of ``range(len(labels))`` (:func:`stratified_split`, fixed by ``seed``):
    ``fractions`` maps held-out split names ("val", "test") to their fractions (:func:`check_fractions`); "train"
    gets the rest. A ValueError names the fraction to change when a split would be empty."""
    train = check_fractions(fractions)
    names = ["train", *fractions]
    parts = dict(zip(names, stratified_split(labels, [train, *(float(f) for f in fractions.values())], seed)))
    for key, part in parts.items():
        if len(part) == 0:
            fix = (
                f"raise data.{key}_fraction"
                if key != "train"
                else "lower " + " or ".join(f"data.{k}_fraction" for k in fractions)
            )
            shares = ", ".join(f"{k} {float(f):g}" for k, f in fractions.items())
            raise ValueError(f"{name}: the {key} split of {len(labels)} samples is empty ({shares}); {fix}")
    return parts


def distributed_world() -> tuple[int, int]:
    """``(world_size, rank)`` of the initialised default process group, ``(1, 0)`` without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


def check_loader_args(batch_size: object, num_workers: object = 0) -> tuple[int, int]:
    """``batch_size`` >= 1 and ``num_workers`` >= 0 as ints (:func:`~src.utils.checks.check_int`: 1.5 is refused,
    not truncated to 1), else a TypeError (not an integer) or ValueError (out of range) naming the config key to fix."""
    bs = check_int(
        batch_size, "batch_size", 1, meaning="samples per batch", fix="set data.batch_size to a positive integer"
    )
    nw = check_int(
        num_workers, "num_workers", 0, meaning="loader processes", fix="set data.num_workers=0 to load in-process"
    )
    return bs, nw


def make_loader(
    dataset: Dataset,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    num_workers: int = 0,
    drop_last: bool = False,
    position: Callable[[], tuple[int, int] | None] | None = None,
) -> DataLoader:
    """A DataLoader following the sampling policy of this module (see the module docstring).

    ``shuffle=True``: training order from :class:`SeededRandomSampler` in a :class:`ResumableDataLoader` (single
    process; ``position`` reports the trainer's progress for mid-epoch checkpoints) or Lightning's
    ``DistributedSampler`` (DDP). ``shuffle=False``: sequential, sharded without duplicates under DDP.
    """
    batch_size, num_workers = check_loader_args(batch_size, num_workers)
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
        sampler = SeededRandomSampler(len(dataset), seed)  # type: ignore[arg-type]
        return ResumableDataLoader(dataset, sampler=sampler, position=position, **kwargs)
    if world_size > 1:
        from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

        sampler = UnrepeatedDistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
        return DataLoader(dataset, sampler=sampler, **kwargs)
    return DataLoader(dataset, shuffle=False, **kwargs)


def check_num_classes(expected: int | None, actual: int, name: str) -> None:
    """The config's ``data.num_classes`` (feeds ``model.num_classes``) must match the data."""
    if expected is not None and check_int(expected, "data.num_classes", 1) != int(actual):
        raise ValueError(f"{name} has {actual} classes but data.num_classes={expected}; set data.num_classes={actual}")


class SplitsDataModule(L.LightningDataModule):
    """Base for RepBench data modules: subclasses fill ``train_dataset``/``val_dataset``/``test_dataset`` in
    ``setup`` and set ``batch_size``, ``seed``, ``num_workers``; the loaders follow :func:`make_loader`'s policy
    (seeded, resumable training order; exact, duplicate-free evaluation shards under DDP)."""

    train_dataset: Dataset | None = None
    val_dataset: Dataset | None = None
    test_dataset: Dataset | None = None
    seed: int = 0
    _batch_size: int = 64
    _num_workers: int = 0

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self._batch_size = check_loader_args(value)[0]  # batch_size=0 fails here, at construction

    @property
    def num_workers(self) -> int:
        return self._num_workers

    @num_workers.setter
    def num_workers(self, value: int) -> None:
        self._num_workers = check_loader_args(1, value)[1]

    def _fit_position(self) -> tuple[int, int] | None:
        trainer = getattr(self, "trainer", None)
        return fit_position(trainer) if trainer is not None else None

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        self.setup()
        dataset = getattr(self, f"{split}_dataset")
        position = self._fit_position if shuffle else None
        return make_loader(dataset, self.batch_size, shuffle, self.seed, self.num_workers, position=position)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)
