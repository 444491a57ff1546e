"""Log names follow ``{stage}/{family}/{name}`` with no ``.`` or ``=`` inside (README, "Configuration reference")."""

from __future__ import annotations

__all__ = ["format_eps", "metric_name"]


def format_eps(eps: float) -> str:
    """0.5 -> '0p5', 8/255 -> '0p0314', 1 -> '1'; safe inside metric and module names."""
    text = f"{float(eps):.4g}"
    if "e" in text:
        raise ValueError(f"epsilon {eps} is too small or too large to name; use a value in [1e-4, 1e4)")
    return text.replace(".", "p").replace("-", "m")


def metric_name(stage: str, *parts: str) -> str:
    """metric_name('val', 'adv', 'acc_pgd5_l2_0p5') -> 'val/adv/acc_pgd5_l2_0p5'."""
    name = "/".join([stage, *parts])
    if "." in name or "=" in name:
        raise ValueError(f"metric name {name!r} must not contain '.' or '='")
    return name
