"""Hugging Face ``transformers`` vision models as backbones: ``hf:<hub id or local folder>``.

* **Model**: ``AutoModel`` on the checkpoint's ``config.json`` (a ``*VisionModelWithProjection`` checkpoint loads as
  that class). Dual encoders (CLIP, SigLIP, BLIP, ALIGN, ...) keep only their image tower (``model.vision_model``)
  and, for the joint image-text space, their ``visual_projection`` (``projection``).
* **Embedding** (``pooling="auto"``): the CLS token of ``last_hidden_state`` (after the final LayerNorm) for ViT,
  DeiT, MAE and MSN (their ``pooler_output`` is an extra dense+tanh layer that the self-supervised checkpoints do not
  train, and that timm and the MAE paper's linear probe do not use), else the model's ``pooler_output`` (CLIP: the
  LayerNormed CLS token; SigLIP: its attention-pooling head; DINOv2: the LayerNormed CLS token; ConvNeXt / ResNet:
  the pooled feature map), else the mean of ``last_hidden_state`` over all tokens (or pixels). ``pooling`` =
  ``"pooler"``, ``"cls"`` or ``"mean"`` forces one of these. CLIP-like checkpoints with a ``visual_projection``
  embed after it by default (``projection=None``; ``False``: the pooled tower output; ``True``: required).
* **Input convention** from the checkpoint's image processor (``preprocessor_config.json`` read with
  ``AutoImageProcessor``, offline): input size = the center-crop size (or the resize size without a crop), mean/std =
  ``image_mean``/``image_std``, interpolation = ``resample``, ``crop_pct`` = crop / resize. Without one (``config=``,
  or a cache without the file, then with a warning): the model config's ``image_size`` (224 if absent), mean/std
  0.5 for SigLIP models, OpenAI's CLIP statistics for CLIP models and ImageNet's otherwise, bicubic,
  ``crop_pct`` 1.0 (CLIP / SigLIP) or 0.875.
* **Weights, offline first**: a local folder (``hf:/path`` or ``checkpoint_path=/path``: ``config.json`` + weights, as
  ``save_pretrained`` writes them), a weights file (``checkpoint_path=/path/model.safetensors`` with the config of
  the hub id or ``config=``), or the Hugging Face cache; missing files fail at once with a
  :class:`MissingWeightsError` naming them, and the network is used only when it is reachable and
  ``HF_HUB_OFFLINE`` / ``REPBENCH_OFFLINE`` are unset.
* **Random weights from a config** (tests, smoke runs): ``config=`` a ``transformers`` config object or a dict with
  ``model_type`` (``{"model_type": "vit", "hidden_size": 32, ...}``, what YAML and checkpoints' hparams can hold);
  the part after ``hf:`` is then only the backbone's name.
* Position embeddings are interpolated for other input sizes where the model supports it
  (``interpolate_pos_encoding=True``, the default; DINOv2 always does); ``False`` makes such models accept their
  native size only.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .base import Backbone, tokens_to_map
from .registry import register_source
from .spec import plain
from .weights import MissingWeightsError, find_in_hf_cache, host_reachable, load_state_dict

__all__ = ["HFBackbone", "create_hf", "list_hf", "input_convention"]

#: model types embedded by their CLS token under ``pooling="auto"``
CLS_POOLED = ("vit", "deit", "vit_mae", "vit_msn")
POOLINGS = ("auto", "pooler", "cls", "mean")
#: the files that hold a checkpoint's weights, in the order ``from_pretrained`` looks for them
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)
_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
_HEADS = ("classifier.", "head.", "fc.", "lm_head.", "decoder.")  # task heads a weights file may hold beside the model


class HFBackbone(Backbone):
    """A ``transformers`` image model (or a dual encoder's image tower), pooled as ``pooling`` says, optionally
    followed by the image-text ``projection`` layer."""

    def __init__(
        self,
        tower: nn.Module,
        *,
        name: str,
        embed_dim: int,
        input_size: Sequence[int],
        mean: Sequence[float],
        std: Sequence[float],
        interpolation: str = "bicubic",
        crop_pct: float = 1.0,
        pooling: str = "auto",
        model_type: str = "",
        projection: nn.Module | None = None,
        interpolate_pos_encoding: bool = True,
    ) -> None:
        super().__init__(name, embed_dim, input_size, mean, std, interpolation, crop_pct)
        self.model = tower
        self.projection = projection
        self.model_type = model_type
        self.pooling = pooling
        params = inspect.signature(tower.forward).parameters
        self._interpolate = "interpolate_pos_encoding" in params and interpolate_pos_encoding
        self.fixed_input_size = "interpolate_pos_encoding" in params and not interpolate_pos_encoding
        # MAE masks a random 75 % of the patches in every forward: no masking, and the identity order of patches
        self._patch = int(getattr(getattr(tower, "config", None), "patch_size", 16)) if "noise" in params else 0

    def _tower(self, x: Tensor) -> Any:
        """The tower's output on normalized images (MAE: no masking, patches in order)."""
        kwargs: dict[str, Any] = {}
        if self._interpolate:
            kwargs["interpolate_pos_encoding"] = True
        if self._patch:
            n = (x.shape[-2] // self._patch) * (x.shape[-1] // self._patch)
            kwargs["noise"] = torch.arange(n, device=x.device, dtype=x.dtype).expand(x.shape[0], n)
        return self.model(pixel_values=x, **kwargs)

    def forward_normalized(self, x: Tensor) -> Tensor:
        return self._pool(self._tower(x))

    def forward_normalized_with_map(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The embedding and ``last_hidden_state`` as a map: conv models' (N, C, h, w) as returned, a ViT's tokens on
        its patch grid (``config.patch_size``; the leading CLS / register tokens dropped,
        :func:`~src.backbones.base.tokens_to_map`)."""
        out = self._tower(x)
        hidden = out.last_hidden_state
        if hidden.dim() == 4:
            return self._pool(out), hidden
        patch = getattr(getattr(self.model, "config", None), "patch_size", None)
        if patch is None:
            raise NotImplementedError(f"{self.name}: tokens {tuple(hidden.shape)} without a config.patch_size")
        return self._pool(out), tokens_to_map(hidden, x.shape[-2:], patch)

    def _pool(self, out: Any) -> Tensor:
        """The embedding of a tower output (``pooling``; then the projection, if any)."""
        pooled = getattr(out, "pooler_output", None)
        if self.pooling == "cls" or (self.pooling == "auto" and self.model_type in CLS_POOLED):
            z = out.last_hidden_state[:, 0]
        elif self.pooling == "pooler" or (self.pooling == "auto" and pooled is not None):
            if pooled is None:
                raise ValueError(f"{self.name}: this model returns no pooler_output; use pooling='cls' or 'mean'")
            z = pooled
        else:
            hidden = out.last_hidden_state
            z = hidden.mean(dim=1) if hidden.dim() == 3 else hidden.mean(dim=(2, 3))
        z = z.flatten(1)
        return self.projection(z) if self.projection is not None else z

    def extra_repr(self) -> str:
        proj = ", projection=True" if self.projection is not None else ""
        return f"{super().extra_repr()}, model_type={self.model_type!r}, pooling={self.pooling!r}{proj}"


# --- configs, files and the input convention -------------------------------------------------------------------


def _as_config(config: Any):
    """A ``transformers`` config object from an object or a dict with ``model_type``."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, PretrainedConfig):
        return config
    if isinstance(config, Mapping) and isinstance(config.get("model_type"), str):
        opts = plain({k: v for k, v in config.items() if k != "model_type"})  # e.g. an OmegaConf node from YAML
        return AutoConfig.for_model(config["model_type"], **opts)
    raise ValueError(
        f"config must be a transformers config (e.g. transformers.ViTConfig(...)) or a dict with model_type, "
        f"e.g. {{model_type: vit, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2, "
        f"intermediate_size: 64, image_size: 32, patch_size: 8}}; got {config!r}"
    )


def _weight_files(folder: Path) -> list[str]:
    """The names of ``folder``'s weight files that are missing ([] when a complete set is there)."""
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            if not name.endswith(".index.json"):
                return []
            shards = sorted(set(json.loads((folder / name).read_text()).get("weight_map", {}).values()))
            return [s for s in shards if not (folder / s).is_file()]
    return [" or ".join(WEIGHT_FILES[::2])]


def _fix(repo: str | None) -> str:
    get = f"download them once where there is network (`hf download {repo}`, into the HF cache), or " if repo else ""
    return (
        f"Fix: {get}pass checkpoint_path=/path/to/folder holding config.json and model.safetensors (as "
        "save_pretrained writes them), or pretrained=False for random init (needs config.json), or "
        "config={model_type: ..., ...} for a random model built from a config."
    )


def _check_folder(folder: Path, weights: bool) -> None:
    if not folder.is_dir():
        raise MissingWeightsError(f"checkpoint folder not found: {folder}. {_fix(None)}")
    missing = [] if (folder / "config.json").is_file() else ["config.json"]
    missing += _weight_files(folder) if weights else []
    if missing:
        raise MissingWeightsError(
            f"Hugging Face checkpoint folder {folder} lacks {missing} (has {sorted(p.name for p in folder.iterdir())}). "
            + _fix(None)
        )


def _cached_snapshot(repo: str, weights: bool) -> tuple[Path | None, list[str]]:
    """The HF cache snapshot folder of ``repo`` and the files it lacks (config.json, weights, shards)."""
    config = find_in_hf_cache(repo, ["config.json"])
    if config is None:
        return None, ["config.json"] + ([" or ".join(WEIGHT_FILES[::2])] if weights else [])
    folder = Path(config).parent
    return folder, _weight_files(folder) if weights else []


def _preprocessor(folder: Path | None, hub_id: str | None = None):
    """The image processor saved beside the model (``preprocessor_config.json``), or None."""
    from transformers import AutoImageProcessor

    if hub_id is not None:  # downloading the model from the hub: its processor too, where it has one
        try:
            return AutoImageProcessor.from_pretrained(hub_id)
        except (OSError, ValueError):
            return None
    if folder is None or not (folder / "preprocessor_config.json").is_file():
        return None
    return AutoImageProcessor.from_pretrained(str(folder), local_files_only=True)


def _side(size: Any, key: str) -> int | None:
    value = size.get(key) if isinstance(size, Mapping) else getattr(size, key, None)
    return int(value) if value else None


def _triple(v: Any) -> tuple[float, float, float]:
    return tuple(float(x) for x in (v if isinstance(v, (list, tuple)) else [v] * 3))  # type: ignore[return-value]


def input_convention(config: Any, processor: Any = None) -> dict[str, Any]:
    """``input_size``, ``mean``, ``std``, ``interpolation``, ``crop_pct`` of a model from its image processor, or
    from its config by the fallback rule of this module's docstring when ``processor`` is None."""
    vision = getattr(config, "vision_config", None) or config
    model_type = str(getattr(config, "model_type", ""))
    if processor is not None:
        size, crop = getattr(processor, "size", None), getattr(processor, "crop_size", None)
        short = _side(size, "shortest_edge")
        if getattr(processor, "do_center_crop", False) and _side(crop, "height"):
            hw = (_side(crop, "height"), _side(crop, "width") or _side(crop, "height"))
            crop_pct = hw[0] / (short or _side(size, "height") or hw[0])
        elif _side(size, "height"):
            hw, crop_pct = (_side(size, "height"), _side(size, "width") or _side(size, "height")), 1.0
        elif short:
            hw, crop_pct = (short, short), 1.0
        else:
            hw, crop_pct = None, 1.0
        if hw is not None:
            normalize = getattr(processor, "do_normalize", True)
            resample = getattr(processor, "resample", 3)
            resample = getattr(resample, "value", resample)
            return {
                "input_size": (3, *hw),
                "mean": _triple(processor.image_mean) if normalize else (0.0, 0.0, 0.0),
                "std": _triple(processor.image_std) if normalize else (1.0, 1.0, 1.0),
                "interpolation": _RESAMPLE.get(resample, resample) if not isinstance(resample, str) else resample,
                "crop_pct": float(crop_pct),
            }
    image_size = getattr(vision, "image_size", None) or 224
    hw = tuple(image_size) if isinstance(image_size, (list, tuple)) else (image_size, image_size)
    mean, std, crop_pct = IMAGENET_MEAN, IMAGENET_STD, 0.875
    if "siglip" in model_type:
        mean, std, crop_pct = HALF, HALF, 1.0
    elif "clip" in model_type:
        mean, std, crop_pct = CLIP_MEAN, CLIP_STD, 1.0
    return {"input_size": (3, *hw), "mean": mean, "std": std, "interpolation": "bicubic", "crop_pct": crop_pct}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' load report and progress bars off: missing weights are checked here and raise."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _model_class(config: Any):
    import transformers

    for arch in getattr(config, "architectures", None) or []:
        if arch.endswith("VisionModelWithProjection") and hasattr(transformers, arch):
            return getattr(transformers, arch)
    return transformers.AutoModel


def _drops_pooler(model_type: str, pooling: str) -> bool:
    """ViT / DeiT: the unused dense+tanh pooler is removed (its weights are not loaded, not trained, not counted)."""
    return model_type in CLS_POOLED and pooling != "pooler"


def _check_keys(name: str, where: str, missing: Sequence[str], unexpected: Sequence[str], drop_pooler: bool) -> None:
    missing = [k for k in missing if not (drop_pooler and k.startswith("pooler."))]
    unexpected = [k for k in unexpected if not k.startswith(_HEADS)]
    if missing or unexpected:
        raise ValueError(
            f"{where} does not match hf model {name!r}: {len(missing)} missing key(s) {sorted(missing)[:5]}, "
            f"{len(unexpected)} unexpected key(s) {sorted(unexpected)[:5]}; pass the checkpoint of this architecture"
        )


def _load_file(model: nn.Module, path: str, name: str, drop_pooler: bool) -> None:
    sd = load_state_dict(path)
    own = model.state_dict()
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    if prefix != "." and not any(k in own for k in sd) and any(k.startswith(prefix) for k in sd):
        sd = {k[len(prefix) :] if k.startswith(prefix) else k: v for k, v in sd.items()}  # e.g. a *ForImage... file
    missing, unexpected = model.load_state_dict({k: v for k, v in sd.items() if k in own}, strict=False)
    _check_keys(name, f"checkpoint {path}", missing, [k for k in sd if k not in own], drop_pooler)


# --- the source ---------------------------------------------------------------------------------------------------


def create_hf(
    name: str,
    *,
    pretrained: bool | None = None,
    checkpoint_path: str | None = None,
    config: Any = None,
    projection: bool | None = None,
    pooling: str = "auto",
    interpolate_pos_encoding: bool = True,
    **kwargs: Any,
) -> HFBackbone:
    """``hf:<hub id or local folder>`` through Hugging Face ``transformers`` (``pretrained``, ``checkpoint_path``,
    ``config``, ``projection``, ``pooling``).

    ``pretrained`` (default: True, or False with ``config=``): load the weights (folder, cache, or the hub where
    reachable) or initialise randomly from the config. ``checkpoint_path``: a folder as ``save_pretrained`` writes
    it (then the id is only the name) or a weights file (with the id's cached ``config.json`` or ``config=``).
    Other keywords go to ``from_pretrained`` / ``from_config`` (e.g. ``attn_implementation``); parameters are float32
    unless ``dtype=`` says otherwise.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    if not name:
        raise ValueError("hf backbones are named hf:<hub id or local folder>, e.g. hf:facebook/dinov2-base")
    if config is not None and pretrained and checkpoint_path is None:
        raise ValueError(
            f"hf:{name}: config= builds a randomly initialised model; drop pretrained=True, or pass "
            "checkpoint_path= with weights of that architecture"
        )
    if pretrained is None:
        pretrained = config is None
    kwargs.setdefault("dtype", torch.float32)
    local = Path(os.path.expanduser(name))
    looks_local = local.is_dir() or name.startswith(("/", ".", "~")) or name.count("/") > 1  # not an org/name id
    repo = None if looks_local else name
    folder: Path | None = None  # where config.json (and the weights, when read from a folder) live
    weights_file: str | None = None
    from_folder = False  # weights from a folder (checkpoint_path, hf:/folder, the cache) or the hub
    hub = False  # let from_pretrained fetch the id from the hub (reachable, not offline)

    if checkpoint_path is not None:
        path = Path(os.path.expanduser(str(checkpoint_path)))
        if path.is_dir():
            _check_folder(path, weights=True)
            folder, from_folder = path, True
        elif not path.is_file():
            raise MissingWeightsError(f"checkpoint not found: {path} (a folder with config.json + weights, or a file)")
        else:
            weights_file = str(path)
    if folder is None and config is None:  # the id (or folder) gives the config, and the weights unless a file does
        need_weights = from_folder = bool(pretrained) and weights_file is None
        if repo is None:
            _check_folder(local, weights=need_weights)
            folder = local
        else:
            folder, missing = _cached_snapshot(repo, need_weights)
            if missing:
                if host_reachable("huggingface.co"):
                    folder, hub = None, True
                else:
                    from huggingface_hub import constants

                    cache = f"the Hugging Face cache {constants.HF_HUB_CACHE}"
                    what = "pretrained weights" if need_weights else "the config"
                    raise MissingWeightsError(
                        f"{what} of hf model {repo!r} are not available offline: looked for {missing} of Hugging Face "
                        f"repo {repo!r} in {cache}. " + _fix(repo)
                    )

    from transformers import AutoConfig

    with _quiet():
        if config is not None:
            cfg = _as_config(config)
        else:
            cfg = AutoConfig.from_pretrained(str(folder) if folder is not None else name, local_files_only=not hub)
        model_type = str(cfg.model_type)
        if hasattr(cfg, "mask_ratio"):
            cfg.mask_ratio = 0.0  # MAE: embed every patch
        drop_pooler = _drops_pooler(model_type, pooling)
        cls = _model_class(cfg)
        if from_folder:
            model, info = cls.from_pretrained(
                str(folder) if folder is not None else name,
                config=cfg,
                local_files_only=not hub,
                output_loading_info=True,
                **kwargs,
            )
            _check_keys(
                name,
                f"checkpoint {folder or name}",
                list(info["missing_keys"]) + list(info.get("mismatched_keys", [])),
                [],
                drop_pooler,
            )
        else:
            model = cls.from_config(cfg, **kwargs)
            if weights_file is not None:
                _load_file(model, weights_file, name, drop_pooler)
        processor = None
        if config is None or checkpoint_path is not None:
            processor = _preprocessor(folder, name if hub else None)
    if processor is None and config is None:
        warnings.warn(
            f"hf:{name} has no preprocessor_config.json beside its config: input size, mean and std follow the "
            "fallback rule (model config image_size; SigLIP 0.5, CLIP OpenAI, else ImageNet statistics); "
            "download the file or save the image processor with the model to use the checkpoint's own",
            stacklevel=2,
        )
    convention = input_convention(cfg, processor)

    tower = getattr(model, "vision_model", model)
    proj_layer = getattr(model, "visual_projection", None)
    if projection and proj_layer is None:
        raise ValueError(
            f"hf:{name} ({type(model).__name__}) has no image-text projection (visual_projection); "
            "use projection=None or False"
        )
    if projection is False:
        proj_layer = None
    if drop_pooler and getattr(tower, "pooler", None) is not None:
        tower.pooler = None
    vision_cfg = getattr(tower, "config", None) or getattr(cfg, "vision_config", None) or cfg
    if proj_layer is not None:
        embed_dim = int(proj_layer.out_features)
    elif getattr(vision_cfg, "hidden_size", None):
        embed_dim = int(vision_cfg.hidden_size)
    else:
        embed_dim = int(vision_cfg.hidden_sizes[-1])
    return HFBackbone(
        tower,
        name=f"hf:{name}",
        embed_dim=embed_dim,
        pooling=pooling,
        model_type=model_type,
        projection=proj_layer,
        interpolate_pos_encoding=interpolate_pos_encoding,
        **convention,
    )


def _is_vision_config(path: Path) -> bool:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and "model_type" in cfg and any(k in cfg for k in ("vision_config", "image_size"))


def list_hf(pattern: str | None = None) -> list[str]:
    """The vision models in the local Hugging Face cache (the hub itself is not searched): repos whose cached
    ``config.json`` is a ``transformers`` config with an image size or a vision tower."""
    from huggingface_hub import constants

    root = Path(constants.HF_HUB_CACHE)
    out = []
    for repo in sorted(root.glob("models--*")):
        if any(_is_vision_config(p) for p in repo.glob("snapshots/*/config.json")):
            out.append(repo.name[len("models--") :].replace("--", "/"))
    return out


register_source(
    "hf", create_hf, list_hf, doc="Hugging Face transformers vision models (hub id or local folder, config= for random)"
)
