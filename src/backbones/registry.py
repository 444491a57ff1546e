"""``create_backbone("<source>:<name>", **opts)``: one entry point for every backbone source, one table of sources.

A source is one :func:`register_source` call at its definition site: its factory (``name, **opts -> Backbone``), its
lister (``pattern -> names``, for :func:`list_backbones`) and a one-line description, stored as a :class:`SourceSpec`
row of :data:`SOURCES`. The builtin sources live in the modules named by :data:`BUILTIN_MODULES` (the one list to
extend for a new builtin source); they are imported on the first use of the table, so importing
:mod:`src.backbones` imports no hub package (timm, open_clip, transformers), and each lister imports its package only
when called.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import Backbone

__all__ = ["BUILTIN_MODULES", "SOURCES", "SourceSpec", "create_backbone", "list_backbones", "register_source"]

Factory = Callable[..., Backbone]
Lister = Callable[[str | None], list[str]]


@dataclass(frozen=True)
class SourceSpec:
    """One backbone source: ``<name>:<model>`` is built by ``factory(model, **opts)``; ``lister(pattern)`` gives the
    model names of its catalogue (without the ``<name>:`` prefix; it may pre-filter by the fnmatch ``pattern`` or
    ignore it), or is None for a source that cannot list its models (left out of :func:`list_backbones`)."""

    name: str
    factory: Factory
    lister: Lister | None = None
    doc: str = ""


#: the table of backbone sources, in listing order (the builtin ones first); filled on first use of the registry
SOURCES: dict[str, SourceSpec] = {}

#: the builtin sources' modules (in this package), in listing order; each one registers its source when imported
BUILTIN_MODULES = ("embedded", "timm_backbone", "open_clip_backbone", "torchvision_backbone", "hf_backbone")

_loaded = False


def _load_builtins() -> None:
    """Import the builtin source modules once (each calls :func:`register_source` for itself)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    try:
        for module in BUILTIN_MODULES:
            importlib.import_module(f"{__package__}.{module}")
    except BaseException:
        _loaded = False  # a failed import is retried (and raises again) on the next use
        raise


def _rank(spec: SourceSpec) -> int:
    """Position of a source in listings: the builtin ones in :data:`BUILTIN_MODULES` order, then the others."""
    module = getattr(spec.factory, "__module__", "") or ""
    prefix, _, leaf = module.rpartition(".")
    if prefix == __package__ and leaf in BUILTIN_MODULES:
        return BUILTIN_MODULES.index(leaf)
    return len(BUILTIN_MODULES)


def register_source(
    name: str, factory: Factory, lister: Lister | None = None, *, doc: str | None = None, overwrite: bool = False
) -> SourceSpec:
    """Register the backbone source ``name``: ``create_backbone("<name>:<model>", **opts)`` calls
    ``factory(model, **opts)``, and ``list_backbones()`` lists ``lister(pattern)`` (each name prefixed by
    ``<name>:``). Call it once, where the source is defined.

    ``lister=None``: the source builds backbones but is left out of ``list_backbones()``, and
    ``list_backbones(name)`` raises a ValueError saying so. ``doc``: one line describing the source (default: the
    first line of the factory's docstring). A name registered before raises a ValueError unless ``overwrite=True``
    (registering the very same factory and lister again is a no-op). Returns the table row.
    """
    if not isinstance(name, str) or not name or ":" in name or name != name.strip():
        raise ValueError(f"a backbone source name must be a non-empty string without ':' or spaces, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory of backbone source {name!r} must be callable (name, **opts) -> Backbone")
    if lister is not None and not callable(lister):
        raise TypeError(f"lister of backbone source {name!r} must be callable (pattern) -> list of names, or None")
    _load_builtins()
    if doc is None:
        doc = ((getattr(factory, "__doc__", None) or "").strip().splitlines() or [""])[0]
    spec = SourceSpec(name, factory, lister, doc)
    old = SOURCES.get(name)
    if old is not None and not overwrite:
        if (old.factory, old.lister) == (factory, lister):
            return old
        raise ValueError(
            f"backbone source {name!r} is already registered (factory {getattr(old.factory, '__qualname__', old.factory)!r}); "
            "pick another name, or pass overwrite=True to replace it"
        )
    SOURCES[name] = spec
    ordered = sorted(SOURCES.values(), key=_rank)  # stable: registration order within each rank
    SOURCES.clear()
    SOURCES.update((s.name, s) for s in ordered)
    return spec


def create_backbone(name: str, **opts: Any) -> Backbone:
    """Build a backbone from ``"<source>:<name>"``.

    Sources (:data:`SOURCES`): ``embedded`` (EfficientNet-Lite 0/1/2, offline ImageNet weights), ``timm``
    (``pretrained``, ``checkpoint_path``), ``open_clip`` (``pretrained`` tag or file, ``projection``), ``torchvision``
    (``pretrained``, ``checkpoint_path``), ``hf`` (Hugging Face ``transformers``: a hub id or local folder,
    ``pretrained``, ``checkpoint_path``, ``projection``, ``pooling``, ``config``), and any source added with
    :func:`register_source`. Extra options go to the source's factory.

    The backbone is returned in **eval mode** (``embed`` gives per-sample features and leaves BatchNorm running
    statistics untouched); call ``.train()`` to fine-tune it.
    """
    _load_builtins()
    if not isinstance(name, str) or ":" not in name:
        raise ValueError(
            f"backbone name must look like '<source>:<name>' with source in {list(SOURCES)}, got {name!r} "
            "(e.g. 'embedded:efficientnet_lite0', 'timm:resnet50')"
        )
    source, _, model_name = name.partition(":")
    if source not in SOURCES:
        raise ValueError(f"unknown backbone source {source!r} in {name!r}; choose one of {list(SOURCES)}")
    return SOURCES[source].factory(model_name, **opts).eval()


def list_backbones(source: str | None = None, pattern: str | None = None) -> list[str]:
    """Names accepted by :func:`create_backbone`: every source of :data:`SOURCES` in table order (embedded ones
    first), or only ``source``; filtered by the fnmatch ``pattern`` on the part after the colon.

    A source registered without a lister is left out of the full listing; naming it as ``source`` raises a
    ValueError, as does an unknown ``source``.
    """
    _load_builtins()
    if source is not None and source not in SOURCES:
        raise ValueError(f"unknown backbone source {source!r}; choose one of {list(SOURCES)}")
    out: list[str] = []
    for spec in [SOURCES[source]] if source is not None else list(SOURCES.values()):
        if spec.lister is None:
            if source is not None:
                raise ValueError(
                    f"backbone source {source!r} was registered without a lister, so it cannot list its models; "
                    "pass lister=<pattern -> names> to register_source to list them"
                )
            continue
        out += [f"{spec.name}:{n}" for n in spec.lister(pattern)]
    if pattern:
        out = [n for n in out if fnmatch.fnmatch(n.split(":", 1)[1], pattern)]
    return out
