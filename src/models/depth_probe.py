"""Depth estimation with a head on a frozen backbone (Liu et al., "Robustness of Vision Foundation Models to Common
Perturbations", arXiv:2604.14973, App. D: a convolutional decoder head — batch normalization, a 1×1 convolution, the
readout — on the frozen foundation model, trained on NYU-Depth V2; App. F: DINOv2's released one-layer head).

The head is :class:`~src.divergence_radius.depth.DepthHead` on the backbone's last spatial feature map
(:meth:`~src.backbones.base.Backbone.embed_with_map`: patch tokens of a ViT, the last map of a conv net) with the
pooled embedding concatenated at every position; it is trained with ``loss`` (Eigen et al.'s scale-invariant log
loss, DINOv2's, or the MSE) on the valid pixels; ``val/rmse`` and ``test/rmse`` are the mean per-image RMSE
(:class:`~src.metrics.DepthRMSE`, App. E). ``python -m src.train experiment=depth_synthetic`` trains it on synthetic
scenes (``data=nyu_depth_v2`` on NYU-Depth V2), ``python -m src.eval ckpt_path=...`` tests a checkpoint, and
``python -m src.divergence_radius task=depth`` measures RMSE_p under perturbation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..backbones import Backbone, check_images
from ..divergence_radius.depth import DepthHead, DepthHeadConfig, depth_loss
from ..metrics.depth import DepthRMSE
from ..utils.checkpoint import register_module
from ..utils.checks import check_int
from .base import RepBenchModule, unpack_batch

__all__ = ["DepthProbe"]


@register_module
class DepthProbe(RepBenchModule):
    """Frozen backbone (always in eval mode) + :class:`~src.divergence_radius.depth.DepthHead`.

    Args:
        backbone: a :class:`Backbone` with a feature map (timm:, embedded:, hf:, open_clip:), a registry name or
            ``{name: ..., **opts}``. Checkpoints leave out its weights when this spec rebuilds them bit for bit
            (:class:`~src.models.base.RepBenchModule`).
        image_size: the images' side; one forward of a blank image of this size reads the feature map's channels
            (the head's input width) when the module is built.
        readout, n_bins, min_depth, max_depth, upsample, with_embedding: the head
            (:class:`~src.divergence_radius.depth.DepthHeadConfig`, whose defaults these are).
        loss: "silog" | "mse" (:func:`~src.divergence_radius.depth.depth_loss`).
        lr, weight_decay, optimizer, scheduler: the head's optimiser (:class:`~src.models.base.RepBenchModule`).
    """

    rebuilt_from_spec = ("backbone",)

    def __init__(
        self,
        backbone: Backbone | str | Mapping[str, Any] = "embedded:efficientnet_lite0",
        image_size: int = 64,
        readout: str = DepthHeadConfig.readout,  # the head's defaults have one owner, DepthHeadConfig
        n_bins: int = DepthHeadConfig.n_bins,
        min_depth: float = DepthHeadConfig.min_depth,
        max_depth: float = DepthHeadConfig.max_depth,
        upsample: int = DepthHeadConfig.upsample,
        with_embedding: bool = DepthHeadConfig.with_embedding,
        loss: str = DepthHeadConfig.loss,
        lr: float = DepthHeadConfig.lr,
        weight_decay: float = DepthHeadConfig.weight_decay,
        optimizer: str = "adam",
        scheduler: str | None = None,
        seed: int = 0,
    ) -> None:
        cfg = DepthHeadConfig(readout=readout, n_bins=n_bins, min_depth=min_depth, max_depth=max_depth,
                              upsample=upsample, with_embedding=with_embedding, loss=loss, lr=lr,
                              weight_decay=weight_decay)  # fmt: skip
        image_size = check_int(image_size, "model.image_size", 1, meaning="pixels per side of the images")
        super().__init__(backbone)
        self.backbone.requires_grad_(False).eval()
        with torch.no_grad():
            device = next((p.device for p in self.backbone.parameters()), torch.device("cpu"))
            _, fmap = self.backbone.embed_with_map(torch.zeros(1, 3, image_size, image_size, device=device))
        self.head = DepthHead(fmap.shape[1], self.backbone.embed_dim, **cfg.head_options())
        self.loss_kind = cfg.loss
        self.val_rmse, self.test_rmse = DepthRMSE(), DepthRMSE()
        self._checked: set[str] = set()

    def train(self, mode: bool = True) -> DepthProbe:
        """Frozen means frozen: the backbone stays in eval mode (the head's BatchNorm trains)."""
        super().train(mode)
        self.backbone.eval()
        return self

    def forward(self, x: Tensor) -> Tensor:
        """Pixel-space images (N, 3, H, W) -> depth maps (N, 1, H, W) in metres."""
        with torch.no_grad():
            z, fmap = self.backbone.embed_with_map(x)
        return self.head(fmap, z, x.shape[-2:])

    def trainable_parameters(self) -> Iterable[nn.Parameter]:
        return self.head.parameters()  # the backbone is frozen

    def on_fit_start(self) -> None:
        super().on_fit_start()
        for m in (self.val_rmse, self.test_rmse):
            m.reset()

    def _step(self, stage: str, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        x, y, _ = unpack_batch(batch)
        if stage not in self._checked:
            check_images(x, name=f"{stage} images", value_range=(0.0, 1.0))
            if y.dim() != 4 or y.shape[1] != 1 or y.shape[0] != x.shape[0] or not y.is_floating_point():
                raise ValueError(
                    f"{stage} targets must be depth maps (N, 1, H, W) in metres, got {tuple(y.shape)} {y.dtype}; use "
                    "a depth data module (data=synthetic_depth or data=nyu_depth_v2)"
                )
            self._checked.add(stage)
        pred = self(x)
        if pred.shape[-2:] != y.shape[-2:]:
            pred = nn.functional.interpolate(pred, size=y.shape[-2:], mode="bilinear", align_corners=False)
        return pred, y, depth_loss(pred, y, self.loss_kind)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        _, y, loss = self._step("train", batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite training loss at step {self.global_step} (lr={self.hparams.lr}); lower model.lr"
            )
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=len(y))
        return loss

    def _eval_step(self, stage: str, batch: Any) -> None:
        pred, y, loss = self._step(stage, batch)
        metric = self.val_rmse if stage == "val" else self.test_rmse
        metric(pred, y)
        self.log(f"{stage}/loss", loss, on_epoch=True, batch_size=len(y), sync_dist=True)
        self.log(f"{stage}/rmse", metric, on_epoch=True, prog_bar=True, batch_size=len(y))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("test", batch)
