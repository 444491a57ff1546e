"""compare_backbones in the one shape: backbones -> features -> compare_features -> a Report written by Report.write;
the aggregate path (write_table) builds the same Report; the Hydra callback lives at the entry-point level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from src.backbones.spec import build_backbone
from src.features import FeatureExtractor
from src.task_prior import TaskPriorConfig, compare_backbones, compare_features
from src.task_prior.report import COLUMNS, FIGURE, digits_images, rows_report, write_table

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
VIT = {"name": "timm:test_vit", "pretrained": False}
EFF = {"name": "timm:test_efficientnet", "pretrained": False}
SMALL = {"num_tasks": 3, "epochs": 3, "prior_backbone": EFF}


def _features(specs, images, seed):
    """What compare_backbones computes, spelt out: the prior first, then the backbones, from one seeded stream."""
    torch.manual_seed(seed)
    return [FeatureExtractor(build_backbone(s).eval().embed)(images).float().cpu() for s in specs]


def test_compare_backbones_equals_compare_features_on_the_same_features(tmp_path) -> None:
    images = digits_images(24, 16)
    before = torch.get_rng_state()
    report = compare_backbones([VIT, EFF], SMALL, images=images)
    assert torch.equal(torch.get_rng_state(), before)  # fork_rng: the caller's generator is untouched
    with torch.random.fork_rng(devices=[]):
        prior, vit, eff = _features([EFF, VIT, EFF], images, seed=0)
    rows = compare_features({"timm:test_vit": vit, "timm:test_efficientnet": eff}, prior, TaskPriorConfig(**SMALL))
    # the same float32 features (same seeded weights, same forwards) and the same float64 code path: exactly equal
    for got, want in zip(report.rows, rows):
        assert {k: v for k, v in got.items() if k != "prior_backbone"} == want
    assert report.method == "task_prior" and list(report.results) == ["timm:test_vit", "timm:test_efficientnet"]
    assert all(r["prior_backbone"] == "timm:test_efficientnet" for r in report.rows)
    assert report.data["correlations"].keys() == {
        "pearson_mean_vs_acc_mean", "spearman_mean_vs_acc_mean", "pearson_var_vs_acc_var", "spearman_var_vs_acc_var"
    }  # fmt: skip
    paths = report.write(tmp_path)
    assert {p.name for p in paths.values()} == {"task_prior.md", "task_prior.csv", "task_prior.json", FIGURE}
    assert paths["csv"].read_text().splitlines()[0] == ",".join(COLUMNS)
    saved = json.loads(paths["json"].read_text())
    assert [r["backbone"] for r in saved["rows"]] == list(report.results) and len(saved["rows"][0]["accuracies"]) == 3
    assert all(v is None for v in saved["correlations"].values())  # 2 backbones: undefined, null (JSON has no NaN)
    assert paths["md"].read_text() == report.markdown and "| timm:test_vit |" in report.markdown
    assert paths[FIGURE].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_backbones_checks_everything_before_building(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was built before the bad argument was refused")

    monkeypatch.setattr("src.backbones.spec.create_backbone", refuse)
    with pytest.raises(ValueError, match=r"backbones must be a non-empty list"):
        compare_backbones([], SMALL)
    with pytest.raises(ValueError, match=r"temperature must be a finite number > 0"):
        compare_backbones([VIT], {**SMALL, "temperature": -1})
    with pytest.raises(ValueError, match=r"prior_backbone must be one backbone"):
        compare_backbones([VIT], SMALL, prior_backbone=3)
    with pytest.raises(ValueError, match=r"images must be a floating \(N >= 2, 3, H, W\) tensor"):
        compare_backbones([VIT], SMALL, images=torch.zeros(1, 3, 8, 8))
    with pytest.raises(ValueError, match=r"max_batch must be an integer >= 1, got 0"):
        compare_backbones([VIT], SMALL, images=torch.zeros(4, 3, 8, 8), max_batch=0)
    with pytest.raises(ValueError, match=r"num_images must be an integer in \[2, 1797\]"):
        digits_images(5000, 8)


def test_compare_backbones_progress_lines() -> None:
    lines: list[str] = []
    compare_backbones([VIT], {**SMALL, "num_tasks": 2}, images=digits_images(12, 16), progress=lines.append)
    assert [line.split(":")[0] for line in lines] == ["features timm", "features timm"]
    assert "(prior)" in lines[0]


def test_write_table_is_the_report_writer(tmp_path) -> None:
    rows = [
        {"backbone": b, "acc_mean": a, "acc_var": 0.01, "mean": m, "var": v, "z": m / v**0.5, "acc_q10": 0.5}
        for b, a, m, v in (("x", 0.6, 1.0, 2.0), ("y", 0.7, 2.0, 1.0), ("z", 0.8, 3.0, 0.5))
    ]
    paths = write_table(rows, tmp_path)
    report = rows_report(rows)
    assert paths["md"].read_text() == report.markdown and (tmp_path / FIGURE).is_file()
    assert json.loads(paths["json"].read_text())["correlations"]["pearson_mean_vs_acc_mean"] == pytest.approx(
        1.0, abs=1e-12
    )  # E and acc_mean are both linear in the row index: Pearson 1 up to rounding (~1e-16)
    with pytest.raises(ValueError, match="no rows to write"):
        write_table([], tmp_path)


def test_hydra_table_callback_from_its_entry_point_home(tmp_path) -> None:
    from hydra.utils import get_class

    from src.hydra_callbacks import TaskPriorTableCallback

    target = OmegaConf.load(CONFIGS / "experiment" / "task_prior.yaml").hydra.callbacks.task_prior_table._target_
    assert target == "repbench.hydra_callbacks.TaskPriorTableCallback"
    assert get_class(target) is TaskPriorTableCallback
    for i, (name, mean) in enumerate((("a", 1.0), ("b", 2.0))):
        (tmp_path / str(i)).mkdir()
        row = {"backbone": name, "acc_mean": 0.5 + mean / 10, "acc_var": 0.01, "mean": mean, "var": 1.0, "z": mean}
        (tmp_path / str(i) / "task_prior_row.json").write_text(json.dumps(row))
    TaskPriorTableCallback().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert "| a |" in (tmp_path / "task_prior.md").read_text() and (tmp_path / "task_prior.csv").is_file()
    import src.task_prior.report as core

    assert not hasattr(core, "TaskPriorTableCallback")  # the core holds no Hydra piece
