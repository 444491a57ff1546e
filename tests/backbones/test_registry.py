"""Registry, weight loading and fail-fast errors."""

from __future__ import annotations

import pytest
import torch

from src.backbones import MissingWeightsError, create_backbone, list_backbones
from src.backbones import weights as weights_mod


def test_list_backbones_has_every_source() -> None:
    names = list_backbones()
    for prefix in ("embedded:efficientnet_lite0", "timm:resnet50", "open_clip:ViT-B-32", "torchvision:resnet50"):
        assert prefix in names
    assert list_backbones("embedded") == [f"embedded:efficientnet_lite{i}" for i in range(3)]
    assert all(n.startswith("timm:vit_") for n in list_backbones("timm", "vit_*"))


@pytest.mark.parametrize(
    "name, match",
    [
        ("efficientnet_lite0", "<source>:<name>"),
        ("hub:resnet", "unknown backbone source"),
        ("timm:not_a_model_xyz", "unknown timm model"),
        ("open_clip:Not-A-Model", "unknown open_clip"),
        ("torchvision:not_a_model", "unknown torchvision"),
        ("embedded:efficientnet_lite9", "unknown embedded"),
    ],
)
def test_unknown_backbone(name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        create_backbone(name)


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """No hub reachable and empty caches (HF, torch hub)."""
    monkeypatch.setattr(weights_mod, "host_reachable", lambda *a, **k: False)
    for mod in ("timm_backbone", "open_clip_backbone", "torchvision_backbone"):
        monkeypatch.setattr(f"src.backbones.{mod}.host_reachable", lambda *a, **k: False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))


@pytest.mark.parametrize(
    "name, opts, looked_for",
    [
        ("timm:resnet18.a1_in1k", {}, "timm/resnet18.a1_in1k"),
        ("open_clip:ViT-B-32", {"pretrained": "laion2b_s34b_b79k"}, "laion/CLIP-ViT-B-32-laion2B-s34B-b79K"),
        ("torchvision:resnet18", {}, "resnet18-f37072fd.pth"),
    ],
)
def test_missing_weights_fail_fast_naming_the_file(no_network, name, opts, looked_for) -> None:
    with pytest.raises(MissingWeightsError) as info:
        create_backbone(name, **opts)
    msg = str(info.value)
    assert looked_for in msg and ("checkpoint_path" in msg or "pretrained=" in msg)


def test_missing_checkpoint_file(tmp_path) -> None:
    with pytest.raises(MissingWeightsError, match="not found"):
        create_backbone("timm:test_vit", checkpoint_path=str(tmp_path / "nope.pth"))


@pytest.mark.parametrize("name", ["timm:test_efficientnet", "torchvision:mobilenet_v3_small"])
def test_checkpoint_path_round_trip(tmp_path, name) -> None:
    """Weights saved from one instance and loaded through checkpoint_path reproduce its embeddings."""
    torch.manual_seed(0)
    src = create_backbone(name, pretrained=False).eval()
    model = src.model
    path = tmp_path / "w.pth"
    if name.startswith("torchvision"):
        # a torchvision checkpoint includes the classifier the adapter strips: rebuild a full state dict
        from torchvision import models

        full = models.get_model(name.split(":")[1], weights=None)
        full.load_state_dict(model.state_dict(), strict=False)
        torch.save(full.state_dict(), path)
    else:
        torch.save(model.state_dict(), path)
    other = create_backbone(name, pretrained=False, checkpoint_path=str(path)).eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(other.embed(x), src.embed(x))


@pytest.fixture
def own_sources():
    """Register test sources for one test: the table is restored afterwards."""
    from src.backbones import registry

    registry._load_builtins()
    saved = dict(registry.SOURCES)
    yield registry
    registry.SOURCES.clear()
    registry.SOURCES.update(saved)


def _mine(name: str, **opts):
    """A user's own source: a tiny random timm model under another name."""
    from src.backbones.timm_backbone import create_timm

    backbone = create_timm("test_efficientnet", pretrained=False, **opts)
    backbone.name = f"mine:{name}"
    return backbone


def test_a_source_registered_once_is_created_and_listed(own_sources) -> None:
    from src.backbones import SOURCES, register_source

    spec = register_source("mine", _mine, lambda pattern: ["x", "y"])
    assert SOURCES["mine"] is spec and spec.doc == "A user's own source: a tiny random timm model under another name."
    bb = create_backbone("mine:x")
    assert bb.name == "mine:x" and not bb.training
    assert list_backbones("mine") == ["mine:x", "mine:y"] and list_backbones("mine", "y") == ["mine:y"]
    names = list_backbones()
    assert names[:3] == list_backbones("embedded") and names[-2:] == ["mine:x", "mine:y"]  # builtins first
    assert list(SOURCES)[:5] == ["embedded", "timm", "open_clip", "torchvision", "hf"] and list(SOURCES)[-1] == "mine"


def test_a_source_without_lister_builds_but_is_not_listed(own_sources) -> None:
    from src.backbones import register_source

    register_source("unlisted", _mine)
    assert create_backbone("unlisted:z").name == "mine:z"
    assert not any(n.startswith("unlisted:") for n in list_backbones())
    with pytest.raises(ValueError, match="'unlisted' was registered without a lister"):
        list_backbones("unlisted")


def test_duplicate_source_names_need_overwrite(own_sources) -> None:
    from src.backbones import SOURCES, register_source

    with pytest.raises(ValueError, match="'timm' is already registered .*overwrite=True"):
        register_source("timm", _mine)
    register_source("mine", _mine)
    register_source("mine", _mine)  # the very same factory again: no-op
    other = register_source("timm", _mine, overwrite=True)
    assert SOURCES["timm"] is other and create_backbone("timm:whatever").name == "mine:whatever"
    for bad in ("", "a:b", " x"):
        with pytest.raises(ValueError, match="non-empty string without ':'"):
            register_source(bad, _mine)


def test_unknown_source_in_listing_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown backbone source 'nosuch'; choose one of \['embedded', 'timm'"):
        list_backbones("nosuch")


def test_importing_the_package_imports_no_hub_library() -> None:
    """Sources are loaded on first use, and each lister imports its library only when called."""
    import subprocess
    import sys

    code = (
        "import sys, src.backbones as b\n"
        "b.list_backbones('embedded')\n"
        "print(sorted(m for m in ('timm', 'open_clip', 'transformers', 'torchvision') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
