"""Digits DataModule and the shared helpers: range, split, stratification, seeded order, indices, DDP sharding."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from sklearn.datasets import load_digits
from torch.utils.data import RandomSampler

import src.data.common as common
from src.data import DigitsDataModule, IndexedDataset, SeededRandomSampler, stratified_split
from tests._lightning import quiet_trainer


@pytest.fixture(scope="module")
def digits() -> DigitsDataModule:
    dm = DigitsDataModule(image_size=32, batch_size=100, seed=0)
    dm.setup("fit")
    return dm


def test_batches_are_pixel_space_images_with_indices(digits):
    x, y, index = next(iter(digits.train_dataloader()))
    assert x.shape == (100, 3, 32, 32) and x.dtype == torch.float32
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0 and float(x.max()) > 0.9
    assert y.dtype == torch.int64 and index.dtype == torch.int64
    assert torch.equal(x[:, 0], x[:, 2])  # gray -> RGB
    assert digits.num_classes == 10 and digits.class_names[3] == "3" and digits.image_size == 32


def test_item_index_and_image_match_the_upsampled_digit(digits):
    raw = load_digits()
    for split, dataset in (("train", digits.train_dataset), ("val", digits.val_dataset)):
        positions = digits.train_indices if split == "train" else digits.val_indices
        for i in (0, 7, len(dataset) - 1):
            x, y, index = dataset[i]
            source = int(positions[i])
            gray = torch.tensor(raw.images[source], dtype=torch.float32)[None, None] / 16.0
            expected = F.interpolate(gray, size=(32, 32), mode="bilinear", align_corners=False)[0].expand(3, -1, -1)
            assert index == i and y == int(raw.target[source])
            torch.testing.assert_close(x, expected, rtol=0, atol=1e-6)


def test_split_is_fixed_by_seed_disjoint_and_complete(digits):
    again = DigitsDataModule(image_size=32, seed=0)
    again.setup()
    other = DigitsDataModule(image_size=32, seed=1)
    other.setup()
    for split in ("train", "val", "test"):
        assert torch.equal(getattr(again, f"{split}_indices"), getattr(digits, f"{split}_indices"))
        assert not torch.equal(getattr(other, f"{split}_indices"), getattr(digits, f"{split}_indices"))
    every = torch.cat([digits.train_indices, digits.val_indices, digits.test_indices])
    assert torch.equal(every.sort().values, torch.arange(1797))  # disjoint and complete
    # 0.2 * 1797 = 359.4 each: largest remainder gives one of them 360
    assert sorted([len(digits.val_indices), len(digits.test_indices)]) == [359, 360]
    train_before = digits.train_dataset
    digits.setup("test")  # idempotent
    assert digits.train_dataset is train_before


def test_split_is_stratified(digits):
    labels = load_digits().target
    for positions, fraction in ((digits.train_indices, 0.6), (digits.val_indices, 0.2), (digits.test_indices, 0.2)):
        counts = np.bincount(labels[positions.numpy()], minlength=10)
        expected = fraction * np.bincount(labels, minlength=10)
        assert (counts > 0).all() and np.abs(counts - expected).max() <= 2


def test_stratified_split_general():
    labels = np.repeat(np.arange(3), [50, 31, 19])
    parts = stratified_split(labels, (0.5, 0.3, 0.2), seed=4)
    assert [len(p) for p in parts] == [50, 30, 20]
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(100))
    for part, fraction in zip(parts, (0.5, 0.3, 0.2)):
        counts = np.bincount(labels[part.numpy()], minlength=3)
        assert np.abs(counts - fraction * np.array([50, 31, 19])).max() < 2
    for bad in ((0.5, 0.6), (1.2, -0.2), ()):
        with pytest.raises(ValueError):
            stratified_split(labels, bad, seed=0)


def _epoch_order(dm: DigitsDataModule, epoch: int) -> list[int]:
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(epoch)
    return torch.cat([index for _, _, index in loader]).tolist()


def test_training_order_depends_only_on_seed_and_epoch():
    a = DigitsDataModule(image_size=8, batch_size=256, seed=5)
    b = DigitsDataModule(image_size=8, batch_size=256, seed=5)
    assert isinstance(a.train_dataloader().sampler, SeededRandomSampler)
    first = _epoch_order(a, 3)
    assert first == _epoch_order(b, 3)  # two fresh loaders
    assert first == _epoch_order(a, 3)  # iterating again does not advance anything
    assert sorted(first) == list(range(len(a.train_dataset)))
    assert first != _epoch_order(a, 4)
    assert first != _epoch_order(DigitsDataModule(image_size=8, batch_size=256, seed=6), 3)
    assert list(SeededRandomSampler(10, seed=0)) != list(SeededRandomSampler(10, seed=1))


def test_eval_loaders_are_sequential(digits):
    order = torch.cat([index for _, _, index in digits.val_dataloader()]).tolist()
    assert order == list(range(len(digits.val_dataset)))


def test_unrepeated_distributed_sampler_shards_without_duplicates(digits):
    n = len(digits.val_dataset)
    shards = [
        list(UnrepeatedDistributedSampler(digits.val_dataset, num_replicas=2, rank=rank, shuffle=False))
        for rank in (0, 1)
    ]
    assert len(shards[0]) + len(shards[1]) == n and sorted(shards[0] + shards[1]) == list(range(n))


def test_loaders_under_simulated_ddp(monkeypatch, digits):
    """make_loader decides at call time: eval -> UnrepeatedDistributedSampler; train -> a shuffled loader that
    Lightning re-wraps with DistributedSampler (a custom sampler would lose set_epoch under DDP)."""
    monkeypatch.setattr(common, "distributed_world", lambda: (2, 1))
    val = digits.val_dataloader()
    assert isinstance(val.sampler, UnrepeatedDistributedSampler) and val.sampler.rank == 1
    assert torch.cat([index for _, _, index in val]).tolist() == list(range(1, len(digits.val_dataset), 2))
    assert isinstance(digits.train_dataloader().sampler, RandomSampler)


class _Recorder(L.LightningModule):
    """Records the indices seen in each training epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(3 * 8 * 8, 10)
        self.seen: dict[int, list[int]] = {}

    def training_step(self, batch, batch_idx):
        x, y, index = batch
        self.seen.setdefault(self.current_epoch, []).extend(index.tolist())
        return F.cross_entropy(self.head(x.flatten(1)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(tmp_path, max_epochs: int) -> L.Trainer:
    return quiet_trainer(max_epochs=max_epochs, devices=1, default_root_dir=tmp_path, limit_val_batches=0)


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`")
def test_lightning_sets_the_epoch_and_resume_reproduces_the_order(tmp_path):
    threads = torch.get_num_threads()  # a tiny model: one intra-op thread (two are slow on a busy 2-core machine)
    torch.set_num_threads(1)
    try:
        _fit_and_resume(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _fit_and_resume(tmp_path) -> None:
    dm = DigitsDataModule(image_size=8, batch_size=512, seed=2)
    dm.setup()
    expected = {}
    for epoch in range(3):
        sampler = SeededRandomSampler(len(dm.train_dataset), seed=2)
        sampler.set_epoch(epoch)
        expected[epoch] = list(sampler)
    model = _Recorder()
    trainer = _trainer(tmp_path, 2)
    trainer.fit(model, datamodule=dm)
    assert model.seen == {0: expected[0], 1: expected[1]}
    ckpt = tmp_path / "after2.ckpt"
    trainer.save_checkpoint(ckpt)
    resumed = _Recorder()  # a fresh process would build a fresh DataModule and model
    fresh = DigitsDataModule(image_size=8, batch_size=512, seed=2)
    _trainer(tmp_path, 3).fit(resumed, datamodule=fresh, ckpt_path=ckpt)
    assert resumed.seen == {2: expected[2]}


def test_indexed_dataset_wraps_any_pair_dataset():
    base = [(torch.zeros(2), 1), (torch.ones(2), 0)]
    dataset = IndexedDataset(base)
    assert len(dataset) == 2 and dataset[1][1:] == (0, 1)


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        DigitsDataModule(val_fraction=1.0)
    with pytest.raises(ValueError):
        DigitsDataModule(interpolation="lanczos")


def test_precomputed_and_lazy_upsampling_agree(monkeypatch) -> None:
    from src.data.digits import UpsampledDigits, load_digits_tensors

    images, labels = load_digits_tensors()
    eager = UpsampledDigits(images[:40], labels[:40], 24)
    assert eager.upsampled is not None
    monkeypatch.setattr(UpsampledDigits, "PRECOMPUTE_MAX_SIZE", 0)
    lazy = UpsampledDigits(images[:40], labels[:40], 24)
    assert lazy.upsampled is None
    for i in (0, 17, 39):
        x_e, y_e = eager[i]
        x_l, y_l = lazy[i]
        assert y_e == y_l and x_e.shape == x_l.shape == (3, 24, 24)
        torch.testing.assert_close(x_e, x_l, rtol=0, atol=1e-6)
