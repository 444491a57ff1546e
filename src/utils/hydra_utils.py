"""Hydra plumbing shared by the entry points (train, eval, synbench)."""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = [
    "instantiate_list",
    "job_name",
    "log_config",
    "register_resolvers",
    "run_name",
    "to_container",
    "with_run_seed",
]

log = logging.getLogger("repbench")

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_OVERRIDES_CHARS = 96  # file names stay far below the usual 255-byte limit


def _overrides_part(override_dirname: str) -> str:
    """``model.epsilon-0.25_data-photos`` from Hydra's override_dirname (configs/hydra/default.yaml sets its
    separators); characters a shell or Hydra's override parser would trip on become ``-``; long ones are cut and
    end in a hash of the whole, so two long override sets never share a name."""
    safe = _UNSAFE.sub("-", str(override_dirname or "")).strip("-_")
    if len(safe) > MAX_OVERRIDES_CHARS:
        digest = hashlib.sha1(safe.encode()).hexdigest()[:8]
        safe = f"{safe[: MAX_OVERRIDES_CHARS - 9]}-{digest}"
    return safe


def run_name(override_dirname: str = "") -> str:
    """A run folder name: ``<YYYY-mm-dd_HH-MM-SS>_<6 random hex>[_<overrides>]``.

    The random part keeps two runs started in the same second (job arrays, parallel launches, also on several hosts
    sharing one file system) in two folders: two such runs collide with probability 2^-24 (6e-8), and a collision
    that still happens is refused by the run-folder lock while the first run lives (``src.utils.run_dir``); the
    overrides part says what the run changed. Registered as the OmegaConf resolver ``repbench_run_name`` with
    caching, so every job of one multirun shares its sweep folder (Hydra copies the master config's cache)."""
    stamp = f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{secrets.token_hex(3)}"
    part = _overrides_part(override_dirname)
    return f"{stamp}_{part}" if part else stamp


def job_name(num: Any, override_dirname: str = "") -> str:
    """A multirun job's subfolder: ``<job number>[_<overrides>]`` (resolver ``repbench_job_name``)."""
    part = _overrides_part(override_dirname)
    return f"{num}_{part}" if part else str(num)


def register_resolvers() -> None:
    """Register the resolvers configs/hydra/default.yaml uses (idempotent; every entry point imports this module)."""
    if not OmegaConf.has_resolver("repbench_run_name"):
        OmegaConf.register_new_resolver("repbench_run_name", run_name, use_cache=True)
    if not OmegaConf.has_resolver("repbench_job_name"):
        OmegaConf.register_new_resolver("repbench_job_name", job_name, use_cache=True)


register_resolvers()


def to_container(cfg: Any) -> Any:
    """Plain dicts/lists (checkpoint hparams must be loadable with ``weights_only=True``)."""
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def with_run_seed(block: Mapping[str, Any] | None, cfg: Any) -> dict[str, Any]:
    """A method block (its plain fields) with the run's ``seed`` (configs/run_options/default.yaml, shared by the
    comparison CLIs; checked: an integer >= 0) where the block leaves its own ``seed`` null or unset."""
    from .checks import check_int

    out = dict(block or {})
    seed = cfg.get("seed") if cfg is not None else None
    if out.get("seed") is None and seed is not None:
        out["seed"] = check_int(seed, "seed", 0)
    return out


def instantiate_list(cfg: DictConfig | None) -> list[Any]:
    """Instantiate every ``_target_`` entry of a config group mapping (callbacks, loggers)."""
    from hydra.utils import instantiate

    if not cfg:
        return []
    if not isinstance(cfg, DictConfig):
        raise TypeError(f"expected a mapping of {{name: {{_target_: ...}}}}, got {type(cfg).__name__}")
    return [instantiate(c, _convert_="all") for c in cfg.values() if isinstance(c, DictConfig) and "_target_" in c]


def log_config(cfg: DictConfig) -> None:
    """What a CLI says about its config: one line on the console, the resolved YAML in the run's log file
    (:func:`src.utils.console.announce_run`; the whole YAML on the console was ~130 lines)."""
    from .console import announce_run

    announce_run(cfg)
