"""The monitors as Lightning users expect them: images in the model's convention (K08, K07), one state per monitor,
every_n_epochs in infinite training, progress while computing, epochs on the loggers' x-axis."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, Dataset

import src.callbacks as src_callbacks
from src.callbacks import (
    DivergenceRadiusCallback,
    RepresentationSpectrumCallback,
    SynBenchCallback,
    TaskPriorCallback,
    check_monitor_prefixes,
)
from src.images.probe_images import PIXEL_OVERSHOOT, clip_overshoot, pixel_images
from src.utils.tensorboard import read_scalars
from tests._lightning import quiet_trainer

# dyadic mean/std: (p - mean) / std and back are exact in float32 for p = k / 256, so a denormalised probe set is
# bitwise the pixel one and the metrics agree exactly (no tolerance to derive)
MEAN, STD = (0.5, 0.25, 0.75), (0.25, 0.5, 0.125)
SYNBENCH_BUDGET = dict(s_values=(1.0, 2.0), n_train=64, n_test=32, eps=(0.0,), a_T=(0.6,), normalization="none")


class _Images(Dataset):
    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], 0


class _DM(L.LightningDataModule):
    def __init__(self, val_x: torch.Tensor) -> None:
        super().__init__()
        self.val_dataset = _Images(val_x)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Images(torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(1))), batch_size=4)


class _Net(L.LightningModule):
    """A 2-layer conv backbone (the reproduction's) trained on a feature norm."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )

    def training_step(self, batch, _):
        return self.backbone(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _pixels(n: int = 6, size: int = 16) -> torch.Tensor:
    """Images in [0, 1] on the 1/256 grid."""
    return torch.randint(0, 257, (n, 3, size, size), generator=torch.Generator().manual_seed(0)).float() / 256


def _dr(**kw) -> DivergenceRadiusCallback:
    opts = dict(num_images=6, image_size=16, m=2, perturbations=["brightness"], log_figure=False, progress=False)
    return DivergenceRadiusCallback(**{**opts, **kw})


def _rank0(dm=None):
    return SimpleNamespace(global_rank=0, world_size=1, datamodule=dm, current_epoch=0)


# ---------------------------------------------------------------- K08, K07: the input contract (normalize=)
def _normalised(pixels: torch.Tensor) -> torch.Tensor:
    return (pixels - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)


def _explicit(module: L.LightningModule, x: torch.Tensor) -> torch.Tensor:
    """The reference: the backbone fed explicitly normalised pixels (what the user's training feeds it)."""
    return module.backbone(_normalised(x))


def test_k08_0_to_255_validation_images_are_refused() -> None:
    val = (_pixels() * 255).round()
    with pytest.raises(ValueError, match=r"lie in \[0, 255\].*normalize=\(0, 1 / 255\)"):
        quiet_trainer(max_epochs=1, callbacks=[_dr()]).fit(_Net(), datamodule=_DM(val))


def test_k07_normalised_images_are_refused_before_training_and_normalize_feeds_the_backbone_normalised_images() -> None:
    pixels = _pixels()
    normalised = _normalised(pixels)
    net = _Net()
    with pytest.raises(ValueError, match=r"lie in \[-6, 2\].*normalize=\(mean, std\)"):
        quiet_trainer(max_epochs=1, callbacks=[_dr()]).fit(net, datamodule=_DM(normalised))
    assert net.trainer.global_step == 0  # refused in setup, before the first training step
    model = _Net()
    # the reference feeds the backbone normalised pixels through an explicit feature function
    ref_cb, cb = _dr(feature_fn=_explicit), _dr(normalize=(MEAN, STD))
    ref = ref_cb.compute(_rank0(_DM(pixels)), model)
    got = cb.compute(_rank0(_DM(normalised)), model)
    # dyadic mean/std: the round trip pixels -> normalised -> pixels -> normalised is exact in float32
    assert torch.equal(cb.images, ref_cb.images) and torch.equal(cb.images, pixels)
    assert got.keys() == ref.keys() and 0.0 < ref["divergence_radius/mean"] < 1.0
    # The features differ only by float32 summation order: the callback's encoder exposes the conv net, so the
    # feature engine runs it channels_last, the reference lambda runs NCHW. Each feature is a sum of <= 72 products
    # (8 x 3 x 3 taps) then a mean over positions: relative rounding <= 72 * 2^-24 ≈ 4.3e-6 of the summed magnitude.
    # R_dr and R_cs are radii/cosines of unit vectors (1-Lipschitz in them): |difference| <= 1e-5 absolute.
    assert all(abs(got[k] - ref[k]) <= 1e-5 for k in ref)
    # not what the former denormalize= did (pixels into a backbone trained on normalised images)
    assert (
        abs(_dr().compute(_rank0(_DM(pixels)), model)["divergence_radius/mean"] - ref["divergence_radius/mean"]) > 1e-3
    )
    # the mapping form and torchvision's Normalize are the same contract, bit for bit
    from torchvision.transforms import Normalize

    for spec in ({"mean": list(MEAN), "std": list(STD)}, Normalize(MEAN, STD)):
        assert _dr(normalize=spec).compute(_rank0(_DM(normalised)), model) == got


def test_k07_task_prior_takes_normalize() -> None:
    pixels = _pixels(4)
    normalised = _normalised(pixels)
    opts = dict(prior_backbone=None, prior_features=torch.randn(4, 3), num_images=4, progress=False)
    with pytest.raises(ValueError, match=r"TaskPriorCallback: the validation images lie in \[-6, 2\].*normalize="):
        TaskPriorCallback(**opts).compute(_rank0(_DM(normalised)), _Net())
    ref = TaskPriorCallback(**opts, feature_fn=_explicit).compute(_rank0(_DM(pixels)), _Net())
    got = TaskPriorCallback(**opts, normalize=(MEAN, STD)).compute(_rank0(_DM(normalised)), _Net())
    # features equal to float32 summation order (channels_last vs NCHW, see the test above: <= 4.3e-6 relative);
    # E and Var are smooth in the normalised features: 1e-4 relative leaves a margin of 20x
    assert got.keys() == ref.keys() and all(v == pytest.approx(ref[k], rel=1e-4) for k, v in got.items())
    with pytest.raises(ValueError, match=r"images= lie in \[0, 255\]"):
        TaskPriorCallback(prior_backbone=None, prior_features=torch.randn(4, 3), images=pixels * 255)


def test_denormalize_is_a_deprecated_alias_of_normalize() -> None:
    normalised = _normalised(_pixels())
    with pytest.warns(DeprecationWarning, match=r"denormalize=\.\.\.\) is deprecated.*use normalize=.*backbone takes"):
        old = _dr(denormalize=(MEAN, STD))
    assert old.normalize == _dr(normalize=(MEAN, STD)).normalize
    model = _Net()
    assert old.compute(_rank0(_DM(normalised)), model) == _dr(normalize=(MEAN, STD)).compute(
        _rank0(_DM(normalised)), model
    )
    with pytest.raises(TypeError, match=r"denormalize=<callable>\) is no longer supported.*normalize=\(mean, std\)"):
        _dr(denormalize=lambda x: x * 0.5)
    with pytest.raises(ValueError, match="denormalize= is the deprecated alias of normalize="):
        _dr(normalize=(0.5, 0.5), denormalize=(0.5, 0.5))


def test_normalize_argument_errors() -> None:
    with pytest.raises(ValueError, match="std must be > 0"):
        _dr(normalize=(0.5, 0.0))
    with pytest.raises(ValueError, match="exactly the keys 'mean' and 'std'"):
        _dr(normalize={"mean": 0.5, "sd": 0.2})
    with pytest.raises(TypeError, match=r"normalize=\.\.\.\) must be None"):
        _dr(normalize="imagenet")
    with pytest.raises(ValueError, match="finite numbers"):
        _dr(normalize=(float("nan"), 0.5))
    with pytest.raises(ValueError, match="2 mean values for images with 3 channels"):
        _dr(normalize=([0.5, 0.5], 0.2)).compute(_rank0(_DM(_pixels())), _Net())
    with pytest.raises(ValueError, match="2 mean values for images with 3 channels"):
        SynBenchCallback(input_size=16, normalize=([0.5, 0.5], 0.2))
    with pytest.raises(ValueError, match=r"mapped back to pixels with normalize=.*lie in"):
        _dr(normalize=(0.5, 10.0)).compute(_rank0(_DM(_normalised(_pixels()))), _Net())
    with pytest.warns(UserWarning, match=r"already lie in \[.*as \[0, 1\] pixels do"):  # pixels, said normalised
        _dr(normalize=(0.5, 0.5)).compute(_rank0(_DM(_pixels())), _Net())
    with pytest.raises(ValueError, match=r"images= lie in \[0, 255\]"):
        _dr(images=_pixels() * 255)


def test_resize_overshoot_is_allowed_reported_and_clipped(caplog) -> None:
    # the worst bicubic pattern of the derivation of PIXEL_OVERSHOOT: a 4x4 sign pattern sampled at half-pixel
    # offsets (align_corners=True, 4 -> 7 pixels puts samples at 0, 0.5, 1, ...): the bound is reached
    sign = torch.tensor([0.0, 1.0, 1.0, 0.0])
    x = (sign[:, None] * sign[None, :] + (1 - sign[:, None]) * (1 - sign[None, :]))[None, None].expand(1, 3, 4, 4)
    up = nn.functional.interpolate(x, size=(7, 7), mode="bicubic", align_corners=True)
    # float32 bicubic weights and sums of 16 terms of size <= 1.2: rounding <= 16 * 1.2 * 2^-24 ≈ 1.2e-6 < 1e-5
    assert abs(float(up.max()) - 1.0 - PIXEL_OVERSHOOT) < 1e-5 and float(up.min()) >= -PIXEL_OVERSHOOT - 1e-5
    checked = pixel_images(up.clamp(-PIXEL_OVERSHOOT, 1 + PIXEL_OVERSHOOT), "X", "validation images")
    with caplog.at_level(logging.WARNING, logger="repbench"):
        clipped = clip_overshoot(checked, "X", "validation images")
    assert float(clipped.min()) == 0.0 and float(clipped.max()) == 1.0
    assert "interpolation overshoot" in caplog.text
    with pytest.raises(ValueError, match="resizing overshoot up to 0.445"):
        pixel_images(torch.full((1, 3, 4, 4), 1.5), "X", "validation images")


# ---------------------------------------------------------------- unique state keys
def test_two_divergence_radius_callbacks_keep_their_states_apart(tmp_path: Path) -> None:
    val = _pixels()
    a = _dr(prefix="val/a", perturbations=["brightness"])
    b = _dr(prefix="val/b", perturbations=["gaussian_noise"])
    assert a.state_key != b.state_key
    trainer = quiet_trainer(max_epochs=1, callbacks=[a, b])
    trainer.fit(_Net(), datamodule=_DM(val))
    assert "val/a/divergence_radius/brightness" in trainer.callback_metrics
    assert "val/b/divergence_radius/gaussian_noise" in trainer.callback_metrics
    assert a.last != b.last
    ckpt = tmp_path / "two.ckpt"
    trainer.save_checkpoint(ckpt)
    assert {a.state_key, b.state_key} <= set(torch.load(ckpt, weights_only=False)["callbacks"])
    a2 = _dr(prefix="val/a", perturbations=["brightness"])
    b2 = _dr(prefix="val/b", perturbations=["gaussian_noise"])
    quiet_trainer(max_epochs=1, callbacks=[b2, a2]).fit(_Net(), datamodule=_DM(val), ckpt_path=ckpt)
    assert a2.last == a.last and b2.last == b.last and a2.history == a.history


def test_two_monitors_of_one_type_need_different_prefixes() -> None:
    """Different arguments, one prefix: Lightning accepts the Trainer (the state keys differ), setup refuses it."""
    trainer = quiet_trainer(max_epochs=1, callbacks=[_dr(), _dr(perturbations=["gaussian_noise"])])
    with pytest.raises(ValueError, match="same prefix 'val'.*give each its own prefix="):
        trainer.fit(_Net(), datamodule=_DM(_pixels()))
    assert trainer.global_step == 0
    trainer = quiet_trainer(max_epochs=1, callbacks=[_dr()])
    trainer.callbacks.append(_dr(perturbations=["gaussian_noise"]))  # added after the Trainer was built
    with pytest.raises(ValueError, match="same prefix 'val'.*give each its own prefix="):
        trainer.fit(_Net(), datamodule=_DM(_pixels()))


_MONITORS = [_dr, lambda: RepresentationSpectrumCallback(num_images=6, image_size=16)]


@pytest.mark.parametrize("make", _MONITORS)
def test_two_identical_monitors_name_prefix_not_state_key(make) -> None:
    """CB17: two monitors with equal arguments have equal state keys, which Lightning refuses in
    Trainer(callbacks=...) before any hook runs, pointing to the class's documentation: check_monitor_prefixes (what
    src.train calls before building its Trainer) names prefix= first, and every monitor's docstring names it.
    RepBench does not patch Lightning's check (importing it changes no global state)."""
    with pytest.raises(ValueError, match=r"two \w+s in one Trainer log under the same prefix.*its own prefix="):
        check_monitor_prefixes([make(), make()])
    with pytest.raises(RuntimeError, match=r"more than one stateful callback of type `(\w+)`.*documentation of"):
        quiet_trainer(max_epochs=1, callbacks=[make(), make()])
    check_monitor_prefixes([make(), EarlyStopping("x")])  # one of a kind, among other callbacks: fine
    quiet_trainer(max_epochs=1, callbacks=[make(), EarlyStopping("x")])


def test_every_monitor_documents_prefix_for_two_of_a_kind() -> None:
    """Lightning's message sends the user to the class's documentation: each monitor's docstring names prefix=."""
    from src.callbacks._monitor import BackboneMonitor

    monitors = [c for c in vars(src_callbacks).values() if isinstance(c, type) and issubclass(c, BackboneMonitor)]
    assert len(monitors) >= 6
    for cls in monitors:
        assert "Two of one kind in one Trainer: give each its own ``prefix=``" in (cls.__doc__ or ""), cls


def test_src_train_checks_prefixes_before_building_its_trainer() -> None:
    """The CLI's order: callbacks instantiated, prefixes checked, then the Trainer (Lightning's check)."""
    import inspect

    import src.train as train_module

    source = inspect.getsource(train_module)
    assert source.index("check_monitor_prefixes(callbacks)") < source.index("trainer: L.Trainer = instantiate(")


class _MixedSizes(Dataset):
    """Validation images of 12 x 16 and 16 x 16 px, alternately."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int):
        return _pixels(1)[0, :, : 16 if i % 2 else 12], 0


def test_validation_images_of_mixed_sizes_name_the_callback_and_the_fix() -> None:
    """CB12: images='auto' stacks the first validation images into one batch; sizes that differ are refused in
    setup (no training step wasted) naming the callback, the sizes and the fix, not torch.stack's message."""
    dm, net = _DM(_pixels()), _Net()
    dm.val_dataset = _MixedSizes()
    pattern = r"DivergenceRadiusCallback: .*different sizes \[\[3, 12, 16\], \[3, 16, 16\]\].*images='photos'"
    with pytest.raises(ValueError, match=pattern + r".*resize the images"):
        quiet_trainer(max_epochs=1, callbacks=[_dr()]).fit(net, datamodule=dm)
    assert net.trainer.global_step == 0


# ---------------------------------------------------------------- every_n_epochs in infinite training
def test_every_n_epochs_is_honoured_with_max_epochs_minus_one() -> None:
    cb = _dr(every_n_epochs=2, skip_unchanged=False)
    # 8 training images in batches of 4: 2 steps per epoch; max_steps=6 ends the third epoch (index 2)
    quiet_trainer(max_epochs=-1, max_steps=6, callbacks=[cb]).fit(_Net(), datamodule=_DM(_pixels()))
    assert [e for e, _ in cb.history] == [1, 2]  # epoch 1 (every 2nd) and epoch 2 (the last: max_steps)


# ---------------------------------------------------------------- progress
def test_progress_lines_while_computing_and_progress_false(caplog, capsys) -> None:
    cb = _dr()
    cb.progress, cb.progress_interval_s = True, 0.0  # a line per embedded batch
    with caplog.at_level(logging.INFO, logger="repbench"):
        quiet_trainer(max_epochs=1, callbacks=[cb]).fit(_Net(), datamodule=_DM(_pixels()))
    total = 6 * (1 + 1 * 2)  # 6 images: clean + m = 2 brightness versions
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("DivergenceRadius (epoch 0)")]
    assert lines[0].endswith(f"computing ({total} images to embed on this process)")
    assert any(f"/{total} images embedded (" in line and "s left" in line for line in lines)
    assert lines[-1].startswith(f"DivergenceRadius (epoch 0): done, {total} images embedded in")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="repbench"):
        quiet_trainer(max_epochs=1, callbacks=[_dr()]).fit(_Net(), datamodule=_DM(_pixels()))
    assert not [r for r in caplog.records if "images embedded" in r.getMessage()]
    # with Lightning's progress bar shown, the lines are printed through it (above the bar)
    cb = SynBenchCallback(input_size=16, config=SYNBENCH_BUDGET, log_figure=False)
    quiet_trainer(max_epochs=1, callbacks=[cb], enable_progress_bar=True).fit(_Net(), datamodule=_DM(_pixels()))
    out = capsys.readouterr().out
    assert "SynBench (epoch 0): computing (192 images to embed" in out and "done, 192 images embedded" in out


# ---------------------------------------------------------------- Lightning's step axis, callback_metrics kept
class _ValNet(_Net):
    """_Net with a validation metric of its own, logged as any user module logs one."""

    def validation_step(self, batch, _):
        self.log("val/acc", self.backbone(batch[0]).mean())


class _ValDM(_DM):
    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_dataset, batch_size=3)


def test_loggers_get_lightnings_steps_and_checkpointing_still_monitors_the_score(tmp_path: Path) -> None:
    cb = SynBenchCallback(input_size=16, config=SYNBENCH_BUDGET, skip_unchanged=False, at_train_start=True)
    best = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/synbench/score", mode="max", save_top_k=1)
    stop = EarlyStopping(monitor="val/synbench/score", mode="max", patience=5)
    trainer = quiet_trainer(
        max_epochs=3,
        callbacks=[stop, best, cb],  # EarlyStopping before the monitor in the list: Lightning runs it after
        logger=TensorBoardLogger(tmp_path, name="", version=""),
        enable_checkpointing=True,
        num_sanity_val_steps=0,
    )
    trainer.fit(_ValNet(), datamodule=_ValDM(_pixels()))
    scalars = read_scalars(tmp_path)
    steps = [s for s, _ in scalars["val/synbench/score"]]
    # the module's own val/acc of each epoch sits at the same x (8 images in batches of 4: steps 1, 3, 5), the value
    # before training at the step training starts from
    assert [s for s, _ in scalars["val/acc"]] == [1, 3, 5] and steps == [0, 1, 3, 5]
    assert [s for s, _ in scalars["val/synbench/curves"]] == steps if "val/synbench/curves" in scalars else True
    scores = [h["score"] for _, h in cb.history[1:]]
    # Lightning keeps logged scalars as float32: |relative rounding| <= 2^-24 ≈ 6e-8 < 1e-6
    assert float(best.best_model_score) == pytest.approx(max(scores), rel=1e-6)
    assert float(trainer.callback_metrics["val/synbench/score"]) == pytest.approx(scores[-1], rel=1e-6)
    assert Path(best.best_model_path).is_file() and stop.wait_count <= 2


def test_synbench_says_when_it_compiles_the_sampler_and_titles_the_computation_before_training(
    caplog, monkeypatch
) -> None:
    import src.callbacks.synbench_callback as sb

    warmed = []
    monkeypatch.setattr(sb, "sampler_ready", lambda device: bool(warmed))
    monkeypatch.setattr(sb, "warm_up_sampler", lambda device: warmed.append(device) or 0.0)
    cb = SynBenchCallback(input_size=16, config=SYNBENCH_BUDGET, log_figure=False, at_train_start=True)
    with caplog.at_level(logging.INFO, logger="repbench"):
        quiet_trainer(max_epochs=1, callbacks=[cb]).fit(_Net(), datamodule=_DM(_pixels()))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("SynBench")]
    assert lines[:3] == [
        "SynBench (before training): computing (192 images to embed on this process)",
        "SynBench (before training): compiling the sampler (once per process) ...",
        lines[2],
    ] and lines[2].startswith("SynBench (before training): sampler compiled (")
    assert len(warmed) == 1 and not any("compiling" in line for line in lines[3:])  # once per process
    assert any(line.startswith("SynBench (epoch 0): done, 192 images embedded") for line in lines)
