"""Test-wide settings: offline hubs, headless matplotlib, small thread pools."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("PYTHONHASHSEED", "0")

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def lite0():
    """The embedded EfficientNet-Lite0 with its real ImageNet weights (loaded once per session)."""
    from src.backbones import create_backbone

    return create_backbone("embedded:efficientnet_lite0").eval()
