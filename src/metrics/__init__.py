"""torchmetrics shells over the functional cores."""

from .synbench_score import SynBenchScore
from .task_prior import TaskAccuracies, TaskPriorMoments

__all__ = ["SynBenchScore", "TaskAccuracies", "TaskPriorMoments"]
