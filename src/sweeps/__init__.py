"""Hyperparameter sweeps guided by the scores (configs/hparams_search/, Hydra's Optuna sweeper).

:class:`OptunaPruning` lets a trial of ``python -m src.train -m hparams_search=...`` stop early when its monitored
score falls (e.g. SynBench-Score collapsing to 0 at a too-large learning rate). :func:`check_objective` refuses, before
any work, a run whose ``optimized_metric`` no configured callback would log.
"""

from .objective import check_objective
from .pruning import OptunaPruning, find_trial, trial_number
from .storage import register_resolvers, sqlite_url

__all__ = ["OptunaPruning", "check_objective", "find_trial", "register_resolvers", "sqlite_url", "trial_number"]
