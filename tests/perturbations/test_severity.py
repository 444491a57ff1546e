"""``perturb(x, name, severity=s)``: ImageNet-C severities exactly where k reproduces them, and clear errors (P21,
P27, P30, P34).

Tolerance against imagecorruptions: as tests/perturbations/test_reference.py (its module docstring derives it): at
most one 8-bit level per pixel and a mean absolute difference of at most one level after the reference's own uint8
truncation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from src.perturbations import PERTURBATIONS, SEVERITY_LEVELS, perturb, sample_parameters, severity_parameter
from src.perturbations.elastic import MAX_DISPLACEMENT_FRACTION, elastic_transform_with
from src.perturbations.photometric import noise_with

from .conftest import mad_levels, to_u8_like_reference

imagecorruptions = pytest.importorskip("imagecorruptions")
TOL_LEVELS = 1.0  # see the module docstring


@pytest.mark.parametrize("name", list(PERTURBATIONS))
def test_severity_is_k_where_exact_and_refused_with_a_reason_elsewhere(name):
    spec = PERTURBATIONS[name]
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    for s in SEVERITY_LEVELS:
        if s in spec.severities:
            a = perturb(x, name, severity=s, generator=torch.Generator().manual_seed(1))
            b = perturb(x, name, spec.severities[s], generator=torch.Generator().manual_seed(1))
            assert torch.equal(a, b), (name, s)
        else:
            with pytest.raises(ValueError, match=rf"severity {s} is not reproduced exactly by k: (it uses|its )"):
                perturb(x, name, severity=s)


@pytest.mark.parametrize(("name", "severity"), [(n, s) for n in PERTURBATIONS for s in PERTURBATIONS[n].severities])
def test_deterministic_severity_matches_imagecorruptions(photo_u8, photo, name, severity):
    if not PERTURBATIONS[name].deterministic:
        pytest.skip("random: same draws compared in test_reference.py at the same k (== severity, test above)")
    ours = to_u8_like_reference(perturb(photo, name, severity=severity))
    ref = imagecorruptions.corrupt(photo_u8, severity=severity, corruption_name=name)
    assert mad_levels(ours, ref) <= TOL_LEVELS
    assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 1


@pytest.mark.parametrize("name", ["brightness", "contrast"])
@pytest.mark.parametrize("severity", SEVERITY_LEVELS)
def test_imagenet_c_table_of_pixel_perturbations(photo_u8, photo, name, severity):
    """The recorded ImageNet-C k of EVERY severity is imagecorruptions' value (the formula, applied outside the
    domain too, reproduces the reference), so the exact/not-exact decision rests on the right numbers."""
    spec = PERTURBATIONS[name]
    k = torch.tensor([spec.imagenet_c[severity - 1]], dtype=torch.float64)
    ours = to_u8_like_reference(spec.fn(photo, k, None))
    ref = imagecorruptions.corrupt(photo_u8, severity=severity, corruption_name=name)
    assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 1


@pytest.mark.parametrize("severity", SEVERITY_LEVELS)
def test_imagenet_c_table_of_noise_and_elastic(photo_u8, photo, severity):
    """Same for the random ones whose other parameters never change with the severity (same numpy draws)."""
    np.random.seed(severity)
    ref = imagecorruptions.corrupt(photo_u8, severity=severity, corruption_name="gaussian_noise")
    np.random.seed(severity)
    noise = torch.from_numpy(np.random.normal(size=photo_u8.shape)).permute(2, 0, 1)[None]
    k = torch.tensor([PERTURBATIONS["gaussian_noise"].imagenet_c[severity - 1]], dtype=torch.float64)
    assert mad_levels(to_u8_like_reference(noise_with(photo, k, noise)), ref) <= TOL_LEVELS
    np.random.seed(severity)
    ref = imagecorruptions.corrupt(photo_u8, severity=severity, corruption_name="elastic_transform")
    np.random.seed(severity)
    m = photo_u8.shape[0] * MAX_DISPLACEMENT_FRACTION
    fields = torch.from_numpy(np.stack([np.random.uniform(-m, m, size=photo_u8.shape[:2]) for _ in range(2)]))[None]
    k = torch.tensor([PERTURBATIONS["elastic_transform"].imagenet_c[severity - 1]], dtype=torch.float64)
    assert mad_levels(to_u8_like_reference(elastic_transform_with(photo, k, fields)), ref) <= TOL_LEVELS


def test_severity_errors():
    x = torch.rand(1, 3, 16, 16)
    with pytest.raises(ValueError, match=r"pass exactly one of k .* and severity"):
        perturb(x, "fog")
    with pytest.raises(ValueError, match=r"pass exactly one of k .* and severity"):
        perturb(x, "fog", 1.0, severity=1)
    with pytest.raises(ValueError, match=r"severity must be one of ImageNet-C's levels \[1, 2, 3, 4, 5\], got 6"):
        perturb(x, "fog", severity=6)
    with pytest.raises(ValueError, match=r"quality factor .* is 25, outside the domain \[30.0, 70.0\].*exact: none"):
        severity_parameter("jpeg_compression", 1)
    with pytest.raises(ValueError, match=r"it uses wibble_decay 1.7 where ours is fixed at wibble_decay 2.0"):
        severity_parameter("fog", 3)


def test_p21_string_k_is_named():
    with pytest.raises(TypeError, match=r"jpeg_compression: k must be a number in \[30.0, 70.0\].*got '50' \(str\)"):
        perturb(torch.rand(2, 3, 32, 32), "jpeg_compression", "50")


def test_p34_negative_n_is_named():
    with pytest.raises(ValueError, match=r"n must be an integer >= 0 .*got -1 \(int\)"):
        sample_parameters("fog", -1)
    assert sample_parameters("fog", 0).shape == (0,)


def test_p27_meta_k_is_refused_clearly():
    with pytest.raises(ValueError, match=r"fog: k is a meta tensor \(shape only, no values\)"):
        perturb(torch.rand(2, 3, 32, 32), "fog", torch.tensor(1.0, device="meta"))


def test_p30_meta_images_are_refused_clearly():
    with pytest.raises(ValueError, match=r"images are a meta tensor \(shape only, no pixel values\)"):
        perturb(torch.rand(2, 3, 32, 32, device="meta"), "brightness", 0.3)


def test_generator_of_the_wrong_type_is_named():
    with pytest.raises(TypeError, match=r"generator must be a torch.Generator"):
        perturb(torch.rand(1, 3, 16, 16), "fog", 1.0, generator=np.random.default_rng(0))
