"""benchmarks/monitors.py runs (a seconds-long subset through the callbacks) and prints its ratio table; the figures
themselves are measured, not asserted (no timed assertions)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_monitor_benchmark_subset_prints_its_table() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.monitors", "--repeats", "1", "--parts", "cosine", "spectrum", "--via",
         "callbacks"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| spectrum") or line.startswith("| collapse")]
    assert len(rows) == 2 and all(row.rstrip().endswith("|") and "x**" in row for row in rows)
