"""The report's Task-Prior images from a configs/data option (``tp_data``): an image folder in the mini-ImageNet layout
(``report_preset=task_priors_paper``) instead of the bundled digits; read by ``python -m src.report`` before anything
else, so a missing folder stops the run naming it; the same seeded draw as ``python -m src.task_prior data=...``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from src.utils.data_tensors import data_images
from tests.cli.conftest import compose_cfg

TINY = {"name": "timm:test_efficientnet", "pretrained": False}
OVERRIDES = [
    "parts=[task_prior,downstream]",
    "backbones=[{name:timm:test_efficientnet,pretrained:false}]",
    "task_prior.prior_backbone={name:timm:test_efficientnet,pretrained:false}",
    "task_prior.num_tasks=2",
    "task_prior.epochs=2",
    "tp_image_size=16",
    "progress=false",
]


def _folder(root: Path, classes: int = 3, per_class: int = 6) -> Path:
    """One sub-folder per class (as mini-ImageNet's n01532829/...), small PNGs of distinct colours."""
    g = np.random.default_rng(0)
    for c in range(classes):
        (root / f"n0{c}").mkdir(parents=True)
        for k in range(per_class):
            Image.fromarray(g.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(root / f"n0{c}" / f"{k}.png")
    return root


def test_tp_data_is_checked_and_lifts_the_digits_bound() -> None:
    from src.report.audit import AuditConfig

    folder = {"option": "imagefolder", "root": "/data/mini-imagenet/train", "num_classes": 100}
    assert AuditConfig(tp_data=folder, tp_images=8192).tp_images == 8192  # the 1797 digits bound is the digits'
    assert AuditConfig().tp_data is None
    with pytest.raises(ValueError, match=r"tp_images must be an integer in \[2, 1797\]"):
        AuditConfig(tp_images=8192)
    with pytest.raises(ValueError, match=r"tp_data must be null or a configs/data option .* got 5"):
        AuditConfig(tp_data=5)


def test_task_prior_prepare_draws_the_tp_images_from_the_folder(tmp_path) -> None:
    from src.methods.audit_parts import task_prior_prepare, tensor_fingerprint
    from src.report.audit import AuditConfig

    root = _folder(tmp_path / "train")
    data = {"option": "imagefolder", "root": str(root), "num_classes": 3}
    cfg = AuditConfig(parts=("task_prior",), tp_data=data, tp_images=8, tp_image_size=16,
                      task_prior={"prior_backbone": TINY, "num_tasks": 2, "seed": 4})  # fmt: skip
    prepared = task_prior_prepare(cfg, "cpu", None)
    expected = data_images(data, 8, image_size=16, seed=4)
    assert prepared["images"].shape == (8, 3, 16, 16) and torch.equal(prepared["images"], expected)
    assert prepared["images_fp"] == tensor_fingerprint(expected)  # the cache key follows the images
    # drawn by the seed, not the first ones: the class-sorted folder's first 8 would be classes 0 and 1 only
    assert not torch.equal(expected, data_images(data, 8, image_size=16, seed=5))


def test_the_report_reads_tp_data_first_and_names_a_missing_folder(tmp_path, monkeypatch) -> None:
    from src.report.__main__ import run

    def refuse(*args, **kwargs):
        raise AssertionError("the downstream sets were read before the missing Task-Prior folder was found")

    monkeypatch.setattr("src.report.__main__.downstream_sets", refuse)
    cfg = compose_cfg("report.yaml", [*OVERRIDES, f"tp_data={{option:imagefolder,root:{tmp_path}/none,num_classes:3}}",
                                      "tp_images=8"], tmp_path)  # fmt: skip
    with pytest.raises(FileNotFoundError, match=r"tp_data \(train split\): imagefolder: folder .*none does not exist"):
        run(cfg)
    cfg = compose_cfg("report.yaml", [*OVERRIDES, "tp_data={option:imagefolder,num_classes:3}"], tmp_path)
    with pytest.raises(ValueError, match=r"tp_data: data config 'imagefolder' leaves \['root'\] unset"):
        run(cfg)


def test_the_report_passes_the_folder_images_to_the_audit(tmp_path, monkeypatch) -> None:
    """The CLI draws tp_images of the folder's train split by the Task-Prior seed (the run's seed here) at
    tp_image_size, and the audit runs on exactly those."""
    from src.report.__main__ import run

    root = _folder(tmp_path / "train")
    seen = {}

    class _Stop(Exception):
        pass

    def capture(*args, **kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr("src.report.audit.run_audit", capture)
    cfg = compose_cfg("report.yaml", [*OVERRIDES, f"tp_data={{option:imagefolder,root:{root},num_classes:3}}",
                                      "tp_images=10", "seed=2", "downstream.sets=[digits]"], tmp_path)  # fmt: skip
    with pytest.raises(_Stop):
        run(cfg)
    data = {"option": "imagefolder", "root": str(root), "num_classes": 3}
    assert torch.equal(seen["tp_images"], data_images(data, 10, image_size=16, seed=2))
    too_many = compose_cfg("report.yaml", [*OVERRIDES, f"tp_data={{option:imagefolder,root:{root},num_classes:3}}",
                                           "tp_images=100"], tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match=r"tp_images must be an integer in \[2, \d+\]"):
        run(too_many)


def test_the_paper_preset_runs_on_an_image_folder_with_the_papers_models(tmp_path) -> None:
    from omegaconf import OmegaConf

    from src.backbones.spec import backbone_labels, backbone_list
    from src.report.__main__ import audit_config

    cfg = compose_cfg("report.yaml", ["report_preset=task_priors_paper"], tmp_path)
    config = audit_config(cfg)
    assert config.tp_data == {"option": "imagefolder", "root": f"{tmp_path}/data/mini-imagenet/train",
                              "num_classes": 100}  # fmt: skip
    assert (config.tp_images, config.tp_image_size) == (8192, 224)  # the paper's 8192 mini-ImageNet images
    assert config.task_prior.convention == "paper" and config.task_prior.num_tasks == 512
    assert config.task_prior.prior_backbone["name"] == "timm:efficientnet_b5.sw_in12k_ft_in1k"
    labels = backbone_labels(backbone_list(OmegaConf.to_container(cfg.backbones, resolve=True)))
    # the 33 timm models of the authors' examples/timm/1_evaluate_timm_models.py (commit 2aed4a7), tagged
    archs = sorted(label.removeprefix("timm:").split(".")[0] for label in labels)
    assert len(archs) == 33 and len(set(archs)) == 33 and "efficientnet_b5" in archs and "convnextv2_base" in archs
    root = compose_cfg("report.yaml", ["report_preset=task_priors_paper", "tp_data.root=/x/train"], tmp_path)
    assert audit_config(root).tp_data["root"] == "/x/train"  # the command line sets the folder
