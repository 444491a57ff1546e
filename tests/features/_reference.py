"""Shared helpers for the engine tests: tiny backbones of each source and the float64 reference forward."""

from __future__ import annotations

import copy
import json

import torch
from torch import Tensor, nn

U32 = torch.finfo(torch.float32).eps / 2  # unit roundoff of float32, 2^-24

TINY_OPEN_CLIP = "repbench-test-tiny-vit"


def register_tiny_open_clip(tmp_dir) -> str:
    """Register a 2-layer, 32 px ViT open_clip config (a few MB; ViT-B-32 itself is 88 M parameters)."""
    import open_clip

    if TINY_OPEN_CLIP not in open_clip.list_models():
        cfg = {
            "embed_dim": 32,
            "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 8},
            "text_cfg": {"context_length": 8, "vocab_size": 1000, "width": 32, "heads": 2, "layers": 1},
        }
        path = tmp_dir / f"{TINY_OPEN_CLIP}.json"
        path.write_text(json.dumps(cfg))
        open_clip.add_model_config(path)
    return TINY_OPEN_CLIP


def make_backbone(source: str, tmp_dir):
    """A randomly initialised backbone of ``source`` through the public create_backbone, at 32 px."""
    from src.backbones import create_backbone

    torch.manual_seed(0)
    if source == "timm":
        bb = create_backbone("timm:resnet10t", pretrained=False)
    elif source == "torchvision":
        bb = create_backbone("torchvision:resnet18", pretrained=False)
    elif source == "open_clip":
        bb = create_backbone(f"open_clip:{register_tiny_open_clip(tmp_dir)}", pretrained=None)
    else:  # pragma: no cover
        raise ValueError(source)
    return bb.eval()


def float64_features(module: nn.Module, x: Tensor) -> Tensor:
    """The exact-arithmetic stand-in: the same network and input in float64 (rounding 2^29 times smaller)."""
    ref = copy.deepcopy(module).double().eval()
    with torch.no_grad():
        return ref.embed(x.double())


def rel_errors(z: Tensor, ref: Tensor) -> Tensor:
    """Per-sample relative error ‖z_i − ref_i‖ / ‖ref_i‖ in float64."""
    z, ref = z.double(), ref.double()
    return (z - ref).norm(dim=1) / ref.norm(dim=1)
