"""compile=True: torch.compile (inductor, frozen weights) gives the eager features; other shapes run eagerly; a
weight change after compilation is detected (warning, eager from then on, never stale features)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from src.features import FeatureExtractor

from ._reference import U32, rel_errors


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2), nn.ReLU()
        )

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).mean((2, 3))


@pytest.mark.slow
def test_compiled_features_shapes_and_weight_guard():
    torch.manual_seed(0)
    net = TinyNet().eval()
    x = torch.rand(10, 3, 16, 16)
    with torch.no_grad():
        z_eager = net.embed(x)
        z64 = net.double().embed(x.double())
    net.float()
    ext = FeatureExtractor(net.embed, max_batch=4, compile=True)
    z = ext(x)  # chunks 4, 4 (compiled), 2 (another shape: eager)
    assert ext.compile_s is not None and ext.compile_s > 0
    # Tolerance: the fused/folded graph reorders float32 operations (BN folded into the conv weights, fused
    # kernels); as in test_extractor, its error to the float64 forward must be of the size of the eager float32
    # error e_ref, within c = 4 (+ an 8u floor).
    e_ref = float(rel_errors(z_eager, z64).max())
    assert float(rel_errors(z, z64).max()) <= 4 * e_ref + 8 * U32
    assert ext._compiled.key[0] == (4, 3, 16, 16)
    with torch.no_grad():
        net.body[0].weight.mul_(2.0)  # an in-place update (as an optimizer step): the frozen graph is stale now
        z_new = net.embed(x)
        z64_new = copy.deepcopy(net).double().embed(x.double())
    with pytest.warns(RuntimeWarning, match="weights changed"):
        z2 = ext(x)
    # eager channels_last now (the same float32 error law as above), and never the stale frozen weights, whose
    # features differ at O(1): the first conv's weights doubled
    e_new = float(rel_errors(z_new, z64_new).max())
    assert float(rel_errors(z2, z64_new).max()) <= 4 * e_new + 8 * U32
    assert float(rel_errors(z, z64_new).max()) > 1e-2
    assert ext._compiled.disabled is not None
