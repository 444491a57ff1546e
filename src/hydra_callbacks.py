"""Hydra callbacks (``hydra.callbacks`` in an experiment config): entry-point pieces beside ``train.py``, so that the
method cores hold no Hydra code.

``TaskPriorTableCallback``: at the end of a run or multirun of ``python -m src.train experiment=task_prior``, the
table of the ``task_prior_row.json`` files under its directory (Task Priors, Patel & Balestriero, arXiv:2507.09871),
written as ``task_prior.{csv,md,json}`` by :func:`src.task_prior.report.write_table`.
"""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback

from .task_prior.report import collect_rows, write_table

__all__ = ["TaskPriorTableCallback"]

log = logging.getLogger("repbench")


class TaskPriorTableCallback(Callback):
    """``hydra.callbacks``: write ``task_prior.{csv,md,json}`` into the run (or sweep) directory at its end (nothing
    when no job wrote a row)."""

    def _write(self, directory: str) -> None:
        rows = collect_rows(directory)
        if rows:
            paths = write_table(rows, directory)
            log.info("Task-Prior table (%d backbones):\n%s", len(rows), paths["md"].read_text())

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        self._write(config.hydra.runtime.output_dir)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        self._write(config.hydra.sweep.dir)
