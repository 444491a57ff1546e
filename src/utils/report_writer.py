"""The one report shape of the three methods: every ``compare_backbones`` returns a :class:`Report` and every CLI
writes it with :meth:`Report.write` — ``<method>.md`` (the human table), ``<method>.csv`` (one flat row per
backbone, or per backbone × setting), ``<method>.json`` (everything, re-loadable), extra CSV tables and the figures
(PNG). Files are written atomically (a full disk leaves the previous file or none, never a truncated one)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic_write import atomic_write_bytes

__all__ = ["Report", "csv_text", "json_safe"]


def json_safe(value: Any) -> Any:
    """``value`` with NaN/±inf floats as None (JSON has neither; None = undefined), mappings as dicts with string
    keys, tuples as lists — recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """CSV of ``rows``: ``columns`` (default: every key, in order of first appearance); nested values (lists,
    mappings) are left out of the default columns — they belong in the JSON."""
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows:
            for k, v in r.items():
                if not isinstance(v, (list, tuple, Mapping)):
                    seen.setdefault(k, None)
        columns = list(seen)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    return buf.getvalue()


@dataclass
class Report:
    """One method's comparison of backbones.

    method: the file stem (``synbench`` | ``divergence_radius`` | ``task_prior``).
    rows: the main table, one flat dict per row (its first column names the backbone).
    markdown: the human-readable table(s) (logged by the CLIs, written as ``<method>.md``).
    data: the JSON payload (``<method>.json``); NaN/inf are written as null.
    results: the method's own result object per backbone label (e.g. :class:`~src.synbench.SynBenchResult`).
    tables: extra CSV tables ``{file name: rows}`` (e.g. per-image values).
    figures: a function returning ``{file name: matplotlib Figure}`` (called only by :meth:`write` / on demand).
    columns: the CSV columns of ``rows`` (default: every scalar key).
    """

    method: str
    rows: list[dict[str, Any]]
    markdown: str
    data: dict[str, Any]
    results: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    figures: Callable[[], dict[str, Any]] | None = None
    columns: Sequence[str] | None = None

    def write(self, out_dir: str | Path, *, figures: bool = True, dpi: int = 120) -> dict[str, Path]:
        """Write every file into ``out_dir`` (created); returns {kind or file name: path}."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {
            "md": out / f"{self.method}.md",
            "csv": out / f"{self.method}.csv",
            "json": out / f"{self.method}.json",
        }
        atomic_write_bytes(self.markdown.encode(), paths["md"])
        atomic_write_bytes(csv_text(self.rows, self.columns).encode(), paths["csv"])
        atomic_write_bytes((json.dumps(json_safe(self.data), indent=1) + "\n").encode(), paths["json"])
        for name, rows in self.tables.items():
            paths[name] = out / name
            atomic_write_bytes(csv_text(rows).encode(), paths[name])
        if figures and self.figures is not None:
            import matplotlib.pyplot as plt

            for name, fig in self.figures().items():
                buf = io.BytesIO()
                fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
                plt.close(fig)
                paths[name] = out / name
                atomic_write_bytes(buf.getvalue(), paths[name])
        return paths
