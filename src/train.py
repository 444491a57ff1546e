"""``python -m src.train [experiment=...] [key=value ...]``: fit (and test) a LightningModule from YAML in configs/.

``train(cfg)`` is separate from ``main`` so tests and notebooks can call it with a composed config.

Reliability contract:

* ``ckpt_path`` is validated before anything is fitted or written (file exists, is a readable Lightning training
  checkpoint, written by the same module class, with weights that fit the configured model).
* A fit stopped by SIGTERM (a scheduler's preemption) exits with status 143, by Ctrl-C with 130, by an exception
  with that exception; each keeps ``checkpoints/on_exception.ckpt`` (after >= 1 optimizer step) and logs the
  command line argument that resumes it, ``ckpt_path=...``. Resuming is exact, also from the middle of an epoch.
* ``main`` returns the value of ``optimized_metric`` (train.yaml) so Hydra sweepers can optimise it; a monitor's value
  (``val/synbench/score``) whose callback the configuration leaves off is refused before anything is built
  (:func:`src.sweeps.objective.check_objective`).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python src/train.py`, lightning-hydra-template's habit (rootutils)
    import sys
    from pathlib import Path

    _here = Path(__file__).resolve().parent  # src/: on sys.path as the script's folder, where it shadows names
    sys.path[:] = [str(_here.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _here]
    __package__ = "src"  # the relative imports below then import this repository's package `src` (PEP 366)

import logging
import math
import re
import shlex
import time
import warnings
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from . import PACKAGE
from .callbacks import check_monitor_prefixes
from .sweeps.objective import check_objective
from .sweeps.storage import register_resolvers
from .utils.allocator import keep_freed_memory
from .utils.checkpoint import read_checkpoint
from .utils.checkpoint_io import AtomicCheckpointIO
from .utils.console import announce_run, ignore_worker_advice, quiet_cli, task_overrides
from .utils.hparams import headline_metrics, log_hparams_with_metrics, run_hparams
from .utils.hydra_utils import instantiate_list, to_container
from .utils.resources import config_dir
from .utils.run_dir import RunDirectoryLock, is_child_rank
from .utils.run_summary import show_summary, write_summary

log = logging.getLogger("repbench")
register_resolvers()  # ${repbench_sqlite:...} of configs/hparams_search (the sweeper resolves it before any job)

__all__ = ["RESUMABLE_EXIT_CODES", "check_resume_checkpoint", "optimized_metric_value", "train", "main"]

# conventional shell statuses: 128 + signal number (SIGTERM 15, SIGINT 2)
RESUMABLE_EXIT_CODES = {"SIGTERM": 143, "SIGINT": 130}


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def check_resume_checkpoint(ckpt_path: str | Path, model: L.LightningModule) -> Path:
    """Refuse a ``ckpt_path`` that cannot resume ``model``, before the trainer touches anything.

    Raises FileNotFoundError (missing), ``CorruptCheckpointError`` (unreadable) or ValueError (not a Lightning
    training checkpoint, written by another module class, or weights of another architecture), each naming the
    problem and the fix.
    """
    from .backbones.weights import check_state_dict_matches, read_checkpoint
    from .utils.checkpoint import MODULE_KEY, canonical_class_key, class_key

    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"ckpt_path={ckpt_path}: no such file; pass a checkpoint of an earlier run, e.g. "
            "ckpt_path=logs/train/runs/<run>/checkpoints/last.ckpt (or on_exception.ckpt after a crash)"
        )
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "loops" not in ckpt:
        raise ValueError(
            f"ckpt_path={ckpt_path} is not a Lightning training checkpoint (no 'state_dict'/'loops' entries): a weights "
            "file cannot resume a run. Start a new run instead (a backbone's weights go to backbone.checkpoint_path)"
        )
    expected = class_key(type(model))
    recorded = ckpt.get(MODULE_KEY)
    recorded = canonical_class_key(recorded) if isinstance(recorded, str) else recorded
    if recorded is not None and recorded != expected:
        raise ValueError(
            f"ckpt_path={ckpt_path} was written by {recorded.rpartition(':')[2]}, but this run trains "
            f"{type(model).__name__} (model={type(model).__name__}); resume with the config of that run "
            "(its .hydra/config.yaml), or start a new run without ckpt_path"
        )
    hp = ckpt.get("hyper_parameters") or {}
    try:
        check_state_dict_matches(ckpt["state_dict"], model, f"ckpt_path={ckpt_path}")
    except ValueError as err:
        saved = {k: hp[k] for k in ("backbone", "num_classes") if k in hp}
        raise ValueError(
            f"{err}. The checkpoint was trained with {saved}; resume with the same backbone and data "
            "(the run's .hydra/config.yaml) or start a new run without ckpt_path"
        ) from None
    return path


def _exception_checkpoint(trainer: L.Trainer) -> Any:
    from .callbacks.checkpointing import ExceptionCheckpoint

    return next((cb for cb in trainer.callbacks if isinstance(cb, ExceptionCheckpoint)), None)


def _loads(path: str | Path) -> bool:
    """True when ``path`` is a checkpoint ``torch.load(weights_only=True)`` can read (not a truncated file)."""
    try:
        read_checkpoint(path)
    except Exception:
        return False
    return True


def resume_argument(path: str | Path) -> str:
    """``ckpt_path=...`` as one shell word Hydra parses: quoted when the path holds ``=`` or other characters
    Hydra's override grammar reserves (Lightning's own names are ``epoch=0-step=2.ckpt``)."""
    text = str(path)
    if re.fullmatch(r"[A-Za-z0-9_./+-]+", text):
        return f"ckpt_path={text}"
    hydra_quoted = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'  # Hydra's quoted value
    return shlex.quote(f"ckpt_path={hydra_quoted}")  # one word for the shell


def _resume_hint(trainer: L.Trainer, reason: str) -> str:
    """'<reason>; resume with ckpt_path=...' naming the newest checkpoint that loads (a file truncated by a full
    disk is never proposed)."""
    cb = _exception_checkpoint(trainer)
    candidates = [cb.saved_path] if cb is not None and cb.saved_path else []
    for c in trainer.checkpoint_callbacks:
        if isinstance(c, ModelCheckpoint):
            candidates += [c.last_model_path, c.best_model_path]
            if c.dirpath and Path(c.dirpath).is_dir():
                candidates += [str(p) for p in Path(c.dirpath).glob("*.ckpt")]
    found = sorted({p for p in candidates if p and Path(p).is_file()}, key=lambda p: Path(p).stat().st_mtime)
    good = next((p for p in reversed(found) if _loads(p)), None)
    if good is None:
        return f"{reason}; no checkpoint that loads was written (nothing to resume from)"
    return (
        f"{reason} at step {trainer.global_step}; resume with: python -m {PACKAGE}.train <same overrides> "
        f"{resume_argument(good)}"
    )


def _run_stage(trainer: L.Trainer, stage: str, **kwargs: Any) -> None:
    """``trainer.fit`` / ``trainer.test`` mapping interruptions to exit statuses: SIGTERM -> SystemExit(143),
    Ctrl-C -> SystemExit(130); logs how to resume."""
    try:
        with warnings.catch_warnings():
            # RepBench's modules keep their frozen parts (a probe's backbone, the fine-tune teacher) in eval mode on
            # purpose and put everything else in train mode (RepBenchModule.on_fit_start): Lightning's "module(s) in
            # eval mode" warning is then expected, so silenced for this call only (a user's own fit still shows it)
            warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training.*")
            ignore_worker_advice(kwargs.get("datamodule"))  # data.num_workers=0 on purpose (in-memory data sets)
            getattr(trainer, stage)(weights_only=True, **kwargs)
    except SIGTERMException:  # Lightning raises it (a SystemExit with status 0!) after the current batch
        log.error(_resume_hint(trainer, f"{stage} stopped by SIGTERM"))
        raise SystemExit(RESUMABLE_EXIT_CODES["SIGTERM"]) from None
    except SystemExit:
        cb = _exception_checkpoint(trainer)
        if cb is not None and isinstance(cb.exception, KeyboardInterrupt):  # Lightning turned Ctrl-C into exit(1)
            log.error(_resume_hint(trainer, f"{stage} interrupted (Ctrl-C)"))
            raise SystemExit(RESUMABLE_EXIT_CODES["SIGINT"]) from None
        raise
    except KeyboardInterrupt:
        log.error(_resume_hint(trainer, f"{stage} interrupted (Ctrl-C)"))
        raise SystemExit(RESUMABLE_EXIT_CODES["SIGINT"]) from None
    except BaseException:
        if stage == "fit":
            log.error(_resume_hint(trainer, "fit failed"))
        raise


def check_trainer_length(cfg: DictConfig) -> None:
    """Refuse a training length that cannot work, before anything is built (each error names the key and the fix).

    ``trainer.max_epochs`` must be an integer >= 1, or -1 (Lightning: until stopped) together with a finite
    ``trainer.max_steps`` when the model's learning-rate schedule needs a horizon."""
    if not cfg.get("train", True):
        return
    tcfg = cfg.get("trainer") or {}
    max_epochs, max_steps = tcfg.get("max_epochs"), tcfg.get("max_steps", -1)
    for key, value in (("max_epochs", max_epochs), ("max_steps", max_steps)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"trainer.{key} must be an integer, got {value!r} ({type(value).__name__})")
    if max_epochs == 0 or (max_epochs is not None and max_epochs < -1):
        raise ValueError(
            f"trainer.max_epochs={max_epochs} trains nothing: pass trainer.max_epochs >= 1 (or -1 with "
            "trainer.max_steps=N), or train=false to only test a checkpoint"
        )
    scheduled = (cfg.get("model") or {}).get("scheduler") not in (None, "none")
    if max_epochs == -1 and (max_steps is None or max_steps < 0) and scheduled:
        raise ValueError(
            "trainer.max_epochs=-1 (train until stopped) leaves the per-step cosine learning-rate schedule without "
            "a length: add trainer.max_steps=N, pass a finite trainer.max_epochs, or model.scheduler=none"
        )


def _target_name(node: Any) -> str:
    """``DigitsDataModule``, ``RobustLinearProbe (backbone timm:x)``: a config node's class, for progress lines."""
    name = str(node.get("_target_", "?")).rpartition(".")[2]
    backbone = node.get("backbone")
    return f"{name} (backbone {backbone.get('name')})" if isinstance(backbone, DictConfig) else name


def _run_dir(cfg: DictConfig) -> Path | None:
    out = (cfg.get("paths") or {}).get("output_dir")
    return Path(str(out)) if out else None


def train(cfg: DictConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """Instantiate data, model, callbacks, loggers and trainer from ``cfg``; fit and optionally test.

    Returns (metrics, objects) where metrics merges ``trainer.callback_metrics`` after fit and test.
    Raises SystemExit(143) after SIGTERM and SystemExit(130) after Ctrl-C (the checkpoint is kept).
    The run folder (``paths.output_dir``) is locked for the run (a second run into it is refused; the CLI already
    locked it before Hydra wrote into it, :class:`~src.utils.run_dir.RunFolderLock`); checkpoints are
    written atomically in their own folder (:class:`~src.utils.checkpoint_io.AtomicCheckpointIO`); the run ends with
    ``metrics.json`` and ``summary.md`` in its folder.
    """
    check_trainer_length(cfg)
    if cfg.get("autoattack") and not (cfg.get("test") and "eval_attack" in cfg.model):
        raise ValueError(
            "autoattack=true runs AutoAttack after the test stage on an attackable probe (a model with eval_attack, "
            f"e.g. model=robust_probe): set test=true (got test={cfg.get('test')}) or autoattack=false"
        )
    check_objective(cfg)  # optimized_metric has a producer (a monitor's value needs its callback)
    run_dir = _run_dir(cfg)
    lock = RunDirectoryLock(run_dir) if run_dir is not None and not is_child_rank() else None
    if lock is not None:
        lock.acquire()
    try:
        return _train(cfg, run_dir)
    finally:
        if lock is not None:
            lock.release()


def _train(cfg: DictConfig, run_dir: Path | None) -> tuple[dict[str, float], dict[str, Any]]:
    started = time.time()
    if cfg.get("seed") is not None:
        L.seed_everything(int(cfg.seed), workers=True, verbose=False)  # the seed is in the run's first lines
    torch.set_float32_matmul_precision("high")
    log.info("building %s and %s", _target_name(cfg.data), _target_name(cfg.model))  # a backbone may take seconds
    datamodule: L.LightningDataModule = instantiate(cfg.data, _convert_="all")
    model: L.LightningModule = instantiate(cfg.model, _convert_="all")
    ckpt_path = cfg.get("ckpt_path")
    resumed_step = 0
    if ckpt_path and cfg.get("train", True):
        check_resume_checkpoint(ckpt_path, model)  # before any callback, logger or trainer writes a file
        resumed_step = int(read_checkpoint(ckpt_path).get("global_step", 0))
    callbacks = instantiate_list(cfg.get("callbacks"))
    check_monitor_prefixes(callbacks)  # two monitors of a kind need their own prefix=: said before Lightning's error
    loggers = instantiate_list(cfg.get("logger"))
    plugins = list(cfg.trainer.get("plugins") or [])
    if not plugins:  # atomic saves in the checkpoint's own folder (never a truncated last.ckpt)
        plugins = [AtomicCheckpointIO()]
    trainer: L.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, plugins=plugins, _convert_="all"
    )
    for lg in loggers:
        lg.log_hyperparams({"cfg": to_container(cfg), "seed": cfg.get("seed")})

    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        log.info("fit: up to %s epoch(s)%s", trainer.max_epochs, f" from {ckpt_path}" if ckpt_path else "")
        _run_stage(trainer, "fit", model=model, datamodule=datamodule, ckpt_path=ckpt_path)
        if ckpt_path and trainer.global_step == resumed_step:
            raise ValueError(
                f"nothing left to train: {resume_argument(ckpt_path)} already reached trainer.max_epochs="
                f"{trainer.max_epochs} (epoch {trainer.current_epoch}, step {trainer.global_step}). Pass a larger "
                f"trainer.max_epochs to train on, or evaluate it: python -m {PACKAGE}.eval {resume_argument(ckpt_path)}"
            )
        metrics.update(_scalars(trainer.callback_metrics))
    if cfg.get("test", False):
        best = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.monitor]
        ckpt = best[0].best_model_path if best else ""
        if not ckpt or trainer.fast_dev_run:
            log.warning("no best checkpoint found: testing the current weights")
            ckpt = None
        log.info("test: %s", f"best checkpoint {Path(ckpt).name}" if ckpt else "current weights")
        _run_stage(trainer, "test", model=model, datamodule=datamodule, ckpt_path=ckpt, verbose=False)
        metrics.update(_scalars(trainer.callback_metrics))
        if cfg.get("autoattack"):  # the tested weights (the best checkpoint's, loaded by the test), as src.eval
            from .models.autoattack import autoattack_metrics

            autoattack = autoattack_metrics(
                model, datamodule, version=str(cfg.get("autoattack_version", "standard")),
                samples=int(cfg.get("autoattack_samples", 500)), seed=int(cfg.get("seed", 0)),
            )  # fmt: skip
            metrics.update(autoattack)
            for lg in loggers:
                lg.log_metrics(autoattack)
    bad = [k for k, v in metrics.items() if not math.isfinite(v)]
    if bad:
        raise FloatingPointError(f"non-finite metrics after training: {bad}")
    if trainer.is_global_zero:
        hparams, varied = run_hparams(to_container(cfg), task_overrides())  # what a sweep varied first (HParams tab)
        objective = cfg.get("optimized_metric")
        objective = list(objective) if objective is not None and not isinstance(objective, str) else objective
        log_hparams_with_metrics(loggers, hparams, headline_metrics(metrics, objective), varied)
        if run_dir is not None:
            write_summary(run_dir, metrics, _run_info(cfg, trainer, run_dir, time.time() - started))
    return metrics, {"cfg": cfg, "datamodule": datamodule, "model": model, "trainer": trainer}


def _run_info(cfg: DictConfig, trainer: L.Trainer, run_dir: Path, seconds: float) -> dict[str, Any]:
    """What ran, for metrics.json / summary.md: folder, overrides, checkpoints, epochs, time."""
    best = next((c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.monitor), None)
    latest = [
        path
        for c in trainer.checkpoint_callbacks
        if isinstance(c, ModelCheckpoint)
        for path in (c.last_model_path, "" if c.monitor else c.best_model_path)  # monitor=None: the newest save
        if path and Path(path).is_file()
    ]
    last = max(latest, key=lambda p: Path(p).stat().st_mtime) if latest else None
    overrides = None
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:  # not started by Hydra (tests, notebooks)
        pass
    return {
        "run_dir": str(run_dir),
        "overrides": overrides,
        "model": cfg.model.get("_target_"),
        "backbone": (cfg.get("backbone") or {}).get("name") if isinstance(cfg.get("backbone"), DictConfig) else None,
        "seed": cfg.get("seed"),
        "epochs": trainer.current_epoch,
        "global_step": trainer.global_step,
        "best_checkpoint": best.best_model_path if best is not None else None,
        "best_score": float(best.best_model_score) if best is not None and best.best_model_score is not None else None,
        "monitor": best.monitor if best is not None else None,
        "last_checkpoint": last,
        "pruned_epoch": next(  # OptunaPruning stopped the run after this epoch (a collapsed trial); None otherwise
            (c.pruned_epoch for c in trainer.callbacks if getattr(c, "pruned_epoch", None) is not None), None
        ),
        "seconds": round(seconds, 1),
    }


def optimized_metric_value(cfg: DictConfig, metrics: dict[str, float]) -> float | list[float] | None:
    """The value of ``cfg.optimized_metric`` (None when it is null; a list of values when it is a list of names, for
    a multi-objective sweep); a KeyError naming the logged metrics if the run did not log one (a sweeper must not
    optimise a missing value)."""
    name = cfg.get("optimized_metric")
    if not name:
        return None
    names = [name] if isinstance(name, str) else list(name)
    missing = [n for n in names if n not in metrics]
    if missing:
        raise KeyError(
            f"optimized_metric={missing[0]!r} was not logged by this run; logged: {sorted(metrics)}. "
            "Set optimized_metric to one of them"
        )
    values = [metrics[n] for n in names]
    return values[0] if isinstance(name, str) else values


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train.yaml")
@quiet_cli()  # no third-party advertisements or known-harmless warnings, for this call only (src/utils/console.py)
def main(cfg: DictConfig) -> float | None:
    announce_run(cfg)  # the first lines, before anything slow: what runs, where, where the full config is
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md)
    metrics, objects = train(cfg)
    if objects["trainer"].is_global_zero:
        show_summary(metrics, f"RepBench {cfg.get('task_name', 'train')}", _run_dir(cfg))
    return optimized_metric_value(cfg, metrics)


if __name__ == "__main__":
    main()
