"""Early, explicit input checks shared by the Task Prior kernels, moments and sampler."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..utils.checks import as_real, check_int, check_positive

Tensor = torch.Tensor

#: rows whose ℓ2 norm is at most this are "zero" (the cosine kernel is undefined for them)
ZERO_NORM = 1e-30

SCALES = ("frobenius", "none")


#: arithmetic of the moments' two kernel products (moments.py): exact float64, float32 (chunked, float64 sums), or
#: float32 per kernel where the a-priori bound of ``float32_error_bounds`` is <= rtol
MOMENT_PRECISIONS = ("float64", "float32", "auto")


def check_moment_precision(precision: object, name: str = "precision") -> str:
    """``precision`` in :data:`MOMENT_PRECISIONS`; a ValueError naming the choices otherwise."""
    if precision not in MOMENT_PRECISIONS:
        raise ValueError(
            f"{name} must be one of {MOMENT_PRECISIONS}, got {precision!r}; 'float64' (default) is exact to float64 "
            "rounding, 'auto' uses float32 products where the error bound allows (see float32_error_bounds)"
        )
    return str(precision)


def check_kernel(kernel: Tensor, name: str = "kernel") -> Tensor:
    """A square floating (n, n) tensor with finite entries."""
    if not isinstance(kernel, Tensor) or kernel.ndim != 2 or kernel.shape[0] != kernel.shape[1]:
        shape = tuple(kernel.shape) if isinstance(kernel, Tensor) else type(kernel).__name__
        raise ValueError(f"{name} must be a square (n, n) tensor, got {shape}")
    if not kernel.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {kernel.dtype}")
    if not bool(torch.isfinite(kernel).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return kernel


def check_temperature(temperature: float, name: str = "temperature") -> float:
    """``temperature`` as a float, finite and > 0; else a ValueError naming ``name`` and the fix."""
    return check_positive(
        temperature, name, "T of the Task Prior is > 0 (the paper's Fig. 6 uses 0.01; docs/task_prior.md, Conventions)"
    )


def check_quantiles(quantiles: object, name: str = "quantiles") -> tuple[float, ...]:
    """``quantiles`` as a tuple of floats in [0, 1] (possibly empty); else an error naming ``name``."""
    if isinstance(quantiles, str | bytes) or not isinstance(quantiles, Sequence):
        raise TypeError(f"{name} must be a list of numbers in [0, 1], got {quantiles!r}; e.g. {name}=[0.1, 0.5, 0.9]")
    out = tuple(as_real(q, name, "a list of numbers in [0, 1]") for q in quantiles)
    bad = [q for q in out if not 0.0 <= q <= 1.0]
    if bad:
        raise ValueError(f"{name} must lie in [0, 1], got {list(quantiles)}; e.g. {name}=[0.1, 0.5, 0.9]")
    return out


def check_block_size(block_size: int) -> int:
    """``block_size`` as an int >= 1 (:func:`check_int`)."""
    return check_int(block_size, "block_size", 1)


def check_scale(scale: str, name: str) -> str:
    if scale not in SCALES:
        raise ValueError(f"{name} must be one of {SCALES}, got {scale!r}")
    return scale


def check_norm(norm: float, name: str) -> float:
    """A kernel's divisor: a finite number > 0 (:func:`check_positive`)."""
    return check_positive(norm, name)


def check_same_n(n_eval: int, n_prior: int) -> None:
    if n_eval != n_prior:
        raise ValueError(
            f"eval and prior describe different numbers of points ({n_eval} vs {n_prior}); "
            "both kernels must be computed on the same images in the same order"
        )
