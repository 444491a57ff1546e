"""What a RepBench command line prints: its own lines, not third-party noise (issue 25).

* :func:`quiet_cli` silences, for the duration of one CLI call only, what a user cannot act on: third-party
  advertisements (Lightning's "💡 Tip: ... litlogger / litmodels") and deprecation warnings that fire inside other
  libraries (:data:`HARMLESS_WARNINGS`). It is installed by the CLI entry points (``src.train``, ``src.eval``, ...)
  around their work and restores every filter on exit: importing RepBench, or calling ``train(cfg)`` from a notebook,
  changes no warning filter and no logger.
* :func:`announce_run` is the first thing a CLI says, before any slow step: what runs, where it writes, and where the
  full resolved config is (the run's log file and ``.hydra/config.yaml``) instead of ~130 lines of YAML on the
  console.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ADVERTISEMENT_PREFIXES",
    "HARMLESS_WARNINGS",
    "announce_run",
    "config_summary",
    "ignore_worker_advice",
    "log_config_to_files",
    "quiet_cli",
    "short_path",
    "task_overrides",
]

log = logging.getLogger("repbench")

#: (message regex, category): warnings raised inside third-party code that a RepBench user can neither fix nor act on
HARMLESS_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    # torch >= 2.14 deprecates LeafSpec; lightning 2.6's utilities/_pytree.py still checks isinstance(x, LeafSpec) on
    # every fit / test (one FutureWarning per stage)
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
)

#: Lightning logs these through its rank-zero logger on every Trainer (a product advertisement, not about the run)
ADVERTISEMENT_PREFIXES = ("💡 Tip:",)

#: the loggers Lightning's ``rank_zero_info`` writes through (fabric's, then pytorch's once lightning.pytorch loads)
_LIGHTNING_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


#: packages that log their model-building steps at INFO through the root logger (open_clip: "Parsing model identifier",
#: "Loaded built-in ... config", ... six lines per model built); their warnings still show
CHATTY_PACKAGES = ("open_clip",)


class _DropChatter(logging.Filter):
    """Drop the root logger's below-WARNING records emitted from a :data:`CHATTY_PACKAGES` module."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        path = record.pathname.replace("\\", "/")
        return not any(f"/{pkg}/" in path for pkg in CHATTY_PACKAGES)


class _DropAdvertisements(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is not ours to judge
            return True
        return not message.lstrip().startswith(ADVERTISEMENT_PREFIXES)


class _QuietCli(contextlib.ContextDecorator):
    """:func:`quiet_cli`'s context manager. A class, not a ``@contextmanager`` generator: a CLI's ``main`` decorated
    with it is pickled by the process launchers (``hydra/launcher=joblib``, ``submitit_slurm``: cloudpickle, by value
    for a ``python -m`` module's ``main``), and a generator cannot be pickled. State lives only while inside (a stack,
    so a nested use restores its own)."""

    def __init__(self) -> None:
        self._inside: list[tuple[Any, list[tuple[logging.Logger, logging.Filter]]]] = []

    def __enter__(self) -> None:
        drop, chatter = _DropAdvertisements(), _DropChatter()
        filters = [(logging.getLogger(name), drop) for name in _LIGHTNING_LOGGERS] + [(logging.getLogger(), chatter)]
        caught = warnings.catch_warnings()
        caught.__enter__()
        for message, category in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        for lg, f in filters:
            lg.addFilter(f)
        self._inside.append((caught, filters))

    def __exit__(self, *exc: Any) -> None:
        caught, filters = self._inside.pop()
        for lg, f in filters:
            lg.removeFilter(f)
        caught.__exit__(*exc)

    def __getstate__(self) -> dict[str, Any]:
        return {"_inside": []}  # what a launcher pickles is the decorator, never a call in progress


def quiet_cli() -> _QuietCli:
    """Inside: :data:`HARMLESS_WARNINGS` ignored, Lightning's advertisements and the INFO build steps of
    :data:`CHATTY_PACKAGES` (open_clip) dropped; on exit everything is as before (``warnings.catch_warnings`` restores the filters; the log filter is removed). Usable as a decorator
    (``@quiet_cli()``; picklable, so a decorated ``main`` runs under Hydra's process launchers). Every other warning,
    and every other Lightning message, still shows."""
    return _QuietCli()


def ignore_worker_advice(datamodule: Any) -> bool:
    """Call inside a ``warnings.catch_warnings()`` block around a fit / test: ignore Lightning's "does not have many
    workers" advice when ``datamodule`` loads in-process on purpose (``num_workers == 0`` in its config, as RepBench's
    bundled data sets do: tensors already in memory, where worker processes only add start-up time). Lightning gives
    it on any machine with more than two cores, once per loader. Returns whether the filter was installed (a data
    module with workers keeps the advice)."""
    if getattr(datamodule, "num_workers", None) != 0:
        return False
    warnings.filterwarnings("ignore", message=r".*does not have many workers which may be a bottleneck.*")
    return True


def short_path(path: str | os.PathLike) -> str:
    """``path`` relative to the current directory when it lies below it, else as given (console lines stay short)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)


def _short_target(node: Any) -> str | None:
    target = node.get("_target_") if isinstance(node, Mapping) else None
    return str(target).rpartition(".")[2] if target else None


def config_summary(cfg: Mapping[str, Any]) -> str:
    """One line of what a composed config runs: ``RobustLinearProbe · backbone timm:x · DigitsDataModule 16 px ·
    1 epoch · seed 0`` (the parts the config has; ``ckpt_path`` for an evaluation, ``backbones`` for a comparison)."""
    parts: list[str] = []
    model = _short_target(cfg.get("model"))
    if model and cfg.get("task_name") != "eval":  # src.eval rebuilds the checkpoint's model, not cfg.model
        parts.append(model)
    backbone = cfg.get("backbone")
    if isinstance(backbone, Mapping) and backbone.get("name") and cfg.get("task_name") != "eval":
        parts.append(f"backbone {backbone['name']}")
    backbones = cfg.get("backbones")
    if isinstance(backbones, (list, tuple)) and backbones:
        names = [b.get("name", "?") if isinstance(b, Mapping) else str(b) for b in backbones]
        parts.append("backbones " + ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else ""))
    data = cfg.get("data")
    data_name = _short_target(data)
    if data_name:
        size = data.get("image_size")
        parts.append(f"{data_name} {size} px" if size else data_name)
    if cfg.get("ckpt_path"):
        parts.append(f"checkpoint {short_path(str(cfg['ckpt_path']))}")
    trainer = cfg.get("trainer")
    if isinstance(trainer, Mapping) and cfg.get("train", cfg.get("task_name") == "train"):
        epochs = trainer.get("max_epochs")
        if isinstance(epochs, int) and epochs > 0:
            parts.append(f"{epochs} epoch" + ("s" if epochs != 1 else ""))
    if cfg.get("seed") is not None:
        parts.append(f"seed {cfg['seed']}")
    return " · ".join(parts)


def log_config_to_files(text: str, logger: logging.Logger = log) -> int:
    """Write ``text`` (the resolved config) to the log *files* only (Hydra's ``<task_name>.log`` in the run folder),
    not to the console; returns how many file handlers got it."""
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, "resolved config:\n%s", (text,), None)
    handlers: dict[logging.Handler, None] = {}
    node: logging.Logger | None = logger
    while node is not None:  # the handlers a record of `logger` reaches (as Logger.callHandlers walks them)
        handlers.update(
            (h, None) for h in node.handlers if isinstance(h, logging.FileHandler) and h.level <= logging.INFO
        )
        node = node.parent if node.propagate else None
    for h in handlers:
        h.handle(record)
    return len(handlers)


def task_overrides() -> list[str]:
    """The command line's overrides of this Hydra job (``hydra.overrides.task``; a sweep's own values included), []
    outside Hydra (tests, notebooks)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError):  # not started by Hydra
        return []


def announce_run(cfg: Any) -> None:
    """The first lines of a CLI run, said before any slow step (building data, a model, a backbone): the task, the
    run folder, what runs (:func:`config_summary`, the command-line overrides) and where the resolved config is
    (the log file, ``.hydra/config.yaml``; ``--cfg job --resolve`` prints it). The resolved config itself goes to the
    run's log file only."""
    from omegaconf import DictConfig, OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    task = plain.get("task_name") or "run"
    out = (plain.get("paths") or {}).get("output_dir")
    where = [f"{task}.log"] if log_config_to_files(OmegaConf.to_yaml(plain) if plain else "{}") else []
    where.append(".hydra/")
    log.info(
        "RepBench %s → %s (full config: %s; print it: --cfg job --resolve)",
        task, short_path(out) if out else "no run folder", " and ".join(where),
    )  # fmt: skip
    overrides = [o for o in task_overrides() if not o.startswith("ckpt_path=")]  # the summary names the checkpoint
    summary = config_summary(plain)
    if overrides:
        summary += (" · " if summary else "") + "overrides: " + " ".join(overrides)
    if summary:
        log.info("%s", summary)
