"""benchmarks/gpu.py runs end to end as a dry run on the CPU (--smoke: tiny sizes), so the script a GPU session
runs once is known to work before the device time is spent."""

from __future__ import annotations

import math

import pytest

gpu = pytest.importorskip("benchmarks.gpu")


def test_smoke_synbench_and_task_prior_parts(tmp_path) -> None:
    out = tmp_path / "gpu.json"
    syn = gpu.main(["--smoke", "--device", "cpu", "--part", "synbench", "--out", str(out)])["synbench"]
    rows = {(r["setting"], r["budget"], r["seed"]): r for r in syn["rows"]}
    official = [k[0] for k in rows if k[1] == "official"]
    assert official[0] == "defaults" and "fp32" not in official and out.is_file()  # fp32 is extrapolated
    scored = {k[0]: r["scores"] for k, r in rows.items() if k[1] != "official" and k[2] == 0}
    assert set(scored) == {"fp32", "tf32", "bf16"}
    assert scored["fp32"] == scored["tf32"]  # on the CPU "tf32" is plain fp32 arithmetic: same features and scores
    # --smoke takes every s value (every = 1): the subset is the official budget, so the defaults run on the CPU
    # (fp32 arithmetic) gives fp32's scores on the same samples
    assert rows[("defaults", "official", 0)]["scores"] == scored["fp32"]
    assert syn["fp32_extrapolated_wall_s"] == round(rows[("fp32", "subset", 0)]["wall_s"], 1)  # factor 1 here
    assert [r["overlap"] for r in syn["overlap"]] == [False, True, False, True]
    tp = gpu.main(["--smoke", "--device", "cpu", "--part", "task_prior"])["task_prior"]
    assert tp[0]["n"] == 512 and math.isfinite(tp[0]["seconds"])
