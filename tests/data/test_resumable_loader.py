"""The training loader resumes mid-epoch: the sampler starts at the position the trainer reports, and bad loader
settings are refused at construction."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

from src.data import DigitsDataModule, GaussianTaskDataModule, ResumableDataLoader, SeededRandomSampler, make_loader
from src.data.common import check_loader_args, fit_position


def test_sampler_position_gives_the_suffix_of_that_epochs_permutation() -> None:
    full = SeededRandomSampler(50, seed=3)
    full.set_epoch(2)
    order = list(full)
    resumed = SeededRandomSampler(50, seed=3, position=lambda: (2, 17))
    assert list(resumed) == order[17:]
    assert resumed.epoch == 2 and len(resumed) == 50
    # no position (outside fit): plain (seed, epoch) order
    assert list(SeededRandomSampler(50, seed=3, position=lambda: None)) == full.permutation(0)


def test_loader_skips_the_batches_already_trained() -> None:
    data = TensorDataset(torch.arange(37.0), torch.arange(37))
    where = {"pos": (1, 0)}
    loader = make_loader(data, batch_size=5, shuffle=True, seed=0, position=lambda: where["pos"])
    assert isinstance(loader, ResumableDataLoader)
    full = [b[1].tolist() for b in loader]
    assert len(full) == 8 and sorted(sum(full, [])) == list(range(37))
    where["pos"] = (1, 3)  # three batches of epoch 1 were trained before the interruption
    assert [b[1].tolist() for b in loader] == full[3:]
    assert loader.state_dict() == {"epoch": 1, "batches": 3, "batch_size": 5, "seed": 0}
    with pytest.warns(UserWarning, match="another data seed or batch size"):
        loader.load_state_dict({"epoch": 1, "batches": 3, "batch_size": 4, "seed": 0})


def _trainer(ready: int, started: int, processed: int, batches: int, training: bool = True):
    ep = SimpleNamespace(ready=ready, started=started, processed=processed)
    bp = SimpleNamespace(current=SimpleNamespace(processed=batches))
    loop = SimpleNamespace(epoch_progress=SimpleNamespace(current=ep), epoch_loop=SimpleNamespace(batch_progress=bp))
    return SimpleNamespace(fit_loop=loop, training=training)


def test_fit_position_reads_lightnings_counters() -> None:
    assert fit_position(_trainer(2, 2, 1, 4)) == (1, 4)  # inside epoch 1, 4 batches trained
    assert fit_position(_trainer(2, 1, 1, 10)) == (1, 0)  # epoch 1 ready, not started: previous counters ignored
    assert fit_position(_trainer(2, 2, 2, 10)) == (2, 0)  # epoch 1 trained: the next one starts at 0
    assert fit_position(_trainer(2, 2, 1, 4, training=False)) is None
    assert fit_position(None) is None


@pytest.mark.parametrize("bad", [0, -3, "x", None])
def test_bad_batch_size_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        check_loader_args(bad)


@pytest.mark.parametrize("bad", [0, -3])
def test_data_modules_refuse_batch_size_below_one(bad) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        DigitsDataModule(batch_size=bad)
    with pytest.raises(ValueError, match="batch_size"):
        GaussianTaskDataModule(batch_size=bad)


def test_torchvision_module_refuses_batch_size_zero(tmp_path) -> None:
    from src.data import TorchvisionDataModule

    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1.*data\.batch_size"):
        TorchvisionDataModule(name="imagefolder", root=str(tmp_path), batch_size=0, num_classes=2)


@pytest.mark.parametrize("bad", [1.5, 0.5, True, float("nan")])
def test_fractional_batch_size_is_refused_not_truncated(bad) -> None:
    # X02: int(1.5) made data.batch_size=1.5 run with batches of 1 (the config said 1.5); 0.5 was refused as "< 1"
    with pytest.raises(TypeError, match=r"^batch_size must be an integer >= 1 .*; set data\.batch_size"):
        check_loader_args(bad)
    with pytest.raises(TypeError, match=r"data\.batch_size"):
        DigitsDataModule(batch_size=bad)
    with pytest.raises(TypeError, match=r"data\.batch_size"):
        GaussianTaskDataModule(batch_size=bad)
    with pytest.raises(TypeError, match=r"^num_workers must be an integer >= 0 .*data\.num_workers"):
        check_loader_args(4, bad)
    with pytest.raises(TypeError, match=r"^data\.seed must be an integer"):
        DigitsDataModule(seed=bad)
    # an integral value of another type is that integer
    assert check_loader_args(torch.tensor(8), 2.0) == (8, 2) and DigitsDataModule(batch_size=16.0).batch_size == 16
