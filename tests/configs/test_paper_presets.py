"""The papers' experiments as configs: every configs/backbone option composes, and the ones that need downloaded
weights fail fast offline naming them (before a network is constructed); the report presets compose and, offline,
stop before any computation naming the missing weights or data."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from src.backbones import MissingWeightsError
from src.backbones.spec import build_backbone

from ..cli.conftest import compose_cfg

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BACKBONES = sorted(p.stem for p in (CONFIGS / "backbone").glob("*.yaml"))
PRESETS = sorted(p.stem for p in (CONFIGS / "report_preset").glob("*.yaml"))
#: the papers' models (native input sizes: CLIP 224 px except RN50x64 448 px; DINOv2 518 px; EfficientNet-B5 448 px)
PAPER_BACKBONES = {
    "open_clip_vit_b16_openai": "open_clip:ViT-B-16",
    "open_clip_vit_l14_openai": "open_clip:ViT-L-14",
    "open_clip_rn50_openai": "open_clip:RN50",
    "open_clip_rn50x64_openai": "open_clip:RN50x64",
    "timm_dinov2_vit_l14": "timm:vit_large_patch14_dinov2.lvd142m",
    "timm_dinov2_vit_g14": "timm:vit_giant_patch14_dinov2.lvd142m",
    "timm_efficientnet_b5": "timm:efficientnet_b5.sw_in12k_ft_in1k",
    "hf_dinov2_vit_b14": "hf:facebook/dinov2-base",
    "hf_dinov2_vit_l14": "hf:facebook/dinov2-large",
    "hf_clip_vit_b16": "hf:openai/clip-vit-base-patch16",
}


class _Constructed(Exception):
    """A network was about to be constructed: its weights were found (this machine has them cached)."""


@pytest.fixture
def offline_no_construction(monkeypatch):
    """Offline (the loaders then never wait on the network), and constructing a timm / open_clip / hf network raises
    _Constructed: a missing-weights error must come before it (the large models are never instantiated here)."""
    import open_clip
    import timm

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise _Constructed(str(args[:1]))

    monkeypatch.setattr(timm, "create_model", refuse)
    monkeypatch.setattr(open_clip, "create_model", refuse)
    monkeypatch.setattr("src.backbones.hf_backbone._model_class", refuse)


def _spec(option: str) -> dict:
    """configs/backbone/<option>.yaml as composed by the training CLI (backbone=<option>)."""
    cfg = compose_cfg("train.yaml", [f"backbone={option}"], Path("unused"))
    return OmegaConf.to_container(cfg.backbone, resolve=True)


@pytest.mark.parametrize("option", BACKBONES)
def test_every_backbone_config_composes(option) -> None:
    spec = _spec(option)
    assert isinstance(spec["name"], str) and ":" in spec["name"], spec
    if option in PAPER_BACKBONES:
        assert spec["name"] == PAPER_BACKBONES[option] and spec["pretrained"] in (True, "openai"), spec


@pytest.mark.parametrize("option", sorted(PAPER_BACKBONES))
def test_paper_backbones_fail_fast_offline_naming_the_weights(option, offline_no_construction) -> None:
    spec = _spec(option)
    try:
        with pytest.raises(MissingWeightsError, match=r"not available offline: looked for .*Fix: download them once"):
            build_backbone(spec)
    except _Constructed:
        pytest.skip(f"the weights of {spec['name']} are cached on this machine")


def test_paper_presets_exist() -> None:
    assert {"synbench_paper", "task_priors_paper"} <= set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_report_presets_compose_into_a_valid_audit(preset, tmp_path) -> None:
    from src.backbones.spec import backbone_labels, backbone_list
    from src.report.__main__ import audit_config

    cfg = compose_cfg("report.yaml", [f"report_preset={preset}"], tmp_path)
    config = audit_config(cfg)  # every report setting checked
    labels = backbone_labels(backbone_list(OmegaConf.to_container(cfg.backbones, resolve=True)))
    assert len(labels) >= 5 and list(cfg.downstream.sets) == ["cifar10"] and cfg.downstream.image_size == 224
    if preset == "synbench_paper":
        assert cfg.full is True and config.budgets == (2048, 4096, 8192, 16384, 32768) and config.input_size is None
        assert config.baseline_convention == "paper" and config.budget_pair is not None  # Table 7 / Fig. 4 / Table 8
        assert "timm:vit_base_patch16_224.augreg_in21k_ft_in1k" in labels
    if preset == "task_priors_paper":
        assert config.task_prior.prior_backbone["name"] == PAPER_BACKBONES["timm_efficientnet_b5"]
        assert config.task_prior.convention == "paper" and len(labels) == 33  # the authors' 33 timm models
        assert config.tp_data["option"] == "imagefolder" and config.tp_images == 8192  # mini-ImageNet layout
    overridden = compose_cfg("report.yaml", [f"report_preset={preset}", "budgets.sizes=[64]"], tmp_path)
    assert list(overridden.budgets.sizes) == [64]  # the command line still wins over the preset


@pytest.fixture
def no_computation(monkeypatch):
    """Any part of the audit running is a failure: the presets must stop before."""

    def refuse(*args, **kwargs):
        raise AssertionError("a part of the audit ran: the missing files were not found first")

    for part in ("synbench", "baselines", "divergence_radius", "task_prior"):  # read lazily from METHODS
        monkeypatch.setattr(f"src.methods.audit_parts.{part}_run", refuse)
    monkeypatch.setattr("src.methods.audit_parts.task_prior_prepare", refuse)  # builds the prior backbone
    monkeypatch.setattr("src.report.audit.part_downstream", refuse)


@pytest.mark.parametrize("preset", PRESETS)
def test_report_presets_offline_fail_first_naming_the_missing_data(preset, tmp_path, no_computation) -> None:
    from src.report.__main__ import run

    cfg = compose_cfg("report.yaml", [f"report_preset={preset}"], tmp_path)
    if preset == "task_priors_paper":  # its Task-Prior images (tp_data) are read first: the image folder is named
        with pytest.raises(FileNotFoundError, match=r"tp_data \(train split\): imagefolder: folder "
                           r".*data/mini-imagenet/train does not exist\. Fix: pass root="):  # fmt: skip
            run(cfg)
        (tmp_path / "data" / "mini-imagenet" / "train" / "n01532829").mkdir(parents=True)  # the folder, no images
        with pytest.raises(FileNotFoundError, match=r"tp_data \(train split\): imagefolder: no usable images"):
            run(cfg)
        cfg = compose_cfg("report.yaml", [f"report_preset={preset}", "parts=[downstream]"], tmp_path)
    with pytest.raises(FileNotFoundError, match=r"downstream.sets 'cifar10': cifar10 \(train split\) not found in .*"
                       r"Fix: pass download=True where there is network, or place the files under"):  # fmt: skip
        run(cfg)
    assert not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("preset", PRESETS)
def test_report_presets_offline_fail_first_naming_the_missing_weights(
    preset, tmp_path, no_computation, offline_no_construction
) -> None:
    """Without the downstream part (no data needed) the first missing weights stop the run, before any part."""
    from src.report.__main__ import run

    cfg = compose_cfg("report.yaml", [f"report_preset={preset}", "parts=[synbench]"], tmp_path)
    first = OmegaConf.to_container(cfg.backbones)[0]["name"].removeprefix("timm:")
    try:
        with pytest.raises(MissingWeightsError, match=rf"timm model '{first}' are not available offline"):
            run(cfg)
    except _Constructed:
        pytest.skip(f"the weights of {first} are cached on this machine")
    assert not (tmp_path / "report.md").exists()
