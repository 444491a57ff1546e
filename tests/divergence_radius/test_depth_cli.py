"""``python -m src.divergence_radius task=depth`` (issue 28): the depth report end to end offline on synthetic scenes
(head, RMSE / RMSE_p per perturbation, figures, regression), a trained DepthProbe checkpoint as its head, NYU-Depth
V2 through ``data=``, and the settings refused before any backbone is built."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from src.divergence_radius import compare_backbones
from src.divergence_radius.depth import image_rmse, load_depth_checkpoint
from src.divergence_radius.report import scenes_split

ROOT = Path(__file__).resolve().parents[2]
TINY = {"name": "timm:test_vit", "pretrained": False}
SWEEP = {"perturbations": ["brightness", "fog"], "m": 2, "chunk_size": 4}


def _cfg(overrides: list[str]):
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        return compose("divergence_radius.yaml", overrides=overrides)


def test_depth_cli_writes_rmse_tables_and_figures(tmp_path: Path) -> None:
    from src.divergence_radius.__main__ import run

    out = run(
        _cfg([
            "task=depth", 'backbones=[{name: "timm:test_vit", pretrained: false}]', f"paths.output_dir={tmp_path}",
            "image_size=32", "n_train=12", "n_test=6", "divergence_radius.m=2",
            "divergence_radius.perturbations=[brightness,fog]", "divergence_radius.chunk_size=4", "depth.epochs=2",
            "depth.n_bins=8",
        ])
    )  # fmt: skip
    data = json.loads((out / "divergence_radius.json").read_text())["timm:test_vit"]
    assert data["head"] == "bins readout" and data["clean_rmse"] > 0 and "increase_correlations" in data
    for r in data["rows"]:
        assert r["mean_rmse_p"] > 0 and r["mse_r_dr"] >= 0 and r["mse_constant"] >= 0
    for name in ("rmse_p_vs_divergence_radius.png", "rmse_p_vs_cosine_robustness.png", "regression_mse.png",
                 "r_dr_by_perturbation.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    rows = list(csv.DictReader((out / "per_image.csv").open()))
    assert len(rows) == 6 * 2 and "rmse_p" in rows[0]
    assert "| backbone | head | clean RMSE |" in (out / "divergence_radius.md").read_text()


def test_trained_depth_probe_checkpoint_is_the_head(tmp_path: Path) -> None:
    """head_checkpoint=: the DepthProbe's own head and (random) backbone weights: the report's clean RMSE is the
    module's RMSE on the same test scenes (float32 forwards of the same weights: 1e-6)."""
    import lightning as L

    from src.models import DepthProbe

    torch.manual_seed(0)
    probe = DepthProbe(TINY, image_size=32, n_bins=8).eval()
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(probe)
    path = tmp_path / "probe.ckpt"
    trainer.save_checkpoint(path)
    report = compare_backbones(
        [TINY], SWEEP, task="depth", head_checkpoint=str(path), image_size=32, n_train=0, n_test=4
    )
    _, _, x, y = scenes_split(32, 0, 4, seed=0)
    with torch.no_grad():
        expect = float(image_rmse(probe(x), y).mean())
    assert report.results["timm:test_vit"].clean_rmse == pytest.approx(expect, abs=1e-6)
    bb = DepthProbe(TINY, image_size=32, n_bins=8).backbone  # another random draw: not the checkpoint's weights
    model = load_depth_checkpoint(path, bb)  # loads the stored backbone weights
    with torch.no_grad():
        assert torch.equal(model(x), probe(x))
    with pytest.raises(ValueError, match="trained on 'timm:test_vit'"):
        compare_backbones(["timm:test_efficientnet"], SWEEP, task="depth", head_checkpoint=str(path), n_test=4)


def test_depth_settings_refused_before_any_build(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was built: the bad setting was not refused first")

    monkeypatch.setattr("src.divergence_radius.compare.build_backbone", refuse)
    with pytest.raises(ValueError, match="spatial feature map.*torchvision:resnet18"):
        compare_backbones(["torchvision:resnet18"], SWEEP, task="depth")
    with pytest.raises(ValueError, match="classifier='zero_shot' is a classification setting"):
        compare_backbones([TINY], SWEEP, task="depth", classifier="zero_shot")
    with pytest.raises(ValueError, match="head_checkpoint= .* task='depth'"):
        compare_backbones([TINY], SWEEP, head_checkpoint="x.ckpt")
    with pytest.raises(ValueError, match="task must be"):
        compare_backbones([TINY], SWEEP, task="segmentation")
    x = torch.rand(4, 3, 32, 32)
    with pytest.raises(ValueError, match=r"labels must be float depth maps of shape \(4, 1, 32, 32\)"):
        compare_backbones([TINY], SWEEP, task="depth", images=x, labels=torch.zeros(4, dtype=torch.long),
                          train_images=x, train_labels=torch.ones(4, 1, 32, 32))  # fmt: skip


def test_depth_block_errors_name_the_block() -> None:
    from src.divergence_radius.__main__ import comparison_arguments

    with pytest.raises(ValueError, match="depth block of configs/divergence_radius.yaml: readout"):
        comparison_arguments(_cfg(["depth.readout=softmax"]))


def test_nyu_through_data_option(tmp_path: Path) -> None:
    """data=nyu_depth_v2 data.path=<a tiny file in the official layout>: the train split fits the head, the official
    test split (2 frames) is swept, maps read as (N, 1, S, S)."""
    from src.divergence_radius.__main__ import comparison_arguments, data_arguments
    from tests.data.test_depth_data import _write_official

    _write_official(tmp_path)
    cfg = _cfg(["task=depth", "data=nyu_depth_v2", f"data.path={tmp_path}", "image_size=16", "n_train=null",
                "n_test=null", f"paths.data_dir={tmp_path}", f"paths.output_dir={tmp_path}"])  # fmt: skip
    args = data_arguments(cfg, comparison_arguments(cfg)["config"].seed)
    assert args["images"].shape == (2, 3, 16, 16) and args["labels"].shape == (2, 1, 16, 16)
    assert args["train_images"].shape[0] == 2 and args["labels"].dtype == torch.float32  # 3 train frames, 1 to val
