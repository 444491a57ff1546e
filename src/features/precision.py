"""Optional reduced-precision forwards (``autocast="bf16"|"fp16"``; off by default).

Measured on a 2-core AVX2 CPU (no native bf16/fp16 arithmetic): see docs/speed.md for the speed and the effect on
features and SynBench-Score. Features are always returned as float32.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["AUTOCAST_DTYPES", "autocast_context", "check_autocast"]

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_autocast(choice: str | None) -> str | None:
    if choice is not None and choice not in AUTOCAST_DTYPES:
        raise ValueError(f"unknown autocast {choice!r}; use None (float32), 'bf16' or 'fp16'")
    return choice


def autocast_context(choice: str | None, device: torch.device) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for the device type with the chosen dtype, or a no-op for None."""
    if choice is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AUTOCAST_DTYPES[choice])
