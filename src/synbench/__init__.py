"""SynBench: task-agnostic robustness-accuracy benchmark of pretrained representations on synthetic Gaussian
data (Ko et al., ICML 2024). Functional core only (no Lightning / torchmetrics here): theory (closed forms),
bayes (robust Bayes classifier, additive statistics), sampling, score, runner (``synbench``), plots."""

from .config import SynBenchConfig
from .result import SynBenchResult
from .runner import synbench

__all__ = ["synbench", "SynBenchConfig", "SynBenchResult"]
