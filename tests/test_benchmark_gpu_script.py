"""benchmarks/gpu.py runs end to end as a dry run on the CPU (--smoke: tiny sizes), so the script a GPU session
runs once is known to work before the device time is spent."""

from __future__ import annotations

import math

import pytest

gpu = pytest.importorskip("benchmarks.gpu")


def test_smoke_synbench_and_task_prior_parts(tmp_path) -> None:
    out = tmp_path / "gpu.json"
    syn = gpu.main(["--smoke", "--device", "cpu", "--part", "synbench", "--out", str(out)])["synbench"]
    labels = [r["setting"] for r in syn["rows"]]
    assert labels[:4] == ["defaults", "fp32", "tf32", "bf16"] and out.is_file()
    fp32, tf32 = syn["rows"][1]["scores"], syn["rows"][2]["scores"]
    assert fp32 == tf32  # on the CPU "tf32" is plain fp32 arithmetic: the same features, the same scores
    assert syn["rows"][0]["scores"] == fp32  # the default precision on the CPU is fp32, same samples
    tp = gpu.main(["--smoke", "--device", "cpu", "--part", "task_prior"])["task_prior"]
    assert tp[0]["n"] == 512 and math.isfinite(tp[0]["seconds"])
