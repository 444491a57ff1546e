"""The page decides (issue 27, item 1, first part): the ground truth leftmost and rows best-first by it; the
random-weight controls marked, never "best", and a line saying where they win; lower bounds shown as "> x", never
best, left out of the rank agreement with the reason shown; no verdict for a column without a direction; verdict
lines at the top. A hand-made AuditResults (5 backbones, the baselines and one downstream set) drives it."""

from __future__ import annotations

from src.report.audit import AuditConfig, AuditResults
from src.report.render import NO_DIRECTION, audit_report

ACC = {"a": 0.70, "b": 0.90, "c": 0.80, "d": 0.60, "ctrl": 0.10}
#: logme agrees with the accuracy; rankme is best on the control; alpha_req has no direction; sdl@1 is censored on two
VALUES = {
    "a": {"logme": 0.3, "rankme": 3.0, "alpha_req": 1.1, "sdl@1": 40.0},
    "b": {"logme": 0.5, "rankme": 5.0, "alpha_req": 0.9, "sdl@1": 20.0},
    "c": {"logme": 0.4, "rankme": 4.0, "alpha_req": 1.3, "sdl@1": 30.0},
    "d": {"logme": 0.2, "rankme": 2.0, "alpha_req": 0.7, "sdl@1": 64.0},
    "ctrl": {"logme": 0.1, "rankme": 9.0, "alpha_req": 2.0, "sdl@1": 64.0},
}
CENSORED = {"d", "ctrl"}


def _results() -> AuditResults:
    labels = list(VALUES)
    values = {
        lab: {
            "baselines": {"values": VALUES[lab], "seconds": {}, "lower_bounds": ["sdl@1"] if lab in CENSORED else [],
                          "errors": {}},
            "downstream": {"toy": {"clean_acc": ACC[lab]}},
        }
        for lab in labels
    }  # fmt: skip
    seconds = {lab: {"baselines": 0.1, "downstream": 0.1} for lab in labels}
    cached = {lab: {"baselines": False, "downstream": False} for lab in labels}
    cfg = AuditConfig(parts=("baselines", "downstream"), baselines=("logme", "rankme", "alpha_req", "sdl"))
    return AuditResults(cfg, labels, values, seconds, cached, ["toy"], controls=["ctrl"])


def test_ground_truth_first_rows_sorted_controls_marked_and_never_best() -> None:
    report, html = audit_report(_results(), n_boot=200)
    ranking = report.markdown.split("## Ranking")[1].split("##")[0]
    header, _, *lines = [line for line in ranking.splitlines() if line.startswith("|")]
    assert header.split("|")[1:4] == [" backbone ", " toy/clean_acc ", " logme "]  # the ground truth leftmost
    assert [line.split("|")[1].strip() for line in lines] == ["b", "c", "a", "d", "ctrl (control)"]  # best first
    ctrl = lines[-1]
    assert "**" not in ctrl  # 9.0 is the highest rankme, but a control is never "best"
    assert "**5.000**" in lines[0]  # the best pretrained rankme (b) is
    assert "scores better than every pretrained backbone on rankme" in report.markdown
    assert report.rows[0]["backbone"] == "a"  # the CSV / JSON keep the input order and the plain labels
    assert "ctrl (control)" in html


def test_lower_bounds_are_shown_censored_and_left_out_of_the_agreement() -> None:
    report, _ = audit_report(_results(), n_boot=200)
    ranking = report.markdown.split("## Ranking")[1].split("##")[0]
    d_line = next(line for line in ranking.splitlines() if line.startswith("| d "))
    assert "> 64.0" in d_line and "**> 64.0**" not in d_line
    agreement = report.data["agreement"]
    assert "sdl@1" not in {a["score"] for a in agreement}
    assert "sdl@1 for 2 of 5 backbones" in report.markdown and "left out of the rank agreement" in report.markdown


def test_verdict_lines_and_no_verdict_without_a_direction() -> None:
    report, _ = audit_report(_results(), n_boot=200)
    by_score = {a["score"]: a for a in report.data["agreement"]}
    assert by_score["alpha_req"]["verdict"] == NO_DIRECTION
    verdict = report.markdown.split("## Verdict (against toy/clean_acc)")[1].split("## Ranking")[0]
    lines = [line for line in verdict.splitlines() if line.startswith("- ")]
    assert any(line.startswith("- logme: agrees with") and "(n = 5)" in line and "it picks b" in line for line in lines)
    assert any(line.startswith(f"- alpha_req: {NO_DIRECTION}") for line in lines)


def test_the_page_fits_its_width_a_wide_ranking_is_transposed() -> None:
    """Layout rule: no table of the page has more than MAX_PAGE_COLUMNS columns while it has fewer rows than columns
    (a 1200-px body holds about ten numeric columns at 0.85 em); the ranking of the full report (19 columns for 5
    backbones) is shown on its side, one column per backbone, best-first, the best of each score still marked."""
    import re

    from src.report.html import MAX_PAGE_COLUMNS, page_table_html

    rows = [{"backbone": f"b{i}", **{f"s{k}": float(i + k) for k in range(14)}} for i in range(5)]
    cols = ["backbone", *(f"s{k}" for k in range(14))]
    out = page_table_html(rows, cols, {c: True for c in cols[1:]}, exclude=[4])
    head = re.search(r"<thead><tr>(.*?)</tr></thead>", out).group(1)
    assert head.count("<th>") == 1 + len(rows) <= MAX_PAGE_COLUMNS
    assert out.count("<tr>") == 1 + 14  # a row per score
    assert out.count('class="num best"') == 14 and "b3" in head  # b4 (excluded, a control) is never best: b3 is
    narrow = page_table_html(rows, cols[:6], {})
    assert re.search(r"<thead><tr>(.*?)</tr></thead>", narrow).group(1).count("<th>") == 6  # as given

    _, html = audit_report(_results(), n_boot=50)
    for table in re.findall(r"<table>.*?</table>", html, flags=re.S):
        n_cols = re.search(r"<thead><tr>(.*?)</tr></thead>", table).group(1).count("<th>")
        n_rows = table.count("<tr>") - 1
        assert n_cols <= MAX_PAGE_COLUMNS or n_rows >= n_cols
