"""``python -m src.train [experiment=...] [key=value ...]``: fit (and test) a LightningModule from YAML in configs/.

``train(cfg)`` is separate from ``main`` so tests and notebooks can call it with a composed config.

Reliability contract:

* ``ckpt_path`` is validated before anything is fitted or written (file exists, is a readable Lightning training
  checkpoint, written by the same module class, with weights that fit the configured model).
* A fit stopped by SIGTERM (a scheduler's preemption) exits with status 143, by Ctrl-C with 130, by an exception
  with that exception; each keeps ``checkpoints/on_exception.ckpt`` (after >= 1 optimizer step) and logs the
  command line argument that resumes it, ``ckpt_path=...``. Resuming is exact, also from the middle of an epoch.
* ``main`` returns the value of ``optimized_metric`` (train.yaml) so Hydra sweepers can optimise it.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from .utils.allocator import keep_freed_memory
from .utils.hydra_utils import instantiate_list, log_config, to_container
from .utils.resources import config_dir

log = logging.getLogger("repbench")

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
            "ckpt_path=logs/train/runs/<time>/checkpoints/last.ckpt (or on_exception.ckpt after a crash)"
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


def _resume_hint(trainer: L.Trainer, reason: str) -> str:
    """'<reason>; resume with ckpt_path=...' naming the newest checkpoint worth resuming from."""
    cb = _exception_checkpoint(trainer)
    candidates = [cb.saved_path] if cb is not None and cb.saved_path else []
    candidates += [
        c.last_model_path or c.best_model_path for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)
    ]
    found = [p for p in candidates if p and Path(p).is_file()]
    if not found:
        return f"{reason}; no checkpoint was written (nothing trained yet)"
    newest = max(found, key=lambda p: Path(p).stat().st_mtime)
    return (
        f"{reason} at step {trainer.global_step}; resume with: python -m src.train <same overrides> ckpt_path={newest}"
    )


def _run_stage(trainer: L.Trainer, stage: str, **kwargs: Any) -> None:
    """``trainer.fit`` / ``trainer.test`` mapping interruptions to exit statuses: SIGTERM -> SystemExit(143),
    Ctrl-C -> SystemExit(130); logs how to resume."""
    try:
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


def train(cfg: DictConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """Instantiate data, model, callbacks, loggers and trainer from ``cfg``; fit and optionally test.

    Returns (metrics, objects) where metrics merges ``trainer.callback_metrics`` after fit and test.
    Raises SystemExit(143) after SIGTERM and SystemExit(130) after Ctrl-C (the checkpoint is kept).
    """
    if cfg.get("seed") is not None:
        L.seed_everything(int(cfg.seed), workers=True)
    torch.set_float32_matmul_precision("high")
    log.info("data <%s>", cfg.data._target_)
    datamodule: L.LightningDataModule = instantiate(cfg.data, _convert_="all")
    log.info("model <%s>", cfg.model._target_)
    model: L.LightningModule = instantiate(cfg.model, _convert_="all")
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path and cfg.get("train", True):
        check_resume_checkpoint(ckpt_path, model)  # before any callback, logger or trainer writes a file
    callbacks = instantiate_list(cfg.get("callbacks"))
    loggers = instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, _convert_="all")
    for lg in loggers:
        lg.log_hyperparams({"cfg": to_container(cfg), "seed": cfg.get("seed")})

    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        _run_stage(trainer, "fit", model=model, datamodule=datamodule, ckpt_path=ckpt_path)
        metrics.update(_scalars(trainer.callback_metrics))
    if cfg.get("test", False):
        best = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.monitor]
        ckpt = best[0].best_model_path if best else ""
        if not ckpt or trainer.fast_dev_run:
            log.warning("no best checkpoint found: testing the current weights")
            ckpt = None
        _run_stage(trainer, "test", model=model, datamodule=datamodule, ckpt_path=ckpt)
        metrics.update(_scalars(trainer.callback_metrics))
    bad = [k for k, v in metrics.items() if not math.isfinite(v)]
    if bad:
        raise FloatingPointError(f"non-finite metrics after training: {bad}")
    return metrics, {"cfg": cfg, "datamodule": datamodule, "model": model, "trainer": trainer}


def optimized_metric_value(cfg: DictConfig, metrics: dict[str, float]) -> float | None:
    """The value of ``cfg.optimized_metric`` (None when it is null); a KeyError naming the logged metrics if the
    run did not log it (a sweeper must not optimise a missing value)."""
    name = cfg.get("optimized_metric")
    if not name:
        return None
    if name not in metrics:
        raise KeyError(
            f"optimized_metric={name!r} was not logged by this run; logged: {sorted(metrics)}. "
            "Set optimized_metric to one of them"
        )
    return metrics[name]


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train.yaml")
def main(cfg: DictConfig) -> float | None:
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md)
    log_config(cfg)
    metrics, _ = train(cfg)
    log.info("final metrics: %s", {k: round(v, 4) for k, v in sorted(metrics.items())})
    return optimized_metric_value(cfg, metrics)


if __name__ == "__main__":
    main()
