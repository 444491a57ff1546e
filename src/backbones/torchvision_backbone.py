"""torchvision classification models as backbones: the embedding is the input of the last Linear layer."""

from __future__ import annotations

import os
from typing import Any

from torch import Tensor, nn

from .base import Backbone
from .registry import register_source
from .weights import MissingWeightsError, check_state_dict_matches, host_reachable, load_state_dict

__all__ = ["TorchvisionBackbone", "create_torchvision"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _replace_last_linear(model: nn.Module) -> int:
    """Swap the last ``nn.Linear`` (the classifier) for Identity; return its input width."""
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    if last is None:
        raise ValueError("no nn.Linear classifier found to strip")
    parent_name, _, child = last.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    width = getattr(parent, child).in_features
    setattr(parent, child, nn.Identity())
    return width


class TorchvisionBackbone(Backbone):
    def __init__(self, model: nn.Module, *, name: str, input_size: int = 224, crop_pct: float = 0.875) -> None:
        embed_dim = _replace_last_linear(model)
        super().__init__(
            name, embed_dim, (3, input_size, input_size), IMAGENET_MEAN, IMAGENET_STD, "bilinear", crop_pct
        )
        self.model = model

    def forward_normalized(self, x: Tensor) -> Tensor:
        return self.model(x)


def _weights_by_name(enum: Any, tag: str, model_name: str) -> Any:
    """``enum[tag]`` accepting ``"IMAGENET1K_V2"`` or ``"ResNet50_Weights.IMAGENET1K_V2"``; a clear error otherwise."""
    key = tag.rsplit(".", 1)[-1]
    names = [w.name for w in enum]
    if key not in names and key != "DEFAULT":
        raise ValueError(
            f"unknown pretrained weights {tag!r} for torchvision {model_name!r}; valid names: {names + ['DEFAULT']} "
            "(or pretrained=True for the default weights, pretrained=False for random init)"
        )
    return enum[key]


def create_torchvision(
    name: str, *, pretrained: bool | str = True, checkpoint_path: str | None = None, **kwargs: Any
) -> TorchvisionBackbone:
    """``torchvision:<name>``: ``pretrained`` True (DEFAULT weights), a weights enum name, or False."""
    import torch
    from torchvision import models

    if name not in models.list_models(module=models):
        raise ValueError(f"unknown torchvision classification model {name!r}; see torchvision.models.list_models()")
    model = models.get_model(name, weights=None, **kwargs)
    size, crop_pct = 224, 0.875
    if checkpoint_path is not None:
        sd = load_state_dict(checkpoint_path)
        check_state_dict_matches(sd, model, f"checkpoint {checkpoint_path} for torchvision {name!r}")
        model.load_state_dict(sd, strict=True)
    elif pretrained:
        enum = models.get_model_weights(name)
        weights = enum.DEFAULT if pretrained is True else _weights_by_name(enum, str(pretrained), name)
        fname = os.path.basename(weights.url)
        cached = os.path.join(torch.hub.get_dir(), "checkpoints", fname)
        if os.path.isfile(cached):
            model.load_state_dict(load_state_dict(cached), strict=True)
        elif host_reachable(weights.url.split("/")[2]):
            model.load_state_dict(weights.get_state_dict(progress=False, weights_only=True), strict=True)
        else:
            raise MissingWeightsError(
                f"pretrained weights {weights} for torchvision {name!r} are not available offline: looked for "
                f"{fname!r} in {os.path.dirname(cached)}. Fix: copy the file there (TORCH_HOME), pass "
                "checkpoint_path=/path/to/file.pth, or pretrained=False for random init."
            )
        tf = weights.transforms()
        size = int(tf.crop_size[0])
        crop_pct = size / int(tf.resize_size[0])
    return TorchvisionBackbone(model, name=f"torchvision:{name}", input_size=size, crop_pct=crop_pct)


def list_torchvision(pattern: str | None = None) -> list[str]:
    """torchvision's classification models (``torchvision.models.list_models``)."""
    from torchvision import models

    return list(models.list_models(module=models))


register_source(
    "torchvision",
    create_torchvision,
    list_torchvision,
    doc="torchvision classification models (pretrained weights enum, or checkpoint_path)",
)
