"""Ground truth measured elsewhere: ``downstream.external=<csv>`` of ``python -m src.report``, a CSV with the columns
``backbone``, ``task`` and ``accuracy`` (one row per backbone and task; other columns are ignored), e.g. the
literature's linear-probe accuracies on 27 tasks (CLIP, Radford et al., arXiv:2103.00020, Table 10) that the
SynBench paper correlates its scores with (Ko et al., ICML 2024, arXiv:2210.02989, Fig. 4 / Table 7).

Each task becomes a ground-truth column ``<task>/external`` of the report, and with two tasks or more their mean
``average/external`` (over the backbones that have every task) comes first: the report's primary column, by which
rows are sorted and verdicts are read. A backbone is matched by its report label exactly (the ``backbones`` entry's
name, e.g. ``timm:vit_base_patch16_224.augreg_in21k_ft_in1k``); rows of backbones not in the report are ignored and a
report backbone without rows has no value there — the page says which. Accuracies are used as given (fractions or
percent: the rank agreement does not care; Pearson's r neither).

Bundled tables (:data:`BUNDLED`, ``downstream.external=<name>``): ``synbench_paper_27_tasks`` — the mean linear-probe
accuracy over the 27 tasks of the SynBench paper's Table 7 (ViT-B/16, ViT-L/16, ViT-B/32 under the labels of
``report_preset=synbench_paper``; the two SimCLRv2 ResNets under ``timm:resnet50`` / ``timm:resnet101``, the labels
they get when added with ``checkpoint_path`` of converted weights, docs/report.md)."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ExternalTruth", "load_external", "external_path", "AVERAGE", "BUNDLED", "SUFFIX"]

#: the column suffix of an external task (``<task>/external``) and the name of the mean over tasks
SUFFIX = "external"
AVERAGE = "average"
_REQUIRED = ("backbone", "task", "accuracy")
_DATA = Path(__file__).parent / "data"
#: the tables shipped with RepBench, by name (``downstream.external=<name>``)
BUNDLED = {p.stem: p for p in sorted(_DATA.glob("*.csv"))}


def external_path(value: str | Path) -> Path:
    """The CSV of ``downstream.external``: a bundled table's name (:data:`BUNDLED`), else a path."""
    return BUNDLED.get(str(value), Path(value))


@dataclass(frozen=True)
class ExternalTruth:
    """The external ground truth of a report: ``values`` {label: {column: accuracy}} (columns in order: the average
    first, then the tasks as the file lists them), the file, the backbones of the file not in the report
    (``unmatched``) and the report's backbones without a row (``missing``)."""

    path: str
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    columns: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    def note(self) -> str:
        """One sentence for the page: where the ground truth comes from and which backbones it lacks."""
        tasks = [c for c in self.columns if not c.startswith(AVERAGE + "/")]
        text = f"External ground truth from {Path(self.path).name}: {len(tasks)} task(s)"
        if len(tasks) > 1:
            text += f", {AVERAGE}/{SUFFIX} = their mean (first column)"
        if self.missing:
            text += f"; no accuracy for {', '.join(self.missing)} (left out of its agreement)"
        if self.unmatched:
            text += f"; rows of backbones not in this report ignored: {', '.join(self.unmatched)}"
        return text + "."


def _fail(path: Path, what: str) -> ValueError:
    return ValueError(
        f"downstream.external={path}: {what}. The file is a CSV with the header backbone,task,accuracy and one row "
        "per backbone and task, e.g. 'timm:vit_base_patch16_224,cifar10,0.95'"
    )


def load_external(path: str | Path, labels: Sequence[str]) -> ExternalTruth:
    """Read and check the CSV at ``path`` (or the bundled table of that name) against the report's backbone ``labels`` (module docstring): a
    FileNotFoundError / ValueError naming the file, the line and the fix for a missing file, a missing column, a
    blank or non-finite accuracy, a repeated (backbone, task), a task named ``average`` next to others, or a file
    that matches none of the labels — before any backbone is computed."""
    path = external_path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"downstream.external={path}: no such file; pass the path of a CSV with the columns backbone,task,accuracy, "
            f"a bundled table ({', '.join(BUNDLED)}), or downstream.external=null"
        )
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        absent = [c for c in _REQUIRED if c not in header]
        if absent:
            raise _fail(path, f"the header {header} lacks {absent}")
        reader.fieldnames = header
        table: dict[str, dict[str, float]] = {}
        tasks: list[str] = []
        for line, row in enumerate(reader, start=2):
            name, task, raw = (str(row.get(k) or "").strip() for k in _REQUIRED)
            if not name or not task:
                raise _fail(path, f"line {line} has an empty backbone or task")
            try:
                value = float(raw)
            except ValueError:
                raise _fail(path, f"line {line}: accuracy {raw!r} is not a number") from None
            if not math.isfinite(value):
                raise _fail(path, f"line {line}: accuracy {raw!r} is not finite")
            if task in table.get(name, {}):
                raise _fail(path, f"line {line} repeats backbone {name!r}, task {task!r}")
            table.setdefault(name, {})[task] = value
            if task not in tasks:
                tasks.append(task)
    if not table:
        raise _fail(path, "it has no rows")
    if AVERAGE in tasks and len(tasks) > 1:
        raise _fail(path, f"a task is named {AVERAGE!r}, the name of the mean over tasks; rename it")
    matched = [lab for lab in labels if lab in table]
    if not matched:
        raise _fail(
            path,
            f"none of its backbones {sorted(table)[:8]} is a backbone of this report {list(labels)[:8]}; the backbone "
            "column holds the report's labels exactly",
        )
    columns = ([f"{AVERAGE}/{SUFFIX}"] if len(tasks) > 1 else []) + [f"{t}/{SUFFIX}" for t in tasks]
    values: dict[str, dict[str, float]] = {}
    for lab in matched:
        accs = table[lab]
        out = {}
        if len(tasks) > 1 and all(t in accs for t in tasks):
            out[f"{AVERAGE}/{SUFFIX}"] = sum(accs[t] for t in tasks) / len(tasks)
        out.update({f"{t}/{SUFFIX}": accs[t] for t in tasks if t in accs})
        values[lab] = out
    return ExternalTruth(
        str(path),
        values,
        tuple(columns),
        tuple(sorted(set(table) - set(labels))),
        tuple(lab for lab in labels if lab not in table),
    )
