"""src.stats.pareto: the front of acceptable points, limit violations in Optuna's sign convention, validators."""

from __future__ import annotations

import itertools

import pytest

from src.stats.pareto import check_limits, dominates, feasible, limit_violations, pareto_front


def _brute_front(points, modes, limits):
    """Independent definition: a point is on the front iff it is acceptable and no acceptable point is >= on every
    objective (in the better direction) and > on one."""
    sign = [1 if m == "max" else -1 for m in modes]
    ok = [i for i, p in enumerate(points) if all(lim is None or s * v >= s * lim for v, s, lim in zip(p, sign, limits))]
    return [
        i
        for i in ok
        if not any(
            all(sign[k] * points[j][k] >= sign[k] * points[i][k] for k in range(len(modes)))
            and any(sign[k] * points[j][k] > sign[k] * points[i][k] for k in range(len(modes)))
            for j in ok
        )
    ]


@pytest.mark.parametrize("modes", list(itertools.product(("max", "min"), repeat=3)))
def test_front_matches_the_definition_on_a_grid_with_ties(modes) -> None:
    # a 3-objective grid with ties (values in {0, 1, 2}) and one limit: every dominance case occurs
    points = [(a, b, (a * b) % 3) for a in range(3) for b in range(3)]
    limits = (None, 1.0, None)
    assert pareto_front(points, modes, limits) == _brute_front(points, modes, limits)
    assert pareto_front(points, modes) == _brute_front(points, modes, (None,) * 3)


def test_collapsed_point_needs_a_limit_to_leave_the_front() -> None:
    # the robust fine-tuning trade-off: (teacher cosine max, R_dr min) for lam = 0 / 1 / 10 and a dominated lam = 3
    points = [(0.50, 0.007), (0.87, 0.19), (0.93, 0.23), (0.85, 0.25)]
    assert pareto_front(points, ("max", "min")) == [0, 1, 2]
    assert pareto_front(points, ("max", "min"), (0.8, None)) == [1, 2]
    assert pareto_front([(1.0, float("nan")), (0.5, 0.5)], ("max", "min")) == [1]  # non-finite: never on it


def test_violation_signs_follow_optuna_constraints() -> None:
    # <= 0 feasible; limit - value for max, value - limit for min; 0 without a limit (exact in binary: 0.5, 0.25)
    assert limit_violations((0.5, 0.25), ("max", "min"), (0.75, 0.5)) == (0.25, -0.25)
    assert limit_violations((0.5, 0.25), ("max", "min"), (None, None)) == (0.0, 0.0)
    assert feasible((0.75, 0.5), ("max", "min"), (0.75, 0.5))  # equal to the limit is acceptable
    assert not feasible((0.5, 0.25), ("max", "min"), (0.75, None))
    assert dominates((1, 1), (1, 0), ("max", "max")) and not dominates((1, 1), (1, 1), ("max", "max"))


def test_bad_limits_and_modes_are_named() -> None:
    assert check_limits(None, 2) == (None, None) and check_limits([1, None], 2) == (1.0, None)
    with pytest.raises(ValueError, match=r"has 1 entries for 2 objectives"):
        check_limits([0.5], 2)
    for bad in (float("nan"), True, "0.5"):
        with pytest.raises(ValueError, match=r"is not a finite number or null"):
            check_limits([bad, None], 2)
    with pytest.raises(ValueError, match=r"modes must be 'max' or 'min'"):
        pareto_front([(1, 2)], ("max", "up"))
    with pytest.raises(ValueError, match=r"has 1 values for 2 objectives"):
        pareto_front([(1,)], ("max", "min"))
