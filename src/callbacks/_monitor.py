"""``BackboneMonitor``: the shell shared by the per-epoch monitors (SynBench, DivergenceRadius, Task Prior, spectrum,
collapse alarm).

One place for what every monitor does around its computation: find the encoder (``pl_module.backbone`` or a
``feature_fn``) and feed it what the user's pipeline feeds it (the input contract, ``normalize=``), build and check
its fixed probe images before the first training step, decide when to compute (every N epochs, after the last one,
optionally before training), skip the computation while the backbone's weights are unchanged, report progress while
it computes, log the values and a figure, and keep its state in checkpoints under a state key of its own.
Subclasses implement :meth:`BackboneMonitor.compute` (every rank calls it; it must join the same collectives on
every rank), optionally :meth:`BackboneMonitor._log_figure`, :meth:`BackboneMonitor._prepare` (work done once,
before training: e.g. the Task-Prior prior features) and :meth:`BackboneMonitor._identity` (the constructor
arguments that make two monitors of one type different).

**Input contract** (:mod:`src.utils.normalization`): ``normalize=(mean, std)`` means the backbone takes images
normalised as ``(pixels - mean) / std`` and so do the validation images. Probe images live in [0, 1] pixel space
(validation images are mapped back, checked and perturbed there) and every forward of the user's backbone gets
``(pixels - mean) / std`` (:class:`PixelEncoder`), SynBench's synthetic images included. ``normalize=None``: the
backbone takes [0, 1] pixels (RepBench's backbones normalise inside ``embed``).

**When things are checked**: the arguments in ``__init__``; the probe images (the validation set's first images:
shape, range, the normalisation) in ``setup`` when the data module provides them (else at ``on_train_start``, from
the loaders given to ``fit``); one forward of two probe images through the encoder (output shape, finiteness) at
``on_train_start``. All before the first training step.

**Logging**: the values go to ``trainer.callback_metrics`` and to the loggers under ``f"{prefix}/{key}"`` through
``pl_module.log`` at the end of the training epoch, so they sit on Lightning's own x-axis: the step Lightning gives
every epoch-level metric, the same x as the module's ``val/*`` metrics of that epoch (TensorBoard, ``metrics.csv``).
Values computed before training (``at_train_start``) are written at the step training starts from (0 for a fresh
run). Figures use the step of their values.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from ..backbones.weights import state_fingerprint
from ..features.owner import owner_module
from ..images.probe_images import check_image_source, check_num_images, probe_images
from ..utils.checks import check_image_size, check_int
from ..utils.modes import eval_mode
from ..utils.normalization import ChannelNormalization, Normalize, monitor_normalization

__all__ = [
    "BackboneMonitor",
    "ComputeProgress",
    "PixelEncoder",
    "check_monitor_prefixes",
    "first_val_images",
    "logged_step",
    "rank_and_world",
    "weights_fingerprint",
]

log = logging.getLogger("repbench")


def weights_fingerprint(module: nn.Module) -> str:
    """A digest of every parameter and buffer (exact change detection, no copy of the weights kept): the one weights
    fingerprint of the project, :func:`~src.backbones.weights.state_fingerprint`, over parameters and all buffers."""
    return state_fingerprint({**dict(module.named_parameters()), **dict(module.named_buffers())})


def logged_step(trainer: Any, epoch_end: bool) -> int:
    """The x-axis value Lightning gives a metric logged now with ``self.log``: its count of optimizer-stepping batches
    (``fit_loop.epoch_loop._batches_that_stepped``, the global step for one optimizer), minus one at the end of a
    training epoch (Lightning logs epoch-end metrics at the step of the epoch's last batch). 0 without a trainer."""
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    step = getattr(loop, "_batches_that_stepped", None)
    if not isinstance(step, int):
        step = int(getattr(trainer, "global_step", 0) or 0)
    return max(0, step - 1) if epoch_end else step


def _image_of(item: Any) -> Any:
    """The image of a dataset item: ``item[0]`` of a tuple/list, ``item["image"]`` of a dict, else the item."""
    if isinstance(item, (tuple, list)):
        return item[0]
    if isinstance(item, dict):
        return item["image"]
    return item


def _val_source(trainer: Any) -> Any:
    """The validation data the trainer knows now: the data module's ``val_dataset`` or ``val_dataloader()``, else the
    loaders given to ``fit`` once Lightning has loaded them (``trainer.val_dataloaders``, from the fit loop's start);
    None when there is none (yet)."""
    dm = getattr(trainer, "datamodule", None)
    source = getattr(dm, "val_dataset", None)
    if source is None and dm is not None and hasattr(dm, "val_dataloader"):
        try:
            source = dm.val_dataloader()
        except Exception:  # a data module without a validation split
            source = None
    if source is None:
        loaders = getattr(trainer, "val_dataloaders", None)
        source = loaders[0] if isinstance(loaders, (list, tuple)) and loaders else loaders
        if isinstance(source, dict) and source:
            source = next(iter(source.values()))
    return source


def _first_items(source: Any, n: int) -> list[Any]:
    """The first ``n`` images of a map-style dataset, of a DataLoader over one (its dataset's first items: no
    sampler shuffling, no worker processes), or of any iterable of batches."""
    dataset = getattr(source, "dataset", source)
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        return [_image_of(dataset[i]) for i in range(min(int(n), len(dataset)))]
    images: list[Any] = []
    for batch in source:  # an iterable dataset: its first batches, as the loader yields them
        for x in torch.as_tensor(_image_of(batch)):
            images.append(x)
            if len(images) >= n:
                return images
    return images


def _stack_images(xs: Sequence[Any], owner: str) -> Tensor:
    """The validation images ``xs`` as one float tensor (N, C, H, W); a ValueError naming ``owner``, the sizes found
    and the fix when they differ (a probe set is one batch of one size)."""
    tensors = [torch.as_tensor(x) for x in xs]
    shapes = sorted({tuple(t.shape) for t in tensors})
    if len(shapes) > 1:
        raise ValueError(
            f"{owner}: the first {len(tensors)} validation images have different sizes {[list(s) for s in shapes]}, "
            "and the probe set is one batch of one size. Fix: images='photos' (or 'digits', or an image tensor) "
            "on the callback, or resize the images to one size in the validation dataset (e.g. a Resize transform)"
        )
    return torch.stack(tensors).float()


def first_val_images(trainer: L.Trainer | None, n: int, owner: str = "first_val_images") -> Tensor | None:
    """The first ``n`` validation images as one float tensor (N, C, H, W), or None when the trainer knows no
    validation data (yet) or it is empty. From the data module's ``val_dataset`` / ``val_dataloader()``, else from
    the validation loaders given to ``fit`` (:func:`_val_source`). Dataset items may be ``(x, ...)`` tuples,
    ``{"image": x, ...}`` dicts or bare tensors; the set is the dataset's first items, so it is the same on every
    rank and every epoch. The values are the dataset's own (see :func:`src.images.probe_images.pixel_images` for
    the [0, 1] check). Images of different sizes are a ValueError naming ``owner`` (the callback) and the fix."""
    source = _val_source(trainer)
    if source is None:
        return None
    xs = _first_items(source, n)
    if not xs:
        return None
    return _stack_images(xs, owner)


class PixelEncoder:
    """The user's encoder as a function of [0, 1] pixel images: ``fn(normalize.to_model(x))``, what the user's
    training feeds it. ``__self__`` is the module whose mode and memory format matter (the feature engine and the
    protocols find it there); ``mean`` / ``std`` are the whole pixel -> network normalisation (the user's, composed
    with the one a RepBench backbone applies inside ``embed``), which SynBench uses to normalise its synthetic
    images as :class:`~src.synbench.SynBenchConfig` ``normalization`` asks."""

    def __init__(
        self,
        fn: Callable[[Tensor], Tensor],
        module: nn.Module,
        normalize: ChannelNormalization,
        inner: tuple[Any, Any] | None = None,
    ) -> None:
        self._fn, self.__self__, self.normalize, self._inner = fn, module, normalize, inner

    def __call__(self, x: Tensor) -> Tensor:
        return self._fn(self.normalize.to_model(x))

    def mean_std(self, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(mean, std), one value per channel, of the whole pixel -> network map."""
        return self.normalize.composed(self._inner, channels)


# ---------------------------------------------------------------------------------------------------- progress
def rank_and_world(trainer: Any) -> tuple[int, int]:
    """(rank, world size) of the trainer, or of the default process group when called without one."""
    if hasattr(trainer, "global_rank"):
        return int(trainer.global_rank), int(getattr(trainer, "world_size", 1))
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _say(trainer: Any, line: str) -> None:
    """One progress line on rank 0: through Lightning's progress bar (``ProgressBar.print``: above the bar, without
    breaking it) when one is shown, else to the ``repbench`` logger at INFO."""
    if rank_and_world(trainer)[0] != 0:
        return
    bar = getattr(trainer, "progress_bar_callback", None)
    if bar is not None and getattr(bar, "is_enabled", True):
        bar.print(line)
    else:
        log.info(line)


class ComputeProgress:
    """Progress of one computation: a line when it starts, a line at most every ``interval_s`` seconds while images
    are embedded (count, of the total when known, elapsed time and time left), one per named stage and one at the
    end. The time left is estimated from the embedding rate alone: images embedded per second since the first
    embedding began, so start-up work (a sampler's compilation, a prior backbone, perturbing the probe set) does not
    inflate it. Silent when ``enabled`` is false."""

    def __init__(
        self, trainer: Any, title: str, total: int | None, enabled: bool = True, interval_s: float = 10.0
    ) -> None:
        self.trainer, self.title, self.total, self.enabled = trainer, title, total, bool(enabled)
        self.interval_s = float(interval_s)
        self.count = 0
        self.start = self._last = time.perf_counter()
        self.first_embed: float | None = None  # when the first embedding began
        if self.enabled:
            of = f" ({total} images to embed on this process)" if total else ""
            _say(trainer, f"{title}: computing{of}")

    def _elapsed(self) -> float:
        return time.perf_counter() - self.start

    def stage(self, text: str) -> None:
        """A line naming a finished stage, with the elapsed time."""
        if self.enabled:
            _say(self.trainer, f"{self.title}: {text} ({self._elapsed():.1f} s)")

    def say(self, text: str) -> None:
        """A line announcing what starts now (e.g. a one-off compilation)."""
        if self.enabled:
            _say(self.trainer, f"{self.title}: {text}")

    def started(self) -> None:
        """An embedding begins (the rate is measured from the first one)."""
        if self.first_embed is None:
            self.first_embed = time.perf_counter()

    def advance(self, n: int) -> None:
        """``n`` more images embedded."""
        self.count += int(n)
        now = time.perf_counter()
        if not self.enabled or now - self._last < self.interval_s:
            return
        self._last = now
        elapsed = now - self.start
        if self.total:
            embedding = now - (self.first_embed if self.first_embed is not None else self.start)
            left = embedding / self.count * max(0, self.total - self.count) if self.count else math.inf
            text = f"{self.count}/{self.total} images embedded ({100 * self.count / self.total:.0f} %), "
            text += f"{elapsed:.1f} s elapsed, ~{left:.0f} s left"
        else:
            text = f"{self.count} images embedded, {elapsed:.1f} s elapsed"
        _say(self.trainer, f"{self.title}: {text}")

    def done(self) -> None:
        """The end line: images embedded and seconds."""
        if self.enabled:
            _say(self.trainer, f"{self.title}: done, {self.count} images embedded in {self._elapsed():.1f} s")

    def counted(self, fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        """``fn`` counting the images it embeds; introspection sees through it (see :class:`_Counted`)."""
        return _Counted(fn, self)


class _Counted:
    """A feature function that reports each batch's size to a :class:`ComputeProgress`. It exposes the wrapped
    function as ``feature_fn`` and its module as ``__self__`` -- the two attributes through which the protocols
    find the module behind a feature function (eval mode, a Backbone's mean/std for SynBench's normalisation,
    memory format) -- so wrapping changes no result."""

    def __init__(self, fn: Callable[[Tensor], Tensor], progress: ComputeProgress) -> None:
        self.feature_fn = fn
        self.progress = progress
        module = owner_module(fn)
        if module is not None:
            self.__self__ = module

    def __call__(self, x: Tensor) -> Tensor:
        self.progress.started()
        out = self.feature_fn(x)
        self.progress.advance(x.shape[0])
        return out


# ---------------------------------------------------------------------------------------------------- the shell
class BackboneMonitor(L.Callback):
    """Base of the monitors. Logs ``f"{prefix}/{key}"`` for every ``key`` of :meth:`compute`'s result.

    ``normalize``: the input contract (module docstring); ``denormalize``: its deprecated alias.
    ``progress``: report progress while computing (rank 0; through the progress bar when shown, else the
    ``repbench`` logger), a line at most every :attr:`progress_interval_s` seconds.

    Image monitors call :meth:`_init_images` in their constructor: they then hold a fixed probe set (``images=``,
    the vocabulary of :func:`src.images.probe_images.probe_images`), built once (:meth:`probe_images`) and checked
    before training.
    """

    progress_interval_s: float = 10.0
    #: the images this monitor embeds: a fixed probe set (image monitors) or none (SynBench's are synthetic)
    uses_images: bool = False

    def __init__(
        self,
        every_n_epochs: int,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None,
        skip_unchanged: bool,
        prefix: str,
        at_train_start: bool = False,
        progress: bool = True,
        normalize: Normalize = None,
        denormalize: Any = None,
    ) -> None:
        name = type(self).__name__
        #: a period of whole epochs (1.5 was truncated to 1 before: a monitor then ran every epoch)
        self.every_n_epochs = check_int(every_n_epochs, f"{name}: every_n_epochs", 1, meaning="epochs between runs")
        if not isinstance(prefix, str) or not prefix.strip("/"):
            raise ValueError(f"prefix must be a non-empty log-name prefix such as 'val', got {prefix!r}")
        if feature_fn is not None and not callable(feature_fn):
            raise TypeError(
                f"{type(self).__name__}: feature_fn must be a callable (pl_module, images) -> (N, D) features, got "
                f"{type(feature_fn).__name__}"
            )
        self.feature_fn = feature_fn
        self.skip_unchanged = bool(skip_unchanged)
        self.prefix = prefix.rstrip("/")
        self.at_train_start = bool(at_train_start)
        self.progress = bool(progress)
        #: the normalisation the backbone takes (None: [0, 1] pixels), :mod:`src.utils.normalization`
        self.normalize: ChannelNormalization | None = monitor_normalization(normalize, denormalize, type(self).__name__)
        self._fingerprint: str | None = None
        self._x = 0  # completed epochs of the current computation (titles and messages)
        self._step = 0  # the loggers' x of the current values (Lightning's step, see logged_step)
        self._prepared = False
        self._before_training = False  # computing in on_train_start (progress titles say so)
        self.last: dict[str, float] = {}
        self.history: list[tuple[int, dict[str, float]]] = []
        self.computations = 0

    # ------------------------------------------------------------------ to implement
    def compute(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        raise NotImplementedError

    def _compute(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        return self.compute(trainer, pl_module)

    def _log_figure(self, trainer: L.Trainer) -> None:
        """Optional: add a figure of ``self.last`` to the loggers (rank 0), e.g. through :meth:`_add_figure`."""

    def _prepare(self, trainer: Any, pl_module: L.LightningModule) -> None:
        """Optional: work done once before training, after the probe images are built (e.g. prior features and
        their checks). Called from ``setup`` (or ``on_train_start`` when the images come from ``fit``'s loaders)
        and before the first computation; every rank calls it."""

    def _check_images(self) -> Tensor | None:
        """Two inputs for the encoder check before training (the probe images' first two; None: no check)."""
        return self.images[:2] if self.uses_images and self.images is not None else None

    def _identity(self) -> dict[str, Any]:
        """The constructor arguments (besides ``prefix``) that change what the monitor computes: part of
        :attr:`state_key`, so two monitors of one type keep their checkpoint states apart."""
        return {}

    # ------------------------------------------------------------------ identity
    @property
    def state_key(self) -> str:
        """``Class{'prefix': ..., <identity>}`` (Lightning's convention, as ModelCheckpoint's)."""
        return self._generate_state_key(prefix=self.prefix, **self._identity())

    def _progress(self, trainer: Any, title: str, total: int | None) -> ComputeProgress:
        """A :class:`ComputeProgress` for one computation (titled with the epoch when there is one)."""
        epoch = getattr(trainer, "current_epoch", None)
        where = f" (epoch {epoch})" if isinstance(epoch, int) else ""
        if self._before_training:
            where = " (before training)"
        return ComputeProgress(trainer, f"{title}{where}", total, self.progress, self.progress_interval_s)

    # ------------------------------------------------------------------ the probe images (image monitors)
    def _init_images(
        self,
        images: str | Tensor,
        num_images: int,
        image_size: int,
        *,
        seed: int = 0,
        resize: bool = True,
        min_images: int = 1,
    ) -> None:
        """The probe set's arguments, checked now (a tensor is built and checked now too): ``images`` (the
        vocabulary of :func:`~src.images.probe_images.probe_images`), at most ``num_images`` images (at least
        ``min_images``), photos and digits at ``image_size`` (validation images too when ``resize``), photo crops
        seeded by ``seed``."""
        name = type(self).__name__
        self.uses_images = True
        self.images_source: str | Tensor = check_image_source(images, name)
        self.num_images = check_num_images(num_images, self.images_source, name)
        self.min_images = check_int(min_images, f"{name}: min_images", 1)
        if self.num_images < self.min_images:
            raise ValueError(f"{name}: num_images must be >= {self.min_images}, got {num_images}")
        self.image_size = check_image_size(image_size, "image_size", f"{name}: set image_size=64 (say)")
        self.seed, self.resize = check_int(seed, f"{name}: seed", meaning="of the photo crops"), bool(resize)
        #: the probe set once built, [0, 1] pixels (a tensor's now: refused here, not at the first epoch end)
        self.images: Tensor | None = self._build(None) if isinstance(self.images_source, Tensor) else None

    @property
    def source(self) -> str:
        """The probe source's name (``"tensor"`` for an image tensor)."""
        return self.images_source if isinstance(self.images_source, str) else "tensor"

    def _wants_val(self) -> bool:
        return isinstance(self.images_source, str) and self.images_source in ("auto", "val")

    def _build(self, val_images: Tensor | None) -> Tensor:
        """The probe set of ``images=`` in [0, 1] pixels (:func:`~src.images.probe_images.probe_images`: validation
        images mapped back with ``normalize``, checked, resized when ``resize``), refused below ``min_images``."""
        name = type(self).__name__
        if val_images is not None and self.normalize is not None and val_images.numel():
            self.normalize.check_channels(val_images.shape[1], name)
            lo, hi = (float(v) for v in torch.aminmax(val_images.float()))
            if 0.0 <= lo and hi <= 1.0:
                warnings.warn(
                    f"{name}(normalize={self.normalize.to_dict()}): the validation images already lie in [{lo:.3g}, "
                    f"{hi:.3g}], as [0, 1] pixels do, while normalize= says they carry that normalisation (then they "
                    "would reach below 0 or above 1). If your pipeline does not normalise, drop normalize=",
                    UserWarning,
                    stacklevel=2,
                )
        images = probe_images(
            self.images_source, num_images=self.num_images, image_size=self.image_size, seed=self.seed,
            val_images=val_images, normalize=self.normalize, resize=self.resize, owner=name,
        )  # fmt: skip
        if images.shape[0] < self.min_images:
            raise ValueError(
                f"{name}: the probe set has {images.shape[0]} image(s), it needs >= {self.min_images}; give more "
                "validation images or another images= source ('photos', 'digits', or an image tensor)"
            )
        return images

    def probe_images(self, trainer: Any) -> Tensor:
        """The fixed probe set, [0, 1] pixels (built once, identical on every rank): see ``images=``."""
        if self.images is None:
            val = first_val_images(trainer, self.num_images, type(self).__name__) if self._wants_val() else None
            self.images = self._build(val)
        return self.images

    def _ready(self, trainer: Any, pl_module: L.LightningModule) -> None:
        """Build the probe images and run :meth:`_prepare`, once (also when ``compute`` is called outside a fit)."""
        if self._prepared:
            return
        if self.uses_images:
            self.probe_images(trainer)
        self._prepare(trainer, pl_module)
        self._prepared = True

    # ------------------------------------------------------------------ pieces
    def _add_figure(self, trainer: L.Trainer, tag: str, make_figure: Callable[[], Any]) -> None:
        """Add ``make_figure()`` under ``tag`` to every logger that takes figures (TensorBoard), on rank 0 only, at
        the step of the values."""
        if trainer.global_rank != 0:
            return
        for lg in trainer.loggers:
            experiment = getattr(lg, "experiment", None)
            if hasattr(experiment, "add_figure"):
                experiment.add_figure(tag, make_figure(), global_step=self._step, close=True)

    def _raw_encoder(self, pl_module: L.LightningModule) -> tuple[nn.Module, Callable[[Tensor], Tensor]]:
        """(module whose mode and weights matter, the user's feature function on the backbone's own inputs)."""
        if self.feature_fn is not None:
            return getattr(pl_module, "backbone", pl_module), lambda x: self.feature_fn(pl_module, x)
        backbone = getattr(pl_module, "backbone", None)
        if backbone is None:
            raise AttributeError(
                f"{type(pl_module).__name__} has no `backbone` attribute: give {type(self).__name__}(feature_fn="
                "lambda module, x: module.encoder(x)) or expose the encoder as `self.backbone`"
            )
        return backbone, getattr(backbone, "embed", backbone)

    def _encoder(self, pl_module: L.LightningModule) -> tuple[nn.Module, Callable[[Tensor], Tensor]]:
        """(module whose mode and weights matter, feature function of [0, 1] pixel images): the user's encoder fed
        what the user's pipeline feeds it (``normalize``; :class:`PixelEncoder`)."""
        module, fn = self._raw_encoder(pl_module)
        if self.normalize is None:
            return module, fn
        owner = getattr(fn, "__self__", None) if self.feature_fn is None else None
        inner = (owner.mean, owner.std) if hasattr(owner, "mean") and hasattr(owner, "std") else None
        return module, PixelEncoder(fn, module, self.normalize, inner)

    def _check_encoder(self, trainer: Any, pl_module: L.LightningModule) -> None:
        """One forward of :meth:`_check_images` through the encoder (eval mode, no gradients, modes restored): the
        features must be a finite (2, D) matrix. A ValueError naming the monitor and the fix, before training."""
        x = self._check_images()
        if x is None:
            return
        module, fn = self._encoder(pl_module)
        name = type(self).__name__
        try:
            with eval_mode(module), torch.no_grad():
                z = fn(x.to(pl_module.device))
        except Exception as err:
            raise RuntimeError(
                f"{name}: the backbone failed on the monitor's {tuple(x.shape[1:])} inputs before training ({err}); "
                "check image_size / input_size against what the backbone takes, normalize=, and feature_fn"
            ) from err
        if not isinstance(z, Tensor) or z.dim() != 2 or z.shape[0] != x.shape[0]:
            shape = tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__
            raise ValueError(
                f"{name}: the encoder maps {tuple(x.shape)} images to {shape}; the monitors need one feature vector "
                "per image, (N, D): give feature_fn=lambda module, x: module.backbone(x).flatten(1) (or pool the "
                "feature maps)"
            )
        if not bool(torch.isfinite(z).all()):
            raise FloatingPointError(
                f"{name}: the backbone gives NaN/inf features for the probe images before training"
            )

    def _due(self, trainer: L.Trainer) -> bool:
        """Every ``every_n_epochs``-th epoch, and the last one when it is known: ``max_epochs`` reached (not with
        ``max_epochs=-1``, infinite training) or ``max_steps`` reached."""
        epoch = trainer.current_epoch
        max_epochs, max_steps = trainer.max_epochs, trainer.max_steps
        last = max_epochs is not None and max_epochs >= 0 and epoch + 1 >= max_epochs
        last = last or (max_steps is not None and max_steps >= 0 and trainer.global_step >= max_steps)
        return (epoch + 1) % self.every_n_epochs == 0 or last

    def _refresh(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Compute unless the weights are unchanged since the last computation (every rank decides alike)."""
        module, _ = self._encoder(pl_module)
        fp = weights_fingerprint(module) if self.skip_unchanged else None
        if fp is None or fp != self._fingerprint or not self.last:
            self._ready(trainer, pl_module)
            self.last = self._compute(trainer, pl_module)
            self._fingerprint = fp
            self._log_figure(trainer)

    def _names(self) -> dict[str, float]:
        return {f"{self.prefix}/{k}": float(v) for k, v in self.last.items()}

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse a second monitor of this type with the same ``prefix`` (both would log the same names and share
        one checkpoint state); for a fit, build and check the probe images and run :meth:`_prepare` now when the
        data module provides the validation images (else at ``on_train_start``)."""
        check_monitor_prefixes(trainer.callbacks)
        if stage == "fit" and (not self.uses_images or not self._wants_val() or _val_source(trainer) is not None):
            self._ready(trainer, pl_module)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._ready(trainer, pl_module)  # images from the loaders given to fit: known from the fit loop's start
        self._check_encoder(trainer, pl_module)
        if not self.at_train_start:
            return
        self._x = trainer.current_epoch  # epochs completed before this fit (0, or those of a resumed run)
        self._step = logged_step(trainer, epoch_end=False)
        self._before_training = True
        try:
            self._refresh(trainer, pl_module)
        finally:
            self._before_training = False
        self.history.append((-1, dict(self.last)))
        if trainer.global_rank == 0 and self.last:  # self.log is not allowed in on_train_start: the loggers only
            for lg in trainer.loggers:
                lg.log_metrics(self._names(), step=self._step)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._due(trainer):
            return
        self._x = trainer.current_epoch + 1
        self._step = logged_step(trainer, epoch_end=True)
        self._refresh(trainer, pl_module)
        self.history.append((trainer.current_epoch, dict(self.last)))
        # callback_metrics (checkpointing, early stopping) and the loggers, at Lightning's step for epoch-end metrics
        for name, value in self._names().items():
            pl_module.log(name, value, on_step=False, on_epoch=True, sync_dist=False, logger=bool(trainer.loggers))

    def state_dict(self) -> dict[str, Any]:
        return {"fingerprint": self._fingerprint, "last": dict(self.last), "history": list(self.history)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._fingerprint = state_dict.get("fingerprint")
        self.last = dict(state_dict.get("last", {}))
        self.history = [(int(e), dict(v)) for e, v in state_dict.get("history", [])]


def check_monitor_prefixes(callbacks: Sequence[Any]) -> None:
    """Refuse two monitors of one type with the same ``prefix`` among ``callbacks``: a ValueError naming ``prefix=``
    (both would log the same names and share one checkpoint state).

    Called by :meth:`BackboneMonitor.setup` and by RepBench's CLIs before they build the Trainer. Two monitors with
    equal arguments have equal ``state_key``s, which Lightning itself refuses in ``Trainer(callbacks=...)``, before
    any hook runs ("more than one stateful callback ... consult the documentation of <class>": each monitor's
    docstring names ``prefix=``); RepBench does not patch Lightning to say it earlier (importing RepBench changes no
    global state). Call it on your list before ``L.Trainer(callbacks=...)`` for this message instead."""
    seen: set[tuple[type, str]] = set()
    for cb in callbacks:
        if not isinstance(cb, BackboneMonitor):
            continue
        key = (type(cb), cb.prefix)
        if key in seen:
            raise ValueError(
                f"two {type(cb).__name__}s in one Trainer log under the same prefix {cb.prefix!r}: their values "
                "would be averaged into one name and their checkpoint states would collide; give each its own "
                f"prefix=, e.g. prefix='{cb.prefix}/a' and prefix='{cb.prefix}/b'"
            )
        seen.add(key)
