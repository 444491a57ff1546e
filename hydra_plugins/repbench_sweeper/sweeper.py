"""The Hydra plugin class (found by Hydra's plugin scan); the work is in :mod:`._impl`, imported on use (optuna)."""

from __future__ import annotations

from typing import Any

from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

__all__ = ["RepBenchOptunaSweeper"]


class RepBenchOptunaSweeper(OptunaSweeper):
    """Hydra's OptunaSweeper with :class:`._impl.RepBenchOptunaSweeperImpl` doing the sweep; same arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from ._impl import RepBenchOptunaSweeperImpl

        self.sweeper = RepBenchOptunaSweeperImpl(*args, **kwargs)
