"""The ε-robust Bayes-optimal linear classifier of SynBench and its evaluation (ICML 2024 paper, §3.2-3.3,
Theorem 3.1 (i)-(ii), Appendix A.5 (ℓp, singular Σ), A.6 (class prior) and Algorithm 1 lines 12-16).

Conventions (docs/synbench.md):
* Labels are {0, 1}; 1 ↔ +μ̃ (the paper's y = +1). μ̃ = (μ₁ − μ₀)/2, midpoint m = (μ₁ + μ₀)/2.
* Σ is used through its eigendecomposition; eigenvalues ≤ the cut-off (``eig_tol``, default 1e-6, absolute
  as the official code; ``eig_tol_mode="relative"``: eig_tol·λ_max, scale-invariant) are dropped: Σ⁻¹ is the
  pseudo-inverse on the retained eigenvectors F (Remark in A.5). An absolute cut-off that would drop > 1 % of the
  feature variance (small-scale features) is refused with a ValueError naming ``eig_tol_mode="relative"``; an
  explicit relative one that does only warns.
  Components of μ̃ outside span(F) are discarded (w ∈ span(F)); the ℓ2 z_Σ has none either.
* Relative ε (official code): budget = ε·‖Fᵀμ̃‖₂ for ℓ2 (the *projected* μ̃, as ``get_bound_rep``) and
  ε·‖μ̃‖∞ for ℓ∞. Absolute ε: budget = ε. Allowed: finite ε ≥ 0, and ε < 1 in relative mode (ε ≥ 1 makes
  z = μ̃ feasible, so w = 0 for every representation); anything else raises ValueError.
* Degenerate classifier (w = 0: constant features, μ̃ = 0 or μ̃ ⟂ span(F)): every sample lies on the
  boundary. A tie counts as half a correct prediction (a fair coin) with scaled bound 0, so the classifier
  reports accuracy 0.5 and mean scaled bound 0 (never above a threshold a_T > 0.5: it adds 0 to the score),
  and a warning is issued. No NaN is produced. (With a prior threshold q/2 ≠ 0, w = 0 predicts the majority
  class for every sample - the Bayes decision without information - and A.3 (ii) gives scaled bound 1.)
* Statistics are sums (class counts, shifted class sums, shifted sum of outer products; test: correct count,
  sum of scaled bounds over correct samples, total) so they can be merged by addition / DDP sum-reduction.

Layout (private modules behind these public names): ``_eps`` (ε validation), ``_eig`` (eigendecomposition and
cut-off), ``_l2`` / ``_linf`` (the two solvers), ``_directions`` (ε-grid front end), ``_statistics`` (additive
train/test statistics), ``_evaluate`` (classifier from statistics, one-call evaluation).
"""

from ...utils.threads import torch_threads
from ._directions import robust_bayes_direction, robust_bayes_directions
from ._eig import EIG_TOL_MODES, check_eig_tol, eig_cutoff, retained_eig
from ._eps import check_eps
from ._evaluate import classifier_from_statistics, evaluate_representation
from ._statistics import (
    LinearClassifiers,
    TestStats,
    TrainStats,
    finalize_test_statistics,
    fit_gaussian,
    merge,
    test_statistics,
    train_statistics,
)

__all__ = [
    "EIG_TOL_MODES",
    "check_eig_tol",
    "eig_cutoff",
    "check_eps",
    "torch_threads",
    "retained_eig",
    "robust_bayes_direction",
    "robust_bayes_directions",
    "TrainStats",
    "train_statistics",
    "merge",
    "fit_gaussian",
    "LinearClassifiers",
    "classifier_from_statistics",
    "TestStats",
    "test_statistics",
    "finalize_test_statistics",
    "evaluate_representation",
]
