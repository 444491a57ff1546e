"""SimCLR self-supervised pretraining (Chen, Kornblith, Norouzi, Hinton, "A Simple Framework for Contrastive Learning
of Visual Representations", ICML 2020, arXiv:2002.05709), with the perturbation family of :mod:`src.perturbations`
as its augmentations: the label-free pretraining objective of the monitoring study (issue 24).

Per training batch of N images x (labels are never read):

    v1, v2 = t(x), t'(x)                  two views, t, t' ~ T: random resized crop (area (0.5, 1), aspect ratio
                                          (3/4, 4/3)) + horizontal flip, then ONE perturbation per image drawn from
                                          ``perturbations`` at k ~ U(its domain) (``sample_parameters``)
    h = backbone.embed([v1; v2])          one forward of the 2N views ([0, 1] pixels; BatchNorm sees both views, as
                                          the paper's global BatchNorm does)
    z = g(h)                              projection MLP: Linear - BatchNorm - ReLU - Linear (hidden 512, out 128)
    loss = nt_xent(z[:N], z[N:], τ)       eq. (1) of the paper over the 2N views (:func:`nt_xent`)

Where this differs from the paper (ImageNet, batch 4096, LARS, 32-128 TPU cores): no colour jitter / grayscale (the
digits are gray; the photometric perturbations brightness and contrast take their place, as the issue asks), no
Gaussian-blur-with-probability-0.5 (defocus blur is one perturbation among six), AdamW with a per-step cosine
schedule instead of LARS, a 512-wide projection hidden layer (the paper's is the embedding width, 2048), and under
DDP the negatives of each rank's loss are that rank's own batch (the paper gathers them across cores).

Views are drawn from a ``torch.Generator`` seeded with ``mix_seed(seed, stage, step, micro-batch, rank)`` (never the
global RNG): a resumed run draws the same views at the same step; validation views depend on the batch index only,
so ``val/loss`` is comparable across epochs (at a fixed validation batch size: the number of negatives is 2N − 2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..backbones import Backbone, check_images
from ..perturbations import perturb, sample_parameters
from ..perturbations.registry import check_perturbation_names
from ..utils.checkpoint import register_module
from ..utils.numerics import check_generator, mix_seed
from .base import RepBenchModule, unpack_batch

__all__ = [
    "DEFAULT_AUGMENTATIONS",
    "SimCLRPretraining",
    "nt_xent",
    "perturb_each",
    "random_resized_crop_flip",
    "simclr_augment",
]

#: The perturbations a SimCLR view draws from by default: those of Table 8 (Liu et al., arXiv:2604.14973) that keep a
#: 32-px digit recognisable over their whole domain — photometric (brightness, contrast), blur (defocus_blur), noise
#: (gaussian_noise), compression (jpeg_compression) and a small geometric warp (elastic_transform). Left out: fog
#: (at density 2.5 the digit all but disappears at 32 px) and frost (a photo overlay that occludes the strokes);
#: glass_blur is left out too, so that the DivergenceRadius monitor keeps three perturbations the network never
#: trained to be invariant to (fog, frost, glass_blur) beside the six it did.
DEFAULT_AUGMENTATIONS = (
    "brightness",
    "contrast",
    "defocus_blur",
    "gaussian_noise",
    "jpeg_compression",
    "elastic_transform",
)

_STAGE_CODE = {"train": 1, "val": 2, "test": 3}
_RATIO = (3.0 / 4.0, 4.0 / 3.0)  # SimCLR's (torchvision's) aspect-ratio range of the random resized crop


def nt_xent(z1: Tensor, z2: Tensor, temperature: float = 0.2) -> Tensor:
    """NT-Xent, the normalised temperature-scaled cross-entropy of SimCLR (Chen et al., arXiv:2002.05709, eq. (1)).

    ``z1[i]`` and ``z2[i]`` (shape (N, D)) are the projections of the two views of image i. With the 2N rows
    z = [z1; z2], sim(u, v) = uᵀv / (‖u‖‖v‖) and j(i) the other view of i,

        ℓ(i, j) = −log  exp(sim(z_i, z_j)/τ) / Σ_{k=1..2N, k≠i} exp(sim(z_i, z_k)/τ)
        L = 1/(2N) Σ_{k=1..N} [ℓ(2k−1, 2k) + ℓ(2k, 2k−1)]          (the paper's rows interleave the views)

    i.e. the mean over the 2N rows of a (2N − 1)-way cross-entropy whose target is the other view. Invariant to a
    permutation of the images (the same one applied to z1 and z2), to swapping z1 and z2 and to a positive scale of
    any row. Known values: every pair identical and all pairs mutually orthogonal gives log(1 + (2N − 2)·e^(−1/τ));
    all 2N rows mutually orthogonal gives log(2N − 1); N = 1 gives 0 (no negatives).

    Computed in float64 for float64 inputs, else in float32 (half inputs are upcast). Differentiable.
    """
    if not isinstance(z1, Tensor) or not isinstance(z2, Tensor):
        raise TypeError(f"z1 and z2 must be tensors, got {type(z1).__name__} and {type(z2).__name__}")
    if z1.ndim != 2 or z1.shape != z2.shape:
        raise ValueError(f"z1 and z2 must both have shape (N, D), got {tuple(z1.shape)} and {tuple(z2.shape)}")
    if z1.shape[0] < 1:
        raise ValueError("nt_xent needs at least one pair of views, got N = 0")
    if not float(temperature) > 0.0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    n = z1.shape[0]
    dtype = torch.float64 if torch.float64 in (z1.dtype, z2.dtype) else torch.float32
    z = F.normalize(torch.cat([z1, z2]).to(dtype), dim=1)
    logits = (z @ z.T) / float(temperature)
    self_mask = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_mask, float("-inf"))  # k ≠ i in the denominator
    arange = torch.arange(n, device=z.device)
    target = torch.cat([arange + n, arange])  # row i's positive: the other view of the same image
    return F.cross_entropy(logits, target)


def random_resized_crop_flip(
    x: Tensor,
    generator: torch.Generator | None,
    scale: tuple[float, float] = (0.5, 1.0),
    ratio: tuple[float, float] = _RATIO,
    flip: bool = True,
) -> Tensor:
    """A random resized crop and (with probability 1/2 when ``flip``) a horizontal flip of each image of ``x``
    (N, C, H, W), resampled bilinearly to H x W: SimCLR's crop (torchvision ``RandomResizedCrop``) in torch on the
    batch, parameters per image.

    Crop area fraction ~ U(scale), log aspect ratio ~ U(log ratio); the crop's relative width and height
    sqrt(area·r), sqrt(area/r) are clipped to 1 (torchvision redraws up to 10 times instead; with area >= 0.5 and
    r in (3/4, 4/3) at most one side exceeds the image, by <= 15 %), and its position is uniform over the places
    where it fits. Draws 5 float64 uniforms per image from ``generator`` (flip or not). Returns a new tensor in x's
    value range (bilinear weights are convex; clamped to x's min and max against round-off).
    """
    check_generator(generator)
    lo, hi = float(scale[0]), float(scale[1])
    if not 0.0 < lo <= hi <= 1.0:
        raise ValueError(f"scale must satisfy 0 < scale[0] <= scale[1] <= 1 (crop area fractions), got {scale}")
    n = x.shape[0]
    if n == 0:
        return x.detach().clone()
    gen_device = generator.device if generator is not None else "cpu"
    u = torch.rand(n, 5, generator=generator, dtype=torch.float64, device=gen_device).cpu()
    area = lo + (hi - lo) * u[:, 0]
    log_r = math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0])) * u[:, 1]
    w = (area * log_r.exp()).sqrt().clamp(max=1.0)  # fractions of the width and height
    h = (area / log_r.exp()).sqrt().clamp(max=1.0)
    cx = (2.0 * u[:, 2] - 1.0) * (1.0 - w)  # crop centre in affine_grid's [-1, 1] coordinates, crop inside the image
    cy = (2.0 * u[:, 3] - 1.0) * (1.0 - h)
    sx = torch.where((u[:, 4] < 0.5) & bool(flip), -w, w)
    theta = torch.zeros(n, 2, 3, dtype=torch.float64)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sx, cx, h, cy
    work = x.detach()
    if work.dtype not in (torch.float32, torch.float64):
        work = work.float()
    with torch.no_grad():
        grid = F.affine_grid(theta.to(device=x.device, dtype=work.dtype), list(work.shape), align_corners=False)
        out = F.grid_sample(work, grid, mode="bilinear", padding_mode="border", align_corners=False)
        out = out.clamp(work.amin(), work.amax())
    return out.to(x.dtype)


def perturb_each(x: Tensor, names: Sequence[str], generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """One perturbation per image of ``x`` (N, 3, H, W in [0, 1]): its name drawn uniformly from ``names``, its k
    uniformly from that perturbation's domain (:func:`~src.perturbations.sample_parameters`), all from
    ``generator``. Returns the perturbed images and the index into ``names`` of each image's perturbation."""
    check_generator(generator)
    names = list(check_perturbation_names(names))
    gen_device = generator.device if generator is not None else "cpu"
    which = torch.randint(len(names), (x.shape[0],), generator=generator, device=gen_device).cpu()
    out = x.detach().clone()
    for j, name in enumerate(names):  # registry order of the given list: the draws' order is fixed
        sel = (which == j).nonzero().flatten()
        if sel.numel() == 0:
            continue
        k = sample_parameters(name, int(sel.numel()), generator=generator)
        sel = sel.to(x.device)
        out[sel] = perturb(x[sel], name, k, generator=generator)
    return out, which


def simclr_augment(
    x: Tensor,
    generator: torch.Generator | None,
    perturbations: Sequence[str] = DEFAULT_AUGMENTATIONS,
    crop_scale: tuple[float, float] = (0.5, 1.0),
    flip: bool = True,
) -> Tensor:
    """One SimCLR view of each image: :func:`random_resized_crop_flip` then :func:`perturb_each`."""
    return perturb_each(random_resized_crop_flip(x, generator, crop_scale, flip=flip), perturbations, generator)[0]


@register_module
class SimCLRPretraining(RepBenchModule):
    """SimCLR pretraining of ``backbone`` (all layers) with a projection MLP (see the module docstring); exposes
    ``self.backbone`` so the monitoring callbacks (SynBench, DivergenceRadius, spectrum, Task Priors) follow its
    representation, the embedding before the projection head (the one SimCLR evaluates).

    Args:
        backbone: a :class:`Backbone`, a registry name or ``{name: ..., **opts}``; trained in train mode
            (:class:`~src.models.base.RepBenchModule` switches it at fit start, training start and every epoch).
        proj_hidden_dim, proj_dim: widths of the projection MLP ``Linear-BN-ReLU-Linear``.
        temperature: τ of NT-Xent (:func:`nt_xent`).
        perturbations: distinct names of :data:`src.perturbations.PERTURBATIONS`; each view of each image gets one,
            drawn uniformly, at k ~ U(its domain) (None = all nine). Default: :data:`DEFAULT_AUGMENTATIONS`.
        crop_scale: area fractions of the random resized crop; flip: random horizontal flips.
        lr, weight_decay, optimizer (adam | adamw | sgd), scheduler (cosine | None): optimisation.
        seed: seeds the views: (seed, stage, step, micro-batch, rank) -> generator, reproducible after a resume.

    Logs ``train/loss`` (NT-Xent of the training views) and ``val/loss`` / ``test/loss`` (NT-Xent of views drawn
    from the batch index: the same views every epoch). Labels are never read: batches may be ``(x, y)``,
    ``(x, y, index)`` or ``{"image", "label"[, "index"]}`` with anything as labels.

    Defaults equal ``configs/model/simclr.yaml`` with ``configs/backbone/timm_resnet10t_random.yaml``.
    """

    def __init__(
        self,
        backbone: Backbone | str | Mapping[str, Any] = MappingProxyType(
            {"name": "timm:resnet10t", "pretrained": False}
        ),
        proj_hidden_dim: int = 512,
        proj_dim: int = 128,
        temperature: float = 0.2,
        perturbations: Sequence[str] | None = DEFAULT_AUGMENTATIONS,
        crop_scale: Sequence[float] = (0.5, 1.0),
        flip: bool = True,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        optimizer: str = "adamw",
        scheduler: str | None = "cosine",
        seed: int = 0,
    ) -> None:
        if not float(temperature) > 0.0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        for key, dim in (("proj_hidden_dim", proj_hidden_dim), ("proj_dim", proj_dim)):
            if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
                raise ValueError(f"{key} must be a positive integer, got {dim!r}")
        check_perturbation_names(perturbations)
        if len(crop_scale) != 2 or not 0.0 < float(crop_scale[0]) <= float(crop_scale[1]) <= 1.0:
            raise ValueError(f"crop_scale must be [low, high] with 0 < low <= high <= 1, got {list(crop_scale)}")
        if not float(lr) > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        super().__init__(backbone)
        self.perturbation_names = list(check_perturbation_names(perturbations))
        self.projector = nn.Sequential(
            nn.Linear(self.backbone.embed_dim, proj_hidden_dim),
            nn.BatchNorm1d(proj_hidden_dim),
            nn.ReLU(inplace=True),
            nn.Linear(proj_hidden_dim, proj_dim),
        )
        self._micro_step, self._micro = -1, 0  # (step, position) of the last training micro-batch

    def forward(self, x: Tensor) -> Tensor:
        """The representation: backbone embeddings of [0, 1] images (before the projection head)."""
        return self.backbone.embed(x)

    def project(self, x: Tensor) -> Tensor:
        """Projections z = g(embed(x)), what NT-Xent compares."""
        return self.projector(self.backbone.embed(x))

    # ----------------------------------------------------------------- views
    def view_generator(self, stage: str, step: int, micro: int = 0) -> torch.Generator:
        """The CPU generator of one batch's views: seeded from (seed, stage, step, micro, rank).

        Training passes (global_step, the micro-batch's position within the step): the step makes the draws differ
        between steps and epochs, ``micro`` between the micro-batches of one optimizer step under gradient
        accumulation (0 without it). Neither depends on the data loader's batch index, which Lightning does not
        restore for every loader on a resume. Evaluation passes (batch_idx, 0): the same views every epoch."""
        if stage not in _STAGE_CODE:
            raise ValueError(f"stage must be one of {list(_STAGE_CODE)}, got {stage!r}")
        rank = self.global_rank if self._trainer is not None else 0
        key = mix_seed(int(self.hparams.seed), _STAGE_CODE[stage], int(step), int(micro), int(rank))
        return torch.Generator().manual_seed(key)

    def views(self, x: Tensor, stage: str, step: int, micro: int = 0) -> tuple[Tensor, Tensor]:
        """The two augmented views of ``x`` for (stage, step, micro) (:meth:`view_generator`)."""
        g = self.view_generator(stage, step, micro)
        hp = self.hparams
        kw = {"perturbations": self.perturbation_names, "crop_scale": tuple(hp.crop_scale), "flip": bool(hp.flip)}
        return simclr_augment(x, g, **kw), simclr_augment(x, g, **kw)

    def loss(self, x: Tensor, stage: str, step: int, micro: int = 0) -> Tensor:
        """NT-Xent of the two views of ``x`` for (stage, step, micro) (one forward of the 2N views)."""
        v1, v2 = self.views(x, stage, step, micro)
        z = self.project(torch.cat([v1, v2]))
        return nt_xent(z[: len(x)], z[len(x) :], float(self.hparams.temperature))

    # ----------------------------------------------------------------- steps
    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, _, _ = unpack_batch(batch)  # labels are never read
        if batch_idx == 0:
            check_images(x, name="train images", value_range=(0.0, 1.0))
        step = self.global_step
        self._micro = self._micro + 1 if step == self._micro_step else 0  # micro-batches of this optimizer step
        self._micro_step = step
        loss = self.loss(x, "train", step, self._micro)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite SimCLR loss at step {self.global_step}; lower model.lr")
        self.log("train/loss", loss, prog_bar=True, batch_size=len(x))
        return loss

    def _eval_step(self, stage: str, batch: Any, batch_idx: int) -> None:
        x, _, _ = unpack_batch(batch)
        if batch_idx == 0:
            check_images(x, name=f"{stage} images", value_range=(0.0, 1.0))
        loss = self.loss(x, stage, batch_idx)
        self.log(f"{stage}/loss", loss, prog_bar=stage == "val", batch_size=len(x), sync_dist=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("val", batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("test", batch, batch_idx)
