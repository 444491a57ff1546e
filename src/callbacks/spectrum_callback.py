"""``RepresentationSpectrumCallback``: label-free spectral monitors of ``pl_module.backbone`` every N epochs.

Two scores of the embedding matrix Z (n probe images x D features), the monitors users of self-supervised
pretraining expect:

* RankMe (Garrido et al., "RankMe: Assessing the Downstream Performance of Pretrained Self-Supervised
  Representations by Their Rank", ICML 2023, arXiv:2210.02885): the entropy effective rank of the singular values
  of Z (uncentred, as the paper), in [1, min(n, D)]; a collapsing representation drops towards 1.
* α-ReQ (Agrawal et al., "α-ReQ: Assessing Representation Quality in Self-Supervised Learning by measuring
  eigenspectrum decay", NeurIPS 2022): the power-law exponent of the covariance eigenspectrum over ranks
  ``fit_range`` (default 11..100, the authors'); α near 1 is best (no monotone direction).

Both are :mod:`src.metrics.baselines` torchmetrics (:class:`~src.metrics.baselines.RankMe`,
:class:`~src.metrics.baselines.AlphaReQ`) on sum-reduced second moments: under DDP each rank embeds only its
round-robin share of the fixed probe images and the metrics sum the moments, so the logged numbers equal the
functional :func:`src.baselines.rankme` / :func:`src.baselines.alpha_req` of all probe features, whatever the
number of processes. Logs ``val/spectrum/rankme`` and ``val/spectrum/alpha_req`` (``val/spectrum`` = ``prefix``).

Defined values instead of errors, so a monitor never stops a run for what it is meant to report:

* α-ReQ needs ``fit_range[1]`` covariance eigenvalues (min(n − 1, D) >= 100 by default): with fewer probe images
  or feature dimensions nothing is logged for it and one warning names the fix; when the spectrum has a zero
  eigenvalue inside ``fit_range`` (a rank-deficient, e.g. collapsed, representation) nothing is logged for it that
  epoch, with a warning. Never a NaN.
* RankMe of all-zero features (no singular value > 0) is logged as 0, the rank of the zero matrix (a non-zero
  matrix has RankMe >= 1), with the collapse warning.
* RankMe below ``collapse_threshold`` warns (:class:`RepresentationCollapseWarning`) naming the epoch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor

from ..baselines.spectral import DEFAULT_FIT_RANGE, check_fit_range
from ..features import FORWARD_BATCH, FeatureExtractor
from ..metrics.baselines import AlphaReQ, RankMe
from ..utils.checks import check_int, check_real
from ..utils.distributed import Shard, all_reduce_sum
from ..utils.modes import eval_mode
from ..utils.normalization import Normalize
from ._monitor import BackboneMonitor, rank_and_world

__all__ = ["RepresentationCollapseWarning", "RepresentationSpectrumCallback"]

_NAME = "RepresentationSpectrumCallback"


class RepresentationCollapseWarning(UserWarning):
    """RankMe fell below the callback's ``collapse_threshold`` (``warnings.simplefilter("error", ...)`` stops a run
    on it)."""


def alpha_req_shortfall(n: int, d: int, fit_range: tuple[int, int]) -> str | None:
    """Why α-ReQ is undefined for ``n`` probe images of ``d`` features (too few covariance eigenvalues: it needs
    min(n − 1, d) >= ``fit_range[1]``) with the fix, or None when there are enough."""
    available, need = min(n - 1, d), fit_range[1]
    if available >= need:
        return None
    fixes = []
    if n - 1 < need:
        fixes.append(f"num_images >= {need + 1} (images='val' needs that many validation images)")
    if d < need:
        fixes.append(f"a backbone with >= {need} feature dimensions")
    smaller = f"fit_range=({min(fit_range[0], max(1, available - 1))}, {available})" if available >= 2 else None
    fix = " and ".join(fixes) + (f", or a shorter fit, {smaller}" if smaller else "")
    return (
        f"{_NAME}: α-ReQ needs {need} covariance eigenvalues (fit_range={tuple(fit_range)}) but {n} probe images of "
        f"{d} features give min(n - 1, D) = {available}, so alpha_req is not logged. Fix: {fix}"
    )


class RepresentationSpectrumCallback(BackboneMonitor):
    """Args (defaults equal ``configs/callbacks/spectrum.yaml``):
    every_n_epochs: compute at the end of every N-th training epoch (and after the last one).
    at_train_start: also compute once before training (logged at step 0: the initial weights).
    images: the probe set, the vocabulary of :func:`src.images.probe_images.probe_images` (shared with the other
        monitors): ``"auto"`` (default: the first ``num_images`` validation images when the data module has some,
        else the bundled photos) | ``"val"`` (an error without validation images) | ``"photos"`` | ``"digits"`` | an
        (N, C, H, W) tensor in [0, 1] with 2 <= N <= ``num_images`` (used as given).
    num_images: probe images, at most (>= 2). α-ReQ's default fit needs > 100 of them (512 by default; the digits'
        validation set has 360). Memory: the features of one rank's share, and two D x D float64 sums.
    image_size: side of the photos and digits; validation images and a tensor keep their own size (the
        representation at the resolution it is trained on).
    seed: seed of the photo crops.
    normalize: None (the backbone takes [0, 1] pixels) or ``(mean, std)`` / ``{"mean": ..., "std": ...}`` /
        torchvision's ``Normalize``: the backbone takes ``(pixels - mean) / std`` and the validation images carry it
        (the monitors' input contract; docs/monitoring.md).
    denormalize: deprecated alias of ``normalize`` (a DeprecationWarning; a callable is refused).
    fit_range: (first, last) 1-based ranks of the α-ReQ power-law fit (default (11, 100), the authors').
    collapse_threshold: warn (:class:`RepresentationCollapseWarning`, naming the epoch) when RankMe falls below
        it; None: never. RankMe is >= 1 for any non-zero features; 1 is a single direction.
    feature_fn: ``(pl_module, x) -> (N, D)``; default ``pl_module.backbone.embed`` (or ``backbone(x)``).
    skip_unchanged: do not recompute while the backbone's weights are unchanged (a frozen probe needs it once).
    max_batch: images per forward.
    prefix: log-name prefix (``val/spectrum``): ``{prefix}/rankme``, ``{prefix}/alpha_req``.
    progress: report progress while computing (counts of embedded images, elapsed time).

    Two of one kind in one Trainer: give each its own ``prefix=`` (Lightning refuses two with equal arguments as
    "more than one stateful callback"; :func:`~src.callbacks.check_monitor_prefixes` says it before the Trainer).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        at_train_start: bool = False,
        images: str | Tensor = "auto",
        num_images: int = 512,
        image_size: int = 64,
        seed: int = 0,
        denormalize: Any = None,
        fit_range: Sequence[int] = DEFAULT_FIT_RANGE,
        collapse_threshold: float | None = 2.0,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None = None,
        skip_unchanged: bool = True,
        max_batch: int = FORWARD_BATCH,
        prefix: str = "val/spectrum",
        progress: bool = True,
        normalize: Normalize = None,
    ) -> None:
        super().__init__(
            every_n_epochs, feature_fn, skip_unchanged, prefix, at_train_start, progress, normalize, denormalize
        )
        self.fit_range = check_fit_range(fit_range)
        self.collapse_threshold = (
            None
            if collapse_threshold is None
            else check_real(collapse_threshold, f"{_NAME}: collapse_threshold (None = no collapse warning)", low=0.0)
        )
        self.max_batch = check_int(max_batch, f"{_NAME}: max_batch", 1, meaning="images per forward")
        # a spectrum needs several images; validation images at their own size (the trained resolution)
        self._init_images(images, num_images, image_size, seed=seed, resize=False, min_images=2)
        self._alpha_warned = False

    def _identity(self) -> dict[str, Any]:
        return {"images": self.source, "num_images": self.num_images, "image_size": self.image_size,
                "fit_range": list(self.fit_range)}  # fmt: skip

    # ------------------------------------------------------------------ pieces

    def _embed_share(self, trainer: Any, pl_module: L.LightningModule) -> Tensor | None:
        """This rank's round-robin share of the probe features (float32, on the module's device), or None when it
        owns no image."""
        self._ready(trainer, pl_module)
        images = self.probe_images(trainer)
        idx = list(Shard(*rank_and_world(trainer)).indices(images.shape[0]))
        module, fn = self._encoder(pl_module)
        progress = self._progress(trainer, "Spectrum", len(idx))
        with eval_mode(module):
            ext = FeatureExtractor(progress.counted(fn), device=pl_module.device, max_batch=self.max_batch)
            z = ext(images[idx]) if idx else None
        progress.done()
        if z is not None and z.ndim != 2:
            raise ValueError(
                f"{_NAME}: the feature function returned shape {tuple(z.shape)}, the spectra need (N, D) vectors; "
                "give feature_fn=lambda module, x: module.backbone(x).flatten(1) (or pool the feature maps)"
            )
        return z

    def _agree(self, z: Tensor | None, trainer: Any) -> tuple[int, int, float]:
        """(D, rows with NaN/inf, Σ z²) over all ranks, in one sum all-reduce that every rank joins (ranks without
        images contribute zeros), so every rank takes the same branch below: no rank can raise alone and leave the
        others waiting in the metrics' sync."""
        if z is None:
            local = torch.zeros(4, dtype=torch.float64)
        else:
            finite = torch.isfinite(z)
            bad = float((~finite).any(1).sum())
            power = float(z.double().where(finite, 0.0).pow(2).sum())
            local = torch.tensor([float(z.shape[1]), 1.0, bad, power], dtype=torch.float64)
        d_sum, ranks, bad, power = (float(v) for v in all_reduce_sum(local))
        return int(round(d_sum / max(ranks, 1.0))), int(round(bad)), power

    def _warn(self, trainer: Any, message: str, category: type[Warning] = UserWarning) -> None:
        """A warning on rank 0 only (every rank reaches the same branch)."""
        if rank_and_world(trainer)[0] == 0:
            warnings.warn(message, category, stacklevel=3)

    def _when(self) -> str:
        return "before training" if self._x == 0 else f"after {self._x} epoch(s)"

    def compute(self, trainer: Any, pl_module: L.LightningModule) -> dict[str, float]:
        """RankMe and α-ReQ of the probe features; every rank must call it (the metrics sync)."""
        z = self._embed_share(trainer, pl_module)
        n = int(self.images.shape[0])
        d, bad, power = self._agree(z, trainer)
        if bad:
            raise FloatingPointError(
                f"{_NAME}: {self._when()}, the backbone produced NaN/inf features for {bad} of {n} probe images (a "
                "diverged run: lower the learning rate or check the loss for overflow)"
            )
        self.computations += 1
        if power == 0.0:  # all-zero features: RankMe's entropy is undefined, the rank is 0; α-ReQ has no spectrum
            self._warn_collapse(trainer, 0.0, n, d)
            return {"rankme": 0.0}
        rankme, alpha = RankMe(d).to(pl_module.device), AlphaReQ(d, self.fit_range).to(pl_module.device)
        if z is not None:
            rankme.update(z)
            alpha.update(z)
        out = {"rankme": float(rankme.compute())}
        alpha_value = self._alpha(alpha, trainer, n, d)
        if alpha_value is not None:
            out["alpha_req"] = alpha_value
        if self.collapse_threshold is not None and out["rankme"] < self.collapse_threshold:
            self._warn_collapse(trainer, out["rankme"], n, d)
        return out

    def _alpha(self, metric: AlphaReQ, trainer: Any, n: int, d: int) -> float | None:
        """α-ReQ, or None (with a warning) when it is undefined: too few eigenvalues (warned once), or a zero
        eigenvalue inside ``fit_range`` (a rank-deficient spectrum; warned each time, with the epoch)."""
        shortfall = alpha_req_shortfall(n, d, self.fit_range)
        if shortfall is not None:
            if not self._alpha_warned:
                self._warn(trainer, shortfall)
                self._alpha_warned = True
            return None
        try:  # every rank syncs, then raises alike: the fit range holds enough eigenvalues, so a ValueError here is
            return float(metric.compute())  # a zero eigenvalue inside it (see power_law_exponent)
        except ValueError as exc:
            self._warn(trainer, f"{_NAME}: {self._when()}, α-ReQ is undefined and not logged: {exc}")
            return None

    def _warn_collapse(self, trainer: Any, value: float, n: int, d: int) -> None:
        """The collapse hint: RankMe below ``collapse_threshold``, or 0 (all-zero features, warned always)."""
        if value == 0.0:
            why = "every feature of every probe image is zero (RankMe logged as 0, the rank of the zero matrix)"
        else:
            why = f"below collapse_threshold={self.collapse_threshold} (RankMe 1 = a single direction)"
        self._warn(
            trainer,
            f"{_NAME}: RankMe = {value:.3g} {self._when()}: {why}; {n} probe images, D = {d}. The representation may "
            "be collapsing: check the learning rate and the loss (collapse_threshold=None silences this warning "
            "for non-zero features)",
            RepresentationCollapseWarning,
        )
