"""The sweep loop of RepBench's Optuna sweeper (see the package docstring for what differs from Hydra's)."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl, create_optuna_distribution_from_override
from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution
from optuna.trial import Trial, TrialState

log = logging.getLogger(__name__)

__all__ = [
    "FINISHED",
    "RepBenchOptunaSweeperImpl",
    "check_n_trials",
    "objective_values",
    "open_study",
    "remaining_trials",
    "search_space",
    "storage_error",
]

VIOLATION_ATTR = "limit_violations"  # user attribute of a COMPLETE trial: per objective, how far beyond its limit

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)  # what n_trials counts (RUNNING: not yet)


def _pruning_names() -> tuple[str, str]:
    """(the job override key of the trial number, the user attribute of a pruned trial): owned by OptunaPruning."""
    from repbench.sweeps.pruning import PRUNED_ATTR, TRIAL_KEY

    return TRIAL_KEY, PRUNED_ATTR


def _check_objective(config: Any) -> None:
    """The run's check that ``optimized_metric`` has a producer (``repbench.sweeps.check_objective``, which every job
    repeats), on the sweep's config before the study is opened: a sweep whose objective no configured callback logs
    fails before it records a FAIL trial in the study."""
    from repbench.sweeps.objective import check_objective

    check_objective(config)


def check_n_trials(n_trials: Any) -> int:
    """``hydra.sweeper.n_trials`` as a positive int; a ValueError naming the key otherwise (checked before the study is
    opened: 0 or a negative count would open the study, run nothing and report no best trial)."""
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(
            f"hydra.sweeper.n_trials must be >= 1, got {n_trials!r}: it is the study's total of finished trials "
            "(a restart runs only the missing ones), e.g. hydra.sweeper.n_trials=20"
        )
    return n_trials


def _sqlite_file(storage: Any) -> str | None:
    """The database file of a ``sqlite:///...`` storage URL, None for any other storage."""
    if not isinstance(storage, str) or not storage.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    return make_url(storage).database


def storage_error(storage: Any, error: Exception) -> RuntimeError:
    """A RuntimeError naming ``hydra.sweeper.storage`` (its file for SQLite) and the fix for a database error raised
    while the study is opened: another process holds the lock ("database is locked"), or the file is corrupt."""
    file = _sqlite_file(storage)
    where = f"hydra.sweeper.storage={storage}" + (f" (file {file})" if file else "")
    cause = str(getattr(error, "orig", None) or error).strip()
    if "locked" in cause:
        fix = (
            "another worker or process holds it (a running sweep, an open sqlite3 shell): wait for it or stop it. "
            "SQLite is unsuitable for many concurrent writers: for several workers give a server URL, e.g. "
            "hydra.sweeper.storage=postgresql://user@host/db"
        )
    elif file:
        fix = (
            f"the file is corrupt or not an SQLite database. It holds every trial record of the study: move it away "
            f"(e.g. mv {file} {file}.broken) to keep it for recovery, then rerun to start a fresh study, or point "
            "hydra.sweeper.storage to another file"
        )
    else:
        fix = "check that the database server is reachable and the URL is right"
    return RuntimeError(f"cannot open the Optuna study in {where}: {cause}; {fix}")


def open_study(study_name: str | None, storage: Any, sampler: Any, directions: Sequence[Any]) -> optuna.Study:
    """``optuna.create_study(load_if_exists=True)``; a database error (corrupt or locked SQLite file, unreachable
    server) becomes :func:`storage_error`'s message naming the storage and the fix."""
    from sqlalchemy.exc import DatabaseError

    try:
        return optuna.create_study(
            study_name=study_name, storage=storage, sampler=sampler, directions=directions, load_if_exists=True
        )
    except DatabaseError as e:
        raise storage_error(storage, e) from e


def search_space(arguments: Sequence[str]) -> tuple[dict[str, BaseDistribution], dict[str, Any]]:
    """(distributions, fixed parameters) of ``key=value`` overrides, as Hydra's ``create_params_from_overrides``; a
    ValueError naming the parameter when Optuna refuses its distribution (e.g. ``model.lr=interval(1, 0)``)."""
    distributions: dict[str, BaseDistribution] = {}
    fixed: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(list(arguments)):
        name = override.get_key_element()
        try:
            value = create_optuna_distribution_from_override(override)
        except ValueError as e:
            raise ValueError(
                f"search space parameter {name!r} ({override.input_line}, from hydra.sweeper.params or the command "
                f"line): {e}"
            ) from e
        if isinstance(value, BaseDistribution):
            distributions[name] = value
        else:
            fixed[name] = value
    return distributions, fixed


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


def _modes(directions: Sequence[Any]) -> tuple[str, ...]:
    """Optuna's StudyDirection (or "maximize"/"minimize") per objective as the "max"/"min" of repbench.stats.pareto."""
    names = [getattr(d, "name", str(d)).lower() for d in directions]
    return tuple("max" if n.startswith("max") else "min" for n in names)


class _LimitConstraints:
    """NSGA-II's ``constraints_func`` for objective limits: a trial's violations (<= 0 feasible). Optuna 2.10 calls
    it in ``study.tell`` with the trial as it was before the values were stored, so the violations are read from the
    user attribute the sweeper sets first (computed from the values when a trial has them)."""

    def __init__(self, modes: tuple[str, ...], limits: tuple[float | None, ...]) -> None:
        self.modes, self.limits = modes, limits

    def __call__(self, trial: optuna.trial.FrozenTrial) -> tuple[float, ...]:
        from repbench.stats.pareto import limit_violations

        if VIOLATION_ATTR in trial.user_attrs:
            return tuple(float(v) for v in trial.user_attrs[VIOLATION_ATTR])
        if trial.values is None:
            raise ValueError(f"trial {trial.number} has neither values nor {VIOLATION_ATTR!r}")
        return limit_violations(trial.values, self.modes, self.limits)


class RepBenchOptunaSweeperImpl(OptunaSweeperImpl):
    """Hydra's OptunaSweeperImpl (search space, trial configuration) with RepBench's sweep loop; ``limits``: the
    worst acceptable value of each objective (see the config)."""

    def __init__(self, *args: Any, limits: Sequence[float | None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = None if limits is None else list(limits)
        self._checked: tuple[float | None, ...] = ()  # self.limits validated against the directions (sweep start)

    def _check_limits(self, directions: Sequence[Any]) -> tuple[float | None, ...]:
        """One limit per direction (a ValueError naming the fix otherwise); hooks them into an NSGA-II sampler."""
        from repbench.stats.pareto import check_limits

        limits = self._checked = check_limits(self.limits, len(directions))
        if any(v is not None for v in limits) and isinstance(self.sampler, optuna.samplers.NSGAIISampler):
            if getattr(self.sampler, "_constraints_func", None) is None:
                # Optuna 2.10 keeps the hook in this attribute (NSGAIISampler(constraints_func=...)); the sampler was
                # built by Hydra before the directions were known, so the limits are attached here.
                self.sampler._constraints_func = _LimitConstraints(_modes(directions), limits)
        return limits

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
        distributions, fixed = search_space(self._parse_sweeper_params_config() + list(arguments))
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
            values = objective_values(value, n_objectives)
            if self.limits is not None:
                from repbench.stats.pareto import limit_violations

                modes = _modes(study.directions)
                trial.set_user_attr(VIOLATION_ATTR, list(limit_violations(values, modes, self._checked)))
            _tell(study, trial, TrialState.COMPLETE, values)
            return None
        except Exception as e:
            _tell(study, trial, TrialState.FAIL)
            log.warning(f"Failed trial {trial.number}: {e}")
            return e

    def sweep(self, arguments: list[str]) -> None:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        check_n_trials(self.n_trials)
        _check_objective(self.config)
        distributions, fixed = self._search_space(arguments)
        directions = self._get_directions()
        self._check_limits(directions)
        study = open_study(self.study_name, self.storage, self.sampler, directions)
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
        self._save_results(study)

    def _save_results(self, study: optuna.Study) -> None:
        """``<hydra.sweep.dir>/optimization_results.yaml``, creating the folder: a restart of a finished study
        launches no job, and only a launched job creates the sweep folder."""
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        results = self._results(study)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(results), sweep_dir / "optimization_results.yaml")
        log.info(f"Wrote {sweep_dir / 'optimization_results.yaml'}")

    def _results(self, study: optuna.Study) -> dict[str, Any]:
        """optimization_results.yaml: the best trial (one objective) or the Pareto front, over the COMPLETE trials of
        the whole study within ``limits``; a ValueError when there is none (every trial pruned, failed or beyond a
        limit)."""
        from repbench.stats.pareto import feasible, pareto_front

        counts = {s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,))) for s in FINISHED}
        modes = _modes(study.directions)
        limits = self._checked
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        ok = [t for t in complete if feasible(t.values, modes, limits)]
        if len(ok) < len(complete):
            counts["beyond_limits"] = len(complete) - len(ok)
        if not ok:
            within = f" within the limits {list(limits)}" if self.limits is not None else ""
            beyond = "; trials beyond a limit missed hydra.sweeper.limits" if self.limits is not None else ""
            relax = " or relax the limits" if self.limits is not None else ""
            raise ValueError(
                f"Study {study.study_name!r}: no COMPLETE trial{within} ({counts}), so no best parameters. Pruned "
                f"trials collapsed below the pruner's threshold (callbacks.optuna_pruning.pruner){beyond}: narrow "
                f"hydra.sweeper.params or lower the threshold{relax}, then run the same command with a larger "
                "hydra.sweeper.n_trials"
            )
        extra = {"limits": list(limits)} if self.limits is not None else {}
        if len(modes) == 1:
            best = max(ok, key=lambda t: t.value if modes[0] == "max" else -t.value)
            log.info(f"Best parameters: {best.params}; best value: {best.value}")
            return {"name": "optuna", "best_params": best.params, "best_value": best.value, "trials": counts, **extra}
        front = [ok[i] for i in pareto_front([t.values for t in ok], modes)]
        log.info(f"Number of Pareto solutions: {len(front)}")
        solutions = [{"number": t.number, "params": t.params, "values": t.values} for t in front]
        return {"name": "optuna", "solutions": solutions, "trials": counts, **extra}
