"""``DivergenceRadiusCallback``: DivergenceRadius and cosine robustness of ``pl_module.backbone`` every N epochs.

Liu et al., "Robustness of Vision Foundation Models to Common Perturbations" (arXiv:2604.14973), §3.3 and §4: on a
fixed probe set of images, every perturbation at m equally spaced parameters plus the clean image; per image the
radius of the minimum enclosing ball of the unit embeddings (R_dr) and (1 − min cos)/2 (R_cs), averaged.

Usable in any Lightning training whose LightningModule exposes ``backbone`` (with ``embed``, or any module mapping
(N, 3, H, W) images in [0, 1] to (N, D)), or given ``feature_fn=lambda module, x: ...``. The probe set
(``images=``, the vocabulary of :mod:`src.images.probe_images`, shared with the Task-Prior callback) is the first
``num_images`` images of the data module's validation set (``"val"``), the bundled offline sample photos
(``"photos"``), the bundled digits (``"digits"``), the validation images when there are some and else the photos
(``"auto"``, the default), or an image tensor; validation images are resized to ``image_size`` once. Validation
images are [0, 1] pixels, or carry the pipeline's normalisation given as ``normalize=(mean, std)`` (the monitors'
input contract, :mod:`src.callbacks._monitor`): they are mapped back to pixels for the perturbations and every
perturbed or clean image is normalised again before the backbone sees it. Images outside [0, 1] (after mapping) by
more than a resize can overshoot are refused, never clipped silently. The perturbed versions of the fixed probe set
are made once per run (:func:`~src.divergence_radius.protocol.cache_perturbations`); each computation only embeds
them. Work is split
in chunks over ranks and reduced through sum-state torchmetrics, so the logged numbers do not depend on the number
of processes. Logs ``val/divergence_radius/<perturbation>``, ``val/divergence_radius/mean``,
``val/cosine_robustness/<perturbation>``, ``val/cosine_robustness/mean`` (``val`` = ``prefix``) and a bar figure on
the fixed [0, 1] scale of both values (:mod:`src.divergence_radius.figures`), which says so on its face when the mean
cosine between different probe images shows a collapsed representation (R_dr ≈ 0 for that reason is not robustness).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor

from ..divergence_radius.config import DivergenceRadiusConfig
from ..divergence_radius.figures import bar_axis
from ..divergence_radius.protocol import PerturbationCache, cache_perturbations
from ..metrics.divergence_radius import robustness_metrics
from ..utils.checks import check_int
from ..utils.distributed import Shard
from ..utils.modes import eval_mode
from ..utils.normalization import Normalize
from ._monitor import BackboneMonitor, rank_and_world
from .collapse_alarm import mean_cross_cosine

__all__ = ["DivergenceRadiusCallback", "bar_figure"]

log = logging.getLogger("repbench")


def bar_figure(values: dict[str, float], names: Sequence[str], title: str = "", cross_cosine: float | None = None):
    """Bar chart of R_dr and R_cs per perturbation (the paper's Fig. 4 for one model) on a fixed [0, 1] y axis (both
    values lie in [0, 1] for unit-normalised embeddings: :mod:`src.divergence_radius.figures`), so a near-zero value
    draws a near-zero bar. ``cross_cosine``: the mean cosine between different probe images' embeddings; at or above
    :data:`~src.divergence_radius.figures.COLLAPSE_COSINE` the figure carries a note that the representation
    collapsed (its low R_dr is not robustness)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    x = torch.arange(len(names)).numpy()
    ax.bar(x - 0.2, [values[f"divergence_radius/{n}"] for n in names], 0.4, label="DivergenceRadius R_dr")
    ax.bar(x + 0.2, [values[f"cosine_robustness/{n}"] for n in names], 0.4, label="cosine robustness R_cs")
    ax.set_xticks(x, [n.replace("_", "\n") for n in names], fontsize=7)
    bar_axis(ax, "mean over probe images\n(lower = more robust)", cross_cosine)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    return fig


def _deprecated_source(source: str | None, images: str | Tensor) -> str | Tensor:
    """``images``, or the deprecated ``source=`` (with a DeprecationWarning naming ``images=``); both given (images
    not at its default ``"auto"``) is a ValueError."""
    if source is None:
        return images
    warnings.warn(
        f"DivergenceRadiusCallback(source={source!r}) is deprecated and will be removed in the next release: use "
        f"images={source!r} (the same choices, shared with TaskPriorCallback)",
        DeprecationWarning,
        stacklevel=3,
    )
    if not (isinstance(images, str) and images == "auto"):
        shown = images if isinstance(images, str) else "<tensor>"
        raise ValueError(
            f"DivergenceRadiusCallback got source={source!r} and images={shown!r}: source= is the deprecated alias "
            "of images=; give images= only"
        )
    return source


class DivergenceRadiusCallback(BackboneMonitor):
    """Args (defaults equal ``configs/callbacks/divergence_radius.yaml``):
    every_n_epochs: compute at the end of every N-th training epoch (and after the last one).
    at_train_start: also compute once before training (logged at step 0).
    num_images, image_size: the probe set's size (at most ``num_images`` images) and the side validation images are
        resized to and photos / digits made at (an ``images=`` tensor keeps its own size).
    m, mode, perturbations, chunk_size, seed: the sweep, fields of
        :class:`~src.divergence_radius.config.DivergenceRadiusConfig` (None = the ``config``'s value, whose defaults are the
        paper's m = 5 equally spaced parameters of all nine perturbations of Table 8): perturbed versions per image
        and perturbation; "equal" spacing or "random"; names; images per chunk (the unit of work sharded over ranks;
        random perturbations seeded per chunk); seed of the random perturbations (and of random parameters).
    feature_fn: ``(pl_module, x) -> (N, D)``; default ``pl_module.backbone.embed`` (or ``backbone(x)``).
    skip_unchanged: do not recompute while the backbone's weights are unchanged (a frozen probe needs it once).
    log_figure: add the bar figure to TensorBoard.
    images: the probe set (:func:`src.images.probe_images.probe_images`): ``"auto"`` (default: the first
        ``num_images`` validation images when the data module has some, else the bundled photos) | ``"val"`` (an
        error without validation images) | ``"photos"`` | ``"digits"`` | an (N, C, H, W) tensor in [0, 1] with
        1 <= N <= ``num_images`` (used as given, at its own size).
    source: deprecated alias of ``images=`` (a name only; removed in the next release): a DeprecationWarning; giving
        both is an error.
    normalize: None (the backbone takes [0, 1] pixels, as do RepBench's backbones) or ``(mean, std)`` /
        ``{"mean": ..., "std": ...}`` / torchvision's ``Normalize``: the backbone takes ``(pixels - mean) / std``
        and the validation images carry it (``(0, 1 / 255)`` for 0..255 images). Validation images are mapped back
        (``x * std + mean``) and checked; photos, digits and a tensor are pixel space. Every image is normalised
        before each forward. Out-of-range images are refused (see :func:`src.images.probe_images.pixel_images`); the
        allowed resize overshoot (at most 57/128) is clipped to [0, 1] with a warning.
    denormalize: deprecated alias of ``normalize`` (a DeprecationWarning; a callable is refused).
    prefix: log-name prefix (``val``): ``{prefix}/divergence_radius/...``; two callbacks in one Trainer need
        different prefixes.
    progress: report progress while computing (counts of embedded images, elapsed time).
    config: the sweep as a DivergenceRadiusConfig or a mapping of its fields (None = its defaults); the arguments
        above override its fields when they are not None.

    Two of one kind in one Trainer: give each its own ``prefix=`` (Lightning refuses two with equal arguments as
    "more than one stateful callback"; :func:`~src.callbacks.check_monitor_prefixes` says it before the Trainer).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        at_train_start: bool = False,
        num_images: int = 32,
        image_size: int = 64,
        m: int | None = None,
        mode: str | None = None,
        perturbations: Sequence[str] | None = None,
        source: str | None = None,
        chunk_size: int | None = None,
        seed: int | None = None,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None = None,
        skip_unchanged: bool = True,
        log_figure: bool = True,
        images: str | Tensor = "auto",
        denormalize: Any = None,
        prefix: str = "val",
        progress: bool = True,
        config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
        normalize: Normalize = None,
    ) -> None:
        super().__init__(
            every_n_epochs, feature_fn, skip_unchanged, prefix, at_train_start, progress, normalize, denormalize
        )
        images = _deprecated_source(source, images)
        image_size = check_int(
            image_size, "DivergenceRadiusCallback: image_size", 16, meaning="the perturbations' smallest side"
        )
        self.config = DivergenceRadiusConfig.coerce(
            config, perturbations=perturbations, m=m, mode=mode, seed=seed, chunk_size=chunk_size
        )
        self.names, self.m, self.mode = self.config.perturbations, self.config.m, self.config.mode
        self.chunk_size = self.config.chunk_size
        self._init_images(images, num_images, image_size, seed=self.config.seed, resize=True)
        self.log_figure = log_figure
        #: this rank's perturbed probe set (made at the first computation, reused: the images, sweep and shard are fixed)
        self.perturbed: PerturbationCache | None = None
        self._perturbed_where: tuple[Shard, str] | None = None
        self.seconds = 0.0  # wall time spent computing (the callback's share of a run)
        #: mean cosine between different probe images' embeddings at the last computation (rank 0, with a figure;
        #: None: not measured): the figure's collapse note
        self.cross_cosine: float | None = None

    def _identity(self) -> dict[str, Any]:
        # "source" holds the source's name as before images= replaced source=; a tensor keeps "auto", the key the
        # former default source="auto" wrote next to images=<tensor>, so checkpoints of earlier versions resume
        source = self.source if isinstance(self.images_source, str) else "auto"
        return {**self.config.to_dict(), "num_images": self.num_images, "image_size": self.image_size,
                "source": source}  # fmt: skip

    # ------------------------------------------------------------------ pieces
    def _perturbed(self, trainer: Any, device: torch.device) -> PerturbationCache:
        """This rank's perturbed probe set, made once per run on ``device`` (where the forwards run) and reused; made
        anew only if the rank layout or the device changed (e.g. a resumed run on other hardware)."""
        shard = Shard(*rank_and_world(trainer))
        where = (shard, str(device))
        if self.perturbed is None or self._perturbed_where != where:
            self.perturbed = cache_perturbations(self.probe_images(trainer), self.config, shard=shard, device=device)
            self._perturbed_where = where
        return self.perturbed

    def _embed_count(self, trainer: Any, n_images: int) -> int:
        """Images this rank embeds in one computation: its chunks' images, clean and m versions per perturbation."""
        shard = Shard(*rank_and_world(trainer))
        chunks = shard.indices(math.ceil(n_images / self.chunk_size))
        mine = sum(min(n_images, (c + 1) * self.chunk_size) - c * self.chunk_size for c in chunks)
        return mine * (1 + len(self.names) * self.m)

    def compute(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """Run the sweep on this rank's chunks; every rank must call it (the metrics all-reduce)."""
        self._ready(trainer, pl_module)
        module, fn = self._encoder(pl_module)
        images = self.probe_images(trainer)
        start = time.perf_counter()
        progress = self._progress(trainer, "DivergenceRadius", self._embed_count(trainer, images.shape[0]))
        first = self.perturbed is None
        perturbed = self._perturbed(trainer, pl_module.device)
        if first:
            progress.stage(f"perturbed the probe set once for the run ({perturbed.nbytes / 2**20:.0f} MiB)")
        rank, world = rank_and_world(trainer)
        with eval_mode(module):
            out = robustness_metrics(
                images,
                progress.counted(fn),
                self.config,
                rank=rank,
                world_size=world,
                device=pl_module.device,
                perturbed=perturbed,
            )
            if self.log_figure and trainer.global_rank == 0 and images.shape[0] >= 2:  # the figure's collapse check
                self.cross_cosine = self._cross_cosine(fn, images, pl_module.device)
        progress.done()
        seconds = time.perf_counter() - start
        self.seconds += seconds
        self.computations += 1
        if trainer.global_rank == 0:
            log.debug(
                "DivergenceRadius: %d images x %d perturbations x (1 + %d) versions in %.1f s; mean R_dr %.4f",
                images.shape[0], len(self.names), self.m, seconds, out["divergence_radius/mean"],
            )  # fmt: skip
        return out

    @torch.no_grad()
    def _cross_cosine(self, fn: Callable[[Tensor], Tensor], images: Tensor, device: torch.device) -> float:
        """Mean cosine between the clean embeddings of different probe images (one forward of the probe set, in
        chunks; :func:`~src.callbacks.collapse_alarm.mean_cross_cosine`)."""
        step = self.chunk_size
        z = torch.cat([fn(images[i : i + step].to(device)).float() for i in range(0, images.shape[0], step)])
        return mean_cross_cosine(z)

    def _log_figure(self, trainer: L.Trainer) -> None:
        if self.log_figure:
            title = f"after {self._x} epoch(s)"
            self._add_figure(
                trainer,
                f"{self.prefix}/divergence_radius/bars",
                lambda: bar_figure(self.last, self.names, title, self.cross_cosine),
            )
