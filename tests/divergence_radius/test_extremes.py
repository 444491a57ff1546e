"""Floating-point extremes of the MEB and the robustness values (R08, R09, R25, R24) and clear errors (R16, R32).

Tolerances: the MEB of a few points is solved with O(10) float64 operations per quantity on coordinates rescaled to
[0.5, 1) (max |value|), each rounding by u = 2^-53 ≈ 1.1e-16 relative to that scale: 1e-14 (≈ 90 u) bounds it.
Scaling by a power of two commutes exactly with every rounding (no under/overflow after the rescaling), so inputs
2^±665 times a unit set give exactly 2^±665 times its results (asserted with ==).
"""

from __future__ import annotations

import math

import pytest
import torch

from src.divergence_radius import divergence_radius, minimum_enclosing_ball, robustness_sweep

F64 = torch.float64
RTOL = 1e-14  # see the module docstring
THREE = [[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]  # MEB: centre (0, 0), radius 1 (the first two points are diametral)


@pytest.mark.parametrize("scale", [1.0, 1e200, 1e-200, 1e-310])
def test_r25_orthogonal_pair_at_any_scale(scale):
    z = torch.tensor([[scale, 0.0], [0.0, scale]], dtype=F64)
    # before: 1e200 gave 0.0 (norm overflow), 1e-200 raised "all-zero vector(s)" (R24: norm underflow)
    torch.testing.assert_close(divergence_radius(z), torch.tensor(1 / math.sqrt(2), dtype=F64), rtol=RTOL, atol=0)


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_r08_r09_three_points_closed_form(scale):
    p = torch.tensor(THREE, dtype=F64) * scale
    centre, radius = minimum_enclosing_ball(p)
    # before: 1e200 gave radius NaN (Gram overflow), 1e-200 radius 0 (underflow)
    torch.testing.assert_close(radius, torch.tensor(scale, dtype=F64), rtol=RTOL, atol=0)
    assert float(centre.abs().max()) <= RTOL * scale  # centre (0, 0) up to rounding at the points' scale


def test_r09_two_points_closed_form():
    centre, radius = minimum_enclosing_ball(torch.tensor([[1e-200, 0.0], [-1e-200, 0.0]], dtype=F64))
    # before: radius 0 and centre (1e-200, 0)
    torch.testing.assert_close(radius, torch.tensor(1e-200, dtype=F64), rtol=RTOL, atol=0)
    assert float(centre.abs().max()) <= RTOL * 1e-200


@pytest.mark.parametrize("exponent", [665, -665])
def test_power_of_two_scaling_is_exact(exponent):
    p = torch.randn(4, 6, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    c1, r1 = minimum_enclosing_ball(p)
    c2, r2 = minimum_enclosing_ball(p * 2.0**exponent)
    assert torch.equal(r2, r1 * 2.0**exponent) and torch.equal(c2, c1 * 2.0**exponent)
    assert torch.equal(divergence_radius(p * 2.0**exponent), divergence_radius(p))


def test_r24_only_true_zero_vectors_are_called_zero():
    with pytest.raises(ValueError, match=r"1 all-zero vector\(s\) \(every component exactly 0\)"):
        divergence_radius(torch.tensor([[0.0, 0.0], [0.0, 1e-200]], dtype=F64))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_enumerate": -3, "max_support": 0}, r"max_enumerate must be an integer >= 1, got -3 \(int\)"),
        ({"max_support": 0}, r"max_support must be an integer >= 2, got 0 \(int\)"),
        ({"max_enumerate": 2.5}, r"max_enumerate must be an integer >= 1, got 2.5 \(float\)"),
    ],
)
def test_r16_solver_limits_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        minimum_enclosing_ball(torch.randn(12, 3), **kwargs)


def test_r32_one_value_per_image_names_the_b_d_contract():
    x = torch.rand(2, 3, 32, 32)
    with pytest.raises(ValueError, match=r"\(B, D\) embeddings.*got shape \(2,\).*add a feature axis"):
        robustness_sweep(x, lambda t: t.mean((1, 2, 3)) - 0.5, perturbations=["brightness", "contrast"], m=3)
