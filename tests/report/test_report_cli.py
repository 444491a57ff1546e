"""``python -m src.report`` in-process on tiny random backbones: every backbone and score in the files, no NaN,
figures embedded in the HTML, and a second run with one more backbone reusing the cached results; bad settings refused
before any work (R22, R26, R29, R33); a second report into a live report's folder refused before Hydra writes (RC2)."""

from __future__ import annotations

import base64
import csv
import json
import math
import re

import pytest

from tests.cli.conftest import compose_cfg

TINY = [
    "input_size=16",
    "synbench.s_values=[1.0,3.0]",
    "synbench.n_train=160",
    "synbench.n_test=64",
    "synbench.eps=[0.0,0.2]",
    "divergence_radius.m=2",
    "divergence_radius.perturbations=[brightness,fog]",
    "dr_images=4",
    "dr_image_size=16",
    "task_prior.prior_backbone={name:timm:test_efficientnet,pretrained:false}",
    "task_prior.num_tasks=4",
    "task_prior.epochs=5",
    "tp_images=40",
    "tp_image_size=16",
    "downstream.image_size=16",
    "downstream.steps=1",
    "agreement.n_boot=100",
    "progress=false",
]
NETS = ["{name:timm:test_efficientnet,pretrained:false}", "{name:timm:test_vit,pretrained:false}"]
THIRD = "{name:timm:resnet10t,pretrained:false}"


def _run(tmp_path, nets, out):
    from src.report.__main__ import run

    cfg = compose_cfg("report.yaml", [f"backbones=[{','.join(nets)}]", *TINY], tmp_path)
    cfg.paths.output_dir = str(tmp_path / out)
    cfg.cache_dir = str(tmp_path / "cache")
    return run(cfg), tmp_path / out


@pytest.mark.timeout(600)
def test_report_files_and_cache_reuse(tmp_path, caplog) -> None:
    md, out = _run(tmp_path, NETS, "first")
    rows = list(csv.DictReader(open(out / "report.csv")))
    assert [r["backbone"] for r in rows] == ["timm:test_efficientnet", "timm:test_vit"]
    for col in ("synbench", "logme", "sfda", "rankme", "val_loss", "mdl", "r_dr_mean", "r_cs_mean", "tp_mean",
                "tp_z", "digits/clean_acc", "digits/robust_acc_pgd1_l2_0p05"):  # fmt: skip
        for r in rows:
            assert r[col] != "" and math.isfinite(float(r[col])), (col, r)
    data = json.loads((out / "report.json").read_text())
    assert set(data["values"]) == {"timm:test_efficientnet", "timm:test_vit"}
    # alpha-ReQ is undefined with fewer than 100 feature dimensions: recorded with its reason, not a crash or a NaN
    assert all("alpha_req" in v["baselines"]["errors"] or "alpha_req" in v["baselines"]["values"]
               for v in data["values"].values())  # fmt: skip
    html = (out / "report.html").read_text()
    assert "timm:test_vit" in html and "Rank agreement" in html
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(pngs) >= 3 and all(base64.b64decode(p)[:4] == b"\x89PNG" for p in pngs)
    assert "nan" not in (out / "report.md").read_text().lower()
    for png in ("curves.png", "r_dr_by_perturbation.png", "task_prior_z.png"):
        assert (out / png).stat().st_size > 1000

    # one more backbone: the two earlier ones come from the cache, bit for bit
    from src.report.audit import AuditResults  # noqa: F401  (documented return type)

    md2, out2 = _run(tmp_path, [*NETS, THIRD], "second")
    data2 = json.loads((out2 / "report.json").read_text())
    for label in ("timm:test_efficientnet", "timm:test_vit"):
        assert all(data2["cached"][label].values())
        assert data2["values"][label] == data["values"][label]
    assert not any(data2["cached"]["timm:resnet10t"].values())
    assert len(list(csv.DictReader(open(out2 / "report.csv")))) == 3


def test_bad_settings_fail_before_any_work(tmp_path) -> None:
    from src.report.__main__ import run

    for override, match in (
        ("parts=[synbench,nonsense]", r"parts \['nonsense'\] unknown"),
        ("baselines.which=[logme,magic]", r"baselines \['magic'\] unknown"),
        ("downstream.sets=[nosuchdata]", r"no data config 'nosuchdata'"),
        ("divergence_radius.m=0", r"m must be"),
        ("budgets.sizes=[1]", r"budgets must be integers >= 2"),
        ("downstream.sets=[photos]", r"'photos' is not a downstream set: .*test crops come from photos of their own"),
        ("downstream.sets=[{option:photos}]", r"'photos' is not a downstream set"),
        ("baselines.eps=[0]", r"baselines\.eps\) must be a non-empty list of finite numbers > 0"),  # R33
        ("tp_images=100000", r"tp_images must be an integer in \[2, 1797\]"),  # R26
        ("synbench.n_train=2", r"synbench\.n_train must be an integer >= 4, got 2"),
    ):
        cfg = compose_cfg("report.yaml", [f"backbones=[{NETS[0]}]", *TINY, override], tmp_path)
        with pytest.raises(ValueError, match=match):
            run(cfg)
    cfg = compose_cfg("report.yaml", [f"backbones=[{NETS[0]}]", *TINY, "synbench.n_train=abc"], tmp_path)
    with pytest.raises(TypeError, match=r"synbench\.n_train must be an integer >= 4, got 'abc' \(str\)"):  # R29
        run(cfg)
    assert not list(tmp_path.glob("report.*"))  # refused before anything was written


def test_r22_a_set_whose_test_labels_never_occur_in_training_is_refused() -> None:
    """The label check behind the photos refusal, for any set (an image folder whose test classes are its own)."""
    import torch

    from src.report.__main__ import check_downstream_option, check_learnable_labels

    check_learnable_labels("ok", torch.tensor([0, 1, 2, 1]), torch.tensor([2, 0]))
    with pytest.raises(
        ValueError, match=r"downstream.sets 'mine': its test labels \[3, 4\] never occur in its training"
    ):
        check_learnable_labels("mine", torch.tensor([0, 1]), torch.tensor([1, 3, 4]))
    with pytest.raises(ValueError, match=r"raise downstream.max_items=2"):
        check_learnable_labels("digits", torch.tensor([0, 1]), torch.tensor([5]), max_items=2)
    with pytest.raises(ValueError, match=r"no data config 'nope'; choose from \[.*'digits'") as err:
        check_downstream_option("nope")
    assert "photos" not in str(err.value)  # not offered as a choice any more
    check_downstream_option("gaussian")


def test_agreement_settings_fail_before_any_work(tmp_path, monkeypatch) -> None:
    """R23/R24: agreement.n_boot / agreement.level were checked only while writing, after every part was computed
    (agreement.level=1.5), or never (agreement.n_boot=0: every verdict "cannot separate"); now audit_config refuses
    them, before the backbones or any part."""
    import src.report.audit as audit
    from src.report.__main__ import audit_config, run

    def no_work(*args, **kwargs):
        raise AssertionError("run_audit was reached")

    monkeypatch.setattr(audit, "run_audit", no_work)
    for override, error, match in (
        ("agreement.n_boot=0", ValueError, r"^agreement\.n_boot must be an integer >= 1 .*got 0"),
        ("agreement.n_boot=-5", ValueError, r"^agreement\.n_boot must be an integer >= 1"),
        ("agreement.n_boot=2.5", TypeError, r"^agreement\.n_boot must be an integer >= 1 .*got 2.5 \(float\)"),
        ("agreement.level=1.5", ValueError, r"^agreement\.level must be in \(0, 1\).*got 1.5"),
        ("agreement.level=0", ValueError, r"^agreement\.level must be in \(0, 1\)"),
    ):
        cfg = compose_cfg("report.yaml", [f"backbones=[{NETS[0]}]", *TINY, override], tmp_path)
        with pytest.raises(error, match=match):
            audit_config(cfg)
        with pytest.raises(error, match=match):
            run(cfg)
    assert not list(tmp_path.glob("report.*"))


def test_downstream_max_items_caps_each_split_and_is_checked() -> None:
    from src.report.__main__ import downstream_sets

    sets = downstream_sets(["digits"], 16, 0, None, max_items=50)
    (x_tr, y_tr), (x_te, y_te) = sets["digits"]
    assert x_tr.shape == (50, 3, 16, 16) and y_te.shape == (50,)
    full = downstream_sets(["digits"], 16, 0, None, max_items=100_000)  # a cap above a split's size: every image
    assert full["digits"][0][0].shape[0] == 1078 and full["digits"][1][0].shape[0] == 359
    with pytest.raises(ValueError, match=r"downstream.max_items must be null or an integer >= 2"):
        downstream_sets(["digits"], 16, 0, None, max_items=1)


def test_rc2_a_report_into_a_live_reports_folder_writes_nothing(tmp_path) -> None:
    """Two real processes: a live holder of the folder (standing in for a running report: its lock and its files)
    and ``python -m src.report`` pointed at the same folder, which exits 1 before Hydra writes .hydra/ or the log,
    naming the folder, the live pid and the fix."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from src.utils.run_dir import LOCK_NAME

    folder = tmp_path / "repC2"
    folder.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # killed below, 600 s: a bound
    try:
        lock = {"pid": live.pid, "host": socket.gethostname(), "started": "x", "kind": "run"}
        (folder / LOCK_NAME).write_text(json.dumps(lock))
        (folder / "report.md").write_text("the live report's table")
        root = Path(__file__).resolve().parents[2]
        refused = subprocess.run(
            [sys.executable, "-m", "src.report", f"backbones=[{NETS[0]}]", *TINY, "cache_dir=null",
             f"hydra.run.dir={folder}"],
            cwd=root, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
            timeout=300,  # the refusal comes right after the imports (~10 s on a loaded 2-core machine)
        )  # fmt: skip
    finally:
        live.kill()
        live.wait()
    assert refused.returncode == 1, refused.stderr
    assert f"run directory {folder} is in use by another run (pid {live.pid} " in refused.stderr
    assert "pass another hydra.run.dir" in refused.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted([LOCK_NAME, "report.md"])
    assert (folder / "report.md").read_text() == "the live report's table"
