"""FeatureExtractor: run a frozen feature function over many images at the machine's speed.

Interface (stable; the speed issue fills in the levers behind it):
    ext = FeatureExtractor(feature_fn, device="cpu", max_batch=256)
    z = ext(images)          # (N, C, H, W) float -> (N, D), inference mode, chunked by max_batch
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Tensor = torch.Tensor


class FeatureExtractor:
    """Callable wrapper: ``extractor(images) -> features`` under ``torch.inference_mode`` in chunks of
    ``max_batch`` images, on ``device``."""

    def __init__(
        self,
        feature_fn: Callable[[Tensor], Tensor],
        device: str | torch.device | None = None,
        max_batch: int = 256,
        inference: bool = True,
        **_: Any,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.feature_fn = feature_fn
        self.device = torch.device(device) if device is not None else None
        self.max_batch = int(max_batch)
        self.inference = inference

    def __call__(self, images: Tensor) -> Tensor:
        if self.device is not None:
            images = images.to(self.device)
        ctx = torch.inference_mode() if self.inference else torch.no_grad()
        with ctx:
            outs = [self.feature_fn(chunk) for chunk in images.split(self.max_batch)]
        return torch.cat(outs) if len(outs) > 1 else outs[0]


def as_extractor(fn: Callable[[Tensor], Tensor] | FeatureExtractor, **options: Any) -> FeatureExtractor:
    """``fn`` itself when it is already an extractor, else ``FeatureExtractor(fn, **options)``."""
    return fn if isinstance(fn, FeatureExtractor) else FeatureExtractor(fn, **options)
