"""Optuna pruning inside a trial of a Hydra Optuna sweep.

RepBench's sweeper (``hydra/sweeper=repbench_optuna``, ``hydra_plugins/repbench_sweeper``) asks the study for a trial,
launches the job with the trial's parameters as command-line overrides (``model.lr=0.0123``) plus the trial's number
(``+optuna_trial=3``), and tells the study PRUNED when the job's trial carries ``pruned_epoch``. :class:`OptunaPruning`
opens the trial by that number in the sweep's storage (``hydra.sweeper.storage``, an RDB URL such as
``sqlite:///...``). Under Hydra's stock ``hydra-optuna-sweeper`` 1.3 (no number; it always tells COMPLETE with the
job's return value) the callback falls back to the RUNNING, unclaimed trial whose parameters are this job's overrides.
Either way it claims the trial (user attribute ``repbench_run_dir``), so two jobs never report into one trial. At the
end of each training epoch (step = epoch) it reports the monitored metric and asks the pruner; when the pruner says
prune, the trial gets the user attribute ``pruned_epoch`` and training stops after that epoch. The job still ends
normally (metrics.json, HParams).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

log = logging.getLogger("repbench")

__all__ = ["OptunaPruning", "find_trial", "trial_number"]

CLAIM_ATTR = "repbench_run_dir"
PRUNED_ATTR = "pruned_epoch"
TRIAL_KEY = "optuna_trial"  # the job override RepBench's sweeper adds: +optuna_trial=<trial number>


def trial_number(overrides: Iterable[str]) -> int | None:
    """The trial number in ``overrides`` (``+optuna_trial=<n>``, as RepBench's sweeper writes it; ``optuna_trial=`` and
    ``++optuna_trial=`` too); None when absent (Hydra's stock Optuna sweeper)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") == TRIAL_KEY:
            try:
                number = int(value)
            except ValueError:
                number = -1
            if number < 0:
                raise ValueError(
                    f"OptunaPruning: override {item!r} is not a trial number; {TRIAL_KEY} is set by RepBench's sweeper "
                    f"(hydra/sweeper=repbench_optuna) to a non-negative integer: drop it when launching a job by hand"
                )
            return number
    return None


def trial_by_number(study: Any, number: int, overrides: Iterable[str]) -> Any:
    """The FrozenTrial ``number`` of ``study``, checked to be RUNNING, unclaimed and to have this job's parameters;
    a ValueError naming the mismatch otherwise (the job was not launched by this study's sweeper)."""
    from optuna.trial import TrialState

    hint = f"drop +{TRIAL_KEY}={number} when launching a job by hand, or check hydra.sweeper.storage / study_name"
    found = [t for t in study.get_trials(deepcopy=False) if t.number == number]
    if not found:
        raise ValueError(f"OptunaPruning: study {study.study_name!r} has no trial {number} ({TRIAL_KEY}); {hint}")
    trial = found[0]
    if trial.state != TrialState.RUNNING or CLAIM_ATTR in trial.user_attrs:
        state = (
            "claimed by " + str(trial.user_attrs[CLAIM_ATTR]) if CLAIM_ATTR in trial.user_attrs else trial.state.name
        )
        raise ValueError(f"OptunaPruning: trial {number} of study {study.study_name!r} is {state}, not open; {hint}")
    given = set(overrides)
    missing = sorted(f"{k}={v}" for k, v in trial.params.items() if f"{k}={v}" not in given)
    if missing:
        raise ValueError(
            f"OptunaPruning: trial {number} of study {study.study_name!r} has parameters {missing} that are not this "
            f"job's overrides; {hint}"
        )
    return trial


def find_trial(study: Any, overrides: Iterable[str]) -> Any | None:
    """The first RUNNING, unclaimed trial of ``study`` whose parameters all appear in ``overrides`` as the sweeper
    writes them (``name=value``); None when there is none (the job was not launched by this study)."""
    given = set(overrides)
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if CLAIM_ATTR in trial.user_attrs or not trial.params:
            continue
        if all(f"{name}={value}" in given for name, value in trial.params.items()):
            return trial
    return None


def _hydra_sweep() -> tuple[Any, list[str]] | None:
    """(hydra.sweeper config, this job's overrides) inside a Hydra multirun job, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return None
    return hc.sweeper, list(hc.overrides.task)


class OptunaPruning(Callback):
    """Report ``monitor`` to the Optuna trial of this job after every validation and stop the run when the
    ``pruner`` prunes it.

    Args:
        monitor: the logged metric that judges the trial (e.g. ``val/synbench/score``).
        pruner: an ``optuna.pruners.BasePruner`` (e.g. ``ThresholdPruner(lower=0.05)``: stop when the score collapses).
        storage, study_name: the study; None = the sweep's ``hydra.sweeper.storage`` / ``study_name``.
        run_dir: recorded on the claimed trial (the run folder), for the report.

    Outside an Optuna sweep with a storage (a plain run) the callback does nothing (logged once).
    """

    def __init__(
        self,
        monitor: str,
        pruner: Any,
        storage: str | None = None,
        study_name: str | None = None,
        run_dir: str | None = None,
    ) -> None:
        from optuna.pruners import BasePruner

        if not isinstance(monitor, str) or not monitor:
            raise TypeError(f"OptunaPruning: monitor must be a logged metric name, e.g. 'val/acc', got {monitor!r}")
        if not isinstance(pruner, BasePruner):
            raise TypeError(
                f"OptunaPruning: pruner must be an optuna pruner, got {type(pruner).__name__}; pass e.g. "
                "{_target_: optuna.pruners.ThresholdPruner, lower: 0.05}"
            )
        self.monitor, self.pruner = monitor, pruner
        self.storage, self.study_name, self.run_dir = storage, study_name, run_dir
        self.trial: Any | None = None
        self.pruned_epoch: int | None = None

    def _open_trial(self) -> Any | None:
        import optuna

        sweep = _hydra_sweep()
        storage = self.storage or (sweep[0].get("storage") if sweep else None)
        study_name = self.study_name or (sweep[0].get("study_name") if sweep else None)
        if not storage or not study_name or sweep is None:
            log.info("OptunaPruning: not in an Optuna sweep with a storage: no pruning")
            return None
        study = optuna.load_study(study_name=study_name, storage=storage, pruner=self.pruner)
        number = trial_number(sweep[1])
        frozen = find_trial(study, sweep[1]) if number is None else trial_by_number(study, number, sweep[1])
        if frozen is None:
            log.warning("OptunaPruning: no RUNNING trial of study %r has this job's parameters: no pruning", study_name)
            return None
        trial = optuna.trial.Trial(study, frozen._trial_id)
        trial.set_user_attr(CLAIM_ATTR, str(self.run_dir))
        log.info("OptunaPruning: trial %d of study %r, monitor %s", frozen.number, study_name, self.monitor)
        return trial

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            self.trial = self._open_trial()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # after the epoch's validation and the monitors that run at the epoch's end (SynBenchCallback): the callback
        # comes after them in the callbacks mapping (configs/hparams_search)
        if self.trial is None or not trainer.is_global_zero:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise KeyError(
                f"OptunaPruning: monitor={self.monitor!r} was not logged; logged: {sorted(trainer.callback_metrics)}. "
                "Set the callback's monitor to one of them (or enable the callback that logs it)"
            )
        value = float(value)
        if not math.isfinite(value):
            raise FloatingPointError(f"OptunaPruning: {self.monitor} = {value} at epoch {trainer.current_epoch}")
        self.trial.report(value, step=trainer.current_epoch)
        if self.trial.should_prune():
            self.pruned_epoch = trainer.current_epoch
            self.trial.set_user_attr(PRUNED_ATTR, trainer.current_epoch)
            log.warning(
                "OptunaPruning: trial %d pruned at epoch %d (%s = %.4f): stopping",
                self.trial.number,
                trainer.current_epoch,
                self.monitor,
                value,
            )
            trainer.should_stop = True
