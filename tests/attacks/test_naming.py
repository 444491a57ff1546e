"""One naming scheme for robust-accuracy metrics: the attack and its steps are in the name."""

from __future__ import annotations

import pytest

from src.attacks import adv_metric_name, autoattack_label, pgd_label


def test_pgd_names_carry_the_number_of_steps() -> None:
    assert adv_metric_name("val", pgd_label(5), "l2", 0.05) == "val/adv/acc_pgd5_l2_0p05"
    assert adv_metric_name("test", pgd_label(10), "linf", 8 / 255) == "test/adv/acc_pgd10_linf_0p03137"
    # PGD-5 in training and PGD-10 in src.eval at the same budget no longer share a name
    assert adv_metric_name("test", pgd_label(5), "l2", 0.05) != adv_metric_name("test", pgd_label(10), "l2", 0.05)


def test_autoattack_names_say_it_is_the_torchattacks_port() -> None:
    name = adv_metric_name("test", autoattack_label("standard"), "l2", 0.5)
    assert name == "test/adv/acc_autoattack_torchattacks_standard_l2_0p5"
    assert "." not in name and "=" not in name


@pytest.mark.parametrize("steps", [0, -1, 2.5, True])
def test_pgd_label_refuses_impossible_steps(steps) -> None:
    with pytest.raises(ValueError, match="PGD steps must be an integer >= 1"):
        pgd_label(steps)
