"""A self-contained HTML page (no network needed to view it: CSS inline, figures as base64 PNG data URIs) from
tables and matplotlib figures, and the matching Markdown table."""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "best_rows",
    "figure_html",
    "format_value",
    "markdown_table",
    "page",
    "page_table_html",
    "table_html",
    "transposed_table_html",
]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}th,td{border:1px solid #ccc;padding:.25em .5em;
text-align:left}th{background:#f3f3f3}td.num{text-align:right}td.best{font-weight:bold;
background:#e6f4e6}figure{display:inline-block;margin:.5em}figcaption{font-size:.8em;color:#555;max-width:560px}
.note{color:#555;font-size:.9em}.wide{overflow-x:auto;max-width:100%}code{background:#f6f6f6;padding:0 .2em}
tbody th{text-align:left;font-weight:normal}thead th{max-width:11em;overflow-wrap:anywhere}
img{max-width:100%;height:auto}
@media print{body{max-width:none;margin:0}.wide{overflow:visible}figure{break-inside:avoid}}
"""


def format_value(v: Any) -> str:
    """Numbers to 4 significant digits (3 decimals for values in [0.001, 10)), None/NaN as "n/a"."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4):
            return f"{v:.3e}"
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def best_rows(
    rows: Sequence[Mapping[str, Any]], directions: Mapping[str, bool | None], exclude: Sequence[int] = ()
) -> dict[str, set[int]]:
    """{column: indices of the best rows}: the max where higher is better (True), the min where lower is (False);
    no mark for columns with direction None or fewer than 2 defined values. Rows in ``exclude`` (controls) and
    non-numeric cells (a censored "> x") are never best."""
    out: dict[str, set[int]] = {}
    for col, higher in directions.items():
        if higher is None:
            continue
        vals = [(i, r.get(col)) for i, r in enumerate(rows) if i not in exclude]
        vals = [(i, float(v)) for i, v in vals if isinstance(v, (int, float)) and math.isfinite(float(v))]
        if len(vals) < 2:
            continue
        target = max(v for _, v in vals) if higher else min(v for _, v in vals)
        out[col] = {i for i, v in vals if v == target}
    return out


def _cell(v: Any, best: bool) -> str:
    """One ``<td>``: numbers right-aligned (class ``num``), the best value of its column or row marked (``best``)."""
    classes = (["num"] if isinstance(v, (int, float)) and not isinstance(v, bool) else []) + (["best"] if best else [])
    cls = f' class="{" ".join(classes)}"' if classes else ""
    return f"<td{cls}>{html.escape(format_value(v))}</td>"


def table_html(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    directions: Mapping[str, bool | None] | None = None,
    exclude: Sequence[int] = (),
) -> str:
    """An HTML table of ``columns``; the best value of each column with a direction is marked (class ``best``), rows
    in ``exclude`` left out of "best"."""
    best = best_rows(rows, directions or {}, exclude)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for i, r in enumerate(rows):
        body.append("<tr>" + "".join(_cell(r.get(c), i in best.get(c, ())) for c in columns) + "</tr>")
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


#: the most columns a page table shows as given; a wider table is transposed so the page fits a 1280-px window and
#: prints whole (a 1200-px body, ~100 px per numeric column at 0.85 em)
MAX_PAGE_COLUMNS = 10


def transposed_table_html(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    directions: Mapping[str, bool | None] | None = None,
    exclude: Sequence[int] = (),
) -> str:
    """The table of :func:`table_html` turned on its side: one row per column (after the first), one column per row
    (headed by the row's first cell, e.g. the backbone), the best value of each row marked."""
    best = best_rows(rows, directions or {}, exclude)
    key = columns[0]
    head = f"<th>{html.escape(key)}</th>" + "".join(f"<th>{html.escape(str(r.get(key)))}</th>" for r in rows)
    body = []
    for c in columns[1:]:
        cells = "".join(_cell(r.get(c), i in best.get(c, ())) for i, r in enumerate(rows))
        body.append(f"<tr><th>{html.escape(c)}</th>{cells}</tr>")
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def page_table_html(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    directions: Mapping[str, bool | None] | None = None,
    exclude: Sequence[int] = (),
) -> str:
    """:func:`table_html`, transposed when it has more than :data:`MAX_PAGE_COLUMNS` columns and fewer rows."""
    if len(columns) > MAX_PAGE_COLUMNS and len(rows) < len(columns):
        return transposed_table_html(rows, columns, directions, exclude)
    return table_html(rows, columns, directions, exclude)


def markdown_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    directions: Mapping[str, bool | None] | None = None,
    exclude: Sequence[int] = (),
) -> str:
    """The same table in Markdown, the best value of each column in bold (rows in ``exclude`` never)."""
    best = best_rows(rows, directions or {}, exclude)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for i, r in enumerate(rows):
        cells = []
        for c in columns:
            text = format_value(r.get(c)).replace("|", "\\|")
            cells.append(f"**{text}**" if i in best.get(c, ()) else text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figure_html(fig: Any, caption: str = "", dpi: int = 100) -> str:
    """A matplotlib figure as an inline PNG (base64 data URI) with a caption; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">{cap}</figure>'


def page(title: str, sections: Sequence[tuple[str, str]], intro: str = "") -> str:
    """The whole page: a title, an intro paragraph (plain text, escaped) and ``(heading, inner HTML)`` sections."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if intro:
        parts.append(f'<p class="note">{html.escape(intro)}</p>')
    for heading, inner in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>{inner}")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
