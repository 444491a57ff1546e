"""The fixed probe images of the image monitors (DivergenceRadius, Task Prior), without Lightning: one vocabulary of
sources (:data:`IMAGE_SOURCES` or an image tensor), one builder (:func:`probe_images`) and the pixel-space checks.

Every probe image is float (N, 3, H, W) in [0, 1] pixel space. Validation images that carry the user's
normalisation (``normalize=(mean, std)``, :mod:`src.utils.normalization`: the monitors' input contract) are mapped
back to pixels and checked by :func:`pixel_images`; nothing is clamped silently: images farther outside [0, 1] than
a resize can overshoot are refused, a resize's overshoot is clipped with a warning (:func:`clip_overshoot`). The
monitors normalise the probe images again in front of the user's backbone.

Sources (``images=`` of both monitors):

* ``"auto"``: the validation images when the data module has some, else ``"photos"``;
* ``"val"``: the first ``num_images`` validation images (an error when there are none);
* ``"photos"``: ``num_images`` seeded crops of the bundled offline photos (:func:`~src.images.photos.bundled_photos`)
  at ``image_size``;
* ``"digits"``: the first ``num_images`` of scikit-learn's 1797 bundled digits at ``image_size``;
* an (N, C, H, W) float tensor in [0, 1]: the probe set as given (at its own size, N <= ``num_images``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.checks import check_image_size, check_int
from ..utils.normalization import ChannelNormalization, Normalize, as_normalization
from .digits import load_digits_tensors, upsample_digits
from .photos import bundled_photos

__all__ = [
    "BUNDLED_DIGITS",
    "IMAGE_SOURCES",
    "PIXEL_OVERSHOOT",
    "Denormalize",
    "as_denormalize",
    "check_image_source",
    "check_num_images",
    "clip_overshoot",
    "pixel_images",
    "probe_images",
]

log = logging.getLogger("repbench")

#: the named probe-image sources (besides an image tensor)
IMAGE_SOURCES = ("auto", "val", "photos", "digits")

#: images in scikit-learn's bundled digits data set (``load_digits()``)
BUNDLED_DIGITS = 1797

Denormalize = Callable[[Tensor], Tensor] | Sequence[Any] | Mapping[str, Any] | None

# How far a resize can push [0, 1] images outside [0, 1]. Bilinear, area, nearest and antialiased bilinear
# resampling take convex combinations of the pixels (non-negative weights summing to 1): no overshoot at all.
# Bicubic (Keys) convolution has negative lobes w(x) = a (x - 1)(x - 2)^2 on 1 < |x| < 2; with PyTorch's a = -0.75
# the two negative taps of one axis at sub-pixel offset t weigh N(t) = 0.75 t (1 - t) together, at most N = 3/16
# (t = 1/2; PIL's a = -0.5 gives 1/8). A separable 2-D kernel with per-axis positive mass P = 1 + N and negative
# mass N reaches at most P^2 + N^2 - 1 = 2N + 2N^2 = 57/128 above 1 (and by symmetry 57/128 below 0) on a [0, 1]
# image: any pixel farther out cannot come from resizing a [0, 1] image, so it is refused.
PIXEL_OVERSHOOT = 57 / 128

# Float32 rounding of x * std + mean for a pixel that was exactly in [0, 1] before (x - mean) / std: two roundings of
# relative size 2^-24 on magnitudes <= 2 (|x * std| <= 1 + |mean| with mean in [0, 1]): <= 2 * 2 * 6e-8 = 2.4e-7.
# Pixels clipped by less than this are rounding, by more are interpolation overshoot (reported).
_ROUNDING = 1e-6


def _who(owner: str) -> str:
    """The name errors start with: the caller's (e.g. ``DivergenceRadiusCallback``), else ``probe_images``."""
    return owner or "probe_images"


# ---------------------------------------------------------------------------------------------------- pixel space
def as_denormalize(spec: Denormalize, owner: str) -> Callable[[Tensor], Tensor] | None:
    """The map from the validation images' convention to [0, 1] pixel space (kept for :func:`probe_images`'s
    deprecated ``denormalize=``; the monitors take ``normalize=``, :mod:`src.utils.normalization`):

    * ``None``: the images are in [0, 1] already;
    * ``(mean, std)``, ``{"mean": ..., "std": ...}`` or a :class:`~src.utils.normalization.ChannelNormalization`:
      the images were normalised as ``(x - mean) / std`` and are mapped back by ``x * std + mean``;
    * a callable ``images -> images`` (any other convention; returned as it is).

    Raises ``TypeError``/``ValueError`` naming the argument for anything else, a non-positive or non-finite std.
    """
    if spec is None or (callable(spec) and not hasattr(spec, "mean")):
        return spec
    return _to_pixels(as_normalization(spec, owner, arg="denormalize"), owner)


def _to_pixels(norm: ChannelNormalization, owner: str) -> Callable[[Tensor], Tensor]:
    """``norm.to_pixels`` with the channel count checked against the images it gets."""

    def to_pixels(x: Tensor) -> Tensor:
        """x * std + mean, channel-wise."""
        norm.check_channels(x.shape[1], owner)
        return norm.to_pixels(x)

    return to_pixels


def pixel_images(x: Tensor, owner: str, what: str, denormalize: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """``denormalize(x)`` (or ``x``) checked to be finite (N, C, H, W) images in [0, 1] pixel space, allowing the
    interpolation overshoot :data:`PIXEL_OVERSHOOT` (values are returned as they are: callers that need [0, 1]
    exactly clip with :func:`clip_overshoot`). ``denormalize``: the map back to pixels (``normalize=``'s
    ``x * std + mean``). Raises ``ValueError`` naming ``normalize=``, the range seen and the fix."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() != 4:
        kind = f"{x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{owner}: {what} must be a float (N, C, H, W) tensor, got a {kind}")
    if denormalize is not None:
        y = denormalize(x)
        if not isinstance(y, Tensor) or y.shape != x.shape:
            got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise ValueError(
                f"{owner}: the map back to pixels must return images of the shape it gets {tuple(x.shape)}, got {got}"
            )
        x = y
    if x.numel() == 0:
        return x
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{owner}: {what} contain NaN or inf pixels; fix the data pipeline that produced them")
    lo, hi = (float(v) for v in torch.aminmax(x))
    if lo >= -PIXEL_OVERSHOOT and hi <= 1.0 + PIXEL_OVERSHOOT:
        return x
    if denormalize is not None:
        raise ValueError(
            f"{owner}: mapped back to pixels with normalize=(mean, std) (x * std + mean), the {what} lie in "
            f"[{lo:.4g}, {hi:.4g}], not in [0, 1] pixel space (resizing overshoot up to {PIXEL_OVERSHOOT:.3f} is "
            "allowed); check that normalize= holds the (mean, std) your pipeline normalised these images with"
        )
    raise ValueError(
        f"{owner}: the {what} lie in [{lo:.4g}, {hi:.4g}], not in [0, 1] pixel space (resizing overshoot up to "
        f"{PIXEL_OVERSHOOT:.3f} is allowed). If your pipeline normalises images before the backbone, say how: "
        "normalize=(mean, std) with the values it normalises with (e.g. normalize={'mean': [0.485, 0.456, 0.406], "
        "'std': [0.229, 0.224, 0.225]}; normalize=(0, 1 / 255) for 0..255 images): the monitors map the images "
        "back to [0, 1] for their perturbations and checks and feed your backbone normalised images, as your "
        "training does"
    )


def clip_overshoot(x: Tensor, owner: str, what: str) -> Tensor:
    """``x`` clipped to [0, 1] after :func:`pixel_images` accepted it: clipping of float rounding is silent, clipping
    of interpolation overshoot is reported (a warning with the count), never of more than PIXEL_OVERSHOOT."""
    outside = int(((x < -_ROUNDING) | (x > 1.0 + _ROUNDING)).sum())
    if outside:
        log.warning(
            "%s: %d of %d pixels of the %s lay outside [0, 1] by at most %.3f (interpolation overshoot); clipped "
            "to [0, 1]", owner, outside, x.numel(), what, max(-float(x.min()), float(x.max()) - 1.0),
        )  # fmt: skip
    return x.clamp(0.0, 1.0)


# ---------------------------------------------------------------------------------------------------- sources
def check_image_source(images: Any, owner: str = "") -> str | Tensor:
    """``images`` as given when it is one of :data:`IMAGE_SOURCES` or a tensor (whose pixels :func:`probe_images`
    checks), else a ValueError naming ``images=``, the choices and the fix."""
    if isinstance(images, Tensor) or (isinstance(images, str) and images in IMAGE_SOURCES):
        return images
    choices = ", ".join(repr(s) for s in IMAGE_SOURCES)
    raise ValueError(
        f"{_who(owner)}: images={images!r} is not a probe-image source; images must be one of {choices} or a float "
        "(N, C, H, W) tensor of images in [0, 1]. Use images='auto' (the validation images, else the bundled photos), "
        "'val', 'photos' (bundled, offline), 'digits' (scikit-learn's, offline) or pass your own image tensor"
    )


def check_num_images(num_images: Any, images: str | Tensor = "auto", owner: str = "") -> int:
    """``num_images`` as an int >= 1 (at most :data:`BUNDLED_DIGITS` for ``images="digits"``), else a ValueError
    naming ``num_images=`` and the fix (never a silent clamp to the digits there are)."""
    num_images = check_int(
        num_images, f"{_who(owner)}: num_images", 1, meaning="probe images", fix="set num_images=32 (say)"
    )
    if isinstance(images, str) and images == "digits" and num_images > BUNDLED_DIGITS:
        raise ValueError(
            f"{_who(owner)}: num_images must be an integer in [1, {BUNDLED_DIGITS}] (the bundled digits) with "
            f"images='digits', got {num_images}; lower num_images, or use images='photos' or an image tensor"
        )
    return num_images


def _rgb(x: Tensor, owner: str, what: str) -> Tensor:
    """(N, 1 or 3, H, W) images as RGB (gray repeated: a broadcast view), else a ValueError naming ``what``."""
    if x.shape[1] not in (1, 3):
        raise ValueError(
            f"{owner}: the {what} must have 1 (gray) or 3 (RGB) channels, got shape {tuple(x.shape)}; convert them "
            "to RGB (or gray) images first"
        )
    return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x


def _given(x: Tensor, num_images: int, owner: str) -> Tensor:
    """An explicit probe set: checked pixels (no ``normalize``: it is pixel space), RGB, at most ``num_images``
    images (more is refused, not cut: which ones to drop is the caller's choice), kept at its own size."""
    x = _rgb(pixel_images(x, owner, "images=", None), owner, "images=")
    if x.shape[0] == 0 or x.shape[0] > num_images:
        raise ValueError(
            f"{owner}: images= holds {x.shape[0]} images but num_images={num_images}; the tensor is the probe set "
            f"as given, so give 1 to num_images images: set num_images={max(1, x.shape[0])} or pass images[:{num_images}]"
        )
    return clip_overshoot(x, owner, "images=")


def _digits(num_images: int, image_size: int) -> Tensor:
    """The first ``num_images`` bundled digits, (N, 3, S, S) in [0, 1] (``num_images`` checked by the caller)."""
    images, _ = load_digits_tensors()
    return upsample_digits(images[:num_images], image_size)


def _validation(
    x: Tensor, image_size: int, to_pixels: Callable[[Tensor], Tensor] | None, resize: bool, owner: str
) -> Tensor:
    """Validation images mapped to [0, 1] by ``to_pixels``, checked, overshoot clipped (with a warning), RGB, and
    resized to ``image_size`` when ``resize`` (antialiased bilinear: convex weights, no new overshoot)."""
    what = "validation images"
    x = _rgb(clip_overshoot(pixel_images(x, owner, what, to_pixels), owner, what), owner, what)
    if resize and tuple(x.shape[-2:]) != (image_size, image_size):
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", antialias=True)
        x = x.clamp(0.0, 1.0)  # float rounding of the convex resize only (weights sum to 1 up to ulps)
    return x


def probe_images(
    source: str | Tensor,
    *,
    num_images: int,
    image_size: int,
    seed: int = 0,
    val_images: Tensor | None = None,
    normalize: Normalize = None,
    resize: bool = True,
    owner: str = "",
    denormalize: Denormalize = None,
) -> Tensor:
    """The fixed probe set of ``source`` (one of :data:`IMAGE_SOURCES` or a tensor) as contiguous float
    (N, 3, H, W) images in [0, 1]:

    * a tensor: checked by :func:`pixel_images` (it is pixel space: ``normalize`` does not apply), gray -> RGB,
      at its own size, 1 to ``num_images`` images (more is refused);
    * ``"val"``: the first ``num_images`` of ``val_images`` (the caller's validation images, e.g. the monitors'
      ``first_val_images``; None or empty is an error naming the fix), mapped back to pixels when they carry
      ``normalize=(mean, std)`` (:mod:`src.utils.normalization`: ``x * std + mean``), checked, the allowed overshoot
      clipped with a warning, gray -> RGB, resized to ``image_size`` x ``image_size`` (antialiased bilinear) when
      ``resize``, else at their own size;
    * ``"auto"``: as ``"val"`` when ``val_images`` holds images, else as ``"photos"``;
    * ``"photos"``: :func:`~src.images.photos.bundled_photos` ``(num_images, image_size, seed)``;
    * ``"digits"``: the first ``num_images`` (at most 1797) scikit-learn digits at ``image_size`` (bilinear).

    ``owner`` (e.g. ``"DivergenceRadiusCallback"``) starts every error message. ``denormalize``: the former name of
    the map back to pixels ((mean, std) as ``normalize``, or a callable); give one of the two. Deterministic in its
    arguments.
    """
    who = _who(owner)
    if normalize is not None and denormalize is not None:
        raise ValueError(f"{who}: give normalize= or its former name denormalize=, not both")
    to_pixels = as_denormalize(denormalize, who) if denormalize is not None else None
    if normalize is not None:
        to_pixels = _to_pixels(as_normalization(normalize, who), who)
    source = check_image_source(source, owner)
    n = check_num_images(num_images, source, owner)
    size = check_image_size(image_size, "image_size", f"{who}: set image_size=64 (say)")
    if isinstance(source, Tensor):
        return _given(source, n, who).contiguous()
    if source == "digits":
        return _digits(n, size).contiguous()
    has_val = val_images is not None and len(val_images) > 0
    if source == "val" and not has_val:
        raise ValueError(
            f"{who}(images='val'): there are no validation images (the data module has no validation set, or it is "
            "empty); use images='auto' or 'photos' (the bundled photos) or 'digits', or pass an image tensor"
        )
    if source == "photos" or not has_val:
        return bundled_photos(n, size, seed=seed)
    return _validation(val_images[:n], size, to_pixels, bool(resize), who).contiguous()
