"""The exact filtering helpers against independent implementations (numpy.pad, scipy.ndimage.map_coordinates)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from src.perturbations._filters import pad2d
from src.perturbations.elastic import _sample_reflect

NUMPY_MODE = {"nearest": "edge", "reflect": "symmetric", "reflect101": "reflect"}


@pytest.mark.parametrize("mode", list(NUMPY_MODE))
@pytest.mark.parametrize("pad", [(0, 3), (2, 0), (4, 5), (6, 8), (7, 9), (16, 20)])  # last two: wider than 6x8
def test_pad2d_matches_numpy_pad(mode, pad):
    """Padding only copies values: exact equality, for pads narrower and (repeated reflection) wider than the image."""
    x = torch.rand(2, 3, 6, 8, dtype=torch.float64)
    ph, pw = pad
    ref = np.pad(x.numpy(), ((0, 0), (0, 0), (ph, ph), (pw, pw)), mode=NUMPY_MODE[mode])
    assert torch.equal(pad2d(x, ph, pw, mode), torch.from_numpy(ref))


def test_sample_reflect_matches_scipy_map_coordinates():
    """grid_sample with reflection = scipy's order-1 ``reflect`` interpolation, also for displacements that leave the
    image several times (±15 px on 40x50). Both interpolate the same two-neighbour convex combination in float64; the
    normalised-coordinate round trip moves a sample by ~W·u ≈ 1e-14 px, so values agree to ~1e-13 (bound: 1e-12)."""
    from scipy.ndimage import map_coordinates

    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 40, 50, generator=g, dtype=torch.float64)
    dy = (torch.rand(2, 40, 50, generator=g, dtype=torch.float64) - 0.5) * 30
    dx = (torch.rand(2, 40, 50, generator=g, dtype=torch.float64) - 0.5) * 30
    ours = _sample_reflect(x, dy, dx)
    rows, cols = np.meshgrid(np.arange(40), np.arange(50), indexing="ij")
    for i in range(2):
        coords = [rows + dy[i].numpy(), cols + dx[i].numpy()]
        for c in range(3):
            ref = map_coordinates(x[i, c].numpy(), coords, order=1, mode="reflect")
            np.testing.assert_allclose(ours[i, c].numpy(), ref, rtol=0, atol=1e-12)


def test_fog_draws_up_front_exactly_what_the_fractal_consumes():
    """The single up-front draw of fog is consumed exactly: one more value after the fractal is out of range."""
    from src.perturbations.weather import _symmetric_uniform_source, plasma_heights

    like = torch.zeros(1)
    uniform = _symmetric_uniform_source(2, 16, torch.Generator().manual_seed(0), like)
    plasma_heights(2, 16, 2.0, uniform)
    with pytest.raises(RuntimeError):
        uniform((1,), -1.0, 1.0)
