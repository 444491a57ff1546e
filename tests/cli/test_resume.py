"""Kill-and-resume through ``ckpt_path=`` ends exactly where an uninterrupted run ends, whatever stopped it (an
exception inside a training step, SIGTERM, Ctrl-C, a crash at an epoch start), also in the middle of an epoch;
``last.ckpt`` is always the last epoch; a failed resume is refused before anything is written."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import open_dict

import src.train as train_mod
from src.backbones.weights import REBUILT_MARKER
from tests.models._seeded_backbone import CHANGED, SPEC  # registers the seeded: backbone source

from .conftest import compose_cfg

# tiny random backbone at 8 px: 9-10 batches of 128 training digits per epoch (the number depends on the data
# module's split; the tests read it from the run), 2 epochs, clean probing on cached
# features (PGD through the backbone is what makes a run slow; its random starts are seeded by the global step)
OVERRIDES = [
    "backbone=timm_tiny_random",
    "data.image_size=8",
    "data.batch_size=128",
    "trainer.max_epochs=2",
    "model.epsilon=0.0",
    "model.eval_epsilons=[]",
    "test=false",
    "logger=csv",
    "trainer.enable_model_summary=false",
]
CHECKPOINT_CALLBACKS = ("model_checkpoint", "last_checkpoint", "exception_checkpoint")
BETWEEN_EPOCHS = None  # kill step: the first step of epoch 1 (= batches per epoch, read from the uninterrupted run)


class _Killed(RuntimeError):
    pass


class _Kill(L.Callback):
    """Stop the run at ``step`` (global step) in one of several ways."""

    def __init__(self, how: str, step: int) -> None:
        self.how, self.step = how, step

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if self.how == "epoch_start" and trainer.global_step == self.step:
            raise _Killed("simulated crash at an epoch start")

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.how == "in_step" and trainer.global_step == self.step:
            raise _Killed("simulated crash inside a training step (after backward, before the optimizer step)")

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step != self.step:
            return
        if self.how == "sigterm":  # what Lightning's SIGTERM handler does; the loop stops after this batch
            trainer._signal_connector.received_sigterm = True
        elif self.how == "ctrl_c":
            raise KeyboardInterrupt


def _run(root: Path, extra: list[str] = (), kill: _Kill | None = None, monkeypatch=None):
    cfg = compose_cfg("train.yaml", OVERRIDES + list(extra), root)
    with open_dict(cfg):  # the default callbacks' checkpointing only (monitors cost time and are tested elsewhere)
        cfg.callbacks = {k: v for k, v in cfg.callbacks.items() if k in CHECKPOINT_CALLBACKS}
    if kill is None:
        return train_mod.train(cfg)
    orig = train_mod.instantiate_list
    monkeypatch.setattr(
        train_mod, "instantiate_list", lambda c: orig(c) + ([kill] if c is not None and "last_checkpoint" in c else [])
    )
    try:
        return train_mod.train(cfg)
    finally:
        monkeypatch.setattr(train_mod, "instantiate_list", orig)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    metrics, objs = _run(root)
    return root, metrics, objs


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "how, step, expected",
    [
        ("in_step", 13, _Killed),  # mid-epoch 1 (steps 9-17 or 10-19), inside the step of a batch
        ("sigterm", 4, SystemExit),  # mid-epoch 0, after its 5th batch
        ("ctrl_c", 16, SystemExit),  # mid-epoch 1
        ("epoch_start", BETWEEN_EPOCHS, _Killed),  # between epochs
    ],
)
def test_kill_and_resume_matches_uninterrupted(full_run, tmp_path, monkeypatch, how, step, expected) -> None:
    _, full_metrics, full = full_run
    step = full["trainer"].num_training_batches if step is BETWEEN_EPOCHS else step
    with pytest.raises(expected) as info:
        _run(tmp_path / "killed", kill=_Kill(how, step), monkeypatch=monkeypatch)
    if how == "sigterm":
        assert info.value.code == 143  # a scheduler must see a failure (Lightning's own SIGTERM exit is status 0)
    if how == "ctrl_c":
        assert info.value.code == 130
    ckpt = tmp_path / "killed" / "checkpoints" / "on_exception.ckpt"
    assert ckpt.is_file()
    assert torch.load(ckpt, weights_only=True)["global_step"] == step

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed_metrics, resumed = _run(tmp_path / "resumed", [f"ckpt_path={ckpt}"])
    assert not [w for w in caught if "not resumable" in str(w.message)]
    assert resumed["trainer"].global_step == full["trainer"].global_step == 2 * full["trainer"].num_training_batches
    # same batches in the same order, same PGD starts, same optimizer and schedule state, same deterministic CPU
    # kernels in one process: the weights are bit-identical (mid-epoch resume without skipping differs by ~1e-3)
    torch.testing.assert_close(resumed["model"].head.weight, full["model"].head.weight, rtol=0, atol=0)
    torch.testing.assert_close(resumed["model"].head.bias, full["model"].head.bias, rtol=0, atol=0)
    for key in ("val/acc", "val/loss"):
        assert resumed_metrics[key] == full_metrics[key], key


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_resume_from_last_ckpt_matches_uninterrupted(full_run, tmp_path, monkeypatch) -> None:
    _, _, full = full_run
    with pytest.raises(_Killed):
        _run(
            tmp_path / "killed",
            kill=_Kill("epoch_start", full["trainer"].num_training_batches),
            monkeypatch=monkeypatch,
        )
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    _, resumed = _run(tmp_path / "resumed", [f"ckpt_path={last}"])
    torch.testing.assert_close(resumed["model"].head.weight, full["model"].head.weight, rtol=0, atol=0)


@pytest.mark.timeout(600)
def test_last_ckpt_is_the_last_epoch_even_when_val_acc_does_not_improve(tmp_path) -> None:
    # lr = 0: val/acc is the same every epoch, so the best checkpoint stays at epoch 0; last.ckpt must not
    _, objs = _run(tmp_path, ["model.lr=0.0", "trainer.max_epochs=3"])
    ckpts = tmp_path / "checkpoints"
    last = torch.load(ckpts / "last.ckpt", weights_only=True)
    assert last["global_step"] == objs["trainer"].global_step == 3 * objs["trainer"].num_training_batches
    assert last["epoch"] == 2
    assert (ckpts / "epoch_000.ckpt").is_file()  # the best one, by val/acc
    assert not (ckpts / "on_exception.ckpt").exists()  # nothing failed: no exception checkpoint


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.fixture(scope="module")
def good_ckpt(full_run) -> Path:
    return full_run[0] / "checkpoints" / "last.ckpt"


def _bad_checkpoints(tmp_path: Path, good: Path) -> dict[str, tuple[Path, type, str]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[Path, type, str]] = {}
    out["missing"] = (tmp_path / "nope.ckpt", FileNotFoundError, "no such file")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[:5000])
    out["corrupt"] = (truncated, ValueError, "cannot read checkpoint")
    ckpt = torch.load(good, weights_only=True)
    other_class = dict(ckpt, repbench_module="src.models.supervised:SupervisedPretraining")
    torch.save(other_class, tmp_path / "other_class.ckpt")
    out["other_class"] = (tmp_path / "other_class.ckpt", ValueError, "written by SupervisedPretraining")
    sd = dict(ckpt["state_dict"])
    sd["head.weight"] = torch.zeros(3, sd["head.weight"].shape[1])
    sd["head.bias"] = torch.zeros(3)
    torch.save(dict(ckpt, state_dict=sd), tmp_path / "other_shape.ckpt")
    out["other_shape"] = (tmp_path / "other_shape.ckpt", ValueError, "shape mismatch.*head.weight")
    torch.save(ckpt["state_dict"], tmp_path / "weights_only.pth")
    out["weights_file"] = (tmp_path / "weights_only.pth", ValueError, "not a Lightning training checkpoint")
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["missing", "corrupt", "other_class", "other_shape", "weights_file"])
def test_failed_resume_is_refused_before_anything_is_written(good_ckpt, tmp_path, kind) -> None:
    path, err, match = _bad_checkpoints(tmp_path / "bad", good_ckpt)[kind]
    run_dir = tmp_path / "run"
    with pytest.raises(err, match=match):
        _run(run_dir, [f"ckpt_path={path}"])
    assert _files(run_dir) == []  # no fake on_exception.ckpt of the untrained model, no logs


def test_optimized_metric_is_returned(full_run, make_cfg) -> None:
    cfg = make_cfg([])
    assert cfg.optimized_metric == "val/acc"
    _, metrics, _ = full_run
    assert train_mod.optimized_metric_value(cfg, metrics) == metrics["val/acc"]
    cfg.optimized_metric = "val/not_logged"
    with pytest.raises(KeyError, match="not logged by this run"):
        train_mod.optimized_metric_value(cfg, metrics)
    cfg.optimized_metric = None
    assert train_mod.optimized_metric_value(cfg, metrics) is None


# a tiny backbone whose spec rebuilds it bit for bit (like pretrained weights): checkpoints leave it out
SEEDED = [f"backbone.name={SPEC['name']}", f"+backbone.seed={SPEC['seed']}"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_resume_from_a_checkpoint_without_the_frozen_backbone_is_exact(tmp_path, monkeypatch) -> None:
    full_metrics, full = _run(tmp_path / "full", SEEDED)
    with pytest.raises(_Killed):
        _run(tmp_path / "killed", SEEDED, kill=_Kill("in_step", 13), monkeypatch=monkeypatch)
    ckpt = tmp_path / "killed" / "checkpoints" / "on_exception.ckpt"
    sd = torch.load(ckpt, weights_only=True)["state_dict"]
    assert [k for k in sd if k.startswith("backbone.")] == ["backbone." + REBUILT_MARKER]
    resumed_metrics, resumed = _run(tmp_path / "resumed", SEEDED + [f"ckpt_path={ckpt}"])
    # as for a stored backbone (test_kill_and_resume_matches_uninterrupted): bit-identical weights and metrics
    torch.testing.assert_close(resumed["model"].head.weight, full["model"].head.weight, rtol=0, atol=0)
    torch.testing.assert_close(resumed["model"].head.bias, full["model"].head.bias, rtol=0, atol=0)
    for key in ("val/acc", "val/loss"):
        assert resumed_metrics[key] == full_metrics[key], key
    # the weights the spec names changed since the checkpoint was written: refused before anything is written
    monkeypatch.setitem(CHANGED, "offset", 1)
    with pytest.raises(ValueError, match="rebuilt weights differ from those it was trained with"):
        _run(tmp_path / "changed", SEEDED + [f"ckpt_path={ckpt}"])
    assert _files(tmp_path / "changed") == []
