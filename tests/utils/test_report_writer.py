"""The one report writer of the three methods (src.utils.report_writer.Report)."""

from __future__ import annotations

import csv
import json
import math

import pytest

from src.utils.report_writer import Report, csv_text, json_safe


def test_json_safe_writes_undefined_values_as_null() -> None:
    data = {"a": math.nan, "b": (1.0, math.inf), 3: {"c": -math.inf, "d": 2}}
    assert json_safe(data) == {"a": None, "b": [1.0, None], "3": {"c": None, "d": 2}}


def test_csv_default_columns_are_scalar_keys_in_first_seen_order() -> None:
    rows = [{"backbone": "x", "score": 0.5, "curve": [1, 2]}, {"backbone": "y", "extra": None, "score": 0.25}]
    text = csv_text(rows)
    assert text.splitlines()[0] == "backbone,score,extra"  # the list column belongs in the JSON only
    assert list(csv.DictReader(text.splitlines()))[1] == {"backbone": "y", "score": "0.25", "extra": ""}


def test_report_write_files(tmp_path) -> None:
    from matplotlib.figure import Figure

    def figures():
        fig = Figure()
        fig.add_subplot().plot([0, 1], [1, 0])
        return {"line.png": fig}

    rep = Report(
        method="demo",
        rows=[{"backbone": "a", "v": 1.5}],
        markdown="| backbone | v |\n",
        data={"a": {"v": 1.5, "undefined": math.nan}},
        tables={"per_image.csv": [{"image": 0, "v": 2.0}]},
        figures=figures,
        columns=("backbone", "v"),
    )
    paths = rep.write(tmp_path / "out")
    assert set(paths) == {"md", "csv", "json", "per_image.csv", "line.png"}
    assert (tmp_path / "out" / "demo.md").read_text() == rep.markdown
    assert json.loads((tmp_path / "out" / "demo.json").read_text()) == {"a": {"v": 1.5, "undefined": None}}
    assert (tmp_path / "out" / "demo.csv").read_text() == "backbone,v\na,1.5\n"
    assert (tmp_path / "out" / "per_image.csv").read_text() == "image,v\n0,2.0\n"
    assert (tmp_path / "out" / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no temporary files left


def test_report_write_keeps_previous_file_when_the_disk_is_full(tmp_path, monkeypatch) -> None:
    rep = Report(method="demo", rows=[{"backbone": "a"}], markdown="first\n", data={})
    rep.write(tmp_path)
    import src.utils.atomic_write as cio

    real = cio.os.fsync

    def full(fd):  # the write of the new content fails like ENOSPC
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cio.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        Report(method="demo", rows=[{"backbone": "b"}], markdown="second\n", data={}).write(tmp_path)
    monkeypatch.setattr(cio.os, "fsync", real)
    assert (tmp_path / "demo.md").read_text() == "first\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
