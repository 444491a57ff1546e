"""Reliability cases of the torchmetrics (M04, M10, M11, M14) and the torchmetrics conventions (``plot``, best_eps)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # headless

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure

from src.metrics import CosineRobustness, DivergenceRadius, SynBenchScore, TaskAccuracies, TaskPriorMoments
from src.metrics.divergence_radius import VALUE_SLACK

from .test_synbench_score import CFG, SHAPE, feature_fn


def test_m11_nan_logits_are_refused():
    m = TaskAccuracies(2)
    # before: the argmax of an all-NaN row is 0, which equals label 0: acc_mean 1.0
    with pytest.raises(ValueError, match=r"logits contain NaN/inf in 8 row\(s\).*diverged"):
        m.update(torch.full((2, 4, 2), float("nan")), torch.zeros(2, 4, dtype=torch.long))


def test_m10_labels_outside_the_classes_are_refused():
    m = TaskAccuracies(2)
    # before: label 5 of a 2-class probe silently counted as wrong: acc_mean 0.0
    with pytest.raises(ValueError, match=r"labels must be integer classes in \[0, 2\).*got values in \[5.0, 5.0\]"):
        m.update(torch.randn(2, 4, 2), torch.full((2, 4), 5))
    with pytest.raises(ValueError, match=r"labels must be integer classes"):
        m.update(torch.randn(2, 4, 2), torch.full((2, 4), 0.5))  # a fractional label can never be predicted


def test_m10_valid_float_labels_still_work():
    m = TaskAccuracies(1)
    m.update(torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]), torch.tensor([[0.0, 0.0]]))  # integral float labels accepted
    assert float(m.compute()["acc_mean"]) == 0.5  # one of two correct, exact in binary


@pytest.mark.parametrize("cls", [CosineRobustness, DivergenceRadius])
def test_m04_values_outside_unit_interval_are_refused(cls):
    m = cls(["fog"])
    # before: -5 and 7 were averaged to 1.0
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\].*\[-5.0, 7.0\].*cannot leave \[0, 1\]"):
        m.update_values(torch.tensor([[-5.0], [7.0]]))


def test_m04_rounding_slack_is_clipped():
    m = CosineRobustness(["fog"])
    # values within VALUE_SLACK (float32 rounding of a unit-vector dot product, see its definition) are rounding
    m.update_values(torch.tensor([[-VALUE_SLACK / 2], [1.0 + VALUE_SLACK / 2]], dtype=torch.float64))
    assert float(m.compute()["fog"]) == 0.5  # clipped to 0 and 1: exact mean
    with pytest.raises(ValueError, match="must lie in"):
        m.update_values(torch.tensor([[1.0 + 2 * VALUE_SLACK]], dtype=torch.float64))


def test_m14_lists_are_refused_with_the_argument_named():
    m = TaskPriorMoments(2, 2, 2, 0.01)
    with pytest.raises(TypeError, match=r"eval_features must be a torch.Tensor of shape \(B, 2\), got list"):
        m.update([[1.0, 2.0], [3.0, 4.0]], [[1.0, 0.0], [0.0, 1.0]], [0, 1])
    with pytest.raises(TypeError, match=r"prior_features must be a torch.Tensor"):
        m.update(torch.ones(2, 2), [[1.0, 0.0], [0.0, 1.0]], [0, 1])
    with pytest.raises(TypeError, match=r"num_samples must be an integer >= 1, got '3' \(str\)"):
        TaskPriorMoments("3", 2, 2, 0.01)


def _computed_metrics():
    dr = DivergenceRadius(["fog", "frost"])
    dr.update(torch.randn(3, 2, 4, 5))
    cs = CosineRobustness(["fog", "frost"])
    cs.update(torch.randn(3, 2, 4, 5))
    tp = TaskPriorMoments(6, 3, 3, 0.5)
    g = torch.Generator().manual_seed(0)
    tp.update(torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g), torch.arange(6))
    acc = TaskAccuracies(3)
    acc.update(torch.randn(3, 8, 4, generator=g), torch.randint(0, 4, (3, 8), generator=g))
    return [dr, cs, tp, acc]


@pytest.mark.parametrize("index", range(4))
def test_plot_returns_a_figure(index):
    metric = _computed_metrics()[index]
    fig, ax = metric.plot()
    assert isinstance(fig, Figure) and ax.figure is fig and ax.lines  # one marker per output
    _, ax2 = plt.subplots()
    fig2, ax3 = metric.plot([metric.compute(), metric.compute()], ax=ax2)  # a series, on a given axis
    assert fig2 is None and ax3 is ax2
    plt.close("all")


def test_synbench_plot_and_best_eps_is_a_separate_output():
    m = SynBenchScore(CFG, input_shape=SHAPE)
    m.update(feature_fn)
    out = m.compute()
    assert "best_eps" not in out and "score" in out  # higher_is_better refers to every key of compute()
    assert m.best_eps() in CFG.eps
    fig, ax = m.plot()
    assert isinstance(fig, Figure) and len(ax.lines) == len(out)
    plt.close("all")
