"""What the documentation tests read from README.md and docs/*.md: fenced blocks (with their language and line) and
inline code spans."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("bash", "sh", "shell", "console")
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)*)`(?!`)")


@dataclass(frozen=True)
class Fence:
    doc: str  # README.md or docs/<name>.md
    lang: str  # "" for a fence without a language
    line: int  # 1-based line of the first line inside the fence
    text: str


def rel(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


def fences(doc: Path) -> list[Fence]:
    text = doc.read_text()
    return [Fence(rel(doc), m.group(1), text.count("\n", 0, m.start(2)) + 1, m.group(2)) for m in _FENCE.finditer(text)]


def inline_spans(doc: Path) -> list[tuple[int, str]]:
    """(line, text) of every inline code span outside the fences; a span broken over lines is joined with spaces."""
    text = doc.read_text()
    prose = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # keep the line numbers
    return [(prose.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split())) for m in _INLINE.finditer(prose)]
