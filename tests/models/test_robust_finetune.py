"""PerturbationRobustFineTune: student starts at the teacher, the loss falls, lambda trades robustness for utility,
the teacher stays frozen, layer selection, checkpoints, bad input."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from src.backbones import create_backbone
from src.models import PerturbationRobustFineTune
from src.models.robust_finetune import select_trainable
from src.utils.checkpoint import load_module
from tests._lightning import quiet_trainer

TINY = {"name": "timm:test_efficientnet", "pretrained": False}


def _images(n: int = 16, size: int = 16, seed: int = 0) -> torch.Tensor:
    """Smooth random images (low-frequency noise upsampled): JPEG and blurs act on them as on photos."""
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, 3, size // 4, size // 4, generator=g)
    return torch.nn.functional.interpolate(low, size=(size, size), mode="bilinear", align_corners=False).clamp(0, 1)


def _loader(x: torch.Tensor, batch_size: int = 8) -> DataLoader:
    return DataLoader(TensorDataset(x, torch.zeros(len(x), dtype=torch.long)), batch_size=batch_size)


def _model(**kw) -> PerturbationRobustFineTune:
    torch.manual_seed(0)
    kw.setdefault("perturbations", ["gaussian_noise"])
    kw.setdefault("scheduler", None)
    return PerturbationRobustFineTune(TINY, **kw)


def _fit(model, x, steps: int) -> None:
    quiet_trainer(max_steps=steps, num_sanity_val_steps=0, limit_val_batches=0).fit(model, _loader(x))


def _utility(model, x) -> float:
    with torch.no_grad():
        return float(torch.nn.functional.cosine_similarity(model.teacher.embed(x), model.backbone.embed(x)).mean())


def test_student_starts_at_teacher_and_teacher_is_frozen():
    model = _model()
    x = _images(8)
    model.train()
    assert not model.teacher.training
    assert not any(p.requires_grad for p in model.teacher.parameters())
    out = model._losses(x, "val", 0)
    # f' = f exactly at step 0 (BatchNorm statistics frozen): cos = 1 up to float32 round-off of the norms (~1e-6)
    assert float(out["l2"]) == pytest.approx(-1.0, abs=1e-5)
    before = {k: v.clone() for k, v in model.teacher.state_dict().items()}
    _fit(model, _images(16), steps=2)
    assert all(torch.equal(before[k], v) for k, v in model.teacher.state_dict().items()), "teacher changed"
    assert not model.teacher.training


def test_loss_decreases():
    """On a fixed batch with fixed perturbation draws (the validation generator), L1 + λ·L2 falls after training
    (λ = 0.1: at step 0 L2 is at its optimum −1, so the decrease comes from L1)."""
    model = _model(lam=0.1, lr=3e-3)
    x = _images(16)
    before = float(model._losses(x, "val", 0)["loss"])
    _fit(model, x, steps=8)
    after = float(model._losses(x, "val", 0)["loss"])
    assert after < before - 1e-3, (before, after)


def test_lambda_trades_robustness_for_utility():
    """λ = 0 drifts from the teacher (collapse direction); a large λ keeps the teacher cosine near 1."""
    x = _images(16)
    free, tied = _model(lam=0.0, lr=3e-4), _model(lam=100.0, lr=3e-4)
    _fit(free, x, steps=8)
    _fit(tied, x, steps=8)
    u_free, u_tied = _utility(free, x), _utility(tied, x)
    assert u_tied > 0.95, u_tied
    assert u_tied > u_free, (u_tied, u_free)
    l1_free = float(free._losses(x, "val", 0)["l1"])
    l1_tied = float(tied._losses(x, "val", 0)["l1"])
    assert l1_free <= l1_tied + 1e-4, (l1_free, l1_tied)  # without the utility term robustness is at least as good


def test_validation_logs_and_checkpoint_round_trip(tmp_path):
    model = _model(lam=1.0, lr=1e-3, perturbations=["jpeg_compression", "contrast"], k_sampling="image")
    x = _images(16)
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0, log_every_n_steps=1)
    trainer.fit(model, _loader(x), _loader(x[:8], batch_size=4))
    logged = trainer.callback_metrics
    for key in ("train/l1", "train/l2", "train/loss", "val/l1", "val/l2", "val/utility", "val/pairwise_cos"):
        assert key in logged and torch.isfinite(logged[key]), key
    assert -1.0 <= float(logged["val/l1"]) <= 1.0 and float(logged["val/utility"]) <= 1.0 + 1e-6
    path = tmp_path / "ft.ckpt"
    trainer.save_checkpoint(path)
    loaded = load_module(path, expected=PerturbationRobustFineTune)
    loaded.eval()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.backbone.embed(x[:4]), model.backbone.embed(x[:4]))
        torch.testing.assert_close(loaded.teacher.embed(x[:4]), model.teacher.embed(x[:4]))
    assert loaded.hparams.perturbations == ["jpeg_compression", "contrast"]
    assert not any(p.requires_grad for p in loaded.teacher.parameters())


def test_trainable_selection():
    bb = create_backbone("timm:test_efficientnet", pretrained=False)
    names = [n for n, _ in bb.named_parameters()]
    assert select_trainable(bb, "all") == names
    norm = select_trainable(bb, "norm_only")
    assert norm and all(".bn" in n for n in norm)
    last = select_trainable(bb, "last_n_blocks:1")
    assert any(n.startswith("model.blocks.4.") for n in last) and "model.conv_head.weight" in last
    assert not any(n.startswith("model.blocks.3.") or n.startswith("model.conv_stem") for n in last)
    model = _model(trainable="norm_only")
    assert {n for n, p in model.backbone.named_parameters() if p.requires_grad} == set(norm)
    assert len(list(model.trainable_parameters())) == len(norm)


def test_bad_arguments():
    with pytest.raises(ValueError, match="lam must be >= 0"):
        _model(lam=-1.0)
    with pytest.raises(ValueError, match="perturbations must be a non-empty list"):
        _model(perturbations=["snow"])
    with pytest.raises(ValueError, match="k_sampling"):
        _model(k_sampling="epoch")
    with pytest.raises(ValueError, match="trainable must be"):
        _model(trainable="first_block")
    with pytest.raises(ValueError, match="only 5 blocks"):
        _model(trainable="last_n_blocks:9")
    model = _model()
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        model._losses(_images(4) * 3, "train", 0)
