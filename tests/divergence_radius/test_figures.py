"""The DivergenceRadius bar figures: a fixed [0, 1] y axis (R_dr and R_cs of unit vectors lie in it), a y label inside
the canvas, and a note on the figure when the representation collapsed (issue 25)."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest
import torch

from src.callbacks.divergence_radius_callback import DivergenceRadiusCallback, bar_figure
from src.divergence_radius.figures import COLLAPSE_COSINE, collapse_note
from src.divergence_radius.metrics import cosine_robustness, divergence_radius

NAMES = ["brightness", "gaussian_noise"]


def _values(r_dr: float, r_cs: float) -> dict[str, float]:
    out = {f"divergence_radius/{n}": r_dr for n in NAMES}
    return out | {f"cosine_robustness/{n}": r_cs for n in NAMES}


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_the_values_it_shows_are_bounded_by_one_for_unit_embeddings() -> None:
    """Why [0, 1]: antipodal unit vectors are the worst case of both values (1), a single direction the best (0)."""
    z = torch.randn(64, 7, 5, generator=torch.Generator().manual_seed(0)) * 100
    assert float(divergence_radius(z).max()) <= 1.0 + 1e-9 and float(cosine_robustness(z).max()) <= 1.0 + 1e-9
    antipodal = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]])
    assert float(divergence_radius(antipodal)) == pytest.approx(1.0)
    assert float(cosine_robustness(antipodal)) == pytest.approx(1.0)


@pytest.mark.parametrize("r_dr", [1.6e-5, 0.4])
def test_the_axis_is_fixed_and_the_label_is_inside_the_canvas(r_dr: float) -> None:
    fig = bar_figure(_values(r_dr, r_dr / 2), NAMES, "after 3 epoch(s)")
    ax = fig.axes[0]
    assert ax.get_ylim() == (0.0, 1.0)  # a collapsed R_dr draws a near-zero bar, not a full-height one
    fig.canvas.draw()
    label = ax.yaxis.label.get_window_extent()
    canvas = fig.bbox
    assert label.x0 >= canvas.x0 and label.y0 >= canvas.y0 and label.x1 <= canvas.x1 and label.y1 <= canvas.y1
    assert "lower = more robust" in ax.get_ylabel()
    assert _texts(fig) == []  # no cosine given: no note


def test_a_collapsed_representation_gets_a_note_on_the_figure() -> None:
    assert collapse_note(None) is None and collapse_note(0.5) is None and collapse_note(float("nan")) is None
    fig = bar_figure(_values(1.6e-5, 1e-10), NAMES, "after 3 epoch(s)", cross_cosine=0.99995)
    (note,) = _texts(fig)
    assert "collapsed" in note and "0.99995" in note and "not robustness" in note
    assert not _texts(bar_figure(_values(0.3, 0.1), NAMES, cross_cosine=COLLAPSE_COSINE - 0.01))


def _compute(feature_fn) -> tuple[DivergenceRadiusCallback, dict[str, float]]:
    cb = DivergenceRadiusCallback(num_images=4, image_size=16, m=2, perturbations=NAMES, feature_fn=feature_fn)
    return cb, cb.compute(SimpleNamespace(global_rank=0, world_size=1, datamodule=None), L.LightningModule())


def test_the_callback_measures_the_cosine_between_different_probe_images() -> None:
    collapsed, out = _compute(lambda module, x: torch.ones(x.shape[0], 4) + 1e-6 * x.mean((1, 2, 3))[:, None])
    assert collapsed.cross_cosine is not None and collapsed.cross_cosine >= COLLAPSE_COSINE
    assert out["divergence_radius/mean"] < 1e-4  # "robust" only because every image is one point
    healthy, _ = _compute(lambda module, x: x.flatten(1) - 0.5)  # centred pixels: different photos point apart
    assert healthy.cross_cosine is not None and healthy.cross_cosine < COLLAPSE_COSINE
    silent = DivergenceRadiusCallback(num_images=4, image_size=16, m=2, perturbations=NAMES, log_figure=False)
    silent.feature_fn = lambda module, x: x.flatten(1)
    silent.compute(SimpleNamespace(global_rank=0, world_size=1, datamodule=None), L.LightningModule())
    assert silent.cross_cosine is None  # no figure, no extra forward
