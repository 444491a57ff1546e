"""Input checks of the baseline scores (one owner for the package): features (n, D) of any float dtype promoted to
float64, integer class labels in [0, C), and the small scalar arguments. Every error names the argument, what was
wrong and the fix."""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from ..utils.checks import check_int

F64 = torch.float64

__all__ = ["check_features", "check_labels", "check_real", "F64"]


def check_features(features: object, name: str = "features", min_rows: int = 2) -> Tensor:
    """``features`` as a float64 (n, D) tensor on its own device: a torch.Tensor of any floating dtype (promoted), at
    least ``min_rows`` rows and one column, every entry finite."""
    if not isinstance(features, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape (n, D), got {type(features).__name__}; convert it with "
            f"torch.as_tensor({name})"
        )
    if not features.is_floating_point():
        raise TypeError(f"{name} must be floating point (any float dtype is promoted to float64), got {features.dtype}")
    if features.ndim != 2:
        raise ValueError(
            f"{name} must have shape (n, D) (one row per sample), got {tuple(features.shape)}; flatten per-sample "
            f"features with {name}.reshape(len({name}), -1)"
        )
    n, d = features.shape
    if n < min_rows or d < 1:
        raise ValueError(f"{name} has shape {(n, d)}: need at least {min_rows} samples (rows) and 1 feature (column)")
    if not bool(torch.isfinite(features).all()):
        bad = int((~torch.isfinite(features)).any(1).sum())
        raise ValueError(
            f"{name} contain NaN/inf in {bad} of {n} rows; check the feature function (e.g. a diverged backbone or "
            "a float16 overflow) before scoring"
        )
    return features.detach().to(F64)


def check_labels(labels: object, n: int, num_classes: int | None = None, name: str = "labels") -> tuple[Tensor, int]:
    """(labels as an int64 (n,) tensor, C): integer class labels in [0, C), C = ``num_classes`` or max + 1. A float
    tensor of whole numbers is refused (TypeError) so that soft labels are never truncated silently."""
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of integer class ids, got {type(labels).__name__}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(
            f"{name} must hold integer class ids in [0, C), got dtype {labels.dtype}; convert with {name}.long() "
            "if they are whole numbers"
        )
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},), one class id per feature row, got {tuple(labels.shape)}")
    y = labels.detach().to(torch.int64)
    lo, hi = int(y.min()), int(y.max())
    c = hi + 1 if num_classes is None else check_int(num_classes, "num_classes", 2)
    if lo < 0 or hi >= c:
        raise ValueError(
            f"{name} must lie in [0, {c}) (num_classes={c}), got values in [{lo}, {hi}]; relabel to 0 … C-1"
        )
    return y, c


def check_real(value: object, name: str, *, low: float, low_open: bool = True, high: float = math.inf) -> float:
    """``value`` as a finite float in (low, high] (``low_open``) or [low, high]."""
    if isinstance(value, bool | str) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    ok = math.isfinite(v) and (v > low if low_open else v >= low) and v <= high
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{']' if math.isfinite(high) else ')'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return v
