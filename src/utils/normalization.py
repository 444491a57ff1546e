"""The monitors' one input contract: which normalisation the user's backbone takes (``normalize=``).

A monitor (SynBench, DivergenceRadius, Task Prior, spectrum, collapse alarm) feeds the user's backbone exactly what the
user's own training feeds it. ``normalize=(mean, std)`` says: "this backbone takes images normalised as
``(pixels - mean) / std``, channel-wise (torchvision's ``Normalize``), and so do the validation images". The
monitors then

* map validation images back to [0, 1] pixel space (:meth:`ChannelNormalization.to_pixels`) for the perturbations,
  the photo/digit probe sets and the range checks, and
* normalise every image again (:meth:`ChannelNormalization.to_model`) in front of every forward of the backbone,
  synthetic SynBench images included.

``normalize=None`` (default): the backbone takes [0, 1] pixels — RepBench's own backbones (they normalise inside
``embed``), or a plain module trained on [0, 1] images. ``(0, 1 / 255)`` describes a pipeline that feeds 0..255.

``denormalize=`` (the former argument, which mapped validation images to [0, 1] but then fed those *pixels* to the
backbone) is a deprecated alias: a ``(mean, std)`` pair means ``normalize=(mean, std)`` (with a DeprecationWarning
that says the backbone now gets normalised images); a callable is refused, since the monitors must both undo and
redo the normalisation.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["ChannelNormalization", "Normalize", "as_normalization", "monitor_normalization"]

#: what ``normalize=`` takes: (mean, std), {"mean": ..., "std": ...}, an object with ``mean`` and ``std``
#: attributes (torchvision's ``Normalize``), a :class:`ChannelNormalization`, or None
Normalize = Sequence[Any] | Mapping[str, Any] | Any | None


def _values(values: Any, what: str, owner: str, arg: str) -> tuple[float, ...]:
    """``values`` (a number or one number per channel) as a tuple of finite floats."""
    if isinstance(values, Tensor):
        values = values.detach().cpu().reshape(-1).tolist()
    elif isinstance(values, numbers.Real) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{owner}({arg}=...): the {what} must be a number or one number per channel, got {values!r}")
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise TypeError(
            f"{owner}({arg}=...): the {what} must be a number or one number per channel, got {values!r}"
        ) from None
    if not out or any(isinstance(v, bool) for v in values) or not all(math.isfinite(v) for v in out):
        raise ValueError(f"{owner}({arg}=...): the {what} must be finite numbers, got {values!r}")
    return out


@dataclass(frozen=True)
class ChannelNormalization:
    """``model input = (pixels - mean) / std`` channel-wise (one value, or one per channel)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if not all(s > 0 for s in self.std):
            raise ValueError(f"normalize=...: every std must be > 0, got {list(self.std)}")

    def check_channels(self, channels: int, owner: str) -> None:
        """Refuse per-channel values that do not match ``channels`` image channels."""
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, channels):
                raise ValueError(
                    f"{owner}(normalize=...): {len(values)} {name} values for images with {channels} channels; give "
                    "one value, or one per channel"
                )

    def _view(self, values: tuple[float, ...], x: Tensor) -> Tensor:
        if x.dim() < 2:
            raise ValueError(f"normalize=... applies to (N, C, ...) images, got shape {tuple(x.shape)}")
        shape = (1, -1) + (1,) * (x.dim() - 2)
        return torch.tensor(values, dtype=x.dtype, device=x.device).view(shape)

    def to_pixels(self, x: Tensor) -> Tensor:
        """Normalised images back to pixel space: ``x * std + mean``."""
        return x * self._view(self.std, x) + self._view(self.mean, x)

    def to_model(self, x: Tensor) -> Tensor:
        """Pixel images to what the backbone takes: ``(x - mean) / std`` (torchvision ``Normalize``'s arithmetic)."""
        return (x - self._view(self.mean, x)) / self._view(self.std, x)

    def composed(self, inner: tuple[Sequence[float], Sequence[float]] | None, channels: int) -> tuple[tuple, tuple]:
        """(mean, std) of the whole pixel -> network map when the backbone normalises once more inside with
        ``inner`` = (m_bb, s_bb): ((x - m)/s - m_bb)/s_bb = (x - (m + s·m_bb)) / (s·s_bb); ``inner`` None: (m, s).
        One value per channel (``channels``)."""

        def per_channel(v: Sequence[float]) -> list[float]:
            v = [float(a) for a in v]
            return v * channels if len(v) == 1 else v

        m, s = per_channel(self.mean), per_channel(self.std)
        if inner is None:
            return tuple(m), tuple(s)
        m_bb, s_bb = per_channel(inner[0]), per_channel(inner[1])
        return tuple(a + b * c for a, b, c in zip(m, s, m_bb)), tuple(b * d for b, d in zip(s, s_bb))

    def to_dict(self) -> dict[str, list[float]]:
        return {"mean": list(self.mean), "std": list(self.std)}


def as_normalization(spec: Normalize, owner: str = "", arg: str = "normalize") -> ChannelNormalization | None:
    """``normalize=`` as a :class:`ChannelNormalization` (None stays None): ``(mean, std)``, a mapping with exactly
    the keys ``mean`` and ``std``, or an object with ``mean`` and ``std`` attributes (torchvision's ``Normalize``,
    v1 or v2). Numbers, sequences or tensors, one value or one per channel. Raises TypeError/ValueError naming the
    argument and the fix for anything else (a callable is not enough: the monitors must undo and redo it)."""
    who = owner or "monitor"
    if spec is None or isinstance(spec, ChannelNormalization):
        return spec
    if isinstance(spec, Mapping):
        if set(spec) != {"mean", "std"}:
            raise ValueError(f"{who}({arg}={{...}}) needs exactly the keys 'mean' and 'std', got {sorted(spec)}")
        pair = (spec["mean"], spec["std"])
    elif isinstance(spec, Sequence) and not isinstance(spec, (str, bytes)) and len(spec) == 2:
        pair = (spec[0], spec[1])
    elif hasattr(spec, "mean") and hasattr(spec, "std") and not isinstance(spec, Tensor):
        pair = (spec.mean, spec.std)  # torchvision.transforms.Normalize (v1 and v2)
    else:
        raise TypeError(
            f"{who}({arg}=...) must be None (the backbone takes [0, 1] pixels), (mean, std), "
            f"{{'mean': ..., 'std': ...}} or torchvision's Normalize(mean, std) - the normalisation your pipeline "
            f"applies before the backbone - got {spec!r}"
        )
    mean, std = _values(pair[0], "mean", who, arg), _values(pair[1], "std", who, arg)
    if not all(s > 0 for s in std):
        raise ValueError(f"{who}({arg}=...): every std must be > 0, got {list(std)}")
    return ChannelNormalization(mean, std)


def monitor_normalization(normalize: Normalize, denormalize: Any, owner: str) -> ChannelNormalization | None:
    """The one resolution of a monitor's ``normalize=`` and its deprecated alias ``denormalize=`` (module
    docstring): both given is a ValueError; ``denormalize=(mean, std)`` warns (DeprecationWarning) and means
    ``normalize=(mean, std)``; a callable ``denormalize`` is a TypeError naming the fix."""
    if denormalize is None:
        return as_normalization(normalize, owner)
    if normalize is not None:
        raise ValueError(
            f"{owner} got normalize= and denormalize=: denormalize= is the deprecated alias of normalize=; give "
            "normalize=(mean, std) only"
        )
    if callable(denormalize) and not hasattr(denormalize, "mean"):
        raise TypeError(
            f"{owner}(denormalize=<callable>) is no longer supported: the monitors feed your backbone what your "
            "pipeline feeds it, so they must both undo and redo the normalisation. Give normalize=(mean, std) (the "
            "values your pipeline normalises with; (0, 1 / 255) for 0..255 images); for any other convention pass "
            "images=<an (N, 3, H, W) tensor in [0, 1]> and feature_fn=lambda module, x: module.backbone(my_transform(x))"
        )
    norm = as_normalization(denormalize, owner, arg="denormalize")
    warnings.warn(
        f"{owner}(denormalize=...) is deprecated and will be removed in the next release: use normalize="
        f"{norm.to_dict()}. It now means the same: the validation images carry this normalisation AND the backbone "
        "takes normalised images, so the monitors normalise every image before each forward (before, the backbone "
        "got [0, 1] pixels, which differ from what your training feeds it)",
        DeprecationWarning,
        stacklevel=4,
    )
    return norm
