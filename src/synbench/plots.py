"""Figures of SynBench results: the E(a_t) curves of the ICML 2024 paper, Fig. 3 (left).

matplotlib is imported lazily and only the object-oriented ``matplotlib.figure.Figure`` API is used (no pyplot,
no global state), so figures are safe in headless runs, threads and TensorBoard loggers
(``SummaryWriter.add_figure`` or ``fig.savefig(path)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def expected_bound_figure(
    a_t: Sequence[float],
    reference: Sequence[float],
    curves: Mapping[str, Sequence[float]],
    *,
    title: str | None = None,
    figsize: tuple[float, float] = (6.4, 4.8),
) -> Any:
    """Line plot of the reference E(a_t) (raw data, eq. 2 with Theorem 3.1 (iv)) and one E_θ,ε(a_t) per label."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(list(a_t), list(reference), "-", color="crimson", linewidth=2.0, label="Raw data w/ robust/std. Bayes")
    for label, values in curves.items():
        ax.plot(list(a_t), list(values), "-", label=label)
    ax.set_xlabel("threshold accuracy $a_t$")
    ax.set_ylabel(r"expected bound $E_{\theta,\epsilon}(a_t)$")
    ax.set_ylim(bottom=0.0)
    ax.grid(True, linestyle="-.")
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return fig


def result_figure(result: Any, a_t: Sequence[float] | None = None, title: str | None = None) -> Any:
    """Fig. 3 (left) for a :class:`~src.synbench.runner.SynBenchResult`: reference and every ε."""
    c = result.curves(a_t)
    curves = {f"Rep. w/ {eps:g}-robust Bayes": v for eps, v in c["eps"].items()}
    return expected_bound_figure(c["a_t"], c["reference"], curves, title=title)
