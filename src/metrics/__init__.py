"""torchmetrics shells over the functional cores."""

from .baselines import AlphaReQ, LogME, RankMe
from .depth import DepthRMSE
from .divergence_radius import CosineRobustness, DivergenceRadius
from .synbench_score import SynBenchScore
from .task_prior import TaskAccuracies, TaskPriorMoments

__all__ = [
    "AlphaReQ",
    "CosineRobustness",
    "DepthRMSE",
    "DivergenceRadius",
    "LogME",
    "RankMe",
    "SynBenchScore",
    "TaskAccuracies",
    "TaskPriorMoments",
]
