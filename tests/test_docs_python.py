"""The Python blocks of the monitoring docs run as written (README's "Callbacks in your own training" and every
block of docs/monitoring.md), each in a fresh interpreter from the repository root, offline.

Other sections' blocks are not run here: several need hub weights or the official SynBench budget (hours on a CPU);
the ``from repbench ... import`` lines of every block are checked from the installed wheel (tests/test_packaging.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# (document, section heading or None for the whole document)
RUN = [("README.md", "### Callbacks in your own training"), ("docs/monitoring.md", None)]


def _section(text: str, heading: str | None) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level (outside code fences)."""
    if heading is None:
        return text
    lines = text.splitlines(keepends=True)
    start = lines.index(heading + "\n") + 1
    level, fenced = len(heading.split(" ")[0]), False
    for end in range(start, len(lines)):
        fenced ^= lines[end].startswith("```")
        hashes = len(lines[end]) - len(lines[end].lstrip("#"))
        if not fenced and 0 < hashes <= level and lines[end][hashes : hashes + 1] == " ":
            return "".join(lines[start:end])
    return "".join(lines[start:])


def _blocks() -> list[tuple[str, str]]:
    out = []
    for doc, heading in RUN:
        text = _section((ROOT / doc).read_text(), heading)
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            out.append((f"{doc}#{heading or ''}#{i}", block))
    return out


BLOCKS = _blocks()


def test_the_sections_hold_python_blocks() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("name, code", BLOCKS, ids=[n for n, _ in BLOCKS])
def test_python_block_runs(name: str, code: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{name}:\n{done.stderr[-3000:]}"
