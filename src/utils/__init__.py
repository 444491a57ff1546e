"""Small shared helpers (naming, config plumbing)."""

from .naming import format_eps, metric_name

__all__ = ["format_eps", "metric_name"]
