"""Supervised (pre)training of a whole backbone + linear head: the "monitor pretraining" demo of SynBench
(Ko et al., ICML 2024, arXiv:2210.02989, App. A.2 "model training": watch SynBench-Score while a model trains)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from ..backbones import Backbone, check_images
from ..utils.checkpoint import register_module
from ..utils.checks import check_int
from .base import RepBenchModule, unpack_batch

__all__ = ["SupervisedPretraining"]


@register_module
class SupervisedPretraining(RepBenchModule):
    """Cross-entropy training of ``backbone`` (all layers) and a linear head; exposes ``self.backbone`` so the
    monitoring callbacks (``SynBenchCallback``) can follow its representation epoch by epoch.

    The whole module trains in train mode (BatchNorm layers update their running statistics, dropout is active):
    :class:`~src.models.base.RepBenchModule` switches it at fit start, training start and every epoch start.

    Defaults equal ``configs/model/supervised.yaml`` with ``configs/backbone/timm_resnet10t_random.yaml``.
    """

    def __init__(
        self,
        backbone: Backbone | str | Mapping[str, Any] = MappingProxyType(
            {"name": "timm:resnet10t", "pretrained": False}
        ),
        num_classes: int = 10,
        lr: float = 2e-3,
        weight_decay: float = 0.05,
        label_smoothing: float = 0.0,
        optimizer: str = "adamw",
        scheduler: str | None = "cosine",
    ) -> None:
        if not 0.0 <= float(label_smoothing) < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        num_classes = check_int(num_classes, "model.num_classes", 2, meaning="classes of the head")
        super().__init__(backbone)
        self.head = nn.Linear(self.backbone.embed_dim, num_classes)
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone.embed(x))

    def setup(self, stage: str) -> None:
        self.check_datamodule_classes()

    def on_fit_start(self) -> None:
        super().on_fit_start()  # train mode: backbone and head (BatchNorm running statistics update)
        for metric in (self.train_acc, self.val_acc, self.test_acc):
            metric.reset()  # states created in __init__ are shared between ddp_spawn workers until reset

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y, _ = unpack_batch(batch)
        if batch_idx == 0:
            check_images(x, name="train images", value_range=(0.0, 1.0))
            self.check_labels(y, "train")
        logits = self(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.hparams.label_smoothing)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite training loss at step {self.global_step}; lower model.lr")
        self.train_acc(logits.detach(), y)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(y))
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, batch_size=len(y))
        return loss

    def _eval_step(self, stage: str, batch: Any) -> None:
        x, y, _ = unpack_batch(batch)
        logits = self(x)
        acc = self.val_acc if stage == "val" else self.test_acc
        acc(logits, y)
        self.log(f"{stage}/loss", F.cross_entropy(logits, y), batch_size=len(y), sync_dist=True)
        self.log(f"{stage}/acc", acc, prog_bar=True, batch_size=len(y))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("test", batch)
