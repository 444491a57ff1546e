"""Backbone specs: what a module, a callback or a report saves to rebuild a backbone (a registry name or
``{name: ..., **options}``) and the one function that builds a Backbone from one. Lives with the backbones so that
every layer above (metrics, cores' reports, callbacks, LightningModules) imports downward."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .base import Backbone
from .registry import create_backbone

__all__ = [
    "BackboneLike",
    "backbone_labels",
    "backbone_list",
    "check_backbone_spec",
    "check_buildable",
    "backbone_spec",
    "build_backbone",
    "native_sizes",
    "plain",
    "spec_name",
]

#: what every entry point accepts for a backbone: a Backbone, a registry name, or ``{name: ..., **create_options}``
BackboneLike = Backbone | str | Mapping[str, Any]
ONE_FIX = "give a registry name such as embedded:efficientnet_lite0 or {name: ..., **create_backbone options}"
LIST_FIX = "write backbones as a list of names or {name: ..., **options}, e.g. [embedded:efficientnet_lite0, {name: timm:resnet10t, pretrained: false}]"


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


def backbone_list(value: Any, key: str = "backbones") -> list[Backbone | dict[str, Any]]:
    """The one backbone-list vocabulary of every CLI and ``compare_backbones``: a non-empty list whose entries are
    registry names (``"embedded:efficientnet_lite0"``), mappings ``{name: ..., **create_backbone options}`` or Backbone
    objects. Returns Backbones as given and every other entry as a plain ``{name, **opts}`` dict; a ValueError naming
    ``key`` and the entry otherwise (a bare string is refused: it would be read as a list of characters)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or not value:
        raise ValueError(f"{key} must be a non-empty list of backbones, got {value!r}; {LIST_FIX}")
    out: list[Backbone | dict[str, Any]] = []
    for i, entry in enumerate(value):
        try:
            entry = check_backbone_spec(entry, f"{key}[{i}]")
        except ValueError:
            raise ValueError(
                f"{key}[{i}] must be a backbone name or {{name: ..., **options}}, got {entry!r}; {LIST_FIX}"
            ) from None
        out.append(
            entry if isinstance(entry, Backbone) else {"name": entry} if isinstance(entry, str) else plain(entry)
        )
    return out


def check_backbone_spec(value: Any, name: str = "backbone") -> BackboneLike:
    """``value`` if it names one backbone (a Backbone, a non-empty registry name or a mapping with a non-empty
    ``name``): the one validator of a backbone entry; a ValueError naming ``name`` and the fix otherwise."""
    if isinstance(value, Backbone) or (isinstance(value, str) and value):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("name"), str) and value["name"]:
        return value
    raise ValueError(f"{name} must be one backbone, got {value!r}; {ONE_FIX}")


def spec_name(spec: BackboneLike) -> str:
    """The registry name of a Backbone, a name or a ``{name, **opts}`` mapping."""
    if isinstance(spec, Backbone):
        return spec.name
    return spec if isinstance(spec, str) else str(spec["name"])


def backbone_labels(specs: list[BackboneLike]) -> list[str]:
    """One distinct label per entry of a backbone list: its name, or where two entries share a name, the name with
    the options that tell them apart (``timm:resnet10t[pretrained=False]``); a ValueError for exact duplicates."""
    names = [spec_name(s) for s in specs]
    labels = []
    for spec, name in zip(specs, names):
        opts = {k: v for k, v in spec.items() if k != "name"} if isinstance(spec, Mapping) else {}
        if names.count(name) > 1 and opts:
            name = name + "[" + ",".join(f"{k}={v}" for k, v in sorted(opts.items())) + "]"
        labels.append(name)
    dupes = sorted({lab for lab in labels if labels.count(lab) > 1})
    if dupes:
        raise ValueError(f"backbones lists {dupes} more than once with the same options; list each backbone once")
    return labels


def check_buildable(specs: Sequence[BackboneLike]) -> list[tuple[int, int] | None]:
    """Build every backbone of a list once on the CPU and drop it, so that a missing weight file, an unknown name or
    a wrong option fails before a long comparison starts rather than after the first backbones have run (costs one
    construction per backbone: seconds, against minutes to hours of protocol). Runs under ``torch.random.fork_rng``:
    random-weight backbones built afterwards get the same initial weights as without this check. Returns, per entry,
    the native (H, W) of a backbone that accepts no other input size (``fixed_input_size``: a ViT's positional
    embedding), else None — what a caller checks its image sizes against before any work."""
    return [size if fixed else None for size, fixed in _built_sizes(specs)]


def native_sizes(specs: Sequence[BackboneLike]) -> list[tuple[int, int]]:
    """The native input (H, W) of every entry of a backbone list (each built once on the CPU and dropped, under
    ``torch.random.fork_rng`` as :func:`check_buildable`: a missing weight file fails here too)."""
    return [size for size, _ in _built_sizes(specs)]


def _built_sizes(specs: Sequence[BackboneLike]) -> list[tuple[tuple[int, int], bool]]:
    """((H, W), fixed_input_size) of each backbone, built once on the CPU under ``fork_rng``."""
    import torch

    out: list[tuple[tuple[int, int], bool]] = []
    with torch.random.fork_rng(devices=[]):
        for spec in specs:
            bb = spec if isinstance(spec, Backbone) else build_backbone(spec)
            out.append(((int(bb.input_size[1]), int(bb.input_size[2])), bool(getattr(bb, "fixed_input_size", False))))
            del bb
    return out
