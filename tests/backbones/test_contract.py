"""Every adapter honours the Backbone protocol (tiny random-init models: no download)."""

from __future__ import annotations

import pytest
import torch

from src.backbones import Backbone, create_backbone

from .test_hf import TINY_HF

ADAPTERS = [
    ("embedded:efficientnet_lite0", {"pretrained": False}),
    ("timm:test_efficientnet", {"pretrained": False}),
    ("timm:test_vit", {"pretrained": False}),
    ("open_clip:ViT-B-32", {"pretrained": None}),
    ("open_clip:ViT-B-32", {"pretrained": None, "projection": False}),
    ("torchvision:mobilenet_v3_small", {"pretrained": False}),
    # Hugging Face transformers, tiny random configs built offline (tests/backbones/test_hf.py: TINY_HF)
    *((f"hf:tiny-{kind}", {"config": config}) for kind, config in TINY_HF.items()),
    ("hf:tiny-clip", {"config": TINY_HF["clip"], "projection": False}),
]


@pytest.fixture(
    scope="module",
    params=ADAPTERS,
    ids=lambda p: f"{p[0]}-{'-'.join(f'{k}={v}' for k, v in p[1].items() if k != 'config')}",
)
def backbone(request) -> Backbone:
    name, opts = request.param
    torch.manual_seed(0)
    return create_backbone(name, **opts).eval()


def test_attributes(backbone: Backbone) -> None:
    assert isinstance(backbone, torch.nn.Module)
    assert backbone.name.split(":")[0] in {"embedded", "timm", "open_clip", "torchvision", "hf"}
    assert len(backbone.input_size) == 3 and backbone.input_size[0] == 3
    assert len(backbone.mean) == 3 and len(backbone.std) == 3 and all(s > 0 for s in backbone.std)
    assert backbone.embed_dim > 0


def test_embed_shape_and_normalization_inside(backbone: Backbone) -> None:
    size = backbone.input_size[1:]
    x = torch.rand(2, 3, *size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        z = backbone.embed(x)
        mean = torch.tensor(backbone.mean).view(1, 3, 1, 1)
        std = torch.tensor(backbone.std).view(1, 3, 1, 1)
        z_ref = backbone.forward_normalized((x - mean) / std)
    assert z.shape == (2, backbone.embed_dim)
    assert z.dtype == torch.float32 and torch.isfinite(z).all()
    torch.testing.assert_close(z, z_ref)
    # per-sample independence in eval mode (no batch statistics leak between samples)
    with torch.no_grad():
        torch.testing.assert_close(backbone.embed(x[:1]), z[:1], rtol=1e-4, atol=1e-4)


def test_gradient_reaches_pixels(backbone: Backbone) -> None:
    """PGD needs d embed / d x."""
    x = torch.rand(1, 3, *backbone.input_size[1:], requires_grad=True)
    z = backbone.embed(x)
    # a random direction: a plain sum can be constant (LayerNorm outputs sum to a constant)
    (z * torch.randn(z.shape, generator=torch.Generator().manual_seed(2))).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "bad, err",
    [
        (torch.randint(0, 255, (1, 3, 32, 32), dtype=torch.uint8), TypeError),
        (torch.rand(3, 32, 32), ValueError),
        (torch.rand(1, 1, 32, 32), ValueError),
        ([[0.0]], TypeError),
    ],
)
def test_bad_images_rejected(backbone: Backbone, bad, err) -> None:
    with pytest.raises(err, match="pixel space|shape|Tensor"):
        backbone.embed(bad)
