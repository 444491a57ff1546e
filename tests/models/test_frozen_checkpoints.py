"""Checkpoints leave out frozen weights that the backbone spec rebuilds bit for bit (a probe's backbone, the fine-tune's
teacher), load them back with identical predictions, refuse them when the rebuilt weights changed, and keep storing
frozen weights that the spec cannot rebuild (random initialisation)."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from src.backbones.weights import (
    REBUILT_MARKER,
    RebuiltWeightsMismatchError,
    check_state_dict_matches,
    omit_rebuilt_state,
    restore_rebuilt_state,
    state_fingerprint,
)
from src.models import PerturbationRobustFineTune, RobustLinearProbe, TaskPriorProbe
from src.utils.checkpoint import load_module
from tests._lightning import quiet_trainer

from ._seeded_backbone import CHANGED, SPEC

RANDOM_SPEC = {"name": "timm:test_efficientnet", "pretrained": False}  # a fresh random init at every build


def _data(n: int = 32, size: int = 16) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.rand(n, 3, size, size, generator=g), torch.arange(n) % 2, torch.arange(n))


def _fit_and_save(model: L.LightningModule, path) -> L.LightningModule:
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, inference_mode=False, num_sanity_val_steps=0)
    trainer.fit(model, DataLoader(_data(), batch_size=16))
    trainer.save_checkpoint(path)
    return model.eval()


def _probe(backbone=SPEC) -> RobustLinearProbe:
    torch.manual_seed(0)
    return RobustLinearProbe(backbone=backbone, num_classes=2, epsilon=0.0, eval_epsilons=[], scheduler=None)


def _state(path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _backbone_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.backbone.state_dict().values())


@pytest.fixture(scope="module")
def probe_ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "probe.ckpt"
    return _fit_and_save(_probe(), path), path


def test_probe_checkpoint_leaves_out_the_frozen_backbone(probe_ckpt) -> None:
    model, path = probe_ckpt
    sd = _state(path)
    assert [k for k in sd if k.startswith("backbone.")] == ["backbone." + REBUILT_MARKER]
    assert {"head.weight", "head.bias"} <= set(sd)
    # what is left (head, Adam moments, loops, hparams) is tens of KB; the tiny backbone alone is 1.4 MB
    assert path.stat().st_size < _backbone_bytes(model) / 10, (path.stat().st_size, _backbone_bytes(model))


def test_probe_round_trip_gives_identical_predictions(probe_ckpt) -> None:
    model, path = probe_ckpt
    x = _data(8)[:][0]
    for loaded in (load_module(path), RobustLinearProbe.load_from_checkpoint(path, weights_only=True)):
        loaded.eval()
        with torch.no_grad():
            assert torch.equal(loaded(x), model(x))  # same weights, same CPU kernels: bit-identical
        assert state_fingerprint(loaded.state_dict()) == state_fingerprint(model.state_dict())


def test_changed_backbone_weights_are_refused_on_load(probe_ckpt, monkeypatch) -> None:
    _, path = probe_ckpt
    monkeypatch.setitem(CHANGED, "offset", 1)  # the spec now builds other weights (e.g. its weights file replaced)
    with pytest.raises(RebuiltWeightsMismatchError, match="rebuilt weights differ from those it was trained with"):
        load_module(path)
    # the check that refuses a resume before the trainer starts (src.train's check_resume_checkpoint) sees it too
    with pytest.raises(RebuiltWeightsMismatchError, match="restore the original weights"):
        check_state_dict_matches(_state(path), _probe(), "ckpt_path=probe.ckpt")


def test_resume_precheck_accepts_the_omitted_backbone(probe_ckpt) -> None:
    _, path = probe_ckpt
    check_state_dict_matches(_state(path), _probe(), "ckpt_path=probe.ckpt")  # no missing-key error


def test_backbone_the_spec_cannot_rebuild_is_stored(tmp_path) -> None:
    """A randomly initialised backbone (no seed): a rebuild gives other weights, so the checkpoint keeps them."""
    model = _fit_and_save(_probe(RANDOM_SPEC), tmp_path / "random.ckpt")
    sd = _state(tmp_path / "random.ckpt")
    assert not any(k.endswith(REBUILT_MARKER) for k in sd)
    assert all(torch.equal(sd[f"backbone.{k}"], v) for k, v in model.backbone.state_dict().items())
    loaded = load_module(tmp_path / "random.ckpt").eval()
    x = _data(8)[:][0]
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_finetune_checkpoint_leaves_out_the_teacher_not_the_student(tmp_path) -> None:
    model = PerturbationRobustFineTune(backbone=SPEC, lr=1e-2, scheduler=None)
    _fit_and_save(model, tmp_path / "ft.ckpt")
    sd = _state(tmp_path / "ft.ckpt")
    assert [k for k in sd if k.startswith("teacher.")] == ["teacher." + REBUILT_MARKER]
    student = model.backbone.state_dict()
    assert all(torch.equal(sd[f"backbone.{k}"], v) for k, v in student.items())
    assert not all(torch.equal(v, model.teacher.state_dict()[k]) for k, v in student.items())  # the student trained
    loaded = load_module(tmp_path / "ft.ckpt").eval()
    assert state_fingerprint(loaded.state_dict()) == state_fingerprint(model.state_dict())


def test_task_prior_probe_checkpoint_leaves_out_the_backbone() -> None:
    kw = {"backbone": SPEC, "prior_backbone": SPEC, "num_tasks": 3}
    model = TaskPriorProbe(**kw, seed=1)
    ckpt = {"state_dict": model.state_dict()}
    model.on_save_checkpoint(ckpt)
    assert [k for k in ckpt["state_dict"] if k.startswith("backbone.")] == ["backbone." + REBUILT_MARKER]
    other = TaskPriorProbe(**kw, seed=2)  # another head initialisation
    other.on_load_checkpoint(ckpt)
    other.load_state_dict(ckpt["state_dict"])  # strict: every key present again
    assert state_fingerprint(other.state_dict()) == state_fingerprint(model.state_dict())


def test_saving_leaves_the_global_rng_alone() -> None:
    """The first save rebuilds the spec once to compare it (a random init draws from torch's global RNG); that must
    not shift the training run's random stream."""
    model = _probe(RANDOM_SPEC)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    model.on_save_checkpoint({"state_dict": model.state_dict()})
    assert torch.equal(torch.rand(3), expected)


def test_omit_and_restore_are_inverse_and_refuse_edits() -> None:
    model = _probe()
    sd = model.state_dict()
    small = omit_rebuilt_state(sd, "backbone.", state_fingerprint(model.backbone.state_dict()))
    back = restore_rebuilt_state(small, model, "test")
    assert list(back) != [] and set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
    assert getattr(back, "_metadata", None) is sd._metadata  # module versions that load_state_dict reads
    both = dict(small, **{"backbone.model.conv_stem.weight": sd["backbone.model.conv_stem.weight"]})
    with pytest.raises(ValueError, match="holds both weights under 'backbone.'"):
        restore_rebuilt_state(both, model, "test")
    with pytest.raises(ValueError, match="must name a submodule"):
        omit_rebuilt_state(sd, "backbone", "00")
