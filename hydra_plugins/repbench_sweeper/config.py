"""The sweeper's config, ``hydra/sweeper=repbench_optuna``: the stock ``optuna`` config (same fields and sampler
group ``hydra/sweeper/sampler``) with RepBench's sweeper as target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf

__all__ = ["RepBenchOptunaSweeperConf"]


@dataclass
class RepBenchOptunaSweeperConf(OptunaSweeperConf):
    """Fields as Hydra's ``hydra/sweeper=optuna``; ``n_trials`` is the study's total (see the package docstring)."""

    _target_: str = "hydra_plugins.repbench_sweeper.sweeper.RepBenchOptunaSweeper"
    # The worst acceptable value of each objective, one per direction (null: none), e.g. [0.8, null] for "utility at
    # least 0.8": a COMPLETE trial beyond a limit is infeasible. It is kept off the best trial / Pareto front of
    # optimization_results.yaml, and NSGA-II ranks it below every feasible trial (Optuna's constraints_func).
    limits: Any | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="repbench_optuna", node=RepBenchOptunaSweeperConf, provider="repbench_sweeper"
)
