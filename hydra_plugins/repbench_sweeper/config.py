"""The sweeper's config, ``hydra/sweeper=repbench_optuna``: the stock ``optuna`` config (same fields and sampler
group ``hydra/sweeper/sampler``) with RepBench's sweeper as target."""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf

__all__ = ["RepBenchOptunaSweeperConf"]


@dataclass
class RepBenchOptunaSweeperConf(OptunaSweeperConf):
    """Fields as Hydra's ``hydra/sweeper=optuna``; ``n_trials`` is the study's total (see the package docstring)."""

    _target_: str = "hydra_plugins.repbench_sweeper.sweeper.RepBenchOptunaSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="repbench_optuna", node=RepBenchOptunaSweeperConf, provider="repbench_sweeper"
)
