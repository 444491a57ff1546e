"""The perturbation registry's validators of the sweep vocabulary (issue 14): one owner, one message, every entry point."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from src.perturbations import PERTURBATIONS, parameter_grid, perturb
from src.perturbations.registry import (
    SAMPLING_MODES,
    check_m,
    check_mode,
    check_perturbable_images,
    check_perturbation_names,
)

KNOWN = "known: " + ", ".join(PERTURBATIONS)


def test_issue14_names_none_is_all_nine_and_a_single_name_is_a_list_of_one() -> None:
    assert check_perturbation_names(None) == tuple(PERTURBATIONS) and len(PERTURBATIONS) == 9
    assert check_perturbation_names("fog") == ("fog",)
    assert check_perturbation_names(["frost", "fog"]) == ("frost", "fog")  # order kept
    assert check_perturbation_names(OmegaConf.create(["fog", "contrast"])) == ("fog", "contrast")  # Hydra lists


@pytest.mark.parametrize(
    "names,problem",
    [
        ([], r"got an empty list"),
        (["sepia", "fog", "snow"], r"unknown perturbation\(s\) \['sepia', 'snow'\]"),
        ([1, "fog"], r"unknown perturbation\(s\) \[1\]"),
        (["fog", "frost", "fog"], r"\['fog'\] listed more than once; list each perturbation once"),
        ({"fog": 1}, r"got \{'fog': 1\} \(dict\)"),
        (3, r"got 3 \(int\)"),
    ],
)
def test_issue14_bad_names_get_one_message(names, problem) -> None:
    with pytest.raises(ValueError) as info:
        check_perturbation_names(names, "divergence_radius.perturbations")
    msg = str(info.value)
    want = "divergence_radius.perturbations must be a non-empty list of distinct perturbation names (or null / None"
    assert msg.startswith(want), msg
    assert re.search(problem, msg), msg
    assert KNOWN in msg or "listed more than once" in msg, msg


@pytest.mark.parametrize("m", [0, -2, 2.0, True, "5", None])
def test_issue14_m_must_be_a_positive_integer(m) -> None:
    with pytest.raises(ValueError, match=r"^m must be a positive integer \(perturbed versions per image and pert"):
        check_m(m)


def test_issue14_m_accepts_integer_types() -> None:
    assert check_m(np.int64(3)) == 3 and type(check_m(np.int64(3))) is int and check_m(1) == 1


@pytest.mark.parametrize("mode", ["grid", "Equal", None, 0])
def test_issue14_mode_is_equal_or_random(mode) -> None:
    with pytest.raises(ValueError, match=r"^mode must be 'equal' or 'random' \('equal': m equally spaced"):
        check_mode(mode)
    assert all(check_mode(m) == m for m in SAMPLING_MODES)


def test_issue14_entry_points_share_the_registry_messages() -> None:
    """parameter_grid and perturb word unknown names, m and mode as the validators do (the one owner)."""
    with pytest.raises(ValueError, match=r"unknown perturbation\(s\) \['snow'\]; " + KNOWN):
        perturb(torch.rand(1, 3, 16, 16), "snow", 1.0)
    with pytest.raises(ValueError, match=r"unknown perturbation\(s\) \['snow'\]; " + KNOWN):
        parameter_grid("snow", 3)
    with pytest.raises(ValueError, match=r"m must be a positive integer \(perturbed versions"):
        parameter_grid("fog", 0)
    with pytest.raises(ValueError, match=r"mode must be 'equal' or 'random' \('equal'"):
        parameter_grid("fog", 3, mode="grid")


def test_issue14_perturbable_images_name_the_argument() -> None:
    with pytest.raises(ValueError, match=r"^train_images must be finite and in \[0, 1\] pixel space"):
        check_perturbable_images(torch.full((2, 3, 16, 16), 2.0), "train_images")
    with pytest.raises(ValueError, match=r"^images must be at least 16x16 px, got 8x8"):
        check_perturbable_images(torch.rand(2, 3, 8, 8))
    check_perturbable_images(torch.rand(2, 3, 16, 16))  # accepted: returns None
