"""timm models as backbones: the embedding is the pooled pre-logits, ``forward_head(..., pre_logits=True)``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from .base import Backbone, tokens_to_map
from .registry import register_source
from .weights import MissingWeightsError, find_in_hf_cache, host_reachable, load_state_dict

__all__ = ["TimmBackbone", "create_timm"]


class TimmBackbone(Backbone):
    """Wraps a timm model; keeps its classifier so :meth:`classify` works, embeds with the pre-logits."""

    def __init__(
        self,
        model: nn.Module,
        *,
        name: str,
        input_size: Sequence[int],
        mean: Sequence[float],
        std: Sequence[float],
        interpolation: str = "bicubic",
        crop_pct: float = 0.875,
    ) -> None:
        # head_hidden_size: models with a pre-logits MLP (e.g. some ConvNeXt/ViT heads) embed at that width
        embed_dim = getattr(model, "head_hidden_size", None) or model.num_features
        super().__init__(name, embed_dim, input_size, mean, std, interpolation, crop_pct)
        self.model = model
        # ViT-style models built for one resolution (timm's pretrained_cfg flag), unless built with dynamic_img_size
        cfg = getattr(model, "pretrained_cfg", None) or {}
        self.fixed_input_size = bool(cfg.get("fixed_input_size", False)) and not getattr(
            model, "dynamic_img_size", False
        )

    def forward_normalized(self, x: Tensor) -> Tensor:
        return self.model.forward_head(self.model.forward_features(x), pre_logits=True)

    def forward_normalized_with_map(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The pooled pre-logits and ``forward_features``' output as a map: (N, C, h, w) as conv nets return it
        (NHWC models, ``output_fmt == "NHWC"``, permuted), or a ViT's tokens on its patch grid
        (:func:`~src.backbones.base.tokens_to_map`, the ``num_prefix_tokens`` class / register tokens dropped)."""
        feats = self.model.forward_features(x)
        z = self.model.forward_head(feats, pre_logits=True)
        if feats.dim() == 4:
            fmap = feats.permute(0, 3, 1, 2) if getattr(self.model, "output_fmt", "NCHW") == "NHWC" else feats
        else:
            patch = getattr(getattr(self.model, "patch_embed", None), "patch_size", None)
            if patch is None:
                raise NotImplementedError(
                    f"{self.name}: timm returned tokens {tuple(feats.shape)} without a patch_embed"
                )
            fmap = tokens_to_map(feats, x.shape[-2:], patch)
        return z, fmap

    def classify(self, x: Tensor) -> Tensor:
        if getattr(self.model, "num_classes", 0) == 0:
            return super().classify(x)
        return self.model(self.normalize(x))


def _pretrained_file(model_name: str) -> dict[str, Any]:
    """Resolve timm pretrained weights to a local file (cache) or fail fast with the file/tag looked for."""
    import timm

    cfg = timm.models.get_pretrained_cfg(model_name)
    if cfg is None:
        raise MissingWeightsError(f"timm has no pretrained weights for {model_name!r}; see timm.list_pretrained()")
    cfg = cfg.to_dict()
    if cfg.get("hf_hub_id"):
        repo = cfg["hf_hub_id"]
        cached = find_in_hf_cache(repo, ["model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"])
        if cached:
            return {"file": cached}
        if host_reachable("huggingface.co"):
            return {}
        looked = f"Hugging Face repo {repo!r} (model.safetensors or pytorch_model.bin) in the HF cache"
    elif cfg.get("url"):
        import os

        import torch

        fname = os.path.basename(cfg["url"])
        cached = os.path.join(torch.hub.get_dir(), "checkpoints", fname)
        if os.path.isfile(cached):
            return {"file": cached}
        if host_reachable(cfg["url"].split("/")[2]):
            return {}
        looked = f"{fname!r} in {os.path.dirname(cached)}"
    else:
        looked = "a pretrained file (no hub id or URL in the pretrained config)"
    raise MissingWeightsError(
        f"pretrained weights for timm model {model_name!r} are not available offline: looked for {looked}. "
        "Fix: download them once where there is network (they land in the cache), or pass "
        "checkpoint_path=/path/to/weights.(safetensors|pth), or pretrained=False for random init."
    )


def create_timm(
    name: str, *, pretrained: bool = True, checkpoint_path: str | None = None, **kwargs: Any
) -> TimmBackbone:
    """``timm:<arch>[.<tag>]``: pretrained via the local cache/hub, or from ``checkpoint_path``."""
    import timm

    arch = name.split(".")[0]
    if not timm.is_model(arch):
        raise ValueError(f"unknown timm model {name!r}; see timm.list_models() (e.g. 'vit_base_patch16_224')")
    overlay: dict[str, Any] = {}
    if pretrained and checkpoint_path is None:
        overlay = _pretrained_file(name)
    model = timm.create_model(
        name, pretrained=pretrained and checkpoint_path is None, pretrained_cfg_overlay=overlay or None, **kwargs
    )
    if checkpoint_path is not None:
        missing, unexpected = model.load_state_dict(load_state_dict(checkpoint_path), strict=False)
        if unexpected or [k for k in missing if not k.startswith(("head", "fc", "classifier"))]:
            raise ValueError(
                f"{checkpoint_path} does not match timm model {name!r}: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
    cfg = model.pretrained_cfg
    input_size = tuple(cfg.get("input_size", (3, 224, 224)))
    if kwargs.get("img_size") is not None:  # built for another resolution (a ViT's positional embedding resampled):
        side = kwargs["img_size"]  # its native size is that one, not the pretrained config's
        input_size = (3, *((side, side) if isinstance(side, int) else tuple(side)))
    return TimmBackbone(
        model,
        name=f"timm:{name}",
        input_size=input_size,
        mean=cfg.get("mean", (0.485, 0.456, 0.406)),
        std=cfg.get("std", (0.229, 0.224, 0.225)),
        interpolation=cfg.get("interpolation", "bicubic"),
        crop_pct=cfg.get("crop_pct", 0.875),
    )


def list_timm(pattern: str | None = None) -> list[str]:
    """timm's architectures matching ``pattern`` (``timm.list_models``)."""
    import timm

    return list(timm.list_models(pattern or "*"))


register_source("timm", create_timm, list_timm, doc="timm models (pretrained from the HF cache, or checkpoint_path)")
