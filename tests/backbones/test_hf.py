"""The Hugging Face ``transformers`` source ``hf:<hub id or folder>``: configs built offline, weights from a folder
written by ``save_pretrained``, from a weights file or from the HF cache, the image processor's input convention,
and the fast offline failure naming the missing files."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from src.backbones import MissingWeightsError, create_backbone, list_backbones
from src.backbones import weights as weights_mod

VIT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
TEXT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
PATCHES = {"image_size": 32, "patch_size": 8}
#: tiny random models of each family the papers use (no download): ``create_backbone(f"hf:{k}", config=v)``
TINY_HF = {
    "vit": {"model_type": "vit", **VIT, **PATCHES},
    "dinov2": {"model_type": "dinov2", **VIT, **PATCHES},
    "clip": {
        "model_type": "clip",
        "vision_config": {**VIT, **PATCHES},
        "text_config": TEXT,
        "projection_dim": 16,
    },
    "clip_vision": {"model_type": "clip_vision_model", **VIT, **PATCHES},
    "siglip_vision": {"model_type": "siglip_vision_model", **VIT, **PATCHES},
    "vit_mae": {"model_type": "vit_mae", **VIT, **PATCHES},
}


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """No hub reachable and an empty HF cache (tmp_path/hf)."""
    monkeypatch.setattr(weights_mod, "host_reachable", lambda *a, **k: False)
    monkeypatch.setattr("src.backbones.hf_backbone.host_reachable", lambda *a, **k: False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path / "hf"


def _save_clip(folder: Path, *, processor: bool = True) -> torch.nn.Module:
    """A tiny random CLIP model and its image processor, written as ``save_pretrained`` does."""
    from transformers import CLIPImageProcessor, CLIPModel

    from src.backbones.hf_backbone import _as_config

    torch.manual_seed(0)
    model = CLIPModel(_as_config(TINY_HF["clip"])).eval()
    model.save_pretrained(folder)
    if processor:
        CLIPImageProcessor(
            size={"shortest_edge": 36},
            crop_size={"height": 32, "width": 32},
            image_mean=[0.1, 0.2, 0.3],
            image_std=[0.3, 0.2, 0.1],
            resample=2,
        ).save_pretrained(folder)
    return model


def _clip_features(model, x: torch.Tensor, mean, std) -> torch.Tensor:
    """What CLIP's own API gives for pixel-space ``x`` normalised with ``mean``/``std``."""
    with torch.no_grad():
        out = model.get_image_features(
            pixel_values=(x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
        )
    return getattr(out, "pooler_output", out)


def test_folder_gives_the_models_features_and_its_image_processors_convention(tmp_path) -> None:
    model = _save_clip(tmp_path / "clip")
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    for bb in (
        create_backbone("hf:openai/clip-tiny", checkpoint_path=str(tmp_path / "clip")),
        create_backbone(f"hf:{tmp_path / 'clip'}"),  # the folder as the model id
    ):
        assert bb.input_size == (3, 32, 32) and bb.mean == (0.1, 0.2, 0.3) and bb.std == (0.3, 0.2, 0.1)
        assert bb.interpolation == "bilinear" and bb.crop_pct == pytest.approx(32 / 36)
        assert bb.embed_dim == 16 and not bb.training  # after the image-text projection
        with torch.no_grad():
            torch.testing.assert_close(bb.embed(x), _clip_features(model, x, bb.mean, bb.std))
    tower = create_backbone(f"hf:{tmp_path / 'clip'}", projection=False)
    with torch.no_grad():
        pooled = model.vision_model(pixel_values=(x - tower._mean) / tower._std).pooler_output
        torch.testing.assert_close(tower.embed(x), pooled)
    assert tower.embed_dim == 32
    assert not hasattr(tower, "text_model") and all("text" not in k for k in tower.state_dict())


def test_a_weights_file_with_a_config_and_a_wrong_file(tmp_path) -> None:
    from transformers import ViTForImageClassification

    from src.backbones.hf_backbone import _as_config

    torch.manual_seed(0)
    full = ViTForImageClassification(_as_config({**TINY_HF["vit"], "num_labels": 3})).eval()
    torch.save(full.state_dict(), tmp_path / "vit.pth")  # keys vit.*, classifier.*: the prefix and head are handled
    bb = create_backbone("hf:my-vit", config=TINY_HF["vit"], checkpoint_path=str(tmp_path / "vit.pth"))
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        cls = full.vit(pixel_values=bb.normalize(x)).last_hidden_state[:, 0]
        torch.testing.assert_close(bb.embed(x), cls)
    torch.save({"something.else": torch.zeros(3)}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="does not match hf model 'my-vit'.* missing key"):
        create_backbone("hf:my-vit", config=TINY_HF["vit"], checkpoint_path=str(tmp_path / "other.pth"))


def test_hub_id_read_from_the_hf_cache_offline_and_listed(no_network) -> None:
    snapshot = no_network / "models--someorg--tiny-clip" / "snapshots" / ("a" * 40)
    model = _save_clip(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("a" * 40)
    bb = create_backbone("hf:someorg/tiny-clip")
    x = torch.rand(1, 3, 32, 32)
    torch.testing.assert_close(bb.embed(x).detach(), _clip_features(model, x, bb.mean, bb.std))
    assert list_backbones("hf") == ["hf:someorg/tiny-clip"] and "hf:someorg/tiny-clip" in list_backbones()
    assert list_backbones("hf", "*dinov2*") == []
    # pretrained=False: the cached config only, random weights
    assert create_backbone("hf:someorg/tiny-clip", pretrained=False).embed_dim == 16


def test_missing_hub_weights_fail_fast_naming_the_files(no_network) -> None:
    with pytest.raises(MissingWeightsError) as info:
        create_backbone("hf:facebook/dinov2-base")
    msg = str(info.value)
    for part in ("'facebook/dinov2-base'", "config.json", "model.safetensors", "hf download", "checkpoint_path="):
        assert part in msg, part
    # the config is cached but not the weights: only the weights are named
    snapshot = no_network / "models--facebook--dinov2-base" / "snapshots" / ("b" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(TINY_HF["dinov2"]))
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("b" * 40)
    with pytest.raises(MissingWeightsError, match=r"\['model.safetensors or pytorch_model.bin'\]"):
        create_backbone("hf:facebook/dinov2-base")
    with pytest.warns(UserWarning, match="no preprocessor_config.json"):  # not cached either: the fallback rule
        assert create_backbone("hf:facebook/dinov2-base", pretrained=False).embed_dim == 32  # the config suffices


def test_missing_or_incomplete_checkpoint_folders_name_the_files(tmp_path) -> None:
    with pytest.raises(MissingWeightsError, match="checkpoint not found"):
        create_backbone("hf:x", checkpoint_path=str(tmp_path / "nope"))
    with pytest.raises(MissingWeightsError, match="folder not found"):
        create_backbone(f"hf:{tmp_path / 'nope'}/")  # an id that is a path, not a repo: the fix names the files
    folder = tmp_path / "half"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_HF["vit"]))
    with pytest.raises(MissingWeightsError, match=r"lacks \['model.safetensors or pytorch_model.bin'\]"):
        create_backbone("hf:x", checkpoint_path=str(folder))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"")
    with pytest.raises(MissingWeightsError, match=r"lacks \['model-00002-of-00002.safetensors'\]"):
        create_backbone("hf:x", checkpoint_path=str(folder))


def test_input_convention_without_an_image_processor(tmp_path) -> None:
    """The fallback rule: config image_size; SigLIP 0.5, CLIP OpenAI, else ImageNet statistics."""
    assert create_backbone("hf:a", config=TINY_HF["siglip_vision"]).mean == (0.5, 0.5, 0.5)
    assert create_backbone("hf:a", config=TINY_HF["clip"]).mean[0] == pytest.approx(0.48145466)
    vit = create_backbone("hf:a", config=TINY_HF["vit"])
    assert vit.mean == (0.485, 0.456, 0.406) and vit.input_size == (3, 32, 32) and vit.crop_pct == 0.875
    _save_clip(tmp_path / "bare", processor=False)
    with pytest.warns(UserWarning, match="no preprocessor_config.json"):
        create_backbone(f"hf:{tmp_path / 'bare'}")


def test_options_pooling_projection_sizes_and_errors() -> None:
    x = torch.rand(2, 3, 32, 32)
    torch.manual_seed(0)
    outs = {}
    for pooling in ("cls", "mean"):
        torch.manual_seed(0)
        outs[pooling] = create_backbone("hf:v", config=TINY_HF["dinov2"], pooling=pooling).embed(x)
    torch.manual_seed(0)
    auto = create_backbone("hf:v", config=TINY_HF["dinov2"]).embed(x)
    torch.testing.assert_close(auto, outs["cls"])  # DINOv2's pooler_output is the LayerNormed CLS token
    assert not torch.allclose(outs["cls"], outs["mean"])
    vit = create_backbone("hf:v", config=TINY_HF["vit"])
    assert vit.model.pooler is None  # the untrained dense+tanh pooler is dropped under CLS pooling
    assert vit.embed(torch.rand(1, 3, 48, 48)).shape == (1, 32)  # position embeddings interpolated
    fixed = create_backbone("hf:v", config=TINY_HF["vit"], interpolate_pos_encoding=False)
    with pytest.raises(ValueError, match="only accepts its native input size 32x32"):
        fixed.embed(torch.rand(1, 3, 48, 48))
    mae = create_backbone("hf:m", config=TINY_HF["vit_mae"])
    torch.testing.assert_close(mae.embed(x), mae.embed(x))  # no random masking: every patch, in order
    with pytest.raises(ValueError, match="no image-text projection"):
        create_backbone("hf:s", config=TINY_HF["siglip_vision"], projection=True)
    with pytest.raises(ValueError, match="pooling must be one of"):
        create_backbone("hf:s", config=TINY_HF["vit"], pooling="max")
    with pytest.raises(ValueError, match="config= builds a randomly initialised model"):
        create_backbone("hf:s", config=TINY_HF["vit"], pretrained=True)
    with pytest.raises(ValueError, match="dict with model_type"):
        create_backbone("hf:s", config={"hidden_size": 32})


def test_specs_in_yaml_form_build_and_rebuild(tmp_path) -> None:
    """A {name, config} spec (what YAML and hparams hold) builds through build_backbone, no warning."""
    from omegaconf import OmegaConf

    from src.backbones import backbone_spec, build_backbone

    spec = OmegaConf.create({"name": "hf:tiny-vit", "config": TINY_HF["vit"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bb = build_backbone(spec)
    assert backbone_spec(bb) == {"name": "hf:tiny-vit", "config": TINY_HF["vit"]}
    assert build_backbone(backbone_spec(bb)).embed_dim == 32
