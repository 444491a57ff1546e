"""A test backbone source whose random weights are fixed by a seed: ``seeded:<timm arch>`` with option ``seed``.

Its spec rebuilds the same weights bit for bit, as a pretrained spec does (``embedded:``, a timm tag, a weights file),
at the size of a tiny timm model; setting ``CHANGED["offset"]`` stands for the weights a spec names having changed
since a checkpoint was written (a local weights file replaced, another package version).
"""

from __future__ import annotations

from typing import Any

import torch

from src.backbones import register_source
from src.backbones.timm_backbone import create_timm

SOURCE = "seeded"
SPEC = {"name": f"{SOURCE}:test_efficientnet", "seed": 0}
CHANGED = {"offset": 0}


def create_seeded(name: str, *, seed: int = 0, pretrained: bool = False, **opts: Any):
    """``timm:<name>`` randomly initialised from ``seed`` (+ ``CHANGED["offset"]``), the global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) + CHANGED["offset"])
        return create_timm(name, pretrained=False, **opts)


register_source(SOURCE, create_seeded)  # no lister: a test source, left out of list_backbones()
