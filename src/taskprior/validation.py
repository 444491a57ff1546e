"""Early, explicit input checks shared by the Task Prior kernels, moments and sampler."""

from __future__ import annotations

import math
import operator

import torch

Tensor = torch.Tensor

#: rows whose ℓ2 norm is at most this are "zero" (the cosine kernel is undefined for them)
ZERO_NORM = 1e-30

#: rows checked per chunk (bounded temporary memory for the finiteness and norm checks)
CHECK_CHUNK = 4096

SCALES = ("frobenius", "none")


def check_features(features: Tensor, name: str = "features") -> Tensor:
    """A 2-D floating tensor (n, D) with n >= 1, D >= 1, every entry finite."""
    if not isinstance(features, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (n, D), got {type(features).__name__}")
    if features.ndim != 2:
        raise ValueError(f"{name} must have shape (n, D), got shape {tuple(features.shape)}; flatten it first")
    if features.shape[0] < 1 or features.shape[1] < 1:
        raise ValueError(f"{name} is empty (shape {tuple(features.shape)}); pass at least one row and column")
    if not features.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {features.dtype}; convert with .float()")
    for chunk in features.split(CHECK_CHUNK):
        if not bool(torch.isfinite(chunk).all()):
            raise ValueError(f"{name} contains NaN or inf; check the feature extractor or drop those rows")
    return features


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


def check_int(value: object, name: str, minimum: int) -> int:
    """``value`` as an int >= ``minimum``: ints (also numpy/torch integer scalars) and integral floats are accepted;
    a string, bool or fractional number raises naming the argument, its value and its type."""
    got = f"got {value!r} ({type(value).__name__})"
    if isinstance(value, bool) or isinstance(value, str):
        raise TypeError(f"{name} must be an integer >= {minimum}, {got}; pass a Python int, e.g. {name}={minimum}")
    try:
        v = operator.index(value)
    except TypeError:
        if not (isinstance(value, float) and value.is_integer()):
            raise TypeError(f"{name} must be an integer >= {minimum}, {got}") from None
        v = int(value)
    if v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, {got}")
    return v


def check_tensor(value: object, name: str, shape: str) -> Tensor:
    """``value`` itself if it is a torch.Tensor, else a TypeError naming the argument and the expected ``shape``."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape {shape}, got {type(value).__name__}; convert it with "
            f"torch.as_tensor({name})"
        )
    return value


def check_temperature(temperature: float, name: str = "temperature") -> float:
    """``temperature`` as a float, finite and > 0; else a ValueError naming ``name``."""
    t = float(temperature)
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {temperature}")
    return t


def check_block_size(block_size: int) -> int:
    if int(block_size) != block_size or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size}")
    return int(block_size)


def check_scale(scale: str, name: str) -> str:
    if scale not in SCALES:
        raise ValueError(f"{name} must be one of {SCALES}, got {scale!r}")
    return scale


def check_norm(norm: float, name: str) -> float:
    v = float(norm)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {norm}")
    return v


def check_same_n(n_eval: int, n_prior: int) -> None:
    if n_eval != n_prior:
        raise ValueError(
            f"eval and prior describe different numbers of points ({n_eval} vs {n_prior}); "
            "both kernels must be computed on the same images in the same order"
        )
