"""``python -m src.synbench`` writes the comparison table (Markdown, CSV, JSON) and figures."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from src.synbench import SynBenchResult

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_cli_compares_backbones(tmp_path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "src.synbench",
        "backbones=[{name:timm:test_efficientnet,pretrained:false},{name:timm:test_vit,pretrained:false}]",
        "input_size=16",
        "progress=false",
        "reduced.s_values=[1.0,3.0]",
        "reduced.n_train=300",
        "reduced.n_test=100",
        "synbench.eps=[0.0,0.4]",
        "synbench.a_T=[0.6,0.7]",
        f"hydra.run.dir={tmp_path}",
    ]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (tmp_path / "synbench.md").read_text()
    assert "timm:test_vit" in md and "a_T = 0.6" in md and "a_T = 0.7" in md
    rows = list(csv.DictReader(open(tmp_path / "synbench.csv")))
    assert len(rows) == 2 * 2 * 2 and {r["backbone"] for r in rows} == {"timm:test_efficientnet", "timm:test_vit"}
    results = {k: SynBenchResult.from_dict(v) for k, v in json.loads((tmp_path / "synbench.json").read_text()).items()}
    for r in rows:
        assert float(r["score"]) == pytest.approx(
            results[r["backbone"]].score(float(r["eps"]), float(r["a_T"])), abs=1e-6
        )
    for png in ("curves.png", "score_vs_eps.png"):
        assert (tmp_path / png).stat().st_size > 5000
