"""Our torch perturbations against imagecorruptions (ImageNet-C) at the parameters behind its severities.

Tolerance: mean absolute difference <= 1 level (1/255) after the reference's own uint8 conversion. Both sides compute
the same formula in floating point (float64 here); the remaining differences are (a) float round-off flipping the uint8
truncation of a pixel whose exact value lies within ~1e-12 of a level (one level on a vanishing fraction of pixels),
(b) OpenCV/libjpeg fixed-point arithmetic (resize of the frost photo, JPEG decoders) of at most one level per pixel,
and (c) for glass blur, ImageNet-C's intermediate uint8 truncation that we do not apply (0.5 level on average). Each of
(a)-(c) is bounded by one level per pixel, hence by one level on average: the 1/255 criterion. Random perturbations are
compared exactly by feeding both sides the same random draws (numpy's legacy generator, seeded).
"""

from __future__ import annotations

from io import BytesIO

import numpy as np
import pytest
import torch

from src.perturbations import PERTURBATIONS, perturb
from src.perturbations.blur import glass_blur_with, glass_shuffle
from src.perturbations.elastic import MAX_DISPLACEMENT_FRACTION, elastic_transform_with
from src.perturbations.photometric import noise_with
from src.perturbations.weather import FROST_FILES, _rescaled, fog_with, frost_layers, frost_with, plasma_fractal

from .conftest import mad_levels, to_u8_like_reference

imagecorruptions = pytest.importorskip("imagecorruptions")

TOL_LEVELS = 1.0  # see module docstring


def _reference(photo_u8, name, severity, **kw):
    return imagecorruptions.corrupt(photo_u8, severity=severity, corruption_name=name, **kw)


@pytest.mark.parametrize("name", ["brightness", "contrast", "defocus_blur"])
def test_deterministic_match_imagecorruptions(photo_u8, photo, name):
    spec = PERTURBATIONS[name]
    assert spec.severities, "every deterministic perturbation but JPEG has an in-domain severity"
    for severity, k in spec.severities.items():
        ours = to_u8_like_reference(perturb(photo, name, k))
        ref = _reference(photo_u8, name, severity)
        assert mad_levels(ours, ref) <= TOL_LEVELS, (name, severity)
        assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 1, (name, severity)  # (a): at most one level


@pytest.mark.parametrize("quality", [30, 50, 70])
def test_jpeg_matches_pil(photo_u8, photo, quality):
    """imagecorruptions' jpeg_compression is PIL ``save(quality=q)`` + reopen; its severities (q = 25 … 7) all lie
    below the domain [30, 70], so we compare with the same PIL round trip at in-domain qualities."""
    from PIL import Image

    buf = BytesIO()
    Image.fromarray(photo_u8).save(buf, "JPEG", quality=quality)
    ref = np.asarray(Image.open(buf).convert("RGB"))
    ours = np.uint8(np.round(perturb(photo, "jpeg_compression", quality)[0].permute(1, 2, 0).numpy() * 255))
    assert mad_levels(ours, ref) <= TOL_LEVELS


def test_gaussian_noise_same_draws(photo_u8, photo):
    k, seed = PERTURBATIONS["gaussian_noise"].severities[1], 3
    np.random.seed(seed)
    ref = _reference(photo_u8, "gaussian_noise", 1)
    np.random.seed(seed)
    noise = torch.from_numpy(np.random.normal(size=photo_u8.shape)).permute(2, 0, 1)[None]
    ours = to_u8_like_reference(noise_with(photo, torch.tensor([k], dtype=torch.float64), noise))
    assert mad_levels(ours, ref) <= TOL_LEVELS


def test_elastic_same_draws(photo_u8, photo):
    k, seed = PERTURBATIONS["elastic_transform"].severities[1], 4
    np.random.seed(seed)
    ref = _reference(photo_u8, "elastic_transform", 1)
    np.random.seed(seed)
    m = photo_u8.shape[0] * MAX_DISPLACEMENT_FRACTION
    dx = np.random.uniform(-m, m, size=photo_u8.shape[:2])
    dy = np.random.uniform(-m, m, size=photo_u8.shape[:2])
    fields = torch.from_numpy(np.stack([dx, dy]))[None]
    ours = to_u8_like_reference(elastic_transform_with(photo, torch.tensor([k], dtype=torch.float64), fields))
    assert mad_levels(ours, ref) <= TOL_LEVELS


@pytest.mark.parametrize("severity", [1, 2])
def test_fog_same_draws(photo_u8, photo, severity):
    k, seed = PERTURBATIONS["fog"].severities[severity], 5
    np.random.seed(seed)
    ref = _reference(photo_u8, "fog", severity)
    np.random.seed(seed)
    fractal = plasma_fractal(
        1, 64, 2.0, lambda shape, lo, hi: torch.from_numpy(np.random.uniform(lo, hi, shape[1:]))[None]
    )
    np.random.seed(seed)
    ref_fractal = imagecorruptions.corruptions.plasma_fractal(mapsize=64, wibbledecay=2.0)
    # the reference stores the map in float32 (relative round-off 6e-8 of values up to ~1e4 before normalisation)
    np.testing.assert_allclose(fractal[0].numpy(), ref_fractal, atol=1e-4)
    ours = to_u8_like_reference(fog_with(photo, torch.tensor([k], dtype=torch.float64), fractal))
    assert mad_levels(ours, ref) <= TOL_LEVELS


def test_frost_same_draws(photo_u8, photo):
    k, seed = PERTURBATIONS["frost"].severities[1], 6
    h, w = photo_u8.shape[:2]
    for s in range(seed, seed + 6):  # several photos
        np.random.seed(s)
        ref = _reference(photo_u8, "frost", 1)
        np.random.seed(s)
        idx = np.random.randint(len(FROST_FILES))
        fh, fw = _rescaled(idx, h, w).shape[1:]
        starts = [np.random.randint(0, fh - h), np.random.randint(0, fw - w)]
        layers = frost_layers(torch.tensor([idx]), torch.tensor([starts]), h, w)
        ours = to_u8_like_reference(frost_with(photo, torch.tensor([k], dtype=torch.float64), layers))
        assert mad_levels(ours, ref) <= TOL_LEVELS, idx


def _glass_offsets_from_numpy(seed: int, h: int, w: int, iterations: int = 2) -> torch.Tensor:
    """The (dx, dy) draws of imagecorruptions' shuffle loop for ``seed`` (numba's np.random = numpy's MT19937)."""
    np.random.seed(seed)
    off = torch.zeros(iterations, 1, 2, h, w, dtype=torch.long)
    for it in range(iterations):
        for r in range(h - 1, 1, -1):
            for c in range(w - 1, 1, -1):
                dx, dy = np.random.randint(-1, 1, size=(2,))
                off[it, 0, 0, r, c], off[it, 0, 1, r, c] = int(dy), int(dx)
    return off


def test_glass_shuffle_is_reference_loop():
    """Exact: our parallel gather equals imagecorruptions' sequential loop (pure-Python body, same seed)."""
    h, w, seed = 33, 40, 11
    img = np.arange(h * w * 3, dtype=np.int64).reshape(h, w, 3)
    ref = imagecorruptions.corruptions._shuffle_pixels_njit_glass_blur.py_func(h, w, img.copy(), (0.7, 1, 2), seed)
    ours = glass_shuffle(torch.from_numpy(img).permute(2, 0, 1)[None], _glass_offsets_from_numpy(seed, h, w))
    np.testing.assert_array_equal(ours[0].permute(1, 2, 0).numpy(), ref)


def test_glass_blur_same_draws(photo_u8, photo):
    k, seed = PERTURBATIONS["glass_blur"].severities[1], 12
    h, w = photo_u8.shape[:2]
    ref = _reference(photo_u8, "glass_blur", 1, seed=seed)
    ours = to_u8_like_reference(
        glass_blur_with(photo, torch.tensor([k], dtype=torch.float64), _glass_offsets_from_numpy(seed, h, w))
    )
    assert mad_levels(ours, ref) <= TOL_LEVELS
