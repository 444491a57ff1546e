"""Metrics are correct under DDP: 2 CPU processes (gloo, ddp_spawn) report what 1 process reports."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from src.data import DigitsDataModule
from src.models import RobustLinearProbe


def _validate(model, devices: int) -> dict[str, float]:
    kw = {"strategy": "ddp_spawn"} if devices > 1 else {}
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        inference_mode=False,
        **kw,
    )
    dm = DigitsDataModule(image_size=32, batch_size=64, seed=0)
    return {k: float(v) for k, v in trainer.validate(model, datamodule=dm, verbose=False)[0].items()}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_process_validation_equals_one_process() -> None:
    from src.backbones import create_backbone

    torch.manual_seed(0)
    backbone = create_backbone("timm:test_efficientnet", pretrained=False)
    model = RobustLinearProbe(
        backbone=backbone, num_classes=10, epsilon=0.0, eval_epsilons=[0.25], eval_attack={"steps": 1}, scheduler=None
    )
    # a head that is not trivially at chance: fit it briefly on one process first
    L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        inference_mode=False,
        limit_val_batches=0,
    ).fit(model, datamodule=DigitsDataModule(image_size=32, seed=0))
    one = _validate(model, 1)
    two = _validate(model, 2)
    assert 0.2 < one["val/acc"] < 1.0
    # 360 validation samples are split 180/180 with no padding duplicates: the counts are exact
    assert two["val/acc"] == pytest.approx(one["val/acc"], abs=1e-6)
    assert two["val/adv/acc_pgd1_l2_0p25"] == pytest.approx(one["val/adv/acc_pgd1_l2_0p25"], abs=1e-6)
