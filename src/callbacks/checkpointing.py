"""Checkpoints: ``ExceptionCheckpoint`` keeps the state of a dying fit; ``ScoreCheckpoint`` / ``ScoreEarlyStopping``
select the model on a RepBench score or a combined criterion, the direction from the metrics (model selection).

``ExceptionCheckpoint``: keep the training state when a fit dies (exception, SIGTERM, Ctrl-C), and only then.

Lightning's ``OnExceptionCheckpoint`` saves on *every* exception -- also when a resume fails before anything was
trained, writing a checkpoint of the untrained model that looks like a real one -- and deletes its file in
``teardown``. This one saves only while fitting and only after at least one optimizer step (a state worth resuming
from), never deletes it, and records what happened (``exception``, ``saved_path``) so the entry point can report the
exit status and print how to resume.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint, EarlyStopping, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from torchmetrics.classification import MulticlassAccuracy

from ..methods import logged_score, resolve
from ..metrics import AlphaReQ, RankMe

__all__ = [
    "ExceptionCheckpoint",
    "ScoreCheckpoint",
    "ScoreEarlyStopping",
    "SelectionCriterion",
    "metric_direction",
    "metric_producer",
]

log = logging.getLogger("repbench")


class ExceptionCheckpoint(Checkpoint):
    """Save ``<dirpath>/<filename>.ckpt`` when ``trainer.fit`` raises after >= 1 optimizer step.

    The checkpoint holds the loops' progress (and the training loader's position, see
    ``src.data.common.ResumableDataLoader``), so ``ckpt_path=<that file>`` resumes exactly where the run stopped,
    also in the middle of an epoch.

    Attributes set on an exception: ``exception`` (what was raised), ``saved_path`` (the file, or None when nothing
    was worth saving).
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike, filename: str = "on_exception") -> None:
        super().__init__()
        if not filename:
            raise ValueError("filename must not be empty, e.g. filename: on_exception")
        self.dirpath = os.fspath(dirpath)
        self.filename = filename
        self.exception: BaseException | None = None
        self.saved_path: str | None = None
        self._saving = False

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.exception = exception
        self.saved_path = None
        if trainer.state.fn != TrainerFn.FITTING:
            return
        if trainer.global_step < 1:
            log.warning("fit stopped before the first optimizer step: no exception checkpoint written")
            return
        self._saving = True
        try:
            trainer.save_checkpoint(self.ckpt_path)
        finally:
            self._saving = False
        self.saved_path = self.ckpt_path
        log.warning(
            "fit stopped at step %d (%s): saved %s", trainer.global_step, type(exception).__name__, self.ckpt_path
        )

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """A run that dies in ``on_train_epoch_start`` (the new epoch is "ready" but not "started") still holds the
        previous epoch's batch counters; Lightning would restore them and skip the whole new epoch. Zero them so
        the resumed run trains that epoch from its first batch."""
        if not self._saving:
            return
        epochs = trainer.fit_loop.epoch_progress.current
        if epochs.ready > epochs.started:
            progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
            progress["current"] = dict.fromkeys(progress["current"], 0)
            progress["is_last_batch"] = False


# ---------------------------------------------------------------------------------------------------- model selection
#: The metric behind each value a monitor outside :data:`src.methods.METHODS` logs, by the last two segments of the
#: logged name (the prefix is the user's). ``*`` = any segment. The methods' values are found in METHODS (their
#: :class:`~src.methods.Score` rows hold the directions); these take their direction from the metric class.
_OTHER_PRODUCERS: dict[tuple[str, str], type] = {
    ("spectrum", "rankme"): RankMe,
    ("spectrum", "alpha_req"): AlphaReQ,
    ("*", "acc"): MulticlassAccuracy,  # the models' {stage}/acc
    ("downstream", "linear_acc"): MulticlassAccuracy,  # DownstreamProbeCallback's probes
    ("downstream", "knn_acc"): MulticlassAccuracy,
    (
        "adv",
        "acc_*",
    ): MulticlassAccuracy,  # robust accuracies {stage}/adv/acc_<attack>_<norm>_<eps> (src.attacks.naming)
}

_MODES = {True: "max", False: "min"}


def _other(name: str) -> type | None:
    parts = str(name).split("/")
    group, key = (parts[-2] if len(parts) > 1 else ""), parts[-1]
    for (g, k), cls in _OTHER_PRODUCERS.items():
        if g in ("*", group) and (k == key or (k.endswith("*") and key.startswith(k[:-1]))):
            return cls
    return None


def _produced(name: str) -> tuple[type | None, bool | None]:
    """(the torchmetric that logs ``name``, the direction of that value): a method's :class:`~src.methods.Score` row
    (its direction, its metric or the method's), else a monitor outside METHODS (its metric's flag); (None, None)."""
    found = logged_score(name)
    if found is not None:
        spec, score = found
        metric = resolve(score.metric) if score.metric is not None else spec.load("metric")
        return metric, score.higher_is_better
    other = _other(name)
    return other, getattr(other, "higher_is_better", None)


def metric_producer(name: str) -> type | None:
    """The torchmetric class whose value is logged under ``name`` (matched on its last two segments, any prefix:
    ``val/synbench/score`` -> :class:`~src.metrics.SynBenchScore`), or None for a name no RepBench metric logs."""
    return _produced(name)[0]


def metric_direction(name: str, directions: Mapping[str, str] | None = None) -> str:
    """``"max"`` or ``"min"`` for the logged metric ``name``: its score's direction (:data:`src.methods.METHODS`, or
    the producing metric's ``higher_is_better``: :func:`metric_producer`). ``directions`` ({name: "max" | "min"})
    gives it for a name without one (e.g. ``val/loss``, ``val/utility``, ``val/task_prior/var``) and may not
    contradict a metric's own. Raises a ValueError naming the fix when the direction is unknown."""
    given = (directions or {}).get(name)
    if given is not None and given not in ("max", "min"):
        raise ValueError(f"directions[{name!r}] must be 'max' or 'min', got {given!r}")
    producer, higher = _produced(name)
    own = _MODES.get(higher)
    if own is not None and given is not None and given != own:
        raise ValueError(
            f"directions[{name!r}]={given!r} contradicts {producer.__name__}.higher_is_better={own == 'max'} for this "
            f"value (so {own!r}); drop the entry: the direction comes from the metric"
        )
    if own is None and given is None:
        why = f"{producer.__name__} has no monotone direction" if producer is not None else "no RepBench metric logs it"
        raise ValueError(
            f"the direction of {name!r} is unknown ({why}); give it, e.g. directions={{{name!r}: 'max'}} "
            "(YAML: `directions: {<name>: max}`) or mode='max' for a single monitor"
        )
    return own or given


class SelectionCriterion:
    """What model selection maximises or minimises: one logged metric, or a weighted combination.

    ``monitor``: a logged name (``"val/synbench/score"``; its direction from the metric's ``higher_is_better``),
    or ``{name: weight}`` with weights > 0: the combined value Σ weight · sign · value is maximised, sign = +1 for
    a higher-is-better metric and −1 for a lower-is-better one (so ``{"val/synbench/score": 1,
    "val/divergence_radius/mean": 1}`` is SynBench-Score − R_dr). The combined value is logged as ``name``.
    ``directions``: {name: "max" | "min"} for names without a metric direction (see :func:`metric_direction`).
    """

    def __init__(
        self,
        monitor: str | Mapping[str, float],
        name: str = "val/selection/score",
        directions: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(monitor, str):
            if not monitor:
                raise ValueError("monitor must name a logged metric, e.g. monitor: val/synbench/score")
            self.terms: dict[str, float] = {monitor: 1.0}
            self.name, self.mode = monitor, metric_direction(monitor, directions)
            self.signs = {monitor: 1.0}
            return
        if not isinstance(monitor, Mapping) or not monitor:
            raise TypeError(
                "monitor must be a logged name or a non-empty {name: weight} mapping, e.g. "
                f"{{'val/synbench/score': 1.0, 'val/divergence_radius/mean': 1.0}}; got {monitor!r}"
            )
        for key, w in monitor.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
                raise ValueError(
                    f"monitor[{key!r}] = {w!r}: weights must be finite numbers > 0 (the direction comes from the "
                    "metric, not the weight's sign)"
                )
        if not isinstance(name, str) or not name or name in monitor:
            raise ValueError(
                f"name must be a new logged name for the combined value, e.g. val/selection/score, got {name!r}"
            )
        self.terms = {str(k): float(w) for k, w in monitor.items()}
        self.signs = {k: 1.0 if metric_direction(k, directions) == "max" else -1.0 for k in self.terms}
        self.name, self.mode = name, "max"

    @property
    def combined(self) -> bool:
        """True for a weighted combination (logged under :attr:`name`), False for one metric."""
        return self.name not in self.terms

    def value(self, metrics: Mapping[str, Any]) -> float | None:
        """The criterion's value from ``metrics`` (e.g. ``trainer.callback_metrics``), or None while a term is
        missing (a monitor not computed yet)."""
        if any(k not in metrics for k in self.terms):
            return None
        return sum(w * self.signs[k] * float(metrics[k]) for k, w in self.terms.items())

    def publish(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Log the combined value (a no-op for one metric, or while a term is missing) so that checkpointing and
        early stopping find it in ``trainer.callback_metrics``."""
        if not self.combined:
            return
        value = self.value(trainer.callback_metrics)
        if value is not None:
            pl_module.log(self.name, value, on_step=False, on_epoch=True, sync_dist=False)

    def describe(self) -> str:
        """``max val/synbench/score`` or ``max val/selection/score = 1*val/synbench/score - 1*val/...``."""
        if not self.combined:
            return f"{self.mode} {self.name}"
        parts = [f"{'+' if self.signs[k] > 0 else '-'} {w:g}*{k}" for k, w in self.terms.items()]
        return f"max {self.name} = " + " ".join(parts).lstrip("+ ")


class _PublishCriterion:
    """Publishes the criterion's value (a combined criterion's weighted sum) before the Lightning callback reads it at
    the end of the training epoch."""

    criterion: SelectionCriterion

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.criterion.publish(trainer, pl_module)
        super().on_train_epoch_end(trainer, pl_module)  # type: ignore[misc]


class ScoreCheckpoint(_PublishCriterion, ModelCheckpoint):
    """``ModelCheckpoint`` on a RepBench score or a combined criterion (:class:`SelectionCriterion`), its ``mode``
    taken from the metrics' ``higher_is_better`` (``mode="auto"``; an explicit mode must agree, or give the
    direction of a name without one). Saves at the end of the training epoch by default: the monitors log there,
    after validation, so a check at validation end would read the previous epoch's score. Other arguments:
    :class:`lightning.pytorch.callbacks.ModelCheckpoint`'s."""

    def __init__(
        self,
        monitor: str | Mapping[str, float],
        mode: str = "auto",
        name: str = "val/selection/score",
        directions: Mapping[str, str] | None = None,
        save_on_train_epoch_end: bool | None = True,
        **kwargs: Any,
    ) -> None:
        self.criterion = _criterion(monitor, mode, name, directions, type(self).__name__)
        super().__init__(
            monitor=self.criterion.name, mode=self.criterion.mode, save_on_train_epoch_end=save_on_train_epoch_end,
            **kwargs,
        )  # fmt: skip


class ScoreEarlyStopping(_PublishCriterion, EarlyStopping):
    """``EarlyStopping`` on a RepBench score or a combined criterion, the direction from the metrics (see
    :class:`ScoreCheckpoint`); checks at the end of the training epoch by default (where the monitors log)."""

    def __init__(
        self,
        monitor: str | Mapping[str, float],
        mode: str = "auto",
        name: str = "val/selection/score",
        directions: Mapping[str, str] | None = None,
        check_on_train_epoch_end: bool | None = True,
        **kwargs: Any,
    ) -> None:
        self.criterion = _criterion(monitor, mode, name, directions, type(self).__name__)
        super().__init__(
            monitor=self.criterion.name, mode=self.criterion.mode, check_on_train_epoch_end=check_on_train_epoch_end,
            **kwargs,
        )  # fmt: skip


def _criterion(
    monitor: str | Mapping[str, float], mode: str, name: str, directions: Mapping[str, str] | None, owner: str
) -> SelectionCriterion:
    """The criterion of ``monitor``; ``mode`` "auto" or the single monitor's direction (checked against it)."""
    if mode not in ("auto", "max", "min"):
        raise ValueError(
            f"{owner}: mode must be 'auto' (from the metric's higher_is_better), 'max' or 'min', got {mode!r}"
        )
    if mode != "auto":
        if not isinstance(monitor, str):
            raise ValueError(
                f"{owner}: a combined monitor is always maximised (each term signed by its metric's direction); "
                f"leave mode='auto' and give unknown directions as directions={{name: 'max' | 'min'}}"
            )
        directions = {**dict(directions or {}), monitor: mode}
    try:
        return SelectionCriterion(monitor, name, directions)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{owner}: {exc}") from None
