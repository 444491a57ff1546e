"""Adversarial attacks in pixel space: PGD (l2 / linf) for training and validation, AutoAttack for final numbers."""

from .autoattack import autoattack_accuracy, autoattack_correct
from .pgd import pgd_attack, project, random_init

__all__ = ["autoattack_accuracy", "autoattack_correct", "pgd_attack", "project", "random_init"]
