"""The sweeps' Optuna storage: one SQLite file per study, at a fixed path, so a killed sweep resumes from it."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

__all__ = ["register_resolvers", "sqlite_url"]


def sqlite_url(path: str) -> str:
    """``sqlite:////abs/path/study.db`` for ``path``, creating its folder (SQLite does not create folders, and
    Hydra's Optuna sweeper opens the study before any run folder exists)."""
    if not isinstance(path, str) or not path.endswith(".db"):
        raise ValueError(f"repbench_sqlite: expected a file path ending in .db, got {path!r}")
    file = Path(path).expanduser().resolve()
    file.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{file}"


def register_resolvers() -> None:
    """``${repbench_sqlite:<path>.db}`` for configs (hparams_search/*.yaml: ``hydra.sweeper.storage``)."""
    if not OmegaConf.has_resolver("repbench_sqlite"):
        OmegaConf.register_new_resolver("repbench_sqlite", sqlite_url, use_cache=True)


register_resolvers()
