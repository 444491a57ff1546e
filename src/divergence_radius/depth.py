"""Depth estimation on a frozen backbone, the DivergenceRadius paper's third downstream task (Liu et al., "Robustness
of Vision Foundation Models to Common Perturbations", arXiv:2604.14973, §5 and App. D–F).

* The head g (App. D: "batch normalization, a 1×1 convolution, ReLU activation, and a sigmoid function" on the frozen
  model's features; App. F: "the one-layer depth estimation head publicly released together with DINO v2"):
  :class:`DepthHead` reads the backbone's last spatial feature map (patch tokens of a ViT, the last feature map of a
  conv net: :meth:`~src.backbones.base.Backbone.embed_with_map`), with the pooled embedding broadcast to every
  position and concatenated (DINOv2's linear head concatenates the class token), upsampled ``upsample`` times
  (bilinear), batch-normalised, and a 1×1 convolution gives per-pixel logits. ``readout="bins"`` (the released
  head): n_bins logits → ReLU + 0.1, normalised to weights w_k, depth = Σ_k w_k·c_k over bin centres c_k equally
  spaced in [min_depth, max_depth]; ``readout="sigmoid"``: one logit, depth = max_depth · sigmoid(logit). The map is
  resized (bilinear) to the ground truth's size.
* Metrics (App. E): the RMSE of a depth map, sqrt(1/n Σ_i (y_i − ŷ_i)²) over its n valid pixels
  (:func:`image_rmse`; RMSE of a data set = the mean over its images), and per image RMSE_p (eq. 16) = the mean over
  the m perturbed versions of their RMSE (computed in the sweep, :mod:`src.divergence_radius.protocol`).
* Training: the scale-invariant log loss of Eigen et al. (NeurIPS 2014, eq. 4, λ = 0.85, as DINOv2's ``SigLoss``)
  or the squared error, on the valid pixels (ground truth finite and > 0): :func:`depth_loss`;
  :func:`fit_depth_head` fits a head on cached frozen features (the CLI's head; ``python -m src.train
  experiment=depth_synthetic`` trains the same head as a LightningModule, :class:`~src.models.DepthProbe`).

No Lightning here; :class:`DepthModel` (backbone + head) is the depth model g ∘ f the sweeps and the module run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..features import FeatureExtractor
from ..utils.checks import check_int, check_nonnegative, check_positive
from ..utils.modes import eval_mode
from ..utils.options import Options

__all__ = [
    "DEPTH_LOSSES",
    "DEPTH_READOUTS",
    "SILOG_LAMBDA",
    "DepthHead",
    "DepthHeadConfig",
    "DepthModel",
    "depth_loss",
    "fit_depth_head",
    "frozen_features",
    "image_rmse",
    "load_depth_checkpoint",
    "silog_loss",
    "valid_depth",
]

#: per-pixel readouts of the head: DINOv2's released classification-over-bins head, or a sigmoid regression
DEPTH_READOUTS = ("bins", "sigmoid")
#: training losses: Eigen et al.'s scale-invariant log loss (DINOv2's), or the squared error
DEPTH_LOSSES = ("silog", "mse")
#: λ of the scale-invariant loss: DINOv2's SigLoss is Var(g) + 0.15·mean(g)² = mean(g²) − 0.85·mean(g)²
SILOG_LAMBDA = 0.85
#: added to the ReLU'd bin logits before normalising (DINOv2's "linear" norm strategy: no division by zero)
BIN_EPS = 0.1


@dataclass(frozen=True)
class DepthHeadConfig(Options):
    """The depth head and its training, one set of defaults (DINOv2's released NYU head where the paper names it).

    readout: "bins" (DINOv2's: ReLU + 0.1, normalised, weighted sum of bin centres) | "sigmoid" (max_depth · σ).
    n_bins: bins of the "bins" readout (DINOv2: 256; ignored by "sigmoid").
    min_depth, max_depth: depth range in metres (NYU-Depth V2: 0.001 and 10, DINOv2's), 0 < min_depth < max_depth.
    upsample: the feature map is upsampled this many times (bilinear) before the head (DINOv2: 4).
    with_embedding: concatenate the backbone's pooled embedding to every position (DINOv2's class token).
    loss: "silog" (Eigen et al.'s scale-invariant log loss, λ = 0.85, DINOv2's) | "mse".
    epochs, batch_size, lr, weight_decay: :func:`fit_depth_head`'s Adam on cached features (the LightningModule takes
      lr and weight_decay; its epochs are the trainer's).
    """

    readout: str = "bins"
    n_bins: int = 256
    min_depth: float = 1e-3
    max_depth: float = 10.0
    upsample: int = 4
    with_embedding: bool = True
    loss: str = "silog"
    epochs: int = 20
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0

    OPTIONS_BLOCK = "the depth: block of configs/divergence_radius.yaml"

    def __post_init__(self) -> None:
        if self.readout not in DEPTH_READOUTS:
            raise ValueError(f"readout must be one of {DEPTH_READOUTS}, got {self.readout!r}")
        if self.loss not in DEPTH_LOSSES:
            raise ValueError(f"loss must be one of {DEPTH_LOSSES}, got {self.loss!r}")
        if not isinstance(self.with_embedding, bool):
            raise ValueError(f"with_embedding must be true or false, got {self.with_embedding!r}")
        lo = check_positive(self.min_depth, "min_depth")
        hi = check_positive(self.max_depth, "max_depth")
        if not lo < hi:
            raise ValueError(f"min_depth must be < max_depth, got {lo} and {hi}")
        checked = {
            "n_bins": check_int(self.n_bins, "n_bins", 2, meaning="depth bins of the readout"),
            "upsample": check_int(self.upsample, "upsample", 1, meaning="feature-map upsampling factor"),
            "epochs": check_int(self.epochs, "epochs", 1, meaning="passes over the training features"),
            "batch_size": check_int(self.batch_size, "batch_size", 1, meaning="images per step"),
            "min_depth": lo,
            "max_depth": hi,
            "lr": check_positive(self.lr, "lr"),
            "weight_decay": check_nonnegative(self.weight_decay, "weight_decay"),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def head_options(self) -> dict[str, Any]:
        """The fields that shape the head (:class:`DepthHead`'s keyword arguments)."""
        keys = ("readout", "n_bins", "min_depth", "max_depth", "upsample", "with_embedding")
        return {k: getattr(self, k) for k in keys}


def valid_depth(target: Tensor) -> Tensor:
    """The pixels with a ground truth: finite and > 0 (NYU's raw maps hold 0 where the sensor saw nothing)."""
    return torch.isfinite(target) & (target > 0)


def image_rmse(pred: Tensor, target: Tensor) -> Tensor:
    """App. E: per image the root mean squared error sqrt(1/n Σ_i (y_i − ŷ_i)²) over its n valid pixels
    (:func:`valid_depth`); ``pred`` and ``target`` (N, 1, H, W) (or (N, H, W)) of one size → (N,) float64. An image
    without a valid pixel is a ValueError."""
    if pred.shape != target.shape:
        raise ValueError(f"pred and target must have one shape, got {tuple(pred.shape)} and {tuple(target.shape)}")
    valid = valid_depth(target).flatten(1)
    count = valid.sum(1)
    if bool((count == 0).any()):
        raise ValueError(f"{int((count == 0).sum())} image(s) have no valid ground-truth pixel (finite and > 0)")
    err = torch.where(valid, pred.flatten(1).double() - target.flatten(1).double(), 0.0)
    return (err.square().sum(1) / count).sqrt()


def silog_loss(pred: Tensor, target: Tensor, lam: float = SILOG_LAMBDA) -> Tensor:
    """Eigen et al.'s scale-invariant log loss (NeurIPS 2014, eq. 4), its square root as DINOv2's SigLoss:
    sqrt(mean(g²) − λ·mean(g)²), g = log ŷ − log y over the valid pixels of the batch (predictions clamped to >= 1e-6
    before the log). λ = 0 is the RMSE of log depths; λ = 1 ignores a global scale."""
    valid = valid_depth(target)
    g = torch.log(pred[valid].clamp_min(1e-6)) - torch.log(target[valid])
    return (g.square().mean() - lam * g.mean().square()).clamp_min(0.0).sqrt()


def depth_loss(pred: Tensor, target: Tensor, kind: str = "silog") -> Tensor:
    """The training loss ``kind`` ("silog": :func:`silog_loss`; "mse": mean squared error) on the valid pixels."""
    if kind == "silog":
        return silog_loss(pred, target)
    if kind == "mse":
        valid = valid_depth(target)
        return (pred[valid] - target[valid]).square().mean()
    raise ValueError(f"loss must be one of {DEPTH_LOSSES}, got {kind!r}")


class DepthHead(nn.Module):
    """g of App. D on a feature map (module docstring): [map ‖ embedding] → bilinear ×upsample → BatchNorm → 1×1
    convolution → readout → bilinear resize to the requested size. ``map_channels`` C of the backbone's map,
    ``embed_dim`` D of its embedding (used when ``with_embedding``)."""

    def __init__(
        self,
        map_channels: int,
        embed_dim: int = 0,
        *,
        readout: str = DepthHeadConfig.readout,
        n_bins: int = DepthHeadConfig.n_bins,
        min_depth: float = DepthHeadConfig.min_depth,
        max_depth: float = DepthHeadConfig.max_depth,
        upsample: int = DepthHeadConfig.upsample,
        with_embedding: bool = DepthHeadConfig.with_embedding,
    ) -> None:
        super().__init__()
        cfg = DepthHeadConfig(readout=readout, n_bins=n_bins, min_depth=min_depth, max_depth=max_depth,
                              upsample=upsample, with_embedding=with_embedding)  # fmt: skip
        self.map_channels = check_int(map_channels, "map_channels", 1, meaning="channels of the feature map")
        self.embed_dim = check_int(embed_dim, "embed_dim", 1 if with_embedding else 0, meaning="embedding size")
        self.readout, self.upsample, self.with_embedding = cfg.readout, cfg.upsample, cfg.with_embedding
        self.min_depth, self.max_depth = cfg.min_depth, cfg.max_depth
        channels = self.map_channels + (self.embed_dim if self.with_embedding else 0)
        self.bn = nn.BatchNorm2d(channels)
        self.conv = nn.Conv2d(channels, cfg.n_bins if self.readout == "bins" else 1, kernel_size=1)
        centres = torch.linspace(cfg.min_depth, cfg.max_depth, cfg.n_bins)
        self.register_buffer("bins", centres, persistent=False)

    def inputs(self, fmap: Tensor, embedding: Tensor | None = None) -> Tensor:
        """The head's input: the map (N, C, h, w), with the embedding (N, D) broadcast to every position and
        concatenated when ``with_embedding``."""
        if fmap.dim() != 4 or fmap.shape[1] != self.map_channels:
            raise ValueError(f"expected a feature map (N, {self.map_channels}, h, w), got {tuple(fmap.shape)}")
        if not self.with_embedding:
            return fmap
        if embedding is None or embedding.shape != (fmap.shape[0], self.embed_dim):
            got = None if embedding is None else tuple(embedding.shape)
            raise ValueError(f"with_embedding: expected the embedding ({fmap.shape[0]}, {self.embed_dim}), got {got}")
        return torch.cat([fmap, embedding[:, :, None, None].expand(-1, -1, *fmap.shape[-2:]).to(fmap)], 1)

    def depth(self, logits: Tensor) -> Tensor:
        """Per-pixel depth (N, 1, h, w) of the convolution's logits (the readout of the module docstring)."""
        if self.readout == "sigmoid":
            return self.max_depth * torch.sigmoid(logits)
        w = torch.relu(logits) + BIN_EPS
        w = w / w.sum(1, keepdim=True)
        return torch.einsum("nkhw,k->nhw", w, self.bins.to(w))[:, None]

    def forward(self, fmap: Tensor, embedding: Tensor | None = None, size: Sequence[int] | None = None) -> Tensor:
        """Depth (N, 1, H, W) at ``size`` (H, W) (None: the upsampled map's size) from the backbone's map and
        embedding."""
        x = self.inputs(fmap, embedding)
        if self.upsample > 1:
            x = F.interpolate(x, scale_factor=self.upsample, mode="bilinear", align_corners=False)
        out = self.depth(self.conv(self.bn(x)))
        if size is not None and tuple(out.shape[-2:]) != tuple(size):
            out = F.interpolate(out, size=tuple(int(s) for s in size), mode="bilinear", align_corners=False)
        return out


class DepthModel(nn.Module):
    """g ∘ f: a backbone f (with :meth:`~src.backbones.base.Backbone.embed_with_map`) and a :class:`DepthHead` g.
    ``forward(x)`` is the depth map (N, 1, H, W) at the image's size; :meth:`sweep_features` is the feature function
    of a depth sweep: per image its embedding (the one R_dr and R_cs are computed on) followed by its predicted map,
    both from one backbone forward."""

    def __init__(self, backbone: nn.Module, head: DepthHead) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head
        self.embed_dim = int(backbone.embed_dim)

    def embed_and_predict(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(embedding (N, D), depth (N, 1, H, W)) of pixel-space images (N, 3, H, W)."""
        z, fmap = self.backbone.embed_with_map(x)
        return z, self.head(fmap, z, x.shape[-2:])

    def forward(self, x: Tensor) -> Tensor:
        return self.embed_and_predict(x)[1]

    def sweep_features(self, x: Tensor) -> Tensor:
        """(N, D + H·W): the embedding, then the predicted depth map flattened (a sweep's ``depth=`` task splits
        them at D)."""
        z, depth = self.embed_and_predict(x)
        return torch.cat([z, depth.flatten(1).to(z)], 1)


def fit_depth_head(
    fmaps: Tensor,
    embeddings: Tensor | None,
    depth: Tensor,
    config: DepthHeadConfig | Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> DepthHead:
    """A :class:`DepthHead` fitted by Adam (``config.lr``, ``weight_decay``) for ``config.epochs`` passes over cached
    frozen features: ``fmaps`` (N, C, h, w) and ``embeddings`` (N, D) of N training images with ground truth
    ``depth`` (N, 1, H, W), batches of ``config.batch_size`` in a seeded order, ``config.loss`` on the valid pixels at
    the ground truth's size. BatchNorm trains in train mode; the head is returned in eval mode, on the CPU."""
    cfg = DepthHeadConfig.coerce(config)
    n = fmaps.shape[0]
    if depth.dim() != 4 or depth.shape[:2] != (n, 1):
        raise ValueError(f"depth must be (N, 1, H, W) with N = {n} (one map per feature map), got {tuple(depth.shape)}")
    if n < 2:
        raise ValueError(f"fitting a depth head needs at least 2 training images (BatchNorm statistics), got {n}")
    dev = torch.device(device) if device is not None else fmaps.device
    d = embeddings.shape[1] if embeddings is not None else 0
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = DepthHead(fmaps.shape[1], d, **cfg.head_options()).to(dev)
    opt = torch.optim.Adam(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    size = depth.shape[-2:]
    head.train()
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=g)
        for start in range(0, n - 1, cfg.batch_size):  # a last batch of one image would break BatchNorm: skipped
            idx = order[start : start + cfg.batch_size]
            if len(idx) < 2:
                continue
            z = embeddings[idx].to(dev) if embeddings is not None else None
            pred = head(fmaps[idx].to(dev), z, size)
            loss = depth_loss(pred, depth[idx].to(dev), cfg.loss)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return head.eval().cpu()


class _EmbeddingAndMap(nn.Module):
    """One tensor per image for the feature extractor: the backbone's embedding, then its feature map flattened."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, x: Tensor) -> Tensor:
        z, fmap = self.backbone.embed_with_map(x)
        return torch.cat([z, fmap.flatten(1).to(z)], 1)


def frozen_features(
    backbone: Any, images: Tensor, *, device: str | torch.device | None = None, **extractor: Any
) -> tuple[Tensor, Tensor]:
    """(embeddings (N, D), feature maps (N, C, h, w)) of ``images`` from one forward each of a frozen backbone
    (:meth:`~src.backbones.base.Backbone.embed_with_map`), through the :class:`~src.features.FeatureExtractor`
    (``extractor``: its options, e.g. ``max_batch``; inference mode, eval mode), on the CPU."""
    if images.shape[0] == 0:
        raise ValueError("frozen_features got no images")
    with torch.inference_mode(), eval_mode(backbone):  # the map's shape, from one image (as the extractor runs)
        _, fmap = backbone.embed_with_map(images[:1].to(device) if device is not None else images[:1])
    c, h, w = fmap.shape[1:]
    out = FeatureExtractor(_EmbeddingAndMap(backbone), device=device, **extractor)(images).cpu()
    d = out.shape[1] - c * h * w
    return out[:, :d], out[:, d:].reshape(-1, c, h, w)


def load_depth_checkpoint(path: str | Path, backbone: nn.Module) -> DepthModel:
    """g ∘ f of a :class:`~src.models.DepthProbe` checkpoint (``python -m src.train experiment=depth_synthetic``)
    on ``backbone``, which must be built from the checkpoint's backbone spec (``hyper_parameters.backbone``): the
    file is read with ``torch.load(weights_only=True)``; the head is rebuilt from its hyperparameters and weights; the
    backbone's weights are checked against the sha256 the checkpoint recorded (when it left them out) or loaded from
    it (a random-weight backbone, which the checkpoint stores). Returned in eval mode."""
    from ..backbones.weights import check_state_dict_matches, restore_rebuilt_state
    from ..utils.checkpoint import read_checkpoint

    what = f"head_checkpoint={path}"
    ckpt = read_checkpoint(path)
    state = ckpt["state_dict"]
    hp = ckpt.get("hyper_parameters") or {}
    if "head.bn.weight" not in state or "head.conv.weight" not in state:
        raise ValueError(
            f"{what} holds no depth head (no head.bn / head.conv weights): pass a checkpoint of python -m src.train "
            "experiment=depth_synthetic (a DepthProbe)"
        )
    options = DepthHeadConfig.coerce({k: hp[k] for k in DepthHeadConfig.field_names() if k in hp}).head_options()
    channels = int(state["head.bn.weight"].shape[0]) - (int(backbone.embed_dim) if options["with_embedding"] else 0)
    if channels < 1:
        raise ValueError(f"{what}: its head reads {channels + int(backbone.embed_dim)} channels, fewer than this "
                         f"backbone's embedding ({backbone.embed_dim}): it was trained on another backbone")  # fmt: skip
    model = DepthModel(backbone, DepthHead(channels, int(backbone.embed_dim), **options))
    check_state_dict_matches(dict(state), model, what)
    model.load_state_dict(restore_rebuilt_state(state, model, what))
    return model.eval()
