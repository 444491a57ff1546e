"""Backbone specs: what a module, a callback or a report saves to rebuild a backbone (a registry name or
``{name: ..., **options}``) and the one function that builds a Backbone from one. Lives with the backbones so that
every layer above (metrics, cores' reports, callbacks, LightningModules) imports downward."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Backbone
from .registry import create_backbone

__all__ = ["backbone_spec", "build_backbone", "plain"]


def build_backbone(spec: Backbone | str | Mapping[str, Any]) -> Backbone:
    """A Backbone, a registry name, or a mapping ``{name: ..., **opts}`` -> a Backbone."""
    if isinstance(spec, Backbone):
        return spec
    if isinstance(spec, str):
        backbone = create_backbone(spec)
    elif isinstance(spec, Mapping) and "name" in spec:
        backbone = create_backbone(spec["name"], **{k: v for k, v in spec.items() if k != "name"})
    else:
        raise TypeError(
            f"backbone must be a Backbone, a name like 'embedded:efficientnet_lite0' or {{name: ...}}, got {spec!r}"
        )
    backbone.spec = plain(spec)  # what rebuilt it (hparams of a module that is given this backbone later)
    return backbone


def backbone_spec(backbone: Backbone | str | Mapping[str, Any]) -> str | dict[str, Any]:
    """What goes into hparams for ``backbone``: the name or ``{name, **opts}`` (a Backbone gives its ``spec``
    attribute when it has one, else its name; its weights are in the checkpoint's state dict anyway)."""
    if isinstance(backbone, Backbone):
        spec = getattr(backbone, "spec", None)
        if spec:
            return plain(spec)
        # rebuild the architecture only: the weights (pretrained or trained) come from the checkpoint's state dict
        return {"name": backbone.name, "pretrained": None if backbone.name.startswith("open_clip:") else False}
    if isinstance(backbone, str):
        return backbone
    if isinstance(backbone, Mapping):
        return plain(backbone)
    raise TypeError(
        f"backbone must be a Backbone, a name like 'embedded:efficientnet_lite0' or {{name: ...}}, got {backbone!r}"
    )


def plain(value: Any) -> Any:
    """Mappings -> dict, tuples -> list (recursively): hparams must load with ``torch.load(weights_only=True)``."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
