"""Shared fixtures: a small real photo (uint8 HWC and float NCHW) for comparisons with imagecorruptions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

H, W = 48, 64  # non-square catches H/W mix-ups; imagecorruptions needs >= 32 px


@pytest.fixture(scope="session")
def photo_u8() -> np.ndarray:
    from skimage import data

    return np.ascontiguousarray(data.astronaut()[100 : 100 + H, 150 : 150 + W])  # face and suit: edges and flat parts


@pytest.fixture(scope="session")
def photo(photo_u8) -> torch.Tensor:
    return torch.from_numpy(photo_u8).permute(2, 0, 1)[None].to(torch.float64) / 255.0


def to_u8_like_reference(y: torch.Tensor) -> np.ndarray:
    """imagecorruptions.corrupt returns ``np.uint8(float image)``: truncation, not rounding. Apply the same to ours."""
    return np.uint8(y[0].permute(1, 2, 0).double().numpy() * 255)


def mad_levels(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference in 8-bit levels (1 level = 1/255)."""
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())
