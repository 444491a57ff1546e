"""The package's one integer validator (src/utils/checks.py): what it accepts, what it refuses, what it says."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from src.utils.checks import EXACT_FLOAT_LIMIT, NotAnIntegerError, check_int


@pytest.mark.parametrize(
    "value, expected",
    [
        (3, 3),
        (np.int32(4), 4),
        (np.uint64(5), 5),
        (torch.tensor(6), 6),
        (np.array(7), 7),
        (2.0, 2),  # integral floats: exactly the integer (Hydra reads n=1e4 as the float 10000.0)
        (1e4, 10_000),
        (np.float32(8.0), 8),
        (torch.tensor(9.0), 9),
        (Fraction(20, 2), 10),
        (float(EXACT_FLOAT_LIMIT), EXACT_FLOAT_LIMIT),
        (2**70, 2**70),  # Python ints of any size
    ],
)
def test_integers_and_integral_values_are_accepted_exactly(value, expected) -> None:
    got = check_int(value, "x")
    assert got == expected and type(got) is int


@pytest.mark.parametrize(
    "value, fix",
    [
        (1.5, r"pass a whole number such as 1 \(a fraction is never rounded or truncated\)"),
        (torch.tensor(2.5), r"pass a whole number such as 1 \(a fraction"),
        (True, "pass an int such as 1"),
        (np.bool_(False), "pass an int"),
        (torch.tensor(True), "pass an int"),
        ("3", "pass an int"),
        (None, "pass an int"),
        (float("nan"), "pass an int"),
        (float("inf"), "pass an int"),
        (1e20, r"a float above 2\*\*53 may not be the integer you meant"),
        (torch.tensor([1, 2]), "pass an int"),
        (3 + 0j, "pass an int"),
    ],
)
def test_non_integers_are_refused_naming_the_parameter_and_the_fix(value, fix) -> None:
    with pytest.raises(NotAnIntegerError, match=rf"^count must be an integer >= 1 \(items\), got .*; {fix}"):
        check_int(value, "count", 1, meaning="items")
    # both a TypeError (the kind) and a ValueError (what the replaced checks raised for a bad config value)
    assert issubclass(NotAnIntegerError, TypeError) and issubclass(NotAnIntegerError, ValueError)


def test_range_errors_and_messages() -> None:
    with pytest.raises(ValueError, match=r"^n must be an integer >= 0, got -1 \(int\); pass a value >= 0$"):
        check_int(-1, "n", 0)
    with pytest.raises(ValueError, match=r"^k must be an integer in \[2, 9\], got 10 \(int\); set k=9$"):
        check_int(10, "k", 2, 9, fix="set k=9")
    with pytest.raises(ValueError, match=r"^k must be an integer <= 9, got 10"):
        check_int(10, "k", maximum=9)
    with pytest.raises(NotAnIntegerError, match=r"got a Tensor of shape \(20,\)"):
        check_int(torch.arange(20), "k")  # a large tensor is described by its shape, not printed
    assert check_int(-(2**40), "offset") == -(2**40)
