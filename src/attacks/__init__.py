"""Adversarial attacks in pixel space: PGD (l2 / linf) for training and validation, torchattacks' port of AutoAttack
for final numbers; :mod:`.naming` names their robust-accuracy metrics (``{stage}/adv/acc_{attack}_{norm}_{eps}``)."""

from .autoattack import autoattack_accuracy, autoattack_correct
from .naming import adv_metric_name, autoattack_label, pgd_label
from .pgd import pgd_attack, project, random_init

__all__ = [
    "adv_metric_name",
    "autoattack_accuracy",
    "autoattack_correct",
    "autoattack_label",
    "pgd_attack",
    "pgd_label",
    "project",
    "random_init",
]
