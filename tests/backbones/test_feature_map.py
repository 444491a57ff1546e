"""``Backbone.embed_with_map``: the embedding and the last spatial feature map of one forward (patch tokens of a ViT
on its patch grid, the last feature map of a conv net), for dense heads such as the depth head."""

from __future__ import annotations

import pytest
import torch

from src.backbones import create_backbone
from src.backbones.base import tokens_to_map


def test_tokens_to_map_drops_leading_tokens_and_lays_patches_row_major() -> None:
    """Token 1 + r·w + c (after one CLS token) lands at map[:, :, r, c]: the row-major patch order of every ViT."""
    n, h, w, c = 2, 3, 4, 5
    patches = torch.arange(n * h * w * c, dtype=torch.float32).reshape(n, h * w, c)
    tokens = torch.cat([torch.full((n, 1, c), -1.0), patches], 1)  # a CLS token first
    fmap = tokens_to_map(tokens, (h * 8, w * 8), 8)
    assert fmap.shape == (n, c, h, w)
    for r in range(h):
        for col in range(w):
            assert torch.equal(fmap[:, :, r, col], patches[:, r * w + col])
    with pytest.raises(ValueError, match="patches"):
        tokens_to_map(patches[:, :5], (h * 8, w * 8), 8)  # fewer tokens than patches


@pytest.mark.parametrize("name", ["timm:test_vit", "timm:test_efficientnet"])
def test_timm_map_and_embedding_of_one_forward(name: str) -> None:
    """The embedding equals embed()'s; the map has the backbone's patch grid (ViT: 32 px / 16 = 2) or its last
    stage's stride-32 map (1 x 1 at 32 px)."""
    torch.manual_seed(0)
    bb = create_backbone(name, pretrained=False)
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        z, fmap = bb.embed_with_map(x)
        assert torch.allclose(z, bb.embed(x), atol=1e-6)
    side = 2 if "vit" in name else 1
    assert fmap.shape[0] == 3 and fmap.shape[-2:] == (side, side)
    if "vit" in name:  # the patch tokens of forward_features, CLS dropped
        tokens = bb.model.forward_features(bb.normalize(x))
        assert torch.equal(fmap.flatten(2).transpose(1, 2), tokens[:, 1:].detach())


def test_hf_vit_map_has_the_patch_grid() -> None:
    """A random transformers ViT (offline): last_hidden_state without its CLS token, on the 4 x 4 grid of 32 px / 8."""
    cfg = dict(model_type="vit", hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
               image_size=32, patch_size=8)  # fmt: skip
    torch.manual_seed(0)
    bb = create_backbone("hf:tiny-vit", config=cfg)
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        z, fmap = bb.embed_with_map(x)
        hidden = bb.model(pixel_values=bb.normalize(x), interpolate_pos_encoding=True).last_hidden_state
        assert torch.allclose(z, bb.embed(x), atol=1e-6)
    assert fmap.shape == (2, 32, 4, 4)
    assert torch.allclose(fmap.flatten(2).transpose(1, 2), hidden[:, 1:], atol=1e-6)


def test_backbone_without_a_map_names_the_sources_that_have_one() -> None:
    bb = create_backbone("torchvision:resnet18", pretrained=False)
    with pytest.raises(NotImplementedError, match="timm:, embedded:, hf: or open_clip:"):
        bb.embed_with_map(torch.rand(1, 3, 32, 32))


def test_open_clip_vit_map_is_its_output_tokens() -> None:
    """open_clip ViT towers: the embedding of embed() and the 7 x 7 patch tokens of 224 px / 32 (output_tokens is
    restored afterwards)."""
    bb = create_backbone("open_clip:ViT-B-32", pretrained=None)
    x = torch.rand(1, 3, 224, 224)
    with torch.no_grad():
        z, fmap = bb.embed_with_map(x)
        assert torch.equal(z, bb.embed(x))
    assert fmap.shape == (1, 768, 7, 7) and bb.visual.output_tokens is False
