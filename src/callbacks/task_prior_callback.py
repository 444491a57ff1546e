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
from torch import Tensor

from ..backbones.spec import check_backbone_spec
from ..features import FeatureExtractor
from ..metrics.task_prior import TaskPriorMoments
from ..task_prior.config import TaskPriorConfig
from ..task_prior.conventions import TaskPriorConvention, resolve_convention
from ..task_prior.validation import check_block_size
from ..utils.digits import check_image_size
from ..utils.distributed import Shard, all_reduce_sum
from ..utils.modes import eval_mode
from ..utils.probe_images import Denormalize, as_denormalize, check_image_source, check_num_images, probe_images
from ._monitor import BackboneMonitor, first_val_images

__all__ = ["TaskPriorCallback"]


class TaskPriorCallback(BackboneMonitor):
    """Args:
    every_n_epochs: compute at the end of every N-th training epoch (and after the last one).
    temperature: T of the Task Prior (Thm 2.3); None = the convention's (``"repbench"``: 0.01).
    prior_backbone: registry name or ``{name: ..., **opts}`` of the prior (its features are computed once on the
        fixed images, then the backbone is dropped); or give ``prior_features`` (N, D) for the same images (and
        ``prior_backbone=None``). Default: :class:`~src.task_prior.TaskPriorConfig`'s.
    images: the fixed image set, the vocabulary of :func:`src.utils.probe_images.probe_images` (shared with
        DivergenceRadiusCallback): ``"val"`` (default: the first ``num_images`` validation images, at their own size:
        not resized) | ``"auto"`` (those, else the bundled photos) | ``"photos"`` | ``"digits"`` | an (N, C, H, W)
        tensor in [0, 1] with 2 <= N <= ``num_images`` (used as given). The default stays ``"val"`` (not
        DivergenceRadius's ``"auto"``): a run without validation images is refused rather than measured on photos.
    num_images: size of the fixed set, at most (memory O(N·D); the moments never hold N × N).
    image_size: side of the photos and digits (``images="photos"`` / ``"digits"``); validation images and a tensor
        keep their own size.
    feature_fn: ``(pl_module, x) -> (N, D)``; default ``pl_module.backbone.embed``.
    eval_scale, prior_scale: ``"frobenius"`` | ``"none"``; None = the convention's (``"repbench"``: M/‖M‖_F, raw K).
    block_size: row blocks of the tiled moments (memory only); default :class:`~src.task_prior.TaskPriorConfig`'s.
    skip_unchanged: do not recompute when the backbone's weights did not change.
    max_batch: images per forward.
    prefix: log-name prefix (``val/task_prior``).
    at_train_start: also compute once before training (logged at step 0).
    denormalize: how the validation images map to [0, 1] pixel space (``images="val"``): None (they are in
        [0, 1]), ``(mean, std)`` / ``{"mean": ..., "std": ...}`` of their normalisation, or a callable; images out
        of range are refused (both backbones normalise inside, so normalised images would be normalised twice).
    progress: report progress while computing (the prior's features once, then each computation).
    convention: ``"repbench"`` (default) | ``"paper"`` | ``"authors"`` (or a ``TaskPriorConvention``): the preset of
        ``temperature``, ``eval_scale`` and ``prior_scale`` (docs/task_prior.md, "Conventions"); an explicit
        value (not None) wins. Resolved and checked here, before training.
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        temperature: float | None = None,
        prior_backbone: str | Mapping[str, Any] | None = TaskPriorConfig.prior_backbone,
        prior_features: Tensor | None = None,
        images: str | Tensor = "val",
        num_images: int = 512,
        image_size: int = 64,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None = None,
        eval_scale: str | None = None,
        prior_scale: str | None = None,
        block_size: int = TaskPriorConfig.block_size,
        skip_unchanged: bool = True,
        max_batch: int = 256,
        prefix: str = "val/task_prior",
        at_train_start: bool = False,
        denormalize: Denormalize = None,
        progress: bool = True,
        convention: str | TaskPriorConvention = TaskPriorConfig.convention,
    ) -> None:
        super().__init__(every_n_epochs, feature_fn, skip_unchanged, prefix, at_train_start, progress)
        if prior_backbone is None and prior_features is None:
            raise ValueError("give prior_backbone (a registry name) or prior_features (N, D) for the fixed images")
        if prior_backbone is not None:
            check_backbone_spec(prior_backbone, "prior_backbone")
        #: T and the scales of the moments, resolved and checked now rather than at the first epoch end
        self.settings = resolve_convention(
            convention, temperature=temperature, eval_scale=eval_scale, prior_scale=prior_scale
        )
        self.prior_backbone = prior_backbone
        self.prior_features = prior_features
        name = type(self).__name__
        self.denormalize = as_denormalize(denormalize, name)
        images = check_image_source(images, name)
        self.num_images = check_num_images(num_images, images, name)
        if self.num_images < 2:
            raise ValueError(f"num_images must be >= 2, got {num_images}")
        self.image_size = check_image_size(image_size, "image_size", f"{name}: set image_size=64 (say)")
        self.images_source: str | Tensor = images
        if isinstance(images, Tensor):  # refused now, not at the first epoch end
            self.images_source = self._image_set(None)
        self.block_size = check_block_size(block_size)
        self.max_batch = int(max_batch)
        self._images: Tensor | None = None
        self._prior_share: Tensor | None = None  # prior features of this rank's share

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
        images = self.images_source if isinstance(self.images_source, str) else "tensor"
        prior = "features" if self.prior_features is not None else self.prior_backbone
        prior = dict(prior) if isinstance(prior, Mapping) else prior
        return {"temperature": self.temperature, "prior": prior, "images": images, "num_images": self.num_images}

    # ------------------------------------------------------------------ pieces
    def _share(self, trainer: L.Trainer) -> Tensor:
        assert self._images is not None
        shard = Shard(trainer.global_rank, trainer.world_size)
        return torch.tensor(list(shard.indices(self._images.shape[0])), dtype=torch.long)

    def _image_set(self, val_images: Tensor | None) -> Tensor:
        """The fixed image set of ``images=`` (validation images not resized: ``resize=False`` keeps the numbers of
        earlier versions), refused below 2 images (a kernel needs pairs)."""
        images = probe_images(
            self.images_source, num_images=self.num_images, image_size=self.image_size, val_images=val_images,
            denormalize=self.denormalize, resize=False, owner=type(self).__name__,
        )  # fmt: skip
        if images.shape[0] < 2:
            raise ValueError(
                f"TaskPriorCallback: the fixed image set has {images.shape[0]} image, the moments need >= 2; give "
                "more validation images or another images= source"
            )
        return images

    def _prepare(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._images is not None:
            return
        wants_val = isinstance(self.images_source, str) and self.images_source in ("auto", "val")
        self._images = self._image_set(first_val_images(trainer, self.num_images) if wants_val else None)
        idx = self._share(trainer)
        if self.prior_features is not None:
            if self.prior_features.shape[0] != self._images.shape[0]:
                raise ValueError(
                    f"prior_features has {self.prior_features.shape[0]} rows but the fixed image set has "
                    f"{self._images.shape[0]} images; compute them on the same images in the same order"
                )
            self._prior_share = self.prior_features[idx].to(torch.float64)
            return
        from ..backbones.spec import build_backbone

        progress = self._progress(trainer, "Task-Prior prior features", len(idx))
        prior = build_backbone(self.prior_backbone).to(pl_module.device).eval()
        progress.stage(f"prior backbone {self.prior_backbone!r} built")
        ext = FeatureExtractor(progress.counted(prior.embed), device=pl_module.device, max_batch=self.max_batch)
        self._prior_share = ext(self._images[idx]).to(torch.float64).cpu() if len(idx) else None
        progress.done()
        if self._prior_share is None:  # this rank owns no image: an empty table of the right width
            self._prior_share = torch.zeros(0, int(prior.embed_dim), dtype=torch.float64)
        del prior

    def compute(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """E, Var and z of the current backbone; every rank must call it (the metric syncs)."""
        self._prepare(trainer, pl_module)
        module, fn = self._encoder(pl_module)
        idx = self._share(trainer)
        progress = self._progress(trainer, "Task-Prior", len(idx))
        with eval_mode(module):
            ext = FeatureExtractor(progress.counted(fn), device=pl_module.device, max_batch=self.max_batch)
            z = ext(self._images[idx]).to(torch.float64) if len(idx) else None
        progress.done()
        eval_dim, bad = self._agree(z)  # one collective before any rank may raise: no rank is left waiting
        if bad:
            raise FloatingPointError(
                f"epoch {trainer.current_epoch}: the backbone produced NaN/inf features for {bad} Task-Prior images"
            )
        prior = self._prior_share
        metric = TaskPriorMoments(
            self._images.shape[0], eval_dim, prior.shape[1], block_size=self.block_size, convention=self.settings
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
