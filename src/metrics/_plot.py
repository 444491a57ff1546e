"""``plot()`` for the RepBench torchmetrics, in torchmetrics' convention (``Metric.plot(val=None, ax=None)``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor


class PlotMixin:
    """torchmetrics' ``plot(val=None, ax=None) -> (fig, ax)`` through its ``Metric._plot`` helper
    (``torchmetrics.utilities.plot.plot_single_or_multi_val``): one marker per key of ``compute()``'s dict, or a line
    per key over steps for a list of results, with the class's ``plot_lower_bound``/``plot_upper_bound`` and
    ``higher_is_better``. Needs matplotlib (any backend; Agg works headless)."""

    def plot(
        self, val: dict[str, Tensor] | Sequence[dict[str, Tensor]] | None = None, ax: Any = None
    ) -> tuple[Any, Any]:
        """Plot ``val`` (a ``compute()`` result or a list of them; None: ``self.compute()``) on ``ax`` (None: a new
        figure). Returns (figure, axes); the figure is None when ``ax`` was given."""
        return self._plot(val, ax)  # type: ignore[attr-defined]
