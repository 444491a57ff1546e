"""docs/papers.md and README.md's "Reproducing the papers": every command of their tables (the inline code spans that
run ``python -m src.<cli>``) composes with exactly its overrides, job by job for a multirun, and the tables hold a row
for every table and figure the issue lists (issue 28 item 4)."""

from __future__ import annotations

import re
import shlex

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from tests.docs.markdown import ROOT, inline_spans
from tests.test_docs_commands import CLI_CONFIGS, PLACEHOLDER, _jobs

DOCS = [ROOT / "docs" / "papers.md", ROOT / "README.md"]


def _table_commands() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        rows = {i + 1 for i, line in enumerate(doc.read_text().splitlines()) if line.startswith("| ")}
        for line, span in inline_spans(doc):
            if line in rows and span.startswith("python -m src.") and "..." not in span:
                out.append((doc.name, line, span))
    return out


COMMANDS = _table_commands()


def test_the_tables_hold_the_commands():
    papers = [c for c in COMMANDS if c[0] == "papers.md"]
    assert len(papers) >= 15 and any(c[0] == "README.md" for c in COMMANDS)
    text = (ROOT / "docs" / "papers.md").read_text()
    for item in ("Table 1, Table 6", "Table 2, Table 10", "Fig. 4, Table 7", "Table 20", "Fig. 4, Figs. 12–15"):
        assert item in text, item
    for item in ("Table 2, Fig. 5", "Table 6, Fig. 8", "Fig. 7, Table 9", "Fig. 3, Fig. 4, Fig. 5", "Fig. 6"):
        assert item in text, item
    assert "experiment=robust_finetune_paper" in text and "report_preset=task_priors_paper" in text


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: f"{c[0]}:{c[1]}")
def test_table_command_composes(cmd):
    _, _, code = cmd
    argv = shlex.split(code)
    assert argv[:2] == ["python", "-m"] and argv[2] in CLI_CONFIGS, argv
    overrides = [PLACEHOLDER.sub(r"logs/\1/\2/RUN", o) for o in argv[3:] if o not in ("-m", "--multirun")]
    overrides = [re.sub(r"<run>", "logs/train/runs/RUN", o) for o in overrides]
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "configs")):
        for job in _jobs(overrides):
            compose(config_name=CLI_CONFIGS[argv[2]], overrides=job)
