"""The report's self-contained HTML and Markdown tables (src.report.html)."""

from __future__ import annotations

import base64
import math
import re

from src.report.html import best_rows, figure_html, format_value, markdown_table, page, table_html

ROWS = [{"backbone": "a", "score": 0.5, "loss": 2.0}, {"backbone": "b<x>", "score": 0.7, "loss": math.nan}]


def test_best_marks_follow_each_columns_direction() -> None:
    assert best_rows(ROWS, {"score": True, "loss": False, "backbone": None}) == {"score": {1}}  # loss: 1 defined value
    rows = ROWS + [{"backbone": "c", "score": 0.7, "loss": 1.0}]
    assert best_rows(rows, {"score": True, "loss": False}) == {"score": {1, 2}, "loss": {2}}  # ties all marked


def test_tables_escape_and_mark() -> None:
    t = table_html(ROWS, ["backbone", "score", "loss"], {"score": True})
    assert "b&lt;x&gt;" in t and '<td class="num best">0.700</td>' in t and '<td class="num">n/a</td>' in t
    md = markdown_table(ROWS, ["backbone", "score"], {"score": True})
    assert md.splitlines()[3] == "| b<x> | **0.700** |"
    assert format_value(12345.0) == "1.234e+04" and format_value(None) == "n/a" and format_value(3) == "3"


def test_page_embeds_figures_without_network_references() -> None:
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().plot([0, 1])
    doc = page("Audit", [("Figures", figure_html(fig, "a line"))], intro="x < y")
    assert "x &lt; y" in doc and "<figcaption>a line</figcaption>" in doc
    data = re.search(r'src="data:image/png;base64,([^"]+)"', doc).group(1)
    assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r'(src|href)="(https?:)?//', doc)  # nothing to fetch
