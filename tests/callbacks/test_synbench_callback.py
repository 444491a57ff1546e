"""SynBenchCallback: logs every N epochs, restores modes, skips unchanged weights, works on any module."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import SynBenchCallback
from src.callbacks.synbench_callback import callback_budget, weights_fingerprint
from src.metrics.synbench_score import scores_of
from src.synbench import SynBenchConfig, synbench
from src.utils.resources import config_dir
from tests._lightning import quiet_trainer

CONFIGS = config_dir()

BUDGET = dict(
    s_values=(0.5, 1.0, 2.0, 3.0),
    n_train=200,
    n_test=100,
    eps=(0.0, 0.3),
    a_T=(0.6,),
    chunk_size=50,
    normalization="none",
)


class _Net(L.LightningModule):
    """A tiny trainable encoder exposed as ``self.backbone`` (with a BatchNorm to catch mode changes)."""

    def __init__(self, frozen: bool = False) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()
        )
        self.head = nn.Linear(16, 2)
        self.frozen = frozen
        if frozen:
            self.backbone.requires_grad_(False).eval()

    def train(self, mode: bool = True):
        super().train(mode)
        if self.frozen:  # frozen means frozen: no BatchNorm statistics drift either
            self.backbone.eval()
        return self

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.backbone(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.rand(32, 3, 8, 8, generator=g), torch.randint(0, 2, (32,), generator=g)), batch_size=16
    )


def _fit(model, cb, epochs=3, logger=False):
    trainer = quiet_trainer(max_epochs=epochs, logger=logger, callbacks=[cb], log_every_n_steps=1)
    trainer.fit(model, _loader())
    return trainer


def test_logs_every_n_epochs_and_after_the_last(tmp_path) -> None:
    cb = SynBenchCallback(every_n_epochs=2, input_size=8, config=BUDGET, skip_unchanged=False)
    from lightning.pytorch.loggers import TensorBoardLogger

    trainer = _fit(_Net(), cb, epochs=3, logger=TensorBoardLogger(tmp_path, name="", version=""))
    assert [e for e, _ in cb.history] == [1, 2] and cb.computations == 2
    m = trainer.callback_metrics
    assert {
        "val/synbench/score",
        "val/synbench/score_eps_0",
        "val/synbench/score_eps_0p3",
        "val/synbench/best_eps",
    } <= set(m)
    from src.utils.tensorboard import read_scalars

    assert len(read_scalars(tmp_path)["val/synbench/score"]) == 2
    assert list(tmp_path.rglob("events.out.tfevents.*"))


def test_result_equals_the_functional_runner_on_the_same_backbone() -> None:
    model = _Net()
    cb = SynBenchCallback(input_size=8, config=BUDGET)
    _fit(model, cb, epochs=1)
    model.backbone.eval()
    expected = scores_of(synbench(model.backbone, input_shape=(3, 8, 8), config=cb.config))
    # one process, the same loop on the same samples: bitwise equal
    assert cb.last == expected


def test_modes_are_restored() -> None:
    model = _Net()
    seen = []
    cb = SynBenchCallback(input_size=8, config=BUDGET)
    orig = cb.compute

    def spy(trainer, pl_module):
        seen.append(model.backbone[1].training)
        out = orig(trainer, pl_module)
        seen.append(model.backbone[1].training)
        return out

    cb.compute = spy
    model.backbone[2].eval()  # a submodule deliberately in eval mode must stay so
    _fit(model, cb, epochs=1)
    assert seen == [True, True], "the backbone's train mode must be restored after the computation"
    assert model.backbone[1].training and not model.backbone[2].training


def test_frozen_backbone_is_computed_once() -> None:
    cb = SynBenchCallback(input_size=8, config=BUDGET)
    _fit(_Net(frozen=True), cb, epochs=3)
    assert cb.computations == 1 and len(cb.history) == 3
    cb2 = SynBenchCallback(input_size=8, config=BUDGET)
    _fit(_Net(frozen=False), cb2, epochs=2)
    assert cb2.computations == 2


def test_fingerprint_sees_any_change() -> None:
    net = nn.Linear(3, 2)
    before = weights_fingerprint(net)
    with torch.no_grad():
        net.weight[0, 0] += 1e-7
    assert weights_fingerprint(net) != before


def test_module_without_backbone_needs_a_feature_fn() -> None:
    class NoBackbone(_Net):
        def __init__(self):
            super().__init__()
            self.encoder = self.backbone
            del self.backbone

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.head(self.encoder(x)), y)

    with pytest.raises(AttributeError, match="feature_fn"):
        _fit(NoBackbone(), SynBenchCallback(input_size=8, config=BUDGET), epochs=1)
    cb = SynBenchCallback(input_size=8, config=BUDGET, feature_fn=lambda m, x: m.encoder(x))
    _fit(NoBackbone(), cb, epochs=1)
    assert "score" in cb.last


def test_nan_features_are_a_clear_error_before_training() -> None:
    cb = SynBenchCallback(input_size=8, config=BUDGET, feature_fn=lambda m, x: torch.full((len(x), 4), float("nan")))
    net = _Net()
    with pytest.raises(FloatingPointError, match="NaN/inf features .* before training"):
        _fit(net, cb, epochs=1)
    assert net.trainer.global_step == 0  # refused at on_train_start, before the first step
    with pytest.raises(ValueError, match="NaN"):  # the protocol's own check, outside a fit
        cb.compute(None, _Net())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="every_n_epochs"):
        SynBenchCallback(every_n_epochs=0)
    with pytest.raises(ValueError):
        SynBenchCallback(config={"eps": (-0.1,)})


def test_code_defaults_are_the_yaml() -> None:
    import inspect

    from omegaconf import OmegaConf

    yaml = OmegaConf.to_container(OmegaConf.load(CONFIGS / "callbacks" / "synbench.yaml"))["synbench"]
    cb = SynBenchCallback()
    assert cb.config == SynBenchConfig(**yaml["config"]) == SynBenchConfig(**callback_budget())
    params = inspect.signature(SynBenchCallback).parameters
    for key, value in yaml.items():
        if key not in ("_target_", "config"):
            assert params[key].default == value, key
