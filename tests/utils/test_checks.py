"""The package's generic validators (src/utils/checks.py): integers (what they accept, refuse and say), real numbers,
feature and label tensors, image sizes; and that no other module defines one of them."""

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


# --- real numbers, tensors, features, labels, image sizes (one module for every package) ---------------------------


@pytest.mark.parametrize("value", [0.5, 1, np.float32(0.25), np.int64(2), torch.tensor(0.75), np.array(0.5)])
def test_real_numbers_accept_python_numpy_and_0d_values(value) -> None:
    from src.utils.checks import check_nonnegative, check_positive, check_real

    assert check_real(value, "x", low=0.0) == float(value)
    assert check_positive(value, "x") == float(value) and check_nonnegative(value, "x") == float(value)


@pytest.mark.parametrize("value", [True, "0.5", None, torch.ones(2), [0.5]])
def test_real_numbers_refuse_bools_strings_and_larger_tensors(value) -> None:
    from src.utils.checks import check_fraction, check_positive, check_real

    with pytest.raises(TypeError, match=r"^x must be a real number, got"):
        check_real(value, "x", low=0.0)
    with pytest.raises(TypeError, match=r"^lr must be a finite number > 0, got"):
        check_positive(value, "lr")
    with pytest.raises(TypeError, match=r"^f must be a number in \(0, 1\), got"):
        check_fraction(value, "f")


def test_real_number_messages() -> None:
    from src.utils.checks import check_fraction, check_nonnegative, check_positive, check_real

    with pytest.raises(ValueError, match=r"^tol must be a finite number in \(0.0, inf\), got 0$"):
        check_real(0, "tol", low=0.0)
    with pytest.raises(ValueError, match=r"^s must be a finite number in \[0.0, 1.0\], got nan$"):
        check_real(float("nan"), "s", low=0.0, low_open=False, high=1.0)
    assert check_real(0, "eps", low=0.0, low_open=False) == 0.0
    with pytest.raises(ValueError, match=r"^lr must be a finite number > 0, got inf; e.g. lr=0.01$"):
        check_positive(float("inf"), "lr", "e.g. lr=0.01")
    with pytest.raises(ValueError, match=r"^wd must be a finite number >= 0, got -1; e.g. wd=0$"):
        check_nonnegative(-1, "wd")
    with pytest.raises(ValueError, match=r"^f must be in \(0, 1\), got 1.0; e.g. f=0.3$"):
        check_fraction(1.0, "f")


def test_features_checks_and_messages() -> None:
    from src.utils.checks import CHECK_CHUNK, NotFloatingPointError, check_features

    x = torch.randn(5, 3)
    assert check_features(x) is x  # checked, not copied
    y = check_features(x, dtype=torch.float64)
    assert y.dtype == torch.float64 and torch.equal(y, x.double())
    with pytest.raises(TypeError, match=r"^z must be a torch.Tensor of shape \(n, D\), got ndarray; .*as_tensor\(z\)"):
        check_features(np.ones((3, 3)), "z")
    with pytest.raises(ValueError, match=r"^z must have shape \(n, D\) .*got \(5,\); .*z.reshape\(len\(z\), -1\)"):
        check_features(torch.randn(5), "z")
    with pytest.raises(ValueError, match=r"^z is empty \(shape \(0, 3\)\): need at least 1 sample \(rows\)"):
        check_features(torch.zeros(0, 3), "z")
    with pytest.raises(ValueError, match=r"^z has too few rows \(shape \(1, 3\)\): need at least 2 samples \(rows\)"):
        check_features(x[:1], "z", min_rows=2)
    # integer features: a TypeError by kind and a ValueError, as the two checks it replaced raised
    for kind in (TypeError, ValueError):
        with pytest.raises(kind, match=r"^z must be floating point, got torch.int64; convert with z.float\(\)$"):
            check_features(torch.ones(4, 3, dtype=torch.long), "z")
    assert issubclass(NotFloatingPointError, TypeError) and issubclass(NotFloatingPointError, ValueError)
    big = torch.zeros(CHECK_CHUNK + 3, 2)  # non-finite rows counted over every chunk
    big[1, 0], big[CHECK_CHUNK + 1, 1], big[CHECK_CHUNK + 2] = float("nan"), float("inf"), float("-inf")
    with pytest.raises(ValueError, match=rf"^z contains NaN or inf in 3 of {CHECK_CHUNK + 3} rows; .*drop those rows"):
        check_features(big, "z")


def test_labels_checks_and_messages() -> None:
    from src.utils.checks import check_labels

    y, c = check_labels(torch.tensor([0, 2, 1], dtype=torch.int32), 3)
    assert y.dtype == torch.int64 and c == 3
    assert check_labels(torch.tensor([0, 1]), 2, num_classes=5)[1] == 5
    with pytest.raises(TypeError, match=r"^y must hold integer class ids in \[0, C\), got dtype torch.float32"):
        check_labels(torch.zeros(3), 3, name="y")
    with pytest.raises(ValueError, match=r"^y must have shape \(4,\), one class id per feature row, got \(3,\)"):
        check_labels(torch.zeros(3, dtype=torch.long), 4, name="y")
    with pytest.raises(ValueError, match=r"^y must lie in \[0, 2\) \(num_classes=2\), got values in \[0, 2\]"):
        check_labels(torch.tensor([0, 1, 2]), 3, 2, name="y")


def test_image_size() -> None:
    from src.utils.checks import check_image_size

    assert check_image_size(32.0) == 32
    with pytest.raises(
        ValueError, match=r"^image_size must be an integer >= 1 \(pixels per side\), .*set image_size=64"
    ):
        check_image_size(0)
    with pytest.raises(TypeError, match=r"^data.image_size must be an integer >= 1 .*got 2.5 .*; fix it$"):
        check_image_size(2.5, "data.image_size", "fix it")


GENERIC = {
    "check_int",
    "check_image_size",
    "check_real",
    "check_positive",
    "check_nonnegative",
    "check_fraction",
    "check_tensor",
    "check_features",
    "check_labels",
}


def test_no_other_module_defines_a_generic_validator() -> None:
    """One validation module: a package checks integers, numbers, tensors, features, labels and image sizes through
    src/utils/checks.py, never a copy of its own (``_check_int`` included)."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    names = GENERIC | {f"_{n}" for n in GENERIC}
    found = [
        f"{f.relative_to(src)}:{node.lineno} {node.name}"
        for f in src.rglob("*.py")
        if f != src / "utils" / "checks.py"
        for node in ast.parse(f.read_text()).body  # module-level functions (a model's check_labels method is its own)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names
    ]
    assert not found, found
