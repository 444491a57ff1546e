"""The package's one integer validator, :func:`check_int`: counts, seeds, offsets, periods, sizes.

Policy ("nothing silent": an integer argument is never truncated or rounded):

* accepted: Python ints, numpy integer scalars, 0-d integer tensors and arrays (``torch.tensor(3)``), and integral
  floats (``2.0``, numpy or 0-d tensor floats too) of magnitude at most 2⁵³, converted exactly: nothing is lost,
  and Hydra/OmegaConf reads an override like ``n_train=1e4`` as the float 10000.0. Above 2⁵³ not every integer is a
  float, so a float there may not be the integer that was meant (``1e20``) and is refused;
* refused with a :class:`NotAnIntegerError` (a TypeError, and a ValueError too, as the checks it replaced raised
  for a bad config value, so existing ``except ValueError`` handlers keep working): bools (``True`` is not a
  count), strings, fractions (``1.5``: ``int()`` would silently make it 1), NaN and infinities, tensors or arrays
  of more than one element, anything else;
* refused with a ValueError: an integer outside [``minimum``, ``maximum``].

Every message names the parameter, the value and its type, and the fix.
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np
import torch

__all__ = ["check_int", "as_exact_int", "NotAnIntegerError", "EXACT_FLOAT_LIMIT"]

#: integral floats of magnitude up to 2⁵³ are accepted (every integer in that range is exactly a float64)
EXACT_FLOAT_LIMIT = 2**53


class NotAnIntegerError(TypeError, ValueError):
    """A value given for an integer that is not exactly one (1.5, True, "3", NaN): a TypeError by kind, and a
    ValueError for callers that catch a bad config value as one (as numpy's AxisError is both ValueError and
    IndexError)."""


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
