"""Backbones behind one protocol: ``create_backbone(name) -> Backbone`` with ``embed(x)`` on pixel-space images."""

from .base import Backbone, check_images
from .registry import SOURCES, SourceSpec, create_backbone, list_backbones, register_source
from .spec import backbone_spec, build_backbone
from .weights import MissingWeightsError

__all__ = [
    "Backbone",
    "MissingWeightsError",
    "SOURCES",
    "SourceSpec",
    "backbone_spec",
    "build_backbone",
    "check_images",
    "create_backbone",
    "list_backbones",
    "register_source",
]
