"""``CollapseAlarm``: warn, log and optionally stop a run whose representation collapses.

It reads what the monitors log (``trainer.callback_metrics``) at the end of every N-th training epoch and fires when
any armed condition holds:

* SynBench-Score at 0: ``val/synbench/score <= synbench_floor`` (SynBenchCallback; off by default, see below);
* RankMe collapses: ``val/spectrum/rankme < rankme_floor`` (RepresentationSpectrumCallback);
* R_dr -> 0 together with near-1 cosine between *different* images: ``val/divergence_radius/mean <= radius_floor``
  and the mean cosine between the features of different probe images >= ``cosine_ceiling`` (the alarm computes
  it on its own small probe set, one forward of ``num_images`` images; a representation invariant to every
  perturbation because it maps every image to the same point, not a robust one);
* the Task-Prior z-score falls: ``val/task_prior/z <= (1 - task_prior_drop) * best z so far`` (off by default).

A condition whose metric is not logged (its monitor not attached) is skipped; the thresholds and the measured runs
they come from are in docs/monitoring.md ("Collapse alarm"). On firing: a :class:`CollapseAlarmWarning` (a
:class:`~src.callbacks.RepresentationCollapseWarning`: ``warnings.simplefilter("error", RepresentationCollapseWarning)``
turns it and RankMe's warning into errors), ``val/collapse/alarm`` = 1 (0 otherwise, every checked epoch) and,
with ``stop=True``, ``trainer.should_stop``. List it after the monitors (checked at setup): Lightning calls the
callbacks' epoch-end hooks in list order.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import Tensor

from ..features import FeatureExtractor
from ..utils.modes import eval_mode
from ..utils.normalization import Normalize
from ._monitor import BackboneMonitor
from .spectrum_callback import RepresentationCollapseWarning

__all__ = ["CollapseAlarm", "CollapseAlarmWarning", "mean_cross_cosine"]

_NAME = "CollapseAlarm"


class CollapseAlarmWarning(RepresentationCollapseWarning):
    """The :class:`CollapseAlarm` fired (``warnings.simplefilter("error", CollapseAlarmWarning)`` stops a run on it)."""


def mean_cross_cosine(features: Tensor) -> float:
    """Mean cosine between the features of different images, (‖Σ u_i‖² − n) / (n (n − 1)) of the unit vectors u_i
    (O(n·D), no n × n matrix). Rows of zeros count as cosine 0. Needs n >= 2."""
    n = features.shape[0]
    if features.ndim != 2 or n < 2:
        raise ValueError(f"{_NAME}: need (n >= 2, D) features, got {tuple(features.shape)}")
    u = torch.nn.functional.normalize(features.double().flatten(1), dim=1)
    total = u.sum(0).pow(2).sum() - u.pow(2).sum()  # Σ_{i≠j} u_i·u_j
    return float(total / (n * (n - 1)))


def _threshold(value: Any, what: str, low: float | None = None, high: float | None = None) -> float | None:
    """``value`` as a float threshold (None = condition off), refused outside [low, high] or when not finite."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{_NAME}: {what} must be a finite number or None (condition off), got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{_NAME}: {what} must lie in [{low}, {high}] or be None (condition off), got {value!r}")
    return float(value)


class CollapseAlarm(BackboneMonitor):
    """Args (defaults equal ``configs/callbacks/collapse_alarm.yaml``; every threshold None switches its
    condition off):
    synbench_floor: fire when SynBench-Score <= it. Off (None) by default: measured with BatchNorm in train mode
        (docs/monitoring.md), the collapsed lr 1e-1 runs scored 0.79 / 0.93 after the collapsing epoch while the
        best run (lr 2e-3, val/acc 0.986) scored 0.117, so any floor above 0.12 raises a false alarm on it and none
        catches that collapse. (Earlier figures, 0.000 collapsed vs >= 0.54, came from runs with frozen BatchNorm.)
    rankme_floor: fire when RankMe < it (measured: 1.001 collapsed vs >= 7.6 healthy).
    radius_floor, cosine_ceiling: fire when R_dr <= radius_floor and the mean cosine between different probe
        images >= cosine_ceiling (both: the probe cosine is computed only when ``cosine_ceiling`` is set).
    task_prior_drop: fire when the Task-Prior z <= (1 − drop) × the highest z seen so far (None: off).
    stop: also set ``trainer.should_stop`` (the run ends after this epoch, checkpoints of the epoch written).
    keys: logged names of the inputs, ``{"synbench": ..., "rankme": ..., "radius": ..., "task_prior": ...}``
        (defaults: the monitors' default names).
    images, num_images, image_size: the probe set of the cosine (the monitors' vocabulary, see
        :func:`src.images.probe_images.probe_images`; built and checked before training).
    normalize: None (the backbone takes [0, 1] pixels) or ``(mean, std)`` / ``{"mean": ..., "std": ...}`` /
        torchvision's ``Normalize``: the backbone takes ``(pixels - mean) / std`` and the validation images carry it
        (the monitors' input contract).
    every_n_epochs: check at the end of every N-th epoch (and after the last one).
    feature_fn: ``(pl_module, x) -> (N, D)``; default ``pl_module.backbone.embed``.
    prefix: logs ``{prefix}/alarm`` (0/1) and ``{prefix}/cosine``.

    Two of one kind in one Trainer: give each its own ``prefix=`` (Lightning refuses two with equal arguments as
    "more than one stateful callback"; :func:`~src.callbacks.check_monitor_prefixes` says it before the Trainer).
    """

    KEYS = {
        "synbench": "val/synbench/score",
        "rankme": "val/spectrum/rankme",
        "radius": "val/divergence_radius/mean",
        "task_prior": "val/task_prior/z",
    }

    def __init__(
        self,
        synbench_floor: float | None = None,
        rankme_floor: float | None = 2.0,
        radius_floor: float | None = 0.08,
        cosine_ceiling: float | None = 0.999,
        task_prior_drop: float | None = None,
        stop: bool = False,
        keys: dict[str, str] | None = None,
        images: str | Tensor = "auto",
        num_images: int = 64,
        image_size: int = 32,
        every_n_epochs: int = 1,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None = None,
        prefix: str = "val/collapse",
        normalize: Normalize = None,
    ) -> None:
        super().__init__(every_n_epochs, feature_fn, False, prefix, at_train_start=False, progress=False,
                         normalize=normalize)  # fmt: skip
        self.synbench_floor = _threshold(synbench_floor, "synbench_floor", 0.0)
        self.rankme_floor = _threshold(rankme_floor, "rankme_floor", 0.0)
        self.radius_floor = _threshold(radius_floor, "radius_floor", 0.0, 1.0)
        self.cosine_ceiling = _threshold(cosine_ceiling, "cosine_ceiling", -1.0, 1.0)
        self.task_prior_drop = _threshold(task_prior_drop, "task_prior_drop", 0.0, 1.0)
        if (self.radius_floor is None) != (self.cosine_ceiling is None):
            raise ValueError(
                f"{_NAME}: radius_floor and cosine_ceiling arm one condition together (R_dr -> 0 AND near-1 cosine "
                f"between different images); set both or neither, got {radius_floor!r} and {cosine_ceiling!r}"
            )
        unknown = sorted(set(keys or {}) - set(self.KEYS))
        if unknown:
            raise ValueError(f"{_NAME}: unknown keys {unknown}; the inputs are {sorted(self.KEYS)}")
        self.keys = {**self.KEYS, **dict(keys or {})}
        self.stop = bool(stop)
        # the cosine between different images needs two; probe images only when the cosine condition is armed
        self._init_images(images, num_images, image_size, resize=True, min_images=2)
        self.uses_images = self.cosine_ceiling is not None
        self.best_z: float | None = None
        self.reasons: list[str] = []  # why it fired at the last check (empty: it did not)
        self.fired_epochs: list[int] = []
        self._armed_seen = False

    def _identity(self) -> dict[str, Any]:
        return {"keys": self.keys}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse a monitor listed after the alarm: the alarm would read its previous epoch's value."""
        super().setup(trainer, pl_module, stage)
        mine = trainer.callbacks.index(self)
        late = [type(cb).__name__ for cb in trainer.callbacks[mine + 1 :] if isinstance(cb, BackboneMonitor)]
        if late:
            raise ValueError(
                f"{_NAME} is listed before {late}: Lightning calls the epoch-end hooks in list order, so the alarm "
                "would judge the previous epoch's values; list the alarm after the monitors (in YAML: compose "
                "callbacks=[default,...,collapse_alarm] with collapse_alarm last)"
            )

    # ------------------------------------------------------------------ the check
    def cross_cosine(self, trainer: Any, pl_module: L.LightningModule) -> float:
        """Mean cosine between the features of different probe images (one forward of the probe set)."""
        images = self.probe_images(trainer)
        module, fn = self._encoder(pl_module)
        with eval_mode(module):
            z = FeatureExtractor(fn, device=pl_module.device)(images)
        return mean_cross_cosine(z)

    def judge(self, metrics: dict[str, float], cosine: float | None) -> list[str]:
        """The reasons to fire from the logged ``metrics`` and the probe ``cosine`` (empty: no alarm). Pure but for
        the running best Task-Prior z."""
        reasons = []
        score = metrics.get(self.keys["synbench"])
        if self.synbench_floor is not None and score is not None and score <= self.synbench_floor:
            reasons.append(f"SynBench-Score {score:.3f} <= synbench_floor={self.synbench_floor}")
        rank = metrics.get(self.keys["rankme"])
        if self.rankme_floor is not None and rank is not None and rank < self.rankme_floor:
            reasons.append(f"RankMe {rank:.3f} < rankme_floor={self.rankme_floor}")
        radius = metrics.get(self.keys["radius"])
        if self.radius_floor is not None and radius is not None and cosine is not None:
            if radius <= self.radius_floor and cosine >= self.cosine_ceiling:
                reasons.append(
                    f"R_dr {radius:.4f} <= radius_floor={self.radius_floor} with cosine {cosine:.3f} >= "
                    f"cosine_ceiling={self.cosine_ceiling} between different images (every image maps to one point)"
                )
        z = metrics.get(self.keys["task_prior"])
        if self.task_prior_drop is not None and z is not None:
            if self.best_z is not None and self.best_z > 0 and z <= (1 - self.task_prior_drop) * self.best_z:
                reasons.append(f"Task-Prior z {z:.3f} <= (1 - task_prior_drop) x best {self.best_z:.3f}")
            self.best_z = z if self.best_z is None else max(self.best_z, z)
        return reasons

    def compute(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """{"alarm": 0 | 1, "cosine": ...}; warns and (``stop``) stops the run when it fires."""
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
        inputs = [k for k in self.keys.values() if k in metrics]
        if not inputs and not self._armed_seen:
            warnings.warn(
                f"{_NAME}: none of its inputs {sorted(self.keys.values())} is logged, so it cannot fire; attach the "
                "monitors (callbacks synbench, spectrum, divergence_radius, task_prior) before it",
                UserWarning,
                stacklevel=2,
            )
        self._armed_seen = self._armed_seen or bool(inputs)
        cosine = self.cross_cosine(trainer, pl_module) if self.cosine_ceiling is not None else None
        self.reasons = self.judge(metrics, cosine)
        out = {"alarm": float(bool(self.reasons))}
        if cosine is not None:
            out["cosine"] = cosine
        if self.reasons:
            epoch = trainer.current_epoch + 1
            self.fired_epochs.append(epoch)
            action = "stopping the run (stop=True)" if self.stop else "stop=True would stop the run"
            if trainer.global_rank == 0:
                warnings.warn(
                    f"{_NAME}: the representation collapsed after {epoch} epoch(s): {'; '.join(self.reasons)}. "
                    f"Lower the learning rate (or raise the regulariser); {action}",
                    CollapseAlarmWarning,
                    stacklevel=2,
                )
            if self.stop:
                trainer.should_stop = True
        self.computations += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "best_z": self.best_z, "fired_epochs": list(self.fired_epochs)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.best_z = state_dict.get("best_z")
        self.fired_epochs = list(state_dict.get("fired_epochs", []))
