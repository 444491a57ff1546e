"""The one backbone protocol: ``Backbone.embed`` maps pixel-space images to pooled pre-logit features.

Every image tensor in RepBench is float (N, 3, H, W) in [0, 1] pixel space; normalization lives inside the adapter,
so attacks, perturbations and synthetic data all work in pixel space (the convention of torchattacks, AutoAttack and
RobustBench).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["Backbone", "check_images", "tokens_to_map"]


def check_images(x: object, *, name: str = "images", value_range: tuple[float, float] | None = None) -> Tensor:
    """Validate an image batch: a floating (N, 3, H, W) tensor, finite (no NaN / inf pixels), optionally inside
    ``value_range``.

    Raises ``TypeError``/``ValueError`` naming the problem and the fix.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (N, 3, H, W), got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a float tensor in [0, 1] pixel space, got dtype {x.dtype}; "
            "convert uint8 images with x.float() / 255"
        )
    if x.dim() != 4 or x.shape[1] != 3:
        raise ValueError(
            f"{name} must have shape (N, 3, H, W), got {tuple(x.shape)}; "
            "add a batch dimension with x[None] and expand grayscale with x.expand(-1, 3, -1, -1)"
        )
    if x.numel() > 0 and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(
            f"{name} contain {bad} non-finite (NaN or inf) pixel value(s) of {x.numel()}; "
            "NaN pixels give NaN features: fix the loading / preprocessing that produced them "
            "(e.g. torch.nan_to_num(x, nan=0.0) if missing pixels should be black)"
        )
    if value_range is not None and x.numel() > 0:
        lo, hi = float(x.min()), float(x.max())
        tol = 1e-4
        if not (lo >= value_range[0] - tol and hi <= value_range[1] + tol):
            raise ValueError(
                f"{name} must lie in [{value_range[0]:g}, {value_range[1]:g}] pixel space, got values in [{lo:.3g}, {hi:.3g}]; "
                "do not normalize images yourself (the backbone adapter applies its own mean/std), "
                "and divide uint8 images by 255"
            )
    return x


def tokens_to_map(tokens: Tensor, image_hw: Sequence[int], patch: int | Sequence[int]) -> Tensor:
    """Patch tokens (N, T, C) of a ViT -> feature map (N, C, h, w), h = H // p_h, w = W // p_w for an image of
    ``image_hw`` = (H, W) cut into ``patch`` (p or (p_h, p_w)) patches. The T − h·w leading tokens (CLS, register /
    distillation tokens) are dropped: timm, open_clip and transformers all put them first. Fewer than h·w tokens is a
    ValueError (the tokens are not this image's patches)."""
    p_h, p_w = (int(patch), int(patch)) if isinstance(patch, int) else (int(patch[0]), int(patch[1]))
    h, w = int(image_hw[0]) // p_h, int(image_hw[1]) // p_w
    if tokens.dim() != 3 or tokens.shape[1] < h * w or h * w == 0:
        raise ValueError(
            f"expected (N, T, C) tokens holding the {h}x{w} patches of a {image_hw[0]}x{image_hw[1]} image "
            f"(patch {p_h}x{p_w}) after any leading class / register tokens, got shape {tuple(tokens.shape)}"
        )
    grid = tokens[:, tokens.shape[1] - h * w :]
    return grid.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], h, w)


class Backbone(nn.Module):
    """A frozen-or-trainable image encoder with a uniform interface.

    Attributes:
        name: registry name, e.g. ``"embedded:efficientnet_lite0"``.
        embed_dim: size D of the embedding returned by :meth:`embed`.
        input_size: (3, H, W) the network was trained at.
        mean, std: per-channel normalization applied inside :meth:`embed` (pixel space in, normalized inside).
        interpolation, crop_pct: the evaluation preprocessing of the pretrained weights (resize, center crop).
        fixed_input_size: the network only accepts ``input_size`` (e.g. ViTs with a fixed positional embedding);
            :meth:`embed` then rejects other sizes with an error naming the native size.
    Subclasses implement :meth:`forward_normalized`, mapping normalized images to (N, embed_dim), and may implement
    :meth:`forward_normalized_with_map` (the embedding and the last spatial feature map of one forward: patch tokens
    for ViTs, the last feature map for conv nets), which :meth:`embed_with_map` exposes (dense heads, e.g. the depth
    head of :mod:`src.divergence_radius.depth`).

    :func:`~src.backbones.create_backbone` returns backbones in **eval mode**: ``embed`` gives per-sample features
    and never updates BatchNorm running statistics. Call ``.train()`` yourself to fine-tune.
    """

    fixed_input_size: bool = False

    def __init__(
        self,
        name: str,
        embed_dim: int,
        input_size: Sequence[int],
        mean: Sequence[float],
        std: Sequence[float],
        interpolation: str = "bicubic",
        crop_pct: float = 0.875,
    ) -> None:
        super().__init__()
        self.name = name
        self.embed_dim = int(embed_dim)
        self.input_size = tuple(int(v) for v in input_size)
        self.mean = tuple(float(v) for v in mean)
        self.std = tuple(float(v) for v in std)
        self.interpolation = interpolation
        self.crop_pct = float(crop_pct)
        self.register_buffer("_mean", torch.tensor(self.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("_std", torch.tensor(self.std).view(1, 3, 1, 1), persistent=False)

    def normalize(self, x: Tensor) -> Tensor:
        """(x − mean) / std, channel-wise."""
        return (x - self._mean.to(x.dtype)) / self._std.to(x.dtype)

    def forward_normalized(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def param_dtype(self) -> torch.dtype | None:
        """The floating dtype of the network's parameters (None for a parameter-free backbone)."""
        for p in self.parameters():
            if p.is_floating_point():
                return p.dtype
        return None

    def check_size(self, x: Tensor) -> None:
        """Backbones with a fixed input size (``fixed_input_size``) reject other sizes, naming the fix."""
        if self.fixed_input_size and tuple(x.shape[-2:]) != tuple(self.input_size[1:]):
            h, w = self.input_size[1:]
            raise ValueError(
                f"backbone {self.name!r} only accepts its native input size {h}x{w} (fixed positional embedding), "
                f"got images of {x.shape[-2]}x{x.shape[-1]}; resize them first, e.g. "
                f"F.interpolate(x, size=({h}, {w}), mode='bicubic', antialias=True).clamp(0, 1), "
                f"or set data.image_size={h} (SynBench: input_size={h})"
            )

    def embed(self, x: Tensor) -> Tensor:
        """Pixel-space images (N, 3, H, W) float -> embeddings (N, embed_dim).

        Values outside [0, 1] are allowed (synthetic Gaussian data leaves that range on purpose); NaN/inf pixels are
        not. Images of another floating dtype than the network's parameters (e.g. float64) are cast to it
        (differentiably, so PGD gradients still reach ``x``).
        """
        check_images(x)
        self.check_size(x)
        dtype = self.param_dtype()
        if dtype is not None and x.dtype != dtype:
            x = x.to(dtype)
        return self.forward_normalized(self.normalize(x))

    def forward_normalized_with_map(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Normalized images -> (embedding (N, embed_dim), feature map (N, C, h, w)) of one forward."""
        raise NotImplementedError(
            f"backbone {self.name!r} ({type(self).__name__}) exposes no spatial feature map; dense heads (the depth "
            "head) need a timm:, embedded:, hf: or open_clip: backbone"
        )

    def embed_with_map(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Pixel-space images (N, 3, H, W) -> (embedding (N, embed_dim), last spatial feature map (N, C, h, w)),
        both from one forward: the embedding is :meth:`embed`'s; the map is the patch tokens of a ViT (class and
        register tokens dropped, laid out on the h × w patch grid) or the last feature map of a conv net. Same input
        checks and casting as :meth:`embed`."""
        check_images(x)
        self.check_size(x)
        dtype = self.param_dtype()
        if dtype is not None and x.dtype != dtype:
            x = x.to(dtype)
        return self.forward_normalized_with_map(self.normalize(x))

    def forward(self, x: Tensor) -> Tensor:
        return self.embed(x)

    def classify(self, x: Tensor) -> Tensor:
        """Logits of the pretrained classification head, where the backbone has one."""
        raise NotImplementedError(f"backbone {self.name!r} has no classification head")

    def eval_transform(self, image_size: int | None = None):
        """torchvision transform: PIL/uint8 image -> float [0, 1] tensor, resized and center-cropped as in
        pretraining (resize to size / crop_pct, center crop to size). No normalization (it is inside ``embed``)."""
        from torchvision.transforms import v2

        size = int(image_size or self.input_size[-1])
        interp = getattr(v2.InterpolationMode, self.interpolation.upper(), v2.InterpolationMode.BICUBIC)
        return v2.Compose(
            [
                v2.ToImage(),
                v2.Resize(int(round(size / self.crop_pct)), interpolation=interp, antialias=True),
                v2.CenterCrop(size),
                v2.ToDtype(torch.float32, scale=True),
            ]
        )

    def extra_repr(self) -> str:
        return f"name={self.name!r}, embed_dim={self.embed_dim}, input_size={self.input_size}"
