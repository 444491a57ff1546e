"""ε-grid validation (relative / absolute budgets; see the package docstring)."""

from __future__ import annotations

from typing import Any

import torch

Tensor = torch.Tensor
F64 = torch.float64


def check_eps(eps: Any, eps_mode: str = "relative") -> Tensor:
    """Validate an ε grid (see module docstring) and return it as a float64 vector."""
    if eps_mode not in ("relative", "absolute"):
        raise ValueError(f"eps_mode must be 'relative' or 'absolute', got {eps_mode!r}")
    t = torch.as_tensor(eps, dtype=F64).reshape(-1).cpu()
    if t.numel() == 0:
        raise ValueError("eps list is empty")
    if not torch.isfinite(t).all():
        raise ValueError(f"eps must be finite, got {t.tolist()}")
    if (t < 0).any():
        raise ValueError(f"eps must be >= 0, got {t.tolist()}")
    if eps_mode == "relative" and (t >= 1).any():
        raise ValueError(f"relative eps must be < 1 (eps >= 1 makes w = 0 for every representation), got {t.tolist()}")
    return t
