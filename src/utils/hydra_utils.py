"""Hydra plumbing shared by the entry points (train, eval, synbench)."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["instantiate_list", "log_config", "to_container"]

log = logging.getLogger("repbench")


def to_container(cfg: Any) -> Any:
    """Plain dicts/lists (checkpoint hparams must be loadable with ``weights_only=True``)."""
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def instantiate_list(cfg: DictConfig | None) -> list[Any]:
    """Instantiate every ``_target_`` entry of a config group mapping (callbacks, loggers)."""
    from hydra.utils import instantiate

    if not cfg:
        return []
    if not isinstance(cfg, DictConfig):
        raise TypeError(f"expected a mapping of {{name: {{_target_: ...}}}}, got {type(cfg).__name__}")
    return [instantiate(c, _convert_="all") for c in cfg.values() if isinstance(c, DictConfig) and "_target_" in c]


def log_config(cfg: DictConfig) -> None:
    log.info("config:\n%s", OmegaConf.to_yaml(cfg, resolve=True))
