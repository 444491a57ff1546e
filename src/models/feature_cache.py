"""In-memory cache of frozen-backbone features keyed by dataset index (standard linear probing, ε = 0)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["FeatureCache"]


class FeatureCache:
    """Rows of a growable (capacity, D) tensor plus a filled mask.

    Valid only when the inputs for a given index never change (no random augmentation), which is what
    ``RobustLinearProbe`` checks before enabling it. Not saved in checkpoints: refilled lazily after a resume.
    """

    def __init__(self) -> None:
        self.features: Tensor | None = None
        self.filled: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.filled is None else int(self.filled.sum())

    def clear(self) -> None:
        self.features = self.filled = None

    def _grow(self, needed: int, dim: int, like: Tensor) -> None:
        cap = 0 if self.features is None else self.features.shape[0]
        if needed <= cap:
            return
        new_cap = max(needed, 2 * cap, 256)
        feats = like.new_zeros(new_cap, dim)
        filled = torch.zeros(new_cap, dtype=torch.bool, device=like.device)
        if self.features is not None:
            feats[:cap] = self.features
            filled[:cap] = self.filled
        self.features, self.filled = feats, filled

    def lookup(self, index: Tensor) -> tuple[Tensor | None, Tensor]:
        """(features or None, hit mask) for a batch of indices."""
        if self.filled is None:
            return None, torch.zeros_like(index, dtype=torch.bool)
        index = index.to(self.filled.device)
        in_range = index < self.filled.shape[0]
        hit = torch.zeros_like(index, dtype=torch.bool)
        hit[in_range] = self.filled[index[in_range]]
        return self.features[index.clamp(max=self.filled.shape[0] - 1)], hit

    def store(self, index: Tensor, features: Tensor) -> None:
        features = features.detach()
        index = index.to(features.device)
        self._grow(int(index.max()) + 1, features.shape[1], features)
        self.features[index] = features
        self.filled[index] = True
