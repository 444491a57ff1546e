"""The end of a run, as a user reads it: one Rich table on the console, ``metrics.json`` and ``summary.md`` in the run
folder (the numbers a script or a report reads without parsing TensorBoard event files).

Every CLI that ends a run (``src.train``, ``src.eval``) does the same two things: the library function writes the
files (:func:`write_summary`, so ``train(cfg)`` / ``evaluate(cfg)`` called from Python leave them too) and the CLI's
``main`` prints them once (:func:`show_summary`)."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .atomic_write import atomic_write_bytes

__all__ = ["SUMMARY_FILES", "format_value", "print_summary", "show_summary", "summary_markdown", "write_summary"]

log = logging.getLogger("repbench")

SUMMARY_FILES = ("metrics.json", "summary.md")
_STAGES = ("train", "val", "test")


def _stage(name: str) -> int:
    head = name.split("/", 1)[0]
    return _STAGES.index(head) if head in _STAGES else len(_STAGES)


def _ordered(metrics: Mapping[str, float]) -> list[tuple[str, float]]:
    return sorted(metrics.items(), key=lambda kv: (_stage(kv[0]), kv[0]))


def format_value(value: float) -> str:
    """Four significant digits for the tables (the files keep full precision)."""
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def summary_markdown(metrics: Mapping[str, float], info: Mapping[str, Any]) -> str:
    """``summary.md``: what ran (``info``: run folder, overrides, checkpoints, time) and a table of every metric."""
    lines = ["# Run summary", ""]
    for key, value in info.items():
        if value not in (None, "", [], {}):
            lines.append(f"- **{key}**: `{value}`")
    lines += ["", "| metric | value |", "| --- | --- |"]
    lines += [f"| `{k}` | {format_value(v)} |" for k, v in _ordered(metrics)]
    return "\n".join(lines) + "\n"


def write_summary(run_dir: str | os.PathLike, metrics: Mapping[str, float], info: Mapping[str, Any]) -> list[Path]:
    """Write ``metrics.json`` (``{"metrics": {...}, **info}``, full precision) and ``summary.md`` atomically."""
    folder = Path(run_dir)
    payload = {"metrics": dict(_ordered(metrics)), **{k: v for k, v in info.items()}}
    files = [folder / SUMMARY_FILES[0], folder / SUMMARY_FILES[1]]
    atomic_write_bytes((json.dumps(payload, indent=2, default=str) + "\n").encode(), files[0])
    atomic_write_bytes(summary_markdown(metrics, info).encode(), files[1])
    return files


def print_summary(metrics: Mapping[str, float], title: str = "RepBench run", caption: str = "") -> None:
    """One Rich table of every metric, grouped train / val / test (printed once, at the end of the run); ``caption``
    (a path, say) on its own line below it, never wrapped (a console that is not a terminal is 80 columns wide, and
    a table caption would break a path mid-word)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    previous = None
    for name, value in _ordered(metrics):
        stage = _stage(name)
        if previous is not None and stage != previous:
            table.add_section()
        previous = stage
        table.add_row(name, format_value(value))
    console = Console()
    console.print(table)
    if caption:
        console.print(caption, soft_wrap=True, highlight=False, markup=False)


def show_summary(metrics: Mapping[str, float], title: str, run_dir: str | os.PathLike | None = None) -> None:
    """The last thing every RepBench CLI that ends a run says: the :func:`print_summary` table and one line naming
    the files :func:`write_summary` wrote (``summary.md``, ``metrics.json``)."""
    from .console import short_path

    print_summary(metrics, title=title)
    if run_dir is None:
        log.info("no run folder: summary.md and metrics.json not written")
        return
    log.info("%s and %s in %s", SUMMARY_FILES[1], SUMMARY_FILES[0], short_path(run_dir))
