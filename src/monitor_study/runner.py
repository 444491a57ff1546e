"""The study's runs: one Lightning fit per (objective, learning rate, seed), every monitor attached.

Each run pretrains ``backbone`` (random weights) on the digits (a fixed split and training order: data seed 0; the
run's seed draws the initial weights and, for SimCLR, the augmentations), and records before training (epoch -1)
and after every epoch: every label-free monitor (SynBench, DivergenceRadius R_dr and R_cs, RankMe, α-ReQ, Task-Prior
E/Var/z, the collapse alarm's probe cosine) next to the labelled reference (held-out linear-probe and k-NN accuracy,
:class:`~src.callbacks.DownstreamProbeCallback`) and the module's own validation loss (and accuracy, supervised).
Records are appended to a JSON-lines file as each run ends, so an interrupted study resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
from torch import Tensor

from ..callbacks import (
    CollapseAlarm,
    DivergenceRadiusCallback,
    DownstreamProbeCallback,
    RepresentationSpectrumCallback,
    SynBenchCallback,
    TaskPriorCallback,
)
from ..callbacks._monitor import BackboneMonitor
from ..callbacks.collapse_alarm import CollapseAlarmWarning
from ..callbacks.spectrum_callback import RepresentationCollapseWarning
from ..data.digits import DigitsDataModule
from ..synbench.config import synbench_budget
from ..utils.atomic_write import atomic_write_bytes
from ..utils.checks import check_int

__all__ = ["OBJECTIVES", "StudyPlan", "run_key", "run_study"]

log = logging.getLogger("repbench")

#: the pretraining objectives: name -> LightningModule class path (imported when used)
OBJECTIVES = ("supervised", "simclr")


@dataclass(frozen=True)
class StudyPlan:
    """What the study runs (configs/monitor_study.yaml holds the same fields)."""

    objectives: tuple[str, ...] = OBJECTIVES
    lrs: tuple[float, ...] = (1e-4, 4e-4, 1.6e-3, 6.4e-3, 2.56e-2, 1e-1)
    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: int = 4
    backbone: Mapping[str, Any] = field(default_factory=lambda: {"name": "timm:resnet10t", "pretrained": False})
    image_size: int = 32
    batch_size: int = 64
    accelerator: str = "cpu"
    limit_train_batches: int | float = 1.0
    monitors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per-monitor constructor overrides
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per-objective constructor overrides

    def __post_init__(self) -> None:
        unknown = sorted(set(self.objectives) - set(OBJECTIVES))
        if unknown or not self.objectives:
            raise ValueError(f"objectives must be a non-empty subset of {OBJECTIVES}, got {list(self.objectives)}")
        if not self.lrs or any(not float(lr) > 0 for lr in self.lrs) or len(set(self.lrs)) != len(self.lrs):
            raise ValueError(f"lrs must be distinct learning rates > 0, got {list(self.lrs)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct integers, got {list(self.seeds)}")
        object.__setattr__(self, "epochs", check_int(self.epochs, "epochs", 1))
        unknown = sorted(set(self.monitors) - set(MONITORS))
        if unknown:
            raise ValueError(f"monitors has unknown keys {unknown}; the monitors are {sorted(MONITORS)}")

    def keys(self) -> list[tuple[str, float, int]]:
        return [(o, float(lr), int(s)) for o in self.objectives for lr in self.lrs for s in self.seeds]


def run_key(objective: str, lr: float, seed: int) -> str:
    return f"{objective}|{float(lr)!r}|{int(seed)}"


#: the monitors every run carries: name -> (class, constructor defaults of the study)
MONITORS: dict[str, tuple[type, dict[str, Any]]] = {
    "synbench": (SynBenchCallback, {"config": synbench_budget("monitor")}),  # monitor_pretraining's budget
    "divergence_radius": (DivergenceRadiusCallback, {}),
    "task_prior": (TaskPriorCallback, {"prior_image_size": 64}),
    "spectrum": (RepresentationSpectrumCallback, {"collapse_threshold": None}),
    "downstream": (DownstreamProbeCallback, {}),
}  # fmt: skip


class _Recorder(L.Callback):
    """Collects each epoch's scalar metrics (after the monitors: listed last) and the monitors' values before
    training."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, Any]] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        init = {}
        for cb in trainer.callbacks:
            if isinstance(cb, BackboneMonitor) and cb.at_train_start:
                init.update({f"{cb.prefix}/{k}": float(v) for k, v in cb.last.items()})
        self.epochs.append({"epoch": -1, "metrics": init})

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = {}
        for k, v in trainer.callback_metrics.items():
            if isinstance(v, Tensor) and v.numel() == 1:
                metrics[k] = float(v)
        self.epochs.append({"epoch": int(trainer.current_epoch), "metrics": metrics})


def _model(plan: StudyPlan, objective: str, lr: float, seed: int) -> L.LightningModule:
    opts = dict(plan.models.get(objective, {}))
    if objective == "supervised":
        from ..models import SupervisedPretraining

        return SupervisedPretraining(backbone=dict(plan.backbone), num_classes=10, lr=lr, **opts)
    from ..models import SimCLRPretraining

    return SimCLRPretraining(backbone=dict(plan.backbone), lr=lr, **{"seed": seed, **opts})  # seeds the views


def _callbacks(plan: StudyPlan, prior_features: Tensor | None) -> list[L.Callback]:
    cbs: list[L.Callback] = []
    for name, (cls, defaults) in MONITORS.items():
        opts = {**defaults, "at_train_start": True, "progress": False, **dict(plan.monitors.get(name, {}))}
        if name == "synbench":
            opts.setdefault("input_size", plan.image_size)
            opts["log_figure"] = False
        if name == "divergence_radius":
            opts.setdefault("image_size", plan.image_size)
            opts["log_figure"] = False
        if name == "task_prior" and prior_features is not None:  # the same images every run: computed once
            opts.update(prior_backbone=None, prior_features=prior_features)
        cbs.append(cls(**opts))
    # the alarm's probe cosine only (its conditions are judged offline, one rule at a time: analysis.py)
    cbs.append(CollapseAlarm(synbench_floor=None, rankme_floor=None, task_prior_drop=None, image_size=plan.image_size))
    cbs.append(_Recorder())
    return cbs


def _fit(plan: StudyPlan, objective: str, lr: float, seed: int, prior: Tensor | None) -> tuple[dict, Tensor | None]:
    L.seed_everything(seed, verbose=False)
    dm = DigitsDataModule(image_size=plan.image_size, batch_size=plan.batch_size, seed=0)
    model = _model(plan, objective, lr, seed)
    callbacks = _callbacks(plan, prior)
    trainer = L.Trainer(
        max_epochs=plan.epochs, accelerator=plan.accelerator, devices=1, callbacks=callbacks, logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        limit_train_batches=plan.limit_train_batches,
    )  # fmt: skip
    start = time.perf_counter()
    with warnings.catch_warnings():  # the study reads the monitors' values; their collapse warnings are its data
        warnings.simplefilter("ignore", RepresentationCollapseWarning)
        warnings.simplefilter("ignore", CollapseAlarmWarning)
        warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training.*")
        trainer.fit(model, datamodule=dm)
    recorder = callbacks[-1]
    tp = next(cb for cb in callbacks if isinstance(cb, TaskPriorCallback))
    record = {
        "objective": objective, "lr": float(lr), "seed": int(seed), "epochs": recorder.epochs,
        "seconds": time.perf_counter() - start,
    }  # fmt: skip
    return record, tp.prior_features if tp.prior_features is not None else tp.computed_prior_features


def load_records(path: Path) -> list[dict[str, Any]]:
    """The records of a runs file (JSON lines; a torn last line, from a kill while writing, is ignored)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: a torn line was ignored (the run it held is run again)", path)
    return out


def run_study(
    plan: StudyPlan, runs_file: str | Path, progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Every run of ``plan`` not yet in ``runs_file`` (JSON lines, appended run by run: resumable), then all records
    of the plan's keys in plan order."""
    path = Path(runs_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {run_key(r["objective"], r["lr"], r["seed"]): r for r in load_records(path)}
    prior: Tensor | None = None
    keys = plan.keys()
    for i, (objective, lr, seed) in enumerate(keys):
        if run_key(objective, lr, seed) in done:
            continue
        record, prior = _fit(plan, objective, lr, seed, prior)
        done[run_key(objective, lr, seed)] = record
        text = "".join(json.dumps(r) + "\n" for r in done.values())
        atomic_write_bytes(text.encode(), path)  # the whole file, atomically: a kill never tears a record
        if progress is not None:
            acc = record["epochs"][-1]["metrics"].get("val/downstream/linear_acc", float("nan"))
            progress(
                f"run {i + 1}/{len(keys)}: {objective} lr {lr:g} seed {seed}: {record['seconds']:.0f} s, "
                f"linear-probe accuracy {acc:.3f}"
            )
    return [done[run_key(*k)] for k in keys]


def plan_from(cfg: Mapping[str, Any]) -> StudyPlan:
    """A :class:`StudyPlan` from the config's fields (lists as tuples)."""
    fields = {k: cfg[k] for k in StudyPlan.__dataclass_fields__ if k in cfg and cfg[k] is not None}
    for k in ("objectives", "lrs", "seeds"):
        if k in fields:
            fields[k] = tuple(fields[k])
    return StudyPlan(**fields)


def summarize_seconds(records: Sequence[Mapping[str, Any]]) -> float:
    return float(sum(r.get("seconds", 0.0) for r in records))
