"""The package's generic validators, one module for every package: integers (:func:`check_int`, image sizes
:func:`check_image_size`), real numbers (:func:`check_real` in an interval, :func:`check_positive`,
:func:`check_nonnegative`, :func:`check_fraction`), tensors (:func:`check_tensor`), feature matrices (n, D)
(:func:`check_features`) and class labels (:func:`check_labels`). A method's own validators (a perturbation name, a
convention, a kernel) stay with the method. Every message names the parameter, the value and, where one helps, the
fix.

Integer policy ("nothing silent": an integer argument is never truncated or rounded):

* accepted: Python ints, numpy integer scalars, 0-d integer tensors and arrays (``torch.tensor(3)``), and integral
  floats (``2.0``, numpy or 0-d tensor floats too) of magnitude at most 2⁵³, converted exactly: nothing is lost,
  and Hydra/OmegaConf reads an override like ``n_train=1e4`` as the float 10000.0. Above 2⁵³ not every integer is a
  float, so a float there may not be the integer that was meant (``1e20``) and is refused;
* refused with a :class:`NotAnIntegerError` (a TypeError, and a ValueError too, as the checks it replaced raised
  for a bad config value, so existing ``except ValueError`` handlers keep working): bools (``True`` is not a
  count), strings, fractions (``1.5``: ``int()`` would silently make it 1), NaN and infinities, tensors or arrays
  of more than one element, anything else;
* refused with a ValueError: an integer outside [``minimum``, ``maximum``].

Real numbers: Python and numpy reals and 0-d tensors or arrays, never a bool or a string (a TypeError naming what
was expected); a value out of range or not finite is a ValueError.
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np
import torch

__all__ = [
    "CHECK_CHUNK",
    "EXACT_FLOAT_LIMIT",
    "NotAnIntegerError",
    "NotFloatingPointError",
    "as_exact_int",
    "as_real",
    "check_features",
    "check_fraction",
    "check_image_size",
    "check_int",
    "check_labels",
    "check_nonnegative",
    "check_positive",
    "check_real",
    "check_tensor",
]

#: integral floats of magnitude up to 2⁵³ are accepted (every integer in that range is exactly a float64)
EXACT_FLOAT_LIMIT = 2**53

#: rows checked per chunk (bounded temporary memory for the finiteness checks of large feature matrices)
CHECK_CHUNK = 4096


class NotAnIntegerError(TypeError, ValueError):
    """A value given for an integer that is not exactly one (1.5, True, "3", NaN): a TypeError by kind, and a
    ValueError for callers that catch a bad config value as one (as numpy's AxisError is both ValueError and
    IndexError)."""


class NotFloatingPointError(TypeError, ValueError):
    """Features of an integer, bool or complex dtype: a TypeError by kind, and a ValueError as the feature checks it
    replaced raised (both are caught)."""


def as_exact_int(value: object) -> int | None:
    """``value`` as the int it holds exactly (the policy of the module docstring), or None if it holds none."""
    if isinstance(value, torch.Tensor | np.ndarray):
        if value.ndim != 0:
            return None
        value = value.item()  # a Python bool, int, float or complex
    if isinstance(value, bool | np.bool_ | str | bytes):
        return None
    try:
        return operator.index(value)  # int, numpy integers
    except TypeError:
        pass
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isfinite(f) and f.is_integer() and abs(f) <= EXACT_FLOAT_LIMIT:
            return int(f)
    return None


def _bounds(minimum: int | None, maximum: int | None) -> str:
    """' >= 1', ' <= 9', ' in [1, 9]' or ''."""
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    return "" if maximum is None else f" <= {maximum}"


def _describe(value: object) -> str:
    """``value!r (type)``, a large tensor or array by its shape."""
    if isinstance(value, torch.Tensor | np.ndarray) and math.prod(value.shape) > 8:
        return f"a {type(value).__name__} of shape {tuple(value.shape)}"
    return f"{value!r} ({type(value).__name__})"


def _example(minimum: int | None, maximum: int | None) -> int:
    """An allowed value to show in a fix."""
    if minimum is not None:
        return max(minimum, 1) if maximum is None or maximum >= 1 else minimum
    return 0 if maximum is None or maximum >= 0 else maximum


def _type_hint(value: object, example: int) -> str:
    """The generic fix for a value that is not exactly an integer."""
    if isinstance(value, torch.Tensor | np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_) and math.isfinite(float(value)):
        if float(value).is_integer():
            return f"a float above 2**53 may not be the integer you meant: pass an int, e.g. {example}"
        return f"pass a whole number such as {example} (a fraction is never rounded or truncated)"
    return f"pass an int such as {example}"


def check_int(
    value: object,
    name: str,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    meaning: str = "",
    fix: str = "",
) -> int:
    """``value`` as an int in [``minimum``, ``maximum``] (None: unbounded on that side), by the policy of the
    module docstring: a :class:`NotAnIntegerError` (TypeError and ValueError) for a value that is not exactly an
    integer, a ValueError for one out of range.

    The message reads ``"{name} must be an integer >= {minimum} ({meaning}), got {value!r} ({type}); {fix}"``;
    ``name`` is what the user set (an argument or a config key such as ``data.batch_size``), ``fix`` (default: a
    generic one) says what to do."""
    v = as_exact_int(value)
    head = f"{name} must be an integer{_bounds(minimum, maximum)}{f' ({meaning})' if meaning else ''}"
    if v is None:
        hint = fix or _type_hint(value, _example(minimum, maximum))
        raise NotAnIntegerError(f"{head}, got {_describe(value)}; {hint}")
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        hint = fix or f"pass a value{_bounds(minimum, maximum)}"
        raise ValueError(f"{head}, got {_describe(value)}; {hint}")
    return v


def check_image_size(image_size: object, key: str = "image_size", fix: str | None = None) -> int:
    """``image_size`` as an int >= 1 (:func:`check_int`: an integral float is accepted, 2.5 is not), or a ValueError
    naming ``key`` and ``fix`` (default: "set <key>=64 (say)")."""
    fix = fix or f"set {key}=64 (say)"
    return check_int(image_size, key, 1, meaning="pixels per side", fix=fix)


def as_real(value: object, name: str, requirement: str) -> float:
    """``value`` as a float (Python and numpy reals, 0-d tensors and arrays); a TypeError naming ``name`` and the
    ``requirement`` for a bool, a string, a larger tensor or anything else."""
    v = value.item() if isinstance(value, torch.Tensor | np.ndarray) and value.ndim == 0 else value
    if isinstance(v, bool | np.bool_ | str | bytes) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be {requirement}, got {value!r} ({type(value).__name__})")
    return float(v)


def check_real(value: object, name: str, *, low: float, low_open: bool = True, high: float = math.inf) -> float:
    """``value`` as a finite float in (low, high] (``low_open``) or [low, high]."""
    v = as_real(value, name, "a real number")
    if not (math.isfinite(v) and (v > low if low_open else v >= low) and v <= high):
        interval = f"{'(' if low_open else '['}{low}, {high}{']' if math.isfinite(high) else ')'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return v


def check_positive(value: object, name: str, fix: str = "") -> float:
    """``value`` as a float, finite and > 0; else a ValueError naming ``name`` (and ``fix``, when given)."""
    v = as_real(value, name, "a finite number > 0")
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}" + (f"; {fix}" if fix else ""))
    return v


def check_nonnegative(value: object, name: str) -> float:
    """``value`` as a float, finite and >= 0; else a ValueError naming ``name``."""
    v = as_real(value, name, "a finite number >= 0")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value}; e.g. {name}=0")
    return v


def check_fraction(value: object, name: str) -> float:
    """``value`` as a float strictly between 0 and 1; else a ValueError naming ``name``."""
    v = as_real(value, name, "a number in (0, 1)")
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value}; e.g. {name}=0.3")
    return v


def check_tensor(value: object, name: str, shape: str) -> torch.Tensor:
    """``value`` itself if it is a torch.Tensor, else a TypeError naming the argument and the expected ``shape``."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape}, got {type(value).__name__}; convert it with "
            f"torch.as_tensor({name})"
        )
    return value


def check_features(
    features: object, name: str = "features", *, min_rows: int = 1, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``features`` as an (n, D) floating tensor with n >= ``min_rows``, D >= 1 and every entry finite (checked
    :data:`CHECK_CHUNK` rows at a time): itself, or detached and cast to ``dtype`` when given (the baselines' float64).
    A TypeError for a non-tensor, a :class:`NotFloatingPointError` for a non-floating dtype, ValueErrors for the
    shape and non-finite rows, each naming ``name`` and the fix."""
    x = check_tensor(features, name, "(n, D)")
    if x.ndim != 2:
        raise ValueError(
            f"{name} must have shape (n, D) (one row per sample), got {tuple(x.shape)}; flatten per-sample "
            f"features with {name}.reshape(len({name}), -1)"
        )
    n, d = x.shape
    if n < min_rows or d < 1:
        what = "is empty (shape" if n * d == 0 else "has too few rows (shape"
        rows = f"{min_rows} sample{'s' if min_rows != 1 else ''}"
        raise ValueError(f"{name} {what} {(n, d)}): need at least {rows} (rows) and 1 feature (column)")
    if not x.is_floating_point():
        raise NotFloatingPointError(f"{name} must be floating point, got {x.dtype}; convert with {name}.float()")
    bad = sum(int((~torch.isfinite(chunk)).any(1).sum()) for chunk in x.split(CHECK_CHUNK))
    if bad:
        raise ValueError(
            f"{name} contains NaN or inf in {bad} of {n} rows; check the feature function (e.g. a diverged backbone "
            "or a float16 overflow) or drop those rows"
        )
    return x if dtype is None else x.detach().to(dtype)


def check_labels(
    labels: object, n: int, num_classes: int | None = None, name: str = "labels"
) -> tuple[torch.Tensor, int]:
    """(labels as an int64 (n,) tensor, C): integer class labels in [0, C), C = ``num_classes`` or max + 1. A float
    tensor of whole numbers is refused (TypeError) so that soft labels are never truncated silently."""
    if not isinstance(labels, torch.Tensor):
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
