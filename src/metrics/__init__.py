"""torchmetrics shells over the functional cores."""

from .synbench_score import SynBenchScore

__all__ = ["SynBenchScore"]
