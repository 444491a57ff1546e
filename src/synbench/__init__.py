"""SynBench: task-agnostic robustness-accuracy benchmark of pretrained representations on synthetic Gaussian
data (Ko et al., ICML 2024, arXiv:2210.02989). Functional core only (no Lightning / torchmetrics here): theory
(closed forms), bayes (robust Bayes classifier, additive statistics), sampling and plan (which samples, sharded by
chunk), protocol (THE per-s loop with shard/reduce seams), result and score (eq. 2-3), runner (``synbench``),
plots. Conventions: docs/synbench.md."""

from .config import SYNBENCH_BUDGETS, SynBenchConfig, synbench_budget
from .result import SynBenchResult
from .runner import synbench

__all__ = ["synbench", "SynBenchConfig", "SynBenchResult", "SYNBENCH_BUDGETS", "synbench_budget"]
