"""open_clip image towers as backbones, pre- or post-projection embedding."""

from __future__ import annotations

import copy
import os
from typing import Any

from torch import Tensor, nn

from .base import Backbone, tokens_to_map
from .registry import register_source
from .weights import MissingWeightsError, find_in_hf_cache, host_reachable

__all__ = ["OpenClipBackbone", "create_open_clip"]


class OpenClipBackbone(Backbone):
    """``embed`` = ``visual(x)`` (post-projection, the joint image-text space) or the pooled tower output before
    the projection (``projection=False``; ViT towers only, where the projection is a separate matrix)."""

    def __init__(self, visual: nn.Module, *, name: str, projection: bool = True) -> None:
        cfg = getattr(visual, "preprocess_cfg", {}) or {}
        size = visual.image_size
        size = size if isinstance(size, (tuple, list)) else (size, size)
        if not projection:
            if getattr(visual, "proj", None) is None or not hasattr(visual, "transformer"):
                raise ValueError(
                    f"{name}: a pre-projection embedding needs a ViT image tower with a `proj` matrix; "
                    "use projection=True for this architecture"
                )
            visual = copy.copy(visual)  # shallow: shares parameters, drops only the projection
            visual.proj = None
            embed_dim = visual.transformer.width
        else:
            embed_dim = visual.output_dim
        from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

        super().__init__(
            name,
            embed_dim,
            (3, *size),
            cfg.get("mean", OPENAI_DATASET_MEAN),
            cfg.get("std", OPENAI_DATASET_STD),
            cfg.get("interpolation", "bicubic"),
            1.0,
        )
        self.visual = visual
        self.projection = projection
        # ViT towers (positional_embedding) and ModifiedResNet (attention-pool positional embedding) take one size
        pool = getattr(visual, "attnpool", None)
        self.fixed_input_size = hasattr(visual, "positional_embedding") or hasattr(pool, "positional_embedding")

    def forward_normalized(self, x: Tensor) -> Tensor:
        out = self.visual(x)
        return out[0] if isinstance(out, tuple) else out

    def forward_normalized_with_map(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """ViT towers: the embedding and the patch tokens (``output_tokens``) on the patch grid; ModifiedResNet
        (RN50, ...): the output of ``layer4`` and its attention pool."""
        v = self.visual
        if hasattr(v, "attnpool"):
            fmap = v.layer4(v.layer3(v.layer2(v.layer1(v.stem(x)))))
            return v.attnpool(fmap), fmap
        if not hasattr(v, "output_tokens"):
            return super().forward_normalized_with_map(x)
        before, v.output_tokens = v.output_tokens, True
        try:
            z, tokens = v(x)
        finally:
            v.output_tokens = before
        return z, tokens_to_map(tokens, x.shape[-2:], v.patch_size)


def _resolve_pretrained(arch: str, pretrained: str) -> str:
    """A local file path, a cached hub file, or fail fast naming what was looked for."""
    import open_clip

    if os.path.isfile(os.path.expanduser(pretrained)):
        return os.path.expanduser(pretrained)
    cfg = open_clip.get_pretrained_cfg(arch, pretrained)
    if not cfg:
        tags = [t for a, t in open_clip.list_pretrained() if a == arch]
        raise MissingWeightsError(
            f"{pretrained!r} is neither a file nor a known pretrained tag of open_clip {arch!r}; known tags: {tags}"
        )
    repo = (cfg.get("hf_hub") or "").strip("/")
    if repo:
        parts = repo.split("/")
        repo_id = "/".join(parts[:2])
        prefix = "/".join(parts[2:])
        names = ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
        cached = find_in_hf_cache(repo_id, [f"{prefix}/{n}" if prefix else n for n in names])
        if cached:
            return cached
        if host_reachable("huggingface.co"):
            return pretrained
        looked = f"{names} of Hugging Face repo {repo_id!r} in the HF cache"
    else:
        url = cfg.get("url", "")
        if url and host_reachable(url.split("/")[2]):
            return pretrained
        looked = f"{os.path.basename(url)!r} in the open_clip cache"
    raise MissingWeightsError(
        f"pretrained weights {pretrained!r} for open_clip {arch!r} are not available offline: looked for {looked}. "
        "Fix: download them once where there is network, or pass pretrained=/path/to/open_clip_model.safetensors, "
        "or pretrained=None for random init."
    )


def create_open_clip(
    name: str,
    *,
    pretrained: str | None = None,
    projection: bool = True,
    checkpoint_path: str | None = None,
    **kwargs: Any,
) -> OpenClipBackbone:
    """``open_clip:<arch>`` with ``pretrained`` = a tag (e.g. ``laion2b_s34b_b79k``), a local file, or None."""
    import logging

    import open_clip

    if name not in open_clip.list_models():
        raise ValueError(f"unknown open_clip architecture {name!r}; see open_clip.list_models() (e.g. 'ViT-B-32')")
    weights = checkpoint_path or pretrained
    if weights is True:
        raise ValueError("open_clip needs pretrained=<tag or file>, e.g. pretrained='laion2b_s34b_b79k'")
    if weights:
        weights = _resolve_pretrained(name, str(weights))
    logging.getLogger().disabled, prev = True, logging.getLogger().disabled  # silence 'initialized randomly'
    try:
        model = open_clip.create_model(name, pretrained=weights or None, **kwargs)
    finally:
        logging.getLogger().disabled = prev
    return OpenClipBackbone(model.visual, name=f"open_clip:{name}", projection=projection)


def list_open_clip(pattern: str | None = None) -> list[str]:
    """open_clip's architectures (``open_clip.list_models``)."""
    import open_clip

    return list(open_clip.list_models())


register_source(
    "open_clip", create_open_clip, list_open_clip, doc="open_clip image towers (pretrained tag or file, projection)"
)
