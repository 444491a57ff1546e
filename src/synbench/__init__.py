"""SynBench: task-agnostic robustness-accuracy benchmark of pretrained representations on synthetic Gaussian
data (Ko et al., ICML 2024, arXiv:2210.02989). Functional core only (no Lightning / torchmetrics here): theory
(closed forms), bayes (robust Bayes classifier, additive statistics), sampling and plan (which samples, sharded by
chunk), protocol (THE per-s loop with shard/reduce seams), result and score (eq. 2-3), runner (``synbench``),
plots; proxy (the paper's Table 1 SA / RA of a linear probe on the proxy task) and rejection (the App. A.19
rejection test). Conventions: docs/synbench.md."""

from .config import SYNBENCH_BUDGETS, ProxyAccuracy, SynBenchConfig, synbench_budget
from .rejection import RejectionResult, rejection_test
from .result import SynBenchResult
from .runner import synbench

__all__ = [
    "synbench",
    "SynBenchConfig",
    "SynBenchResult",
    "SYNBENCH_BUDGETS",
    "synbench_budget",
    "ProxyAccuracy",
    "rejection_test",
    "RejectionResult",
]
