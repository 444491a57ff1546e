"""DownstreamProbeCallback (linear probe + weighted k-NN on frozen features, the labelled reference of the monitors):
the k-NN rule against a brute-force transcription, the callback against a direct computation, the same values in 1
and 2 gloo processes, and its errors."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from src.callbacks import DownstreamProbeCallback
from src.divergence_radius.downstream import fit_linear_probe, knn_predict
from src.features import FeatureExtractor
from tests._lightning import quiet_trainer
from tests._multiprocess import run_in_processes


def _knn_brute(train_z, train_y, test_z, k, temperature):
    """Eq. 7 of Wu et al. 2018 as a loop: cosine similarities, the k largest, exp(s/T) votes, argmax."""
    out = []
    a = [v / v.norm() for v in train_z.double()]
    for q in test_z.double():
        q = q / q.norm()
        sims = sorted(((float(q @ v), i) for i, v in enumerate(a)), key=lambda t: -t[0])[:k]
        votes: dict[int, float] = {}
        for s, i in sims:
            votes[int(train_y[i])] = votes.get(int(train_y[i]), 0.0) + float(torch.tensor(s / temperature).exp())
        best = max(votes.values())
        out.append(min(c for c, v in votes.items() if v == best))
    return torch.tensor(out)


def test_knn_predict_is_the_weighted_vote() -> None:
    g = torch.Generator().manual_seed(0)
    train_z, test_z = torch.randn(40, 5, generator=g), torch.randn(17, 5, generator=g)
    train_y = torch.randint(0, 3, (40,), generator=g)
    for k, t in ((1, 0.07), (5, 0.07), (20, 1.0), (100, 0.5)):  # k > N uses all 40
        got = knn_predict(train_z, train_y, test_z, k=k, temperature=t, chunk=4)
        assert torch.equal(got, _knn_brute(train_z, train_y, test_z, min(k, 40), t))
    # k = 1 on the training points themselves returns their own labels (each is its own nearest neighbour)
    assert torch.equal(knn_predict(train_z, train_y, train_z, k=1), train_y)
    with pytest.raises(ValueError, match="k must be >= 1"):
        knn_predict(train_z, train_y, test_z, k=0)


class _Splits(L.LightningDataModule):
    """Three labelled splits of 2-class images whose class shows in the mean brightness."""

    def __init__(self, n: int = 24, shift: float = 0.0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        y = torch.arange(n) % 2
        x = (0.3 + 0.4 * y.view(-1, 1, 1, 1) + 0.1 * torch.rand(n, 3, 8, 8, generator=g)).clamp(0, 1)
        x = (x * 256).round() / 256  # on the 1/256 grid: x - 0.25 + 0.25 == x exactly (no tolerance to derive)
        self.train_dataset = TensorDataset(x - shift, y)
        self.test_dataset = TensorDataset(x.flip(0) - shift, y.flip(0))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_dataset, batch_size=8)


class _Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def training_step(self, batch, _):
        return self.backbone(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _expected(net: _Net, dm: _Splits, shift: float = 0.0) -> dict[str, float]:
    net.backbone.eval()
    (xf, yf), (xe, ye) = dm.train_dataset.tensors, dm.test_dataset.tensors
    extract = FeatureExtractor(net.backbone)  # the same engine (channels_last for a conv net) as the callback's
    zf, ze = extract(xf).double(), extract(xe).double()
    head = fit_linear_probe(zf, yf, C=0.1)
    return {
        "linear_acc": float((head(ze.float()).argmax(1) == ye).double().mean()),
        "knn_acc": float((knn_predict(zf, yf, ze, k=20, temperature=0.07) == ye).double().mean()),
    }


def test_logs_the_accuracies_of_the_trained_backbone() -> None:
    dm, net = _Splits(), _Net()
    cb = DownstreamProbeCallback(at_train_start=True, progress=False)
    trainer = quiet_trainer(max_epochs=1, callbacks=[cb])
    trainer.fit(net, datamodule=dm)
    assert [e for e, _ in cb.history] == [-1, 0]
    assert {"val/downstream/linear_acc", "val/downstream/knn_acc"} <= set(trainer.callback_metrics)
    # the same features through the same engine: the probes see the same numbers, so the accuracies are equal
    # (k-NN over nearly tied cosines of a small ReLU net would flip on any rounding difference)
    assert cb.last == _expected(net, dm)


def test_normalised_splits_give_the_same_accuracies() -> None:
    """The input contract: splits stored as x - 0.25 with normalize=(0.25, 1) give what an explicit feature function
    normalising the pixel splits gives (the backbone gets (pixels - 0.25) / 1 = the stored images, bit for bit:
    dyadic values)."""
    net = _Net()
    explicit = DownstreamProbeCallback(progress=False, feature_fn=lambda m, x: m.backbone(x - 0.25))
    plain = explicit.compute(SimpleNamespace(datamodule=_Splits()), net)
    shifted = DownstreamProbeCallback(progress=False, normalize=(0.25, 1.0))
    assert shifted.compute(SimpleNamespace(datamodule=_Splits(shift=0.25)), net) == plain


def test_bad_arguments_and_missing_splits_are_refused_early() -> None:
    with pytest.raises(ValueError, match="fit_split must be one of"):
        DownstreamProbeCallback(fit_split="training")
    with pytest.raises(ValueError, match="score on held-out images"):
        DownstreamProbeCallback(fit_split="test", eval_split="test")
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        DownstreamProbeCallback(k=0)
    net = _Net()
    trainer = quiet_trainer(max_epochs=1, callbacks=[DownstreamProbeCallback(progress=False)])
    with pytest.raises(ValueError, match="the data module has no train_dataset"):
        trainer.fit(net, DataLoader(TensorDataset(torch.rand(8, 3, 8, 8)), batch_size=4))
    assert net.trainer.global_step == 0


class _LazySplits(_Splits):
    """A labelled data module that builds its splits in setup() (as RepBench's and most users' do)."""

    def __init__(self) -> None:
        super().__init__()
        self.train_dataset, self.test_dataset = None, None
        self.stages: list[str] = []

    def setup(self, stage: str) -> None:
        self.stages.append(stage)
        fresh = _Splits()
        self.train_dataset, self.test_dataset = fresh.train_dataset, fresh.test_dataset


def test_a_probe_data_module_of_its_own_serves_unlabelled_training() -> None:
    """data=: the probes read a labelled module of their own (set up once, before training) while the run trains on
    unlabelled images; the values equal the direct computation on that module's splits."""
    net, probe_set = _Net(), _LazySplits()
    cb = DownstreamProbeCallback(progress=False, data=probe_set)
    trainer = quiet_trainer(max_epochs=1, callbacks=[cb])
    trainer.fit(net, DataLoader(TensorDataset(torch.rand(8, 3, 8, 8)), batch_size=4))  # no labels, no data module
    assert probe_set.stages == ["fit", "test"]
    assert cb.last == _expected(net, _Splits())
    assert "DownstreamProbeCallback" in cb.state_key and "'data': '_LazySplits'" in cb.state_key
    with pytest.raises(TypeError, match="data must be a LightningDataModule"):
        DownstreamProbeCallback(data=[1, 2])
    with pytest.raises(ValueError, match=r"the probe data module \(data=\) has no val_dataset"):
        DownstreamProbeCallback(progress=False, data=_Splits(), fit_split="val").compute(SimpleNamespace(), net)


def _compute_on_rank(rank: int, world_size: int) -> dict[str, float]:
    cb = DownstreamProbeCallback(progress=False)
    return cb.compute(SimpleNamespace(datamodule=_Splits(), global_rank=rank, world_size=world_size), _Net())


def test_two_processes_give_the_one_process_values() -> None:
    one = _compute_on_rank(0, 1)
    for res in run_in_processes(_compute_on_rank, 2):
        assert res == one  # the features are summed into one exact table: the probes see the same numbers
