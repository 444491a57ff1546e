"""The sweep loop of RepBench's Optuna sweeper (see the package docstring for what differs from Hydra's)."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from typing import Any

import optuna
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl, create_params_from_overrides
from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution
from optuna.trial import Trial, TrialState

log = logging.getLogger(__name__)

__all__ = ["FINISHED", "RepBenchOptunaSweeperImpl", "objective_values", "remaining_trials"]

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)  # what n_trials counts (RUNNING: not yet)


def _pruning_names() -> tuple[str, str]:
    """(the job override key of the trial number, the user attribute of a pruned trial): owned by OptunaPruning."""
    from repbench.sweeps.pruning import PRUNED_ATTR, TRIAL_KEY

    return TRIAL_KEY, PRUNED_ATTR


def remaining_trials(study: optuna.Study, n_trials: int) -> int:
    """How many trials are still to run for the study to hold ``n_trials`` finished ones (0 when it has them)."""
    return max(0, n_trials - len(study.get_trials(deepcopy=False, states=FINISHED)))


def objective_values(value: Any, n_objectives: int) -> list[float]:
    """A job's return value as the list of ``n_objectives`` floats Optuna is told; a ValueError naming it otherwise."""
    expected = "a float" if n_objectives == 1 else f"a list of {n_objectives} floats"
    try:
        values = [float(value)] if n_objectives == 1 else [float(v) for v in value]
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"the job returned {value!r}, expected {expected} (one per hydra.sweeper.direction; the task function "
            "returns the values of optimized_metric)"
        ) from e
    if len(values) != n_objectives:
        raise ValueError(
            f"the job returned {len(values)} values {values}, expected {expected} (hydra.sweeper.direction)"
        )
    return values


def _tell(study: optuna.Study, trial: Trial | int, state: TrialState, values: list[float] | None = None) -> None:
    """``study.tell``, ignoring the ``Study.stop`` a sampler requests when its space is exhausted (GridSampler): the
    loop stops on n_trials, and the trial is stored before the request is raised."""
    try:
        study.tell(trial, state=state, values=values)
    except RuntimeError as e:
        if "`Study.stop` is supposed to be invoked" not in str(e):
            raise


def _storage_reader(storage: Any) -> optuna.storages.BaseStorage | None:
    """A storage that reads the jobs' writes: an uncached RDBStorage for a URL (the study's own storage caches the
    trials this process asked for, so it does not see the user attributes a job's OptunaPruning set); None for no
    storage (in memory: no job can reach the study, so none is pruned)."""
    if storage is None:
        return None
    return optuna.storages.RDBStorage(storage) if isinstance(storage, str) else storage


class RepBenchOptunaSweeperImpl(OptunaSweeperImpl):
    """Hydra's OptunaSweeperImpl (search space, trial configuration) with RepBench's sweep loop."""

    def _configure_trials(
        self,
        trials: list[Trial],
        search_space_distributions: dict[str, BaseDistribution],
        fixed_params: dict[str, Any],
    ) -> Sequence[Sequence[str]]:
        """The stock overrides of each trial plus ``+optuna_trial=<trial number>``."""
        overrides = super()._configure_trials(trials, search_space_distributions, fixed_params)
        key = _pruning_names()[0]
        return [(*job, f"+{key}={trial.number}") for trial, job in zip(trials, overrides)]

    def _search_space(self, arguments: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, Any]]:
        """(distributions, fixed parameters) from hydra.sweeper.params and the command line, as the stock sweeper
        builds them; a GridSampler gets its grid and caps n_trials at the grid's size."""
        self._process_searchspace_config()
        distributions, fixed = create_params_from_overrides(self._parse_sweeper_params_config() + list(arguments))
        distributions = {**(self.search_space_distributions or {}), **distributions}
        if isinstance(self.sampler, functools.partial) and self.sampler.func == optuna.samplers.GridSampler:
            grid = {name: self._to_grid_sampler_choices(d) for name, d in distributions.items()}
            self.sampler = self.sampler(grid)
            self.n_trials = min(self.n_trials, math.prod(len(v) for v in grid.values()))
            log.info(f"GridSampler: n_trials = {self.n_trials}")
        for name in fixed:
            distributions.pop(name, None)
        return distributions, fixed

    def _finish(
        self,
        study: optuna.Study,
        trial: Trial,
        ret: JobReturn,
        n_objectives: int,
        reader: optuna.storages.BaseStorage | None,
    ) -> Exception | None:
        """Tell the study how the trial's job ended: FAIL (its exception, or a return value that is not
        ``n_objectives`` finite floats; returned for max_failure_rate), PRUNED (the job's OptunaPruning set
        ``pruned_epoch``; no value: the collapse is in its intermediate values), else COMPLETE with the returned values."""
        try:
            value = ret.return_value  # re-raises the job's exception
            attrs = reader.get_trial_user_attrs(trial._trial_id) if reader is not None else {}
            if _pruning_names()[1] in attrs:
                _tell(study, trial, TrialState.PRUNED)
                log.info(f"Trial {trial.number} pruned at epoch {attrs[_pruning_names()[1]]}")
                return None
            _tell(study, trial, TrialState.COMPLETE, objective_values(value, n_objectives))
            return None
        except Exception as e:
            _tell(study, trial, TrialState.FAIL)
            log.warning(f"Failed trial {trial.number}: {e}")
            return e

    def sweep(self, arguments: list[str]) -> None:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        distributions, fixed = self._search_space(arguments)
        directions = self._get_directions()
        study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            sampler=self.sampler,
            directions=directions,
            load_if_exists=True,
        )
        to_go = remaining_trials(study, self.n_trials)
        log.info(
            f"Study {study.study_name!r} in {self.storage}: {self.n_trials - to_go} of n_trials={self.n_trials} "
            f"finished, {to_go} to run; sampler {type(self.sampler).__name__}, directions {directions}"
        )
        reader = _storage_reader(self.storage)
        while to_go > 0:
            trials = [study.ask() for _ in range(min(self.n_jobs, to_go))]
            overrides = self._configure_trials(trials, distributions, fixed)
            returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
            self.job_idx += len(returns)
            failures = [
                e
                for t, r in zip(trials, returns)
                if (e := self._finish(study, t, r, len(directions), reader)) is not None
            ]
            if len(failures) / len(returns) > self.max_failure_rate:
                log.error(f"{len(failures)} of {len(returns)} trials failed, max_failure_rate={self.max_failure_rate}")
                for ret in returns:
                    ret.return_value  # noqa: B018  (raises the first job's own exception, with its traceback)
                raise failures[0]
            to_go = remaining_trials(study, self.n_trials)  # other workers on the same study count too
        OmegaConf.save(
            OmegaConf.create(self._results(study)), f"{self.config.hydra.sweep.dir}/optimization_results.yaml"
        )

    def _results(self, study: optuna.Study) -> dict[str, Any]:
        """optimization_results.yaml: the best trial (one objective) or the Pareto front, over the COMPLETE trials of
        the whole study; a ValueError when none completed (every trial pruned or failed)."""
        counts = {s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,))) for s in FINISHED}
        if not counts["complete"]:
            raise ValueError(
                f"Study {study.study_name!r}: no COMPLETE trial ({counts}), so no best parameters. Pruned trials "
                "collapsed below the pruner's threshold (callbacks.optuna_pruning.pruner): narrow hydra.sweeper.params "
                "or lower the threshold, then run the same command with a larger hydra.sweeper.n_trials"
            )
        if len(study.directions) == 1:
            best = study.best_trial
            log.info(f"Best parameters: {best.params}; best value: {best.value}")
            return {"name": "optuna", "best_params": best.params, "best_value": best.value, "trials": counts}
        front = [{"params": t.params, "values": t.values} for t in study.best_trials]
        log.info(f"Number of Pareto solutions: {len(front)}")
        return {"name": "optuna", "solutions": front, "trials": counts}
