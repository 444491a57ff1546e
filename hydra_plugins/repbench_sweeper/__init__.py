"""RepBench's Optuna sweeper for Hydra (``hydra/sweeper=repbench_optuna``): Hydra's ``hydra-optuna-sweeper`` 1.3 with
three changes that pruning and resuming need.

* Each job gets its trial's number (``+optuna_trial=<n>``), so ``repbench.sweeps.OptunaPruning`` opens that trial.
* A trial whose job set the user attribute ``pruned_epoch`` (OptunaPruning stopped it) ends PRUNED, not COMPLETE:
  the study's best and the sampler see it as pruned.
* ``n_trials`` counts the whole study: finished trials (COMPLETE, PRUNED, FAIL) already in the storage count, so the
  same command after a kill runs only the remaining ones.

Hydra finds sweepers in the ``hydra_plugins`` namespace package (no ``__init__.py`` in ``hydra_plugins/``). This
module stays light: Hydra imports every plugin module at each start.
"""

from .config import RepBenchOptunaSweeperConf
from .sweeper import RepBenchOptunaSweeper

__all__ = ["RepBenchOptunaSweeper", "RepBenchOptunaSweeperConf"]
