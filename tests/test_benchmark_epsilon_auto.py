"""benchmarks/epsilon_auto.py: its statistics and log parsing on fixed rows (the study itself runs minutes per seed;
its figures are measured, not asserted), and the arms it compares are the auto_epsilon thresholds the default
lists."""

from __future__ import annotations

import math

import pytest

from benchmarks.epsilon_auto import ARMS, HELD_OUT, OBJECTIVE, _auto_epsilon, mean_se, summary
from src.models.auto_epsilon import auto_epsilon_defaults


def test_mean_and_standard_error() -> None:
    m, se = mean_se([0.5, 0.7, 0.9])
    # sample SD of (0.5, 0.7, 0.9) is 0.2 exactly; SE = 0.2 / sqrt(3); a few ulps of float arithmetic
    assert m == pytest.approx(0.7, abs=1e-15) and se == pytest.approx(0.2 / math.sqrt(3), rel=1e-12)
    assert mean_se([0.25]) == (0.25, 0.0)


def _row(seed: int, sweep: float, auto: float) -> dict:
    figures = {OBJECTIVE: sweep, HELD_OUT[0]: sweep, HELD_OUT[1]: 0.9}
    return {
        "seed": seed,
        "walls_s": {"sweep": 10.0, "auto_a06": 1.0},
        "sweep": figures | {"best_test_of_all_trials": sweep + 0.01},
        "auto_a06": {OBJECTIVE: auto, HELD_OUT[0]: auto, HELD_OUT[1]: 0.9, "epsilon": 0.2},
    }


def test_summary_pairs_each_arm_with_the_sweep() -> None:
    lines = summary([_row(0, 0.60, 0.70), _row(1, 0.64, 0.66)])
    paired = [line for line in lines if line.startswith(HELD_OUT[0]) and "auto_a06 − sweep (paired)" in line]
    # differences +0.10 and +0.02: mean +0.06, SE = SD / sqrt(2) = 0.0566 / 1.414 = 0.04 (printed to 4 places)
    assert paired == [f"{HELD_OUT[0]:28s} auto_a06 − sweep (paired) +0.0600 ± 0.0400"]
    assert not [line for line in lines if "zero" in line]  # arms a row lacks are left out


def test_the_chosen_epsilon_is_read_from_the_log(tmp_path) -> None:
    log = tmp_path / "auto.log"
    log.write_text("[..][repbench][INFO] - epsilon=auto: SynBench-Score by a_T and eps: {...} -> a_T = 0.6 decides, "
                   "eps = 0.2 x 1 = 0.2\n")  # fmt: skip
    assert _auto_epsilon(log) == 0.2
    log.write_text("[..][repbench][WARNING] - epsilon=auto: SynBench-Score is 0 ... so the scores do not rank eps; "
                   "eps = 0 (standard probing). Lower auto_epsilon.a_T\n")  # fmt: skip
    assert _auto_epsilon(log) == 0.0


def test_the_arms_are_the_default_thresholds() -> None:
    thresholds = [
        float(o.split("=[")[1].rstrip("]")) for arm in ("auto_a07", "auto_a06") for o in ARMS[arm] if "a_T" in o
    ]
    assert thresholds == auto_epsilon_defaults()["a_T"]
