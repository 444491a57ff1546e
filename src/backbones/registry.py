"""``create_backbone("<source>:<name>", **opts)``: one entry point for every backbone source."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import Backbone

__all__ = ["create_backbone", "list_backbones", "register_backbone", "SOURCES"]

SOURCES: dict[str, Callable[..., Backbone]] = {}


def register_backbone(source: str, factory: Callable[..., Backbone]) -> None:
    """Register ``factory(name, **opts) -> Backbone`` under ``source`` (the part before the colon)."""
    SOURCES[source] = factory


def _builtin() -> None:
    from .embedded import create_embedded
    from .open_clip_backbone import create_open_clip
    from .timm_backbone import create_timm
    from .torchvision_backbone import create_torchvision

    for source, factory in {
        "embedded": create_embedded,
        "timm": create_timm,
        "open_clip": create_open_clip,
        "torchvision": create_torchvision,
    }.items():
        SOURCES.setdefault(source, factory)


def create_backbone(name: str, **opts: Any) -> Backbone:
    """Build a backbone from ``"<source>:<name>"``.

    Sources: ``embedded`` (EfficientNet-Lite 0/1/2, offline ImageNet weights), ``timm`` (``pretrained``,
    ``checkpoint_path``), ``open_clip`` (``pretrained`` tag or file, ``projection``), ``torchvision``
    (``pretrained``, ``checkpoint_path``). Extra options go to the source's factory.

    The backbone is returned in **eval mode** (``embed`` gives per-sample features and leaves BatchNorm running
    statistics untouched); call ``.train()`` to fine-tune it.
    """
    _builtin()
    if not isinstance(name, str) or ":" not in name:
        raise ValueError(
            f"backbone name must look like '<source>:<name>' with source in {sorted(SOURCES)}, got {name!r} "
            "(e.g. 'embedded:efficientnet_lite0', 'timm:resnet50')"
        )
    source, _, model_name = name.partition(":")
    if source not in SOURCES:
        raise ValueError(f"unknown backbone source {source!r} in {name!r}; choose one of {sorted(SOURCES)}")
    return SOURCES[source](model_name, **opts).eval()


def list_backbones(source: str | None = None, pattern: str | None = None) -> list[str]:
    """Names accepted by :func:`create_backbone` (embedded ones first; hub catalogues filtered by ``pattern``)."""
    import fnmatch

    from .embedded import EMBEDDED

    out = [f"embedded:{n}" for n in EMBEDDED]
    if source in (None, "timm"):
        import timm

        out += [f"timm:{n}" for n in timm.list_models(pattern or "*")]
    if source in (None, "open_clip"):
        import open_clip

        out += [f"open_clip:{n}" for n in open_clip.list_models()]
    if source in (None, "torchvision"):
        from torchvision import models

        out += [f"torchvision:{n}" for n in models.list_models(module=models)]
    if source is not None:
        out = [n for n in out if n.startswith(source + ":")]
    if pattern:
        out = [n for n in out if fnmatch.fnmatch(n.split(":", 1)[1], pattern)]
    return out
