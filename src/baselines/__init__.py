"""Task-agnostic baseline scores of a representation on one labelled feature set, as compared against SynBench in
Ko et al. (ICML 2024, arXiv:2210.02989, §4.1 and Appendix Table 7): LogME, SFDA, RankMe, α-ReQ and the
loss-data-curve scores (validation loss, MDL, SDL, ε-SC), plus the synthetic proxy task drawn through SynBench's own
sampling plan. Every score is one row of :data:`BASELINES` (:mod:`.registry`: its function, what it reads, its
direction); two conventions (:data:`CONVENTIONS`: ours and the SynBench paper's code). float64 math; conventions and deviations from the official code: docs/baselines.md."""

from .conventions import CONVENTIONS, Convention
from .logme import logme, logme_from_moments
from .loss_data import (
    Bound,
    LossDataCurve,
    eps_sample_complexity,
    fit_logistic,
    log_grid,
    loss_data_curve,
    mdl,
    reprieve_split,
    sdl,
    val_loss,
)
from .proxy import ALL_BASELINES, BaselineScores, baseline_scores, synthetic_task
from .registry import BASELINES, BaselineSpec, baseline_direction, baseline_names
from .reprieve import ReprieveProbe, reprieve_curve
from .sfda import sfda
from .spectral import alpha_req, alpha_req_from_moments, power_law_exponent, rankme, rankme_from_gram

__all__ = [
    "ALL_BASELINES",
    "BASELINES",
    "BaselineScores",
    "BaselineSpec",
    "Bound",
    "CONVENTIONS",
    "Convention",
    "LossDataCurve",
    "ReprieveProbe",
    "alpha_req",
    "alpha_req_from_moments",
    "baseline_direction",
    "baseline_names",
    "baseline_scores",
    "eps_sample_complexity",
    "fit_logistic",
    "log_grid",
    "logme",
    "logme_from_moments",
    "loss_data_curve",
    "mdl",
    "power_law_exponent",
    "rankme",
    "rankme_from_gram",
    "reprieve_curve",
    "reprieve_split",
    "sdl",
    "sfda",
    "synthetic_task",
    "val_loss",
]
