"""Supervised (pre)training of a whole backbone + linear head: the "monitor pretraining" demo of SynBench
(synbench_icml2024.txt A.2, "model training": watch SynBench-Score while a model trains)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from src.backbones import Backbone, check_images
from src.utils.checkpoint import record_module_class

from .robust_probe import _unpack, build_backbone

__all__ = ["SupervisedPretraining"]


class SupervisedPretraining(L.LightningModule):
    """Cross-entropy training of ``backbone`` (all layers) and a linear head; exposes ``self.backbone`` so the
    monitoring callbacks (``SynBenchCallback``) can follow its representation epoch by epoch."""

    def __init__(
        self,
        backbone: Backbone | str | Mapping[str, Any] = "timm:test_efficientnet",
        num_classes: int = 10,
        lr: float = 2e-3,
        weight_decay: float = 0.05,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        if int(num_classes) < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        spec = backbone.name if isinstance(backbone, Backbone) else backbone
        self.save_hyperparameters({"backbone": spec if isinstance(spec, str) else dict(spec)})
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = build_backbone(backbone)
        self.head = nn.Linear(self.backbone.embed_dim, int(num_classes))
        self.train_acc = MulticlassAccuracy(int(num_classes), average="micro")
        self.val_acc = MulticlassAccuracy(int(num_classes), average="micro")

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone.embed(x))

    def on_fit_start(self) -> None:
        self.train_acc.reset()
        self.val_acc.reset()

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y, _ = _unpack(batch)
        if batch_idx == 0:
            check_images(x, name="train images", value_range=(0.0, 1.0))
        logits = self(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.hparams.label_smoothing)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite training loss at step {self.global_step}; lower model.lr")
        self.train_acc(logits.detach(), y)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(y))
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, batch_size=len(y))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y, _ = _unpack(batch)
        logits = self(x)
        self.val_acc(logits, y)
        self.log("val/loss", F.cross_entropy(logits, y), batch_size=len(y), sync_dist=True)
        self.log("val/acc", self.val_acc, prog_bar=True, batch_size=len(y))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        record_module_class(self, checkpoint)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(
            opt, T_max=max(1, int(self.trainer.estimated_stepping_batches))
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
