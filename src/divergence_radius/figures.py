"""The y axis of every DivergenceRadius bar figure (the training monitor's TensorBoard bars, ``python -m
src.divergence_radius``'s ``r_dr_by_perturbation.png`` and the audit report's).

**Why a fixed [0, 1] axis.** R_dr is the radius of the minimum enclosing ball of the embeddings of an image's
perturbed versions after ℓ2 normalisation (:func:`~src.divergence_radius.metrics.divergence_radius`). Unit vectors
all lie in the unit ball centred at the origin, so that ball encloses them and the *minimum* enclosing radius is at
most 1; it is at least 0, and it reaches 1 when the points surround the origin (some convex combination sums to 0,
App. C of Liu et al.). R_cs = (1 − min cos)/2 lies in [0, 1] because a cosine lies in [−1, 1]. A fixed [0, 1] axis
therefore shows every possible value, and bars of two runs, epochs or backbones compare by height. An autoscaled axis
did not: a collapsed representation (R_dr 1.6e-5) drew bars as tall as a healthy one's.

**Why a collapse note.** R_dr → 0 means "invariant to the perturbations", which a network also achieves by mapping
every image to one point. That is told apart by the mean cosine between the embeddings of *different* images (the
:class:`~src.callbacks.CollapseAlarm`'s second condition): at or above :data:`COLLAPSE_COSINE` the figure says so on
its face, next to the near-zero bars it explains.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["COLLAPSE_COSINE", "bar_axis", "collapse_note"]

#: mean cosine between different images at or above which the representation counts as collapsed (the default
#: ``cosine_ceiling`` of :class:`~src.callbacks.CollapseAlarm`; measured runs in docs/monitoring.md)
COLLAPSE_COSINE = 0.999


def collapse_note(cross_cosine: float | None, ceiling: float = COLLAPSE_COSINE) -> str | None:
    """The note a figure carries when ``cross_cosine`` (the mean cosine between different images' embeddings) says
    the representation collapsed; None otherwise (or when it was not measured)."""
    if cross_cosine is None or not math.isfinite(cross_cosine) or cross_cosine < ceiling:
        return None
    return (
        f"collapsed representation: mean cosine between different images {cross_cosine:.6g} (≥ {ceiling:g}).\n"
        "Every image maps to nearly one point, so R_dr ≈ 0 here is not robustness."
    )


def bar_axis(ax: Any, ylabel: str, cross_cosine: float | None = None) -> str | None:
    """Put ``ax`` on the fixed [0, 1] scale of R_dr / R_cs, with ``ylabel`` (keep it short: two lines at most fit a
    3-inch-tall figure) and, when ``cross_cosine`` says the representation collapsed, :func:`collapse_note` written
    on the plot. Returns the note (None: none). Call the figure's ``tight_layout`` afterwards, so the label is
    inside the canvas."""
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    note = collapse_note(cross_cosine)
    if note is not None:
        ax.text(
            0.5, 0.62, note, transform=ax.transAxes, ha="center", va="center", fontsize=8, color="#a40000",
            bbox={"boxstyle": "round", "facecolor": "#fff3f3", "edgecolor": "#a40000"},
        )  # fmt: skip
    return note
