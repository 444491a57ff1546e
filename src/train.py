"""``python -m src.train [experiment=...] [key=value ...]``: fit (and test) a LightningModule from YAML in configs/.

``train(cfg)`` is separate from ``main`` so tests and notebooks can call it with a composed config.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from src.utils.hydra_utils import instantiate_list, log_config, to_container

log = logging.getLogger("repbench")

__all__ = ["train", "main"]


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def train(cfg: DictConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """Instantiate data, model, callbacks, loggers and trainer from ``cfg``; fit and optionally test.

    Returns (metrics, objects) where metrics merges ``trainer.callback_metrics`` after fit and test.
    """
    if cfg.get("seed") is not None:
        L.seed_everything(int(cfg.seed), workers=True)
    torch.set_float32_matmul_precision("high")
    log.info("data <%s>", cfg.data._target_)
    datamodule: L.LightningDataModule = instantiate(cfg.data, _convert_="all")
    log.info("model <%s>", cfg.model._target_)
    model: L.LightningModule = instantiate(cfg.model, _convert_="all")
    callbacks = instantiate_list(cfg.get("callbacks"))
    loggers = instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, _convert_="all")
    for lg in loggers:
        lg.log_hyperparams({"cfg": to_container(cfg), "seed": cfg.get("seed")})

    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        trainer.fit(model=model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"), weights_only=True)
        metrics.update(_scalars(trainer.callback_metrics))
    if cfg.get("test", False):
        ckpt = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if not ckpt or trainer.fast_dev_run:
            log.warning("no best checkpoint found: testing the current weights")
            ckpt = None
        trainer.test(model=model, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)
        metrics.update(_scalars(trainer.callback_metrics))
    bad = [k for k, v in metrics.items() if not math.isfinite(v)]
    if bad:
        raise FloatingPointError(f"non-finite metrics after training: {bad}")
    return metrics, {"cfg": cfg, "datamodule": datamodule, "model": model, "trainer": trainer}


@hydra.main(version_base="1.3", config_path="../configs", config_name="train.yaml")
def main(cfg: DictConfig) -> float | None:
    log_config(cfg)
    metrics, _ = train(cfg)
    log.info("final metrics: %s", {k: round(v, 4) for k, v in sorted(metrics.items())})
    return metrics.get(cfg.get("optimized_metric", "val/acc"))


if __name__ == "__main__":
    main()
