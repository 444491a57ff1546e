"""``python -m src.report`` in-process on tiny random backbones: every backbone and score in the files, no NaN,
figures embedded in the HTML, and a second run with one more backbone reusing the cached results."""

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
        ("budgets=[1]", r"budgets must be integers >= 2"),
    ):
        cfg = compose_cfg("report.yaml", [f"backbones=[{NETS[0]}]", *TINY, override], tmp_path)
        with pytest.raises(ValueError, match=match):
            run(cfg)


def test_downstream_max_items_caps_each_split_and_is_checked() -> None:
    from src.report.__main__ import downstream_sets

    sets = downstream_sets(["digits"], 16, 0, None, max_items=50)
    (x_tr, y_tr), (x_te, y_te) = sets["digits"]
    assert x_tr.shape == (50, 3, 16, 16) and y_te.shape == (50,)
    full = downstream_sets(["digits"], 16, 0, None, max_items=100_000)  # a cap above a split's size: every image
    assert full["digits"][0][0].shape[0] == 1078 and full["digits"][1][0].shape[0] == 359
    with pytest.raises(ValueError, match=r"downstream.max_items must be null or an integer >= 2"):
        downstream_sets(["digits"], 16, 0, None, max_items=1)
