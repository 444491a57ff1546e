"""Names of robust-accuracy metrics: one scheme for validation during training and for ``python -m src.eval``.

``{stage}/adv/acc_{attack}_{norm}_{eps}``, where ``attack`` says which attack and how strong:

* ``pgd{steps}``: :func:`~src.attacks.pgd_attack` with that many steps (validation's PGD-5 is ``pgd5``,
  ``src.eval``'s PGD-10 ``pgd10``), e.g. ``val/adv/acc_pgd5_l2_0p05``;
* ``autoattack_torchattacks_{version}``: torchattacks' port of AutoAttack (:mod:`src.attacks.autoattack`), e.g.
  ``test/adv/acc_autoattack_torchattacks_standard_l2_0p05``.

The same attack at the same budget gives the same name in a training run and in ``src.eval``; different attacks never
share one. Names hold no ``.`` or ``=`` (:func:`~src.utils.metric_name`).
"""

from __future__ import annotations

from ..utils import format_eps, metric_name

__all__ = ["adv_metric_name", "autoattack_label", "pgd_label"]


def pgd_label(steps: int) -> str:
    """``pgd_label(5) -> 'pgd5'``: PGD and its number of steps."""
    if isinstance(steps, bool) or int(steps) != steps or int(steps) < 1:
        raise ValueError(f"PGD steps must be an integer >= 1, got {steps!r}")
    return f"pgd{int(steps)}"


def autoattack_label(version: str) -> str:
    """``autoattack_label('standard') -> 'autoattack_torchattacks_standard'``: torchattacks' port of AutoAttack."""
    return f"autoattack_torchattacks_{version}"


def adv_metric_name(stage: str, attack: str, norm: str, eps: float) -> str:
    """``adv_metric_name('val', pgd_label(5), 'l2', 0.05) -> 'val/adv/acc_pgd5_l2_0p05'``."""
    return metric_name(stage, "adv", f"acc_{attack}_{norm}_{format_eps(eps)}")
