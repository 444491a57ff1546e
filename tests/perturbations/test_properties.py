"""Properties of the perturbations: domains and grids, monotonicity in k, range, seeding, per-image k, devices and
dtypes, distribution of the random ones against imagecorruptions, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from src.perturbations import MIN_SIZE, PERTURBATIONS, parameter_grid, perturb
from src.perturbations.blur import glass_blur_with, glass_offsets
from src.perturbations.elastic import elastic_fields, elastic_transform_with

NAMES = list(PERTURBATIONS)
MILDER_WITH_K = {"jpeg_compression", "contrast"}  # higher quality / factor = closer to the clean image
RANDOM = [n for n in NAMES if not PERTURBATIONS[n].deterministic]

TABLE_8 = {
    "jpeg_compression": (30, 70),
    "brightness": (0.1, 0.5),
    "contrast": (0.3, 0.7),
    "defocus_blur": (1, 5),
    "elastic_transform": (0.01, 0.05),
    "fog": (0.5, 2.5),
    "frost": (0.2, 0.6),
    "gaussian_noise": (0.02, 0.10),
    "glass_blur": (0.2, 1.0),
}


@pytest.fixture(scope="module")
def photos() -> torch.Tensor:
    """Three 40x48 float32 crops of real photos."""
    from skimage import data

    crops = [data.astronaut()[60:100, 180:228], data.chelsea()[100:140, 150:198], data.coffee()[150:190, 250:298]]
    return torch.stack([torch.from_numpy(np.ascontiguousarray(c)).permute(2, 0, 1) for c in crops]).float() / 255


def test_registry_has_table_8():
    assert set(PERTURBATIONS) == set(TABLE_8)
    for name, dom in TABLE_8.items():
        assert PERTURBATIONS[name].domain == pytest.approx(dom)


@pytest.mark.parametrize("name", NAMES)
def test_parameter_grid(name):
    a, b = PERTURBATIONS[name].domain
    g = parameter_grid(name, 5)
    # a + i(b - a)/(m - 1): linspace in float64, exact to a few ulps of b
    torch.testing.assert_close(g, torch.tensor([a + i * (b - a) / 4 for i in range(5)], dtype=torch.float64))
    assert parameter_grid(name, 1).tolist() == [pytest.approx((a + b) / 2)]
    r = parameter_grid(name, 64, mode="random", generator=torch.Generator().manual_seed(0))
    assert (r >= a).all() and (r <= b).all() and (r.diff() >= 0).all()
    r2 = parameter_grid(name, 64, mode="random", generator=torch.Generator().manual_seed(0))
    assert torch.equal(r, r2)


@pytest.mark.parametrize("name", NAMES)
def test_monotone_range_and_shape(photos, name):
    """Mean distance from the clean images grows with the strength (k, or −k for JPEG quality and contrast); common
    random numbers (same seed at every k) make the comparison pathwise for the random perturbations."""
    ks = parameter_grid(name, 5)
    dist = []
    for k in ks:
        y = perturb(photos, name, float(k), generator=torch.Generator().manual_seed(0))
        assert y.shape == photos.shape and y.dtype == photos.dtype
        assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0
        dist.append(float((y - photos).abs().mean()))
        if name == "glass_blur":
            # the mean absolute change is NOT monotone in the blur sigma: at small sigma the sharp one-pixel shuffle
            # changes pixels about as much as a strong blur does (measured: 0.031, 0.030, 0.029, 0.029, 0.030).
            # The blur's strength is: the mean horizontal gradient magnitude falls with sigma.
            dist[-1] = -float((y[..., 1:] - y[..., :-1]).abs().mean())
    d = np.array(dist[::-1] if name in MILDER_WITH_K else dist)
    assert (np.diff(d) > 0).all(), (name, dist)
    if name != "glass_blur":
        assert d[0] > 1e-3, "the mildest setting still changes the image"


@pytest.mark.parametrize("name", NAMES)
def test_seeded_reproducibility(photos, name):
    k = float(parameter_grid(name, 3)[1])
    y1 = perturb(photos, name, k, generator=torch.Generator().manual_seed(1))
    y2 = perturb(photos, name, k, generator=torch.Generator().manual_seed(1))
    assert torch.equal(y1, y2)
    y3 = perturb(photos, name, k, generator=torch.Generator().manual_seed(2))
    assert torch.equal(y1, y3) == PERTURBATIONS[name].deterministic


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_dtype_preserved(photos, name, dtype):
    k = float(parameter_grid(name, 3)[1])
    x = photos.to(dtype)
    y = perturb(x, name, k, generator=torch.Generator().manual_seed(0))
    assert y.dtype == dtype and y.device == x.device
    y32 = perturb(photos, name, k, generator=torch.Generator().manual_seed(0))
    # float16 input is rounded to 2^-11 relative (<= 2.5e-4 absolute in [0, 1]) before and after the float32 computation;
    # JPEG re-quantises to 1/255 and a half-level shift can flip a DCT coefficient: compare means there.
    if name == "jpeg_compression":
        assert abs(float(y.double().mean() - y32.double().mean())) < 1 / 255
    else:
        torch.testing.assert_close(y.float(), y32, atol=2e-3, rtol=0)  # a few float16 roundings of <= 2.5e-4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", NAMES)
def test_cuda_matches_cpu(photos, name):
    """Draws come from the (CPU) generator, so a seed gives the same images on any device."""
    k = float(parameter_grid(name, 3)[1])
    y_cpu = perturb(photos, name, k, generator=torch.Generator().manual_seed(0))
    y_gpu = perturb(photos.cuda(), name, k, generator=torch.Generator().manual_seed(0))
    assert y_gpu.device.type == "cuda"
    # same float32 formula on both devices; different reduction orders (means, convolutions): ~1e-6, plus at most
    # one level where a float differs across a rounding boundary (JPEG)
    torch.testing.assert_close(y_gpu.cpu(), y_cpu, atol=1.5 / 255, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_per_image_k_equals_separate_calls(photos, name):
    spec = PERTURBATIONS[name]
    ks = parameter_grid(name, 3)
    if spec.deterministic:
        batched = perturb(photos, name, ks)
        single = torch.cat([perturb(photos[i : i + 1], name, float(ks[i])) for i in range(3)])
        torch.testing.assert_close(batched, single, atol=1e-6, rtol=0)  # float32 round-off of identical formulas
    elif name in ("glass_blur", "elastic_transform"):  # per-image kernels / alpha with fixed draws
        n, _, h, w = photos.shape
        if name == "glass_blur":
            draws = glass_offsets(n, h, w, torch.Generator().manual_seed(0), photos)
            fn, sl = glass_blur_with, (lambda i: draws[:, i : i + 1])
        else:
            draws = elastic_fields(n, h, w, torch.Generator().manual_seed(0), photos)
            fn, sl = elastic_transform_with, (lambda i: draws[i : i + 1])
        batched = fn(photos, ks, draws)
        single = torch.cat([fn(photos[i : i + 1], ks[i : i + 1], sl(i)) for i in range(3)])
        torch.testing.assert_close(batched, single, atol=1e-6, rtol=0)


def test_gaussian_noise_statistics():
    """On mid-grey images clipping has probability 2·Φ(−0.5/0.1) < 6e-7 per pixel (negligible): y − x is N(0, k²).
    n = 3·64·64·8 = 98304 values; the sample mean has standard error k/√n and the sample std k/√(2n); 5 SE bounds
    (two-sided p < 6e-7 each)."""
    x = torch.full((8, 3, 64, 64), 0.5, dtype=torch.float64)
    for k in (0.02, 0.1):
        e = perturb(x, "gaussian_noise", k, generator=torch.Generator().manual_seed(0)) - x
        n = e.numel()
        assert abs(float(e.mean())) <= 5 * k / n**0.5
        assert abs(float(e.std()) - k) <= 5 * k / (2 * n) ** 0.5


@pytest.mark.slow  # glass blur's reference compiles its numba loop (~20 s)
@pytest.mark.parametrize("name", RANDOM)
def test_random_match_imagecorruptions_in_distribution(name):
    """Mean absolute change from the clean image, over R independent draws on each side, at the in-domain severity:
    the two means agree within 4 two-sample standard errors sqrt(s1²/R + s2²/R) (p < 6e-5 under equal laws)."""
    ic = pytest.importorskip("imagecorruptions")
    from skimage import data

    u8 = np.ascontiguousarray(data.chelsea()[80:144, 120:184])
    x = torch.from_numpy(u8).permute(2, 0, 1)[None].double() / 255
    severity, k = next(iter(PERTURBATIONS[name].severities.items()))
    r = 16
    np.random.seed(0)
    ref = [
        np.abs(ic.corrupt(u8, severity=severity, corruption_name=name).astype(np.float64) - u8).mean() / 255
        for _ in range(r)
    ]
    g = torch.Generator().manual_seed(0)
    ours = [
        float(
            (np.uint8(perturb(x, name, k, generator=g)[0].permute(1, 2, 0).numpy() * 255) / 255 - u8 / 255)
            .__abs__()
            .mean()
        )
        for _ in range(r)
    ]
    se = (np.var(ref, ddof=1) / r + np.var(ours, ddof=1) / r) ** 0.5
    assert abs(np.mean(ours) - np.mean(ref)) <= 4 * se + 0.5 / 255, (np.mean(ours), np.mean(ref), se)


def test_empty_batch():
    x = torch.zeros(0, 3, 32, 32)
    for name in NAMES:
        assert perturb(x, name, PERTURBATIONS[name].domain[0]).shape == x.shape


def test_bad_input(photos):
    with pytest.raises(ValueError, match=r"outside the domain \[30.0, 70.0\]"):
        perturb(photos, "jpeg_compression", 25)
    with pytest.raises(ValueError, match="outside the domain"):
        perturb(photos, "fog", torch.tensor([0.5, 1.0, 3.0]))
    with pytest.raises(ValueError, match="outside the domain"):
        perturb(photos, "fog", float("nan"))
    with pytest.raises(ValueError, match="one value per image"):
        perturb(photos, "fog", [1.0, 2.0])
    with pytest.raises(ValueError, match="known: jpeg_compression"):
        perturb(photos, "snow", 1.0)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        perturb(photos * 2, "contrast", 0.5)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        perturb(photos.masked_fill(photos > 0.5, float("nan")), "contrast", 0.5)
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        perturb(photos[0], "contrast", 0.5)
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        perturb(photos[:, :1], "contrast", 0.5)
    with pytest.raises(ValueError, match=f"at least {MIN_SIZE}"):
        perturb(photos[:, :, :8, :8], "contrast", 0.5)
    with pytest.raises(TypeError, match="float"):
        perturb((photos * 255).to(torch.uint8), "contrast", 0.5)
    with pytest.raises(ValueError, match="positive integer"):
        parameter_grid("fog", 0)
    with pytest.raises(ValueError, match="'equal' or 'random'"):
        parameter_grid("fog", 3, mode="grid")
    # endpoints given in float32 are accepted (round-off 6e-8 relative is within the documented slack)
    perturb(photos, "elastic_transform", torch.tensor([0.05, 0.01, 0.03], dtype=torch.float32))
