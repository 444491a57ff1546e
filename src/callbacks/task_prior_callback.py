"""``TaskPriorCallback``: Task-Prior moments of the training backbone's kernel every N epochs (a cheap monitor).

Task Priors (Patel & Balestriero, arXiv:2507.09871), Thm 2.3: with M the centred cosine kernel of
``pl_module.backbone`` on a fixed image set and K that of a fixed prior (a pretrained backbone's features, computed
once), E[Tr(MG)] = Σ M_ij σ(K_ij/T) and Var[Tr(MG)] = Σ M_ij² σ(K_ij/T)(1 − σ(K_ij/T)) over G ~ μ_K. A higher E means
the representation agrees, on average, with the tasks the prior considers likely; a lower Var, more uniformly so.

Logs ``val/task_prior/mean``, ``val/task_prior/var`` and ``val/task_prior/z`` = E/√Var (a signal-to-noise ratio of
the alignment: how many standard deviations of Tr(MG) across tasks its mean lies above zero).

DDP: each rank embeds only its round-robin share of the fixed image set and feeds it to a
:class:`~src.metrics.TaskPriorMoments` (sum-reduced states = an exact gather), whose ``compute`` every rank calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from ..backbones.spec import check_backbone_spec
from ..features import FORWARD_BATCH, FeatureExtractor
from ..metrics.task_prior import TaskPriorMoments
from ..task_prior.config import TaskPriorConfig
from ..task_prior.conventions import TaskPriorConvention, resolve_convention
from ..task_prior.validation import ZERO_NORM, check_block_size
from ..utils.checks import check_image_size, check_int
from ..utils.distributed import Shard, all_reduce_sum
from ..utils.modes import eval_mode
from ..utils.normalization import Normalize
from ._monitor import BackboneMonitor, rank_and_world

__all__ = ["TaskPriorCallback"]


class TaskPriorCallback(BackboneMonitor):
    """Args:
    every_n_epochs: compute at the end of every N-th training epoch (and after the last one).
    config: a :class:`~src.task_prior.TaskPriorConfig` or a mapping of its fields (None = its defaults): the prior
        backbone, the convention and its settings, the block size. Each keyword below that is not None replaces the
        config's value (merged once, :meth:`~src.utils.options.Options.coerce`).
    temperature: T of the Task Prior (Thm 2.3); None = the convention's (``"repbench"``: 0.01).
    prior_backbone: registry name or ``{name: ..., **opts}`` of the prior (its features are computed once on the
        fixed images, then the backbone is dropped); or give ``prior_features`` (N, D) for the same images (and
        leave ``prior_backbone`` None). None: the config's (:class:`~src.task_prior.TaskPriorConfig`'s default).
    images: the fixed image set, the vocabulary of :func:`src.images.probe_images.probe_images` (shared with
        DivergenceRadiusCallback): ``"val"`` (default: the first ``num_images`` validation images, at their own size:
        not resized) | ``"auto"`` (those, else the bundled photos) | ``"photos"`` | ``"digits"`` | an (N, C, H, W)
        tensor in [0, 1] with 2 <= N <= ``num_images`` (used as given). The default stays ``"val"`` (not
        DivergenceRadius's ``"auto"``): a run without validation images is refused rather than measured on photos.
    num_images: size of the fixed set, at most (memory O(N·D); the moments never hold N × N).
    image_size: side of the photos and digits (``images="photos"`` / ``"digits"``); validation images and a tensor
        keep their own size.
    prior_image_size: side the *prior* backbone sees the fixed images at (antialiased bilinear resize, once, for
        its features); None (default): their own size. The evaluated backbone always sees them at their own size
        (what it trains on). E.g. 64 for 32-px images and an EfficientNet-Lite prior, which embeds inputs of
        <= 32 px as zero vectors.
    feature_fn: ``(pl_module, x) -> (N, D)``; default ``pl_module.backbone.embed``.
    eval_scale, prior_scale: ``"frobenius"`` | ``"none"``; None = the convention's (``"repbench"``: M/‖M‖_F, raw K).
    block_size: row blocks of the tiled moments (memory only); None = the config's.
    skip_unchanged: do not recompute when the backbone's weights did not change.
    max_batch: images per forward.
    prefix: log-name prefix (``val/task_prior``).
    at_train_start: also compute once before training (logged at step 0).
    normalize: None (the backbone takes [0, 1] pixels, as RepBench's backbones do) or ``(mean, std)`` /
        ``{"mean": ..., "std": ...}`` / torchvision's ``Normalize``: the evaluated backbone takes
        ``(pixels - mean) / std`` and the validation images carry it (the monitors' input contract). The images are
        kept in [0, 1] pixels (checked), normalised again for the evaluated backbone; the prior (a RepBench backbone,
        normalising inside) gets the pixels.
    denormalize: deprecated alias of ``normalize`` (a DeprecationWarning; a callable is refused).
    progress: report progress while computing (the prior's features once, then each computation).

    Checked before training (``setup``): the image set, and the prior's features on it - computed then, once; a
    prior that embeds some images as zero vectors (e.g. EfficientNet-Lite2 on inputs of <= 32 px) is refused with
    the fix named, instead of failing after the first epoch.
    convention: ``"repbench"`` (default) | ``"paper"`` | ``"authors"`` (or a ``TaskPriorConvention``): the preset of
        ``temperature``, ``eval_scale`` and ``prior_scale`` (docs/task_prior.md, "Conventions"); an explicit
        value (not None) wins. Resolved and checked here, before training.

    Two of one kind in one Trainer: give each its own ``prefix=`` (Lightning refuses two with equal arguments as
    "more than one stateful callback"; :func:`~src.callbacks.check_monitor_prefixes` says it before the Trainer).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        temperature: float | None = None,
        prior_backbone: str | Mapping[str, Any] | None = None,
        prior_features: Tensor | None = None,
        images: str | Tensor = "val",
        num_images: int = 512,
        image_size: int = 64,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None = None,
        eval_scale: str | None = None,
        prior_scale: str | None = None,
        block_size: int | None = None,
        skip_unchanged: bool = True,
        max_batch: int = FORWARD_BATCH,
        prefix: str = "val/task_prior",
        at_train_start: bool = False,
        denormalize: Any = None,
        progress: bool = True,
        convention: str | TaskPriorConvention | None = None,
        normalize: Normalize = None,
        prior_image_size: int | None = None,
        config: TaskPriorConfig | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            every_n_epochs, feature_fn, skip_unchanged, prefix, at_train_start, progress, normalize, denormalize
        )
        self.prior_image_size = (
            None
            if prior_image_size is None
            else check_image_size(prior_image_size, "prior_image_size", "TaskPriorCallback: set prior_image_size=64")
        )
        if prior_backbone is not None and prior_features is not None:
            raise ValueError(
                "give prior_backbone (a registry name) or prior_features (N, D) for the fixed images, not both"
            )
        if prior_backbone is not None:
            check_backbone_spec(prior_backbone, "prior_backbone")
        preset = convention if isinstance(convention, TaskPriorConvention) else None  # a preset object, not a name
        #: the options, merged once here: ``config`` with the keywords that are not None on top
        self.options = TaskPriorConfig.coerce(
            config, temperature=temperature, prior_backbone=prior_backbone, eval_scale=eval_scale,
            prior_scale=prior_scale, block_size=block_size, convention=None if preset else convention,
        )  # fmt: skip
        o = self.options
        #: T and the scales of the moments, resolved and checked now rather than at the first epoch end
        self.settings = (
            o.settings
            if preset is None
            else resolve_convention(
                preset, temperature=o.temperature, eval_scale=o.eval_scale, prior_scale=o.prior_scale
            )
        )
        self.prior_backbone = None if prior_features is not None else self.options.prior_backbone
        self.prior_features = prior_features
        # validation images at their own size (resize=False keeps the numbers of earlier versions); a kernel needs pairs
        self._init_images(images, num_images, image_size, resize=False, min_images=2)
        self.block_size = check_block_size(self.options.block_size)
        self.max_batch = check_int(max_batch, "TaskPriorCallback: max_batch", 1, meaning="images per forward")
        self._prior_share: Tensor | None = None  # prior features of this rank's share

    @property
    def computed_prior_features(self) -> Tensor | None:
        """The prior's features of this rank's share of the fixed images, once computed (None before): in one
        process all of them, in image order — reusable as ``prior_features=`` of another TaskPriorCallback on the
        same images (the monitoring study computes the prior once for all its runs)."""
        return self._prior_share

    @property
    def temperature(self) -> float:
        """T of the moments (the resolved convention's)."""
        return self.settings.temperature

    @property
    def eval_scale(self) -> str:
        return self.settings.eval_scale

    @property
    def prior_scale(self) -> str:
        return self.settings.prior_scale

    def _identity(self) -> dict[str, Any]:
        prior = "features" if self.prior_features is not None else self.prior_backbone
        prior = dict(prior) if isinstance(prior, Mapping) else prior
        out = {"temperature": self.temperature, "prior": prior, "images": self.source, "num_images": self.num_images}
        return out if self.prior_image_size is None else {**out, "prior_image_size": self.prior_image_size}

    # ------------------------------------------------------------------ pieces
    def _share(self, trainer: Any) -> Tensor:
        assert self.images is not None
        shard = Shard(*rank_and_world(trainer))
        return torch.tensor(list(shard.indices(self.images.shape[0])), dtype=torch.long)

    def _prepare(self, trainer: Any, pl_module: L.LightningModule) -> None:
        """The prior's features of this rank's share of the fixed images, computed once (before training), and
        checked: no zero vector (the cosine kernel is undefined there)."""
        if self._prior_share is not None:
            return
        idx = self._share(trainer)
        if self.prior_features is not None:
            if self.prior_features.shape[0] != self.images.shape[0]:
                raise ValueError(
                    f"prior_features has {self.prior_features.shape[0]} rows but the fixed image set has "
                    f"{self.images.shape[0]} images; compute them on the same images in the same order"
                )
            self._prior_share = self.prior_features[idx].to(torch.float64)
            self._check_prior(trainer)
            return
        from ..backbones.spec import build_backbone

        progress = self._progress(trainer, "Task-Prior prior features", len(idx))
        prior = build_backbone(self.prior_backbone).to(pl_module.device).eval()
        progress.stage(f"prior backbone {self.prior_backbone!r} built")
        ext = FeatureExtractor(progress.counted(prior.embed), device=pl_module.device, max_batch=self.max_batch)
        share = ext(self._prior_view(self.images[idx])).to(torch.float64).cpu() if len(idx) else None
        progress.done()
        if share is None:  # this rank owns no image: an empty table of the right width
            share = torch.zeros(0, int(prior.embed_dim), dtype=torch.float64)
        del prior
        self._prior_share = share
        self._check_prior(trainer)

    def _prior_view(self, images: Tensor) -> Tensor:
        """The fixed images as the prior backbone sees them: resized to ``prior_image_size`` (antialiased bilinear:
        convex weights, no overshoot) or as they are."""
        size = self.prior_image_size
        if size is None or tuple(images.shape[-2:]) == (size, size):
            return images
        return F.interpolate(images, size=(size, size), mode="bilinear", antialias=True).clamp(0.0, 1.0)

    def _check_prior(self, trainer: Any) -> None:
        """Refuse prior features with zero (or NaN/inf) rows on any rank, naming the fix; one collective that every
        rank joins, so all ranks raise alike."""
        share = self._prior_share
        norms = share.norm(dim=1) if share.numel() else share.new_zeros(0)
        zero = float((norms <= ZERO_NORM).sum()) if norms.numel() else 0.0
        bad = float((~torch.isfinite(norms)).sum()) if norms.numel() else 0.0
        zero, bad = (int(v) for v in all_reduce_sum(torch.tensor([zero, bad], dtype=torch.float64)).tolist())
        if not (zero or bad):
            return
        self._prior_share = None  # nothing half-prepared is kept
        n, side = self.images.shape[0], tuple(self.images.shape[-2:])
        if self.prior_features is not None:
            raise ValueError(
                f"TaskPriorCallback: prior_features has {zero} zero and {bad} NaN/inf rows of {n}; the prior's cosine "
                "kernel is undefined there: give features with finite, non-zero rows (one per image, in order)"
            )
        if bad:
            raise ValueError(
                f"TaskPriorCallback: prior_backbone={self.prior_backbone!r} gives NaN/inf features for {bad} of the "
                f"{n} fixed images"
            )
        if self.prior_image_size is not None:
            side = (self.prior_image_size, self.prior_image_size)
        raise ValueError(
            f"TaskPriorCallback: prior_backbone={self.prior_backbone!r} embeds {zero} of the {n} fixed images "
            f"({side[0]} x {side[1]} px as it sees them) as zero vectors, where the prior's cosine kernel is "
            "undefined (EfficientNet-Lite backbones embed inputs of <= 32 px as exact zeros). Fix: "
            "prior_image_size=64 (the prior sees the images resized; your backbone still sees them at their own "
            "size), or larger images (images='photos' or 'digits' with image_size=64), or a prior that takes small "
            "images (prior_backbone=..., or prior_features= computed on the same images)"
        )

    def compute(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """E, Var and z of the current backbone; every rank must call it (the metric syncs)."""
        self._ready(trainer, pl_module)
        module, fn = self._encoder(pl_module)
        idx = self._share(trainer)
        progress = self._progress(trainer, "Task-Prior", len(idx))
        with eval_mode(module):
            ext = FeatureExtractor(progress.counted(fn), device=pl_module.device, max_batch=self.max_batch)
            z = ext(self.images[idx]).to(torch.float64) if len(idx) else None
        progress.done()
        eval_dim, bad = self._agree(z)  # one collective before any rank may raise: no rank is left waiting
        if bad:
            raise FloatingPointError(
                f"epoch {trainer.current_epoch}: the backbone produced NaN/inf features for {bad} Task-Prior images"
            )
        prior = self._prior_share
        metric = TaskPriorMoments(
            self.images.shape[0], eval_dim, prior.shape[1], block_size=self.block_size, convention=self.settings
        ).to(pl_module.device)
        if z is not None:
            metric.update(z, prior, idx)
        out = {k: float(v) for k, v in metric.compute().items()}
        self.computations += 1
        return out

    @staticmethod
    def _agree(z: Tensor | None) -> tuple[int, int]:
        """(the evaluated feature width, the number of images with NaN/inf features), agreed by every rank in one sum
        all-reduce: ranks with no image contribute width 0 and the others the same D; a rank whose share has bad
        features must not raise before the collective, or the other ranks would wait in it forever."""
        d = 0 if z is None else int(z.shape[1])
        bad = 0 if z is None else int((~torch.isfinite(z)).any(1).sum())
        counts = all_reduce_sum(torch.tensor([float(d), 1.0 if d else 0.0, float(bad)], dtype=torch.float64))
        return int(round(float(counts[0]) / max(1.0, float(counts[1])))), int(counts[2])
