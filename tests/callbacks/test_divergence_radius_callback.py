"""DivergenceRadiusCallback: logged keys, eval mode restored, skip when unchanged, probe sources, YAML defaults, DDP."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
import yaml
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import DivergenceRadiusCallback
from tests._lightning import quiet_trainer
from tests._multiprocess import run_in_processes

NAMES = ["brightness", "gaussian_noise"]
ROOT = Path(__file__).resolve().parents[2]


class TinyBackbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.modes_seen: list[bool] = []

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        self.modes_seen.append(self.training)
        return self.net(x).flatten(1) + 0.1  # + 0.1: no all-zero embedding after the ReLU


class TinyModule(L.LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.backbone = TinyBackbone()
        self.head = nn.Linear(8, 2)
        self.lr = lr

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.backbone.embed(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.rand(8, 3, 16, 16, generator=g), torch.randint(0, 2, (8,), generator=g)), 4)


def _trainer(tmp_path: Path, cb: DivergenceRadiusCallback, epochs: int = 2) -> L.Trainer:
    logger = L.pytorch.loggers.TensorBoardLogger(str(tmp_path))
    return quiet_trainer(max_epochs=epochs, logger=logger, callbacks=[cb], log_every_n_steps=1)


def _cb(**kw) -> DivergenceRadiusCallback:
    return DivergenceRadiusCallback(**{"num_images": 4, "image_size": 16, "m": 2, "perturbations": NAMES, **kw})


def test_logs_keys_and_restores_train_mode(tmp_path: Path) -> None:
    cb = _cb(at_train_start=True)
    model = TinyModule()
    trainer = _trainer(tmp_path, cb)
    trainer.fit(model, _loader())
    keys = {f"val/divergence_radius/{n}" for n in NAMES} | {f"val/cosine_robustness/{n}" for n in NAMES}
    keys |= {"val/divergence_radius/mean", "val/cosine_robustness/mean"}
    assert keys <= set(trainer.callback_metrics)
    assert all(0.0 <= float(trainer.callback_metrics[k]) <= 1.0 for k in keys)
    # the weights change every epoch: train start + 2 epochs = 3 computations
    assert cb.computations == 3 and len(cb.history) == 3
    # probe forwards ran in eval mode; training forwards in train mode; mode restored after every computation
    assert False in model.backbone.modes_seen and model.backbone.modes_seen[-1] is False
    assert model.backbone.training  # trainer leaves the module in train mode
    assert cb.images is not None and cb.images.shape == (4, 3, 16, 16)  # no data module: bundled photos


def test_compute_restores_each_submodule_mode(tmp_path: Path) -> None:
    cb = _cb()
    model = TinyModule()
    model.train()
    model.backbone.net[1].eval()  # a mixed state must come back exactly
    trainer = SimpleNamespace(global_rank=0, world_size=1, datamodule=None)
    out = cb.compute(trainer, model)
    assert model.backbone.training and not model.backbone.net[1].training and model.backbone.net[0].training
    assert set(NAMES) <= {k.split("/")[1] for k in out}


def test_skips_unchanged_weights(tmp_path: Path) -> None:
    cb = _cb()
    trainer = _trainer(tmp_path, cb, epochs=3)
    model = TinyModule(lr=0.0)  # lr 0 and no BatchNorm (whose counters move in training): nothing changes
    model.backbone.net[1] = nn.Identity()
    trainer.fit(model, _loader())
    assert cb.computations == 1 and len(cb.history) == 3


def test_probe_sources_and_feature_fn() -> None:
    class DM:
        def val_dataloader(self):
            return DataLoader(TensorDataset(torch.full((6, 1, 20, 20), 0.5), torch.zeros(6)), 2)

    cb = _cb(images="val", feature_fn=lambda module, x: module.backbone.embed(x) * 2.0)
    trainer = SimpleNamespace(global_rank=0, world_size=1, datamodule=DM())
    model = TinyModule()
    cb.compute(trainer, model)
    assert cb.images.shape == (4, 3, 16, 16) and torch.allclose(cb.images, torch.full_like(cb.images, 0.5), atol=1e-6)
    with pytest.raises(ValueError, match="no validation images"):
        _cb(images="val").probe_images(SimpleNamespace(datamodule=None))
    with pytest.raises(AttributeError, match="feature_fn"):
        _cb().compute(SimpleNamespace(global_rank=0, world_size=1, datamodule=None), nn.Linear(2, 2))
    with pytest.raises(ValueError, match="unknown perturbation"):
        _cb(perturbations=["sepia"])


def test_code_defaults_equal_yaml() -> None:
    """Every YAML value equals the code default; a None default of a sweep field means the DivergenceRadiusConfig's
    value (perturbations: None = all nine on both sides)."""
    from src.divergence_radius import DivergenceRadiusConfig

    cfg = yaml.safe_load((ROOT / "configs/callbacks/divergence_radius.yaml").read_text())["divergence_radius"]
    params = inspect.signature(DivergenceRadiusCallback).parameters
    sweep = DivergenceRadiusConfig()
    for key, value in cfg.items():
        if key == "_target_":
            continue
        default = params[key].default
        if default is None and key in ("m", "mode", "seed", "chunk_size"):
            default = getattr(sweep, key)
        assert default == value, key


def test_sweep_comes_from_the_config() -> None:
    """config= sets the sweep, keyword arguments override it, and the checkpoint identity is the config's fields."""
    from src.divergence_radius import DivergenceRadiusConfig

    cb = DivergenceRadiusCallback(config={"m": 3, "perturbations": ["fog"]}, seed=7)
    assert cb.config == DivergenceRadiusConfig(perturbations=("fog",), m=3, seed=7)
    assert (cb.m, cb.names, cb.seed, cb.mode, cb.chunk_size) == (3, ("fog",), 7, "equal", 16)
    assert cb._identity() == {
        "perturbations": ["fog"], "m": 3, "mode": "equal", "seed": 7, "chunk_size": 16, "num_images": 32,
        "image_size": 64, "source": "auto",
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"m must be a positive integer \(perturbed versions per image"):
        DivergenceRadiusCallback(m=0)
    with pytest.raises(ValueError, match=r"mode must be 'equal' or 'random'"):
        DivergenceRadiusCallback(mode="grid")


# ---------------------------------------------------------------- DDP
def _compute_on_rank(rank: int, world_size: int) -> dict[str, float]:
    cb = DivergenceRadiusCallback(num_images=5, image_size=16, m=2, perturbations=NAMES, chunk_size=2)
    model = TinyModule()
    model.backbone.net[1].running_mean.fill_(0.05)  # a non-trivial eval-mode BatchNorm
    return cb.compute(SimpleNamespace(global_rank=rank, world_size=world_size, datamodule=None), model)


@pytest.mark.slow
def test_ddp_equals_one_process() -> None:
    """5 photos in chunks of 2 over 2 ranks vs one process: the same chunks with the same noise; only float32
    feature arithmetic differs between a 1-thread worker and this process (27-term convolutions, ≲ 27·u32 ≈ 2e-6
    relative), and R_dr / R_cs are Lipschitz (constants 1 and 2) in each unit embedding: agreement to 1e-5."""
    ref = _compute_on_rank(0, 1)
    for res in run_in_processes(_compute_on_rank, 2):
        assert "__error__" not in res, res
        assert res.keys() == ref.keys() and all(abs(res[k] - ref[k]) <= 1e-5 for k in ref)


def test_default_and_monitor_pretraining_runs_include_the_callback() -> None:
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    for overrides in ([], ["experiment=monitor_pretraining"]):
        with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
            cfg = compose("train.yaml", overrides=overrides, return_hydra_config=False)
        if overrides and cfg.callbacks.get("divergence_radius") is None:
            continue  # the experiment may switch it off to keep its CPU budget
        cb = instantiate(cfg.callbacks.divergence_radius)
        assert isinstance(cb, DivergenceRadiusCallback) and cb.m == 5
        assert cb.image_size == (32 if overrides else 64)


def test_the_probe_set_is_perturbed_once_per_run_and_the_cached_values_are_the_uncached_ones(tmp_path: Path) -> None:
    """Cost: the fixed probe images are perturbed at the first computation only (the weights change every epoch, so
    every computation embeds anew); the values equal the uncached sweep of the final weights bit for bit."""
    from src.metrics.divergence_radius import robustness_metrics

    cb = _cb(at_train_start=True, skip_unchanged=False, perturbations=["gaussian_noise", "glass_blur"])
    model = TinyModule()
    caches = []
    original = cb._perturbed

    def spy(trainer, device):
        caches.append(original(trainer, device))
        return caches[-1]

    cb._perturbed = spy
    _trainer(tmp_path, cb).fit(model, _loader())
    assert cb.computations == 3 and len(caches) == 3 and all(c is caches[0] for c in caches)
    assert caches[0].nbytes == 4 * (1 + 2 * 2) * 3 * 16 * 16 * 4  # n x (1 + P m) x 3 x H x W x 4 bytes
    model.backbone.eval()
    assert robustness_metrics(cb.images, model.backbone.embed, cb.config) == cb.last


def test_auto_takes_the_validation_loader_given_to_fit(tmp_path: Path) -> None:
    """Without a data module, images="auto" reads the validation loader passed to fit (built at on_train_start,
    before the first step), not the bundled photos."""
    g = torch.Generator().manual_seed(5)
    val = TensorDataset(torch.rand(6, 3, 16, 16, generator=g), torch.zeros(6, dtype=torch.long))

    class WithValidation(TinyModule):
        def validation_step(self, batch, _):
            pass

    cb = _cb()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = quiet_trainer(max_epochs=1, callbacks=[cb])
        trainer.fit(WithValidation(), _loader(), DataLoader(val, batch_size=3))
    assert torch.equal(cb.images, val.tensors[0][:4])
    # no logger: the values go to callback_metrics only, without Lightning's "no logger configured" warning per value
    assert not [w for w in caught if "no logger configured" in str(w.message)]
    assert "val/divergence_radius/mean" in trainer.callback_metrics


def test_fractional_period_is_refused_not_truncated() -> None:
    # CB16: int(1.5) made a monitor asked for every 1.5 epochs run every epoch
    from src.callbacks import RepresentationSpectrumCallback, SynBenchCallback

    with pytest.raises(
        TypeError, match=r"^DivergenceRadiusCallback: every_n_epochs must be an integer >= 1 .*got 1\.5"
    ):
        DivergenceRadiusCallback(every_n_epochs=1.5)
    with pytest.raises(TypeError, match=r"^SynBenchCallback: every_n_epochs must be an integer >= 1"):
        SynBenchCallback(every_n_epochs=2.5)
    with pytest.raises(TypeError, match=r"^RepresentationSpectrumCallback: every_n_epochs must be .*got True"):
        RepresentationSpectrumCallback(every_n_epochs=True)
    with pytest.raises(ValueError, match=r"every_n_epochs must be an integer >= 1 .*got 0"):
        DivergenceRadiusCallback(every_n_epochs=0)
    assert DivergenceRadiusCallback(every_n_epochs=2.0).every_n_epochs == 2
