"""src.images.probe_images: the one vocabulary of probe-image sources of the image monitors, each source, resize or
not, gray -> RGB, denormalize, and the errors (naming the argument and the fix)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from src.images.digits import load_digits_tensors, upsample_digits
from src.images.photos import bundled_photos
from src.images.probe_images import BUNDLED_DIGITS, IMAGE_SOURCES, check_image_source, check_num_images, probe_images


def _pixels(n: int = 5, c: int = 3, size: int = 12, seed: int = 0) -> torch.Tensor:
    """Images in [0, 1] on the 1/256 grid (dyadic: (p - 0.5) / 0.25 and back are exact in float32)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 257, (n, c, size, size), generator=g).float() / 256


def test_the_vocabulary_and_its_error() -> None:
    assert IMAGE_SOURCES == ("auto", "val", "photos", "digits")
    for source in IMAGE_SOURCES:
        assert check_image_source(source, "X") == source
    x = _pixels()
    assert check_image_source(x, "X") is x
    for bad in ("nope", "VAL", None, 3, ["val"]):
        with pytest.raises(
            ValueError,
            match=r"X: images=.* is not a probe-image source; images must be one of "
            r"'auto', 'val', 'photos', 'digits' or a float \(N, C, H, W\) tensor.*Use images='auto'",
        ):
            check_image_source(bad, "X")


def test_num_images_and_image_size_are_checked() -> None:
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match=r"X: num_images must be an integer >= 1.*set num_images=32"):
            check_num_images(bad, "photos", "X")
    assert check_num_images(BUNDLED_DIGITS, "digits") == BUNDLED_DIGITS
    with pytest.raises(ValueError, match=r"num_images must be an integer in \[1, 1797\] .*images='digits', got 1798"):
        probe_images("digits", num_images=BUNDLED_DIGITS + 1, image_size=8)
    with pytest.raises(ValueError, match=r"image_size must be an integer >= 1.*probe_images: set image_size=64"):
        probe_images("photos", num_images=2, image_size=0)


def test_photos_and_auto_without_validation_images() -> None:
    ref = bundled_photos(4, 16, seed=3)
    for source in ("photos", "auto"):
        got = probe_images(source, num_images=4, image_size=16, seed=3)
        assert torch.equal(got, ref) and got.shape == (4, 3, 16, 16)
    # "photos" ignores validation images; "auto" with an empty validation set is "photos"
    assert torch.equal(probe_images("photos", num_images=4, image_size=16, seed=3, val_images=_pixels()), ref)
    assert torch.equal(probe_images("auto", num_images=4, image_size=16, seed=3, val_images=_pixels(0)), ref)


def test_digits() -> None:
    assert load_digits_tensors()[0].shape[0] == BUNDLED_DIGITS
    got = probe_images("digits", num_images=7, image_size=20)
    assert got.shape == (7, 3, 20, 20) and got.is_contiguous()
    assert torch.equal(got, upsample_digits(load_digits_tensors()[0][:7], 20))
    assert float(got.min()) >= 0.0 and float(got.max()) <= 1.0


def test_validation_images_resized_or_not_and_capped_at_num_images() -> None:
    val = _pixels(7, size=12)
    with pytest.raises(ValueError, match=r"X\(images='val'\): there are no validation images.*use images='auto'"):
        probe_images("val", num_images=4, image_size=16, owner="X")
    with pytest.raises(ValueError, match="no validation images"):
        probe_images("val", num_images=4, image_size=16, val_images=_pixels(0))
    # not resized: the first num_images as they are (bitwise)
    kept = probe_images("val", num_images=4, image_size=16, val_images=val, resize=False)
    assert torch.equal(kept, val[:4])
    # resized: antialiased bilinear to image_size (convex weights: stays in [0, 1])
    for source in ("val", "auto"):
        got = probe_images(source, num_images=4, image_size=16, val_images=val)
        ref = F.interpolate(val[:4], size=(16, 16), mode="bilinear", antialias=True).clamp(0, 1)
        assert got.shape == (4, 3, 16, 16) and torch.equal(got, ref)
    # fewer validation images than num_images: all of them
    assert probe_images("val", num_images=32, image_size=12, val_images=val).shape == (7, 3, 12, 12)


def test_grayscale_becomes_rgb_and_other_channel_counts_are_refused() -> None:
    gray = _pixels(3, c=1)
    for got in (
        probe_images("val", num_images=3, image_size=12, val_images=gray, resize=False),
        probe_images(gray, num_images=3, image_size=64),
    ):
        assert got.shape == (3, 3, 12, 12) and got.is_contiguous()
        assert all(torch.equal(got[:, c], gray[:, 0]) for c in range(3))
    with pytest.raises(ValueError, match=r"X: the validation images must have 1 \(gray\) or 3 \(RGB\) channels"):
        probe_images("val", num_images=3, image_size=12, val_images=_pixels(3, c=2), owner="X")
    with pytest.raises(ValueError, match=r"the images= must have 1 \(gray\) or 3 \(RGB\) channels, got shape "):
        probe_images(_pixels(3, c=4), num_images=3, image_size=12)


def test_normalize_maps_validation_images_only() -> None:
    val = _pixels(4)
    normalised = (val - 0.5) / 0.25  # dyadic: the inverse is exact, no tolerance to derive
    for spec in ((0.5, 0.25), {"mean": 0.5, "std": 0.25}):
        got = probe_images("val", num_images=4, image_size=12, val_images=normalised, normalize=spec)
        assert torch.equal(got, val)
    # the former name, denormalize=, is the same map (a callable too: probe_images feeds no backbone)
    for spec in ((0.5, 0.25), lambda x: x * 0.25 + 0.5):
        got = probe_images("val", num_images=4, image_size=12, val_images=normalised, denormalize=spec)
        assert torch.equal(got, val)
    with pytest.raises(ValueError, match="give normalize= or its former name denormalize=, not both"):
        probe_images("val", num_images=4, image_size=12, val_images=val, normalize=(0, 1), denormalize=(0, 1))
    with pytest.raises(ValueError, match=r"lie in \[-2, 2\].*normalize=\(mean, std\)"):
        probe_images("val", num_images=4, image_size=12, val_images=normalised)
    with pytest.raises(ValueError, match=r"mapped back to pixels with normalize=.*the validation images lie in"):
        probe_images("val", num_images=4, image_size=12, val_images=val, normalize=(0.5, 10.0))
    with pytest.raises(TypeError, match=r"X\(normalize=\.\.\.\) must be None"):
        probe_images("val", num_images=4, image_size=12, val_images=val, normalize="imagenet", owner="X")
    # a tensor is pixel space: normalize does not apply to it
    assert torch.equal(probe_images(val, num_images=4, image_size=64, normalize=(0.5, 0.25)), val)


def test_a_tensor_is_the_probe_set_as_given() -> None:
    x = _pixels(5, size=12)
    got = probe_images(x, num_images=8, image_size=64)  # not resized, not cut: its 5 images at 12 px
    assert torch.equal(got, x)
    with pytest.raises(
        ValueError,
        match=r"X: images= holds 5 images but num_images=4.*set num_images=5 or pass "
        r"images\[:4\]",
    ):
        probe_images(x, num_images=4, image_size=12, owner="X")
    with pytest.raises(ValueError, match=r"images= holds 0 images"):
        probe_images(x[:0], num_images=4, image_size=12)
    with pytest.raises(ValueError, match=r"images= lie in \[0, 255\].*normalize=\(0, 1 / 255\)"):
        probe_images(x * 255, num_images=5, image_size=12)
    with pytest.raises(ValueError, match=r"images= must be a float \(N, C, H, W\) tensor, got a torch.uint8"):
        probe_images((x * 255).to(torch.uint8), num_images=5, image_size=12)
    with pytest.raises(
        ValueError, match=r"images= must be a float \(N, C, H, W\) tensor, got a .* shape \(3, 12, 12\)"
    ):
        probe_images(x[0], num_images=5, image_size=12)


def test_allowed_overshoot_is_clipped_with_a_warning(caplog) -> None:
    val = _pixels(2)
    val[0, 0, 0, 0], val[1, 2, 3, 4] = 1.25, -0.25  # within the resize allowance 57/128 ≈ 0.445
    with caplog.at_level(logging.WARNING, logger="repbench"):
        got = probe_images("val", num_images=2, image_size=12, val_images=val, resize=False, owner="X")
    assert float(got.min()) == 0.0 and float(got.max()) == 1.0
    assert "X: 2 of 864 pixels of the validation images lay outside [0, 1]" in caplog.text
