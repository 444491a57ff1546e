"""Pareto fronts and objective limits: the one owner of "which trial is not dominated" for the sweeper plugin
(``hydra/sweeper=repbench_optuna``) and the sweep report (``python -m src.sweep_report``).

A point is a tuple of objective values; ``modes`` says per objective whether larger (``"max"``) or smaller
(``"min"``) is better. A limit is the worst acceptable value of one objective (``None``: any value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["better", "check_limits", "check_modes", "dominates", "feasible", "limit_violations", "pareto_front"]


def check_modes(modes: Sequence[str]) -> tuple[str, ...]:
    """``modes`` as a tuple, each ``"max"`` or ``"min"``; a ValueError naming the bad entry otherwise."""
    bad = [m for m in modes if m not in ("max", "min")]
    if bad or not modes:
        raise ValueError(f"objective modes must be 'max' or 'min' (one per objective), got {list(modes)}")
    return tuple(modes)


def check_limits(limits: Sequence[float | None] | None, n_objectives: int) -> tuple[float | None, ...]:
    """One limit per objective (``None`` for none; ``limits=None`` means no limit at all); a ValueError when the
    count differs from the number of objectives or a limit is not a finite number."""
    if limits is None:
        return (None,) * n_objectives
    limits = list(limits)
    if len(limits) != n_objectives:
        raise ValueError(
            f"limits {limits} has {len(limits)} entries for {n_objectives} objectives; give one per objective "
            "(null for an objective without a limit)"
        )
    out: list[float | None] = []
    for v in limits:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)):
            raise ValueError(f"limit {v!r} is not a finite number or null (limits {limits})")
        out.append(None if v is None else float(v))
    return tuple(out)


def better(a: float, b: float, mode: str) -> bool:
    """Whether ``a`` is strictly better than ``b`` under ``mode``."""
    return a > b if mode == "max" else a < b


def dominates(p: Sequence[float], q: Sequence[float], modes: Sequence[str]) -> bool:
    """Whether ``p`` Pareto-dominates ``q``: no worse on every objective and strictly better on one."""
    no_worse = all(not better(q[k], p[k], modes[k]) for k in range(len(modes)))
    return no_worse and any(better(p[k], q[k], modes[k]) for k in range(len(modes)))


def limit_violations(point: Sequence[float], modes: Sequence[str], limits: Sequence[float | None]) -> tuple[float, ...]:
    """Per objective, how far ``point`` is beyond its limit (> 0: violated; <= 0 or no limit: 0 or below), the sign
    convention of Optuna's ``constraints_func`` (feasible when every value is <= 0): ``limit - value`` for a
    maximised objective, ``value - limit`` for a minimised one, 0 without a limit."""
    return tuple(
        0.0 if lim is None else (lim - v if m == "max" else v - lim) for v, m, lim in zip(point, modes, limits)
    )


def feasible(point: Sequence[float], modes: Sequence[str], limits: Sequence[float | None]) -> bool:
    """Whether every objective of ``point`` is finite and at least as good as its limit."""
    return all(math.isfinite(v) for v in point) and all(x <= 0 for x in limit_violations(point, modes, limits))


def pareto_front(
    points: Sequence[Sequence[float]],
    modes: Sequence[str],
    limits: Sequence[float | None] | None = None,
) -> list[int]:
    """Indices (in input order) of the feasible points that no other feasible point dominates. Points with a
    non-finite value, or beyond a limit, are never on the front and do not dominate: the front is that of the
    acceptable points only (a collapsed run below a utility limit cannot hide an acceptable one behind it)."""
    modes = check_modes(modes)
    lims = check_limits(limits, len(modes))
    for p in points:
        if len(p) != len(modes):
            raise ValueError(f"point {tuple(p)} has {len(p)} values for {len(modes)} objectives {modes}")
    ok = [i for i, p in enumerate(points) if feasible(p, modes, lims)]
    return [i for i in ok if not any(dominates(points[j], points[i], modes) for j in ok if j != i)]
