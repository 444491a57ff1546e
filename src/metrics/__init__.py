"""torchmetrics shells over the functional cores."""

from .divergence_radius import CosineRobustness, DivergenceRadius
from .synbench_score import SynBenchScore
from .task_prior import TaskAccuracies, TaskPriorMoments

__all__ = ["CosineRobustness", "DivergenceRadius", "SynBenchScore", "TaskAccuracies", "TaskPriorMoments"]
