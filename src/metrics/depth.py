"""``DepthRMSE``: the mean per-image depth RMSE of a data set (Liu et al., "Robustness of Vision Foundation Models to
Common Perturbations", arXiv:2604.14973, App. E: "the average root mean squared error between model's predicted depth
map and the ground-truth depth map"), per image over its valid pixels (:func:`~src.divergence_radius.depth.image_rmse`).

States are the sum of the per-image RMSEs and the image count (float64, ``dist_reduce_fx="sum"``), so the value under
DDP equals the single-process one whatever the split of images over ranks.

    metric = DepthRMSE()
    metric.update(pred, target)   # (N, 1, H, W) depth maps in metres; target <= 0 or non-finite: no ground truth
    metric.compute()              # mean over the images seen
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ..divergence_radius.depth import image_rmse

__all__ = ["DepthRMSE"]


class DepthRMSE(Metric):
    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("total", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, pred: Tensor, target: Tensor) -> None:
        """Add the per-image RMSEs of predicted maps ``pred`` against ``target`` (same shape)."""
        rmse = image_rmse(pred.detach(), target.detach())
        self.total += rmse.sum().to(self.total)
        self.count += rmse.numel()

    def compute(self) -> Tensor:
        if float(self.count) == 0:
            raise ValueError("DepthRMSE saw no images")
        return self.total / self.count
