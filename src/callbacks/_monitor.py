"""``BackboneMonitor``: the shell shared by the per-epoch monitors (SynBench, DivergenceRadius, Task Prior).

One place for what every monitor does around its computation: find the encoder (``pl_module.backbone`` or a
``feature_fn``), decide when to compute (every N epochs, after the last one, optionally before training), skip the
computation while the backbone's weights are unchanged, report progress while it computes, log the values and a
figure, and keep its state in checkpoints under a state key of its own. Subclasses implement
:meth:`BackboneMonitor.compute` (every rank calls it; it must join the same collectives on every rank), optionally
:meth:`BackboneMonitor._log_figure`, and :meth:`BackboneMonitor._identity` (the constructor arguments that make two
monitors of one type different).

Logging: the values go to ``trainer.callback_metrics`` under ``f"{prefix}/{key}"`` (so ``ModelCheckpoint`` and
``EarlyStopping`` can monitor them) and to the loggers with the number of completed epochs as the step (the x-axis
of TensorBoard's charts: 0 = before training, 1 = after the first epoch, ...).

Images: every image the monitors take is float (N, C, H, W) in [0, 1] pixel space (the backbone adapter normalises
inside). The image monitors take their fixed probe images through :func:`src.utils.probe_images.probe_images` (one
vocabulary: ``images="auto" | "val" | "photos" | "digits"`` or a tensor, and the pixel-space checks, without
Lightning); :func:`first_val_images` (here: it needs the trainer) hands it the validation images.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from ..backbones.weights import state_fingerprint
from ..features.owner import owner_module

__all__ = ["BackboneMonitor", "ComputeProgress", "first_val_images", "rank_and_world", "weights_fingerprint"]

log = logging.getLogger("repbench")


def weights_fingerprint(module: nn.Module) -> str:
    """A digest of every parameter and buffer (exact change detection, no copy of the weights kept): the one weights
    fingerprint of the project, :func:`~src.backbones.weights.state_fingerprint`, over parameters and all buffers."""
    return state_fingerprint({**dict(module.named_parameters()), **dict(module.named_buffers())})


def _image_of(item: Any) -> Any:
    """The image of a dataset item: ``item[0]`` of a tuple/list, ``item["image"]`` of a dict, else the item."""
    if isinstance(item, (tuple, list)):
        return item[0]
    if isinstance(item, dict):
        return item["image"]
    return item


def first_val_images(trainer: L.Trainer | None, n: int) -> Tensor | None:
    """The first ``n`` images of the trainer's data module's validation set as one float tensor (N, C, H, W), or
    None when there is no data module, no validation set, or it is empty. Dataset items may be ``(x, ...)`` tuples,
    ``{"image": x, ...}`` dicts or bare tensors; the set is the dataset's first items, so it is the same on every
    rank and every epoch. The values are the dataset's own (see :func:`src.utils.probe_images.pixel_images` for the [0, 1] check)."""
    dm = getattr(trainer, "datamodule", None)
    dataset = getattr(dm, "val_dataset", None)
    if dataset is None and dm is not None and hasattr(dm, "val_dataloader"):
        try:
            dataset = dm.val_dataloader().dataset
        except Exception:  # a data module without a validation split
            dataset = None
    if dataset is None or len(dataset) == 0:
        return None
    xs = [_image_of(dataset[i]) for i in range(min(int(n), len(dataset)))]
    return torch.stack([torch.as_tensor(x) for x in xs]).float()


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
    end. Silent when ``enabled`` is false."""

    def __init__(
        self, trainer: Any, title: str, total: int | None, enabled: bool = True, interval_s: float = 10.0
    ) -> None:
        self.trainer, self.title, self.total, self.enabled = trainer, title, total, bool(enabled)
        self.interval_s = float(interval_s)
        self.count = 0
        self.start = self._last = time.perf_counter()
        if self.enabled:
            of = f" ({total} images to embed on this process)" if total else ""
            _say(trainer, f"{title}: computing{of}")

    def _elapsed(self) -> float:
        return time.perf_counter() - self.start

    def stage(self, text: str) -> None:
        """A line naming a finished stage, with the elapsed time."""
        if self.enabled:
            _say(self.trainer, f"{self.title}: {text} ({self._elapsed():.1f} s)")

    def advance(self, n: int) -> None:
        """``n`` more images embedded."""
        self.count += int(n)
        now = time.perf_counter()
        if not self.enabled or now - self._last < self.interval_s:
            return
        self._last = now
        elapsed = now - self.start
        if self.total:
            left = elapsed / self.count * max(0, self.total - self.count) if self.count else math.inf
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
        out = self.feature_fn(x)
        self.progress.advance(x.shape[0])
        return out


# ---------------------------------------------------------------------------------------------------- the shell
class BackboneMonitor(L.Callback):
    """Base of the monitors. Logs ``f"{prefix}/{key}"`` for every ``key`` of :meth:`compute`'s result.

    ``progress``: report progress while computing (rank 0; through the progress bar when shown, else the
    ``repbench`` logger), a line at most every :attr:`progress_interval_s` seconds.
    """

    progress_interval_s: float = 10.0

    def __init__(
        self,
        every_n_epochs: int,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None,
        skip_unchanged: bool,
        prefix: str,
        at_train_start: bool = False,
        progress: bool = True,
    ) -> None:
        if isinstance(every_n_epochs, bool) or int(every_n_epochs) < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        if not isinstance(prefix, str) or not prefix.strip("/"):
            raise ValueError(f"prefix must be a non-empty log-name prefix such as 'val', got {prefix!r}")
        self.every_n_epochs = int(every_n_epochs)
        self.feature_fn = feature_fn
        self.skip_unchanged = bool(skip_unchanged)
        self.prefix = prefix.rstrip("/")
        self.at_train_start = bool(at_train_start)
        self.progress = bool(progress)
        self._fingerprint: str | None = None
        self._x = 0  # completed epochs of the current computation: the loggers' step
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
        return ComputeProgress(trainer, f"{title}{where}", total, self.progress, self.progress_interval_s)

    # ------------------------------------------------------------------ pieces
    def _add_figure(self, trainer: L.Trainer, tag: str, make_figure: Callable[[], Any]) -> None:
        """Add ``make_figure()`` under ``tag`` to every logger that takes figures (TensorBoard), on rank 0 only, at
        the step of the values (completed epochs)."""
        if trainer.global_rank != 0:
            return
        for lg in trainer.loggers:
            experiment = getattr(lg, "experiment", None)
            if hasattr(experiment, "add_figure"):
                experiment.add_figure(tag, make_figure(), global_step=self._x, close=True)

    def _encoder(self, pl_module: L.LightningModule) -> tuple[nn.Module, Callable[[Tensor], Tensor]]:
        """(module whose mode and weights matter, feature function)."""
        if self.feature_fn is not None:
            return getattr(pl_module, "backbone", pl_module), lambda x: self.feature_fn(pl_module, x)
        backbone = getattr(pl_module, "backbone", None)
        if backbone is None:
            raise AttributeError(
                f"{type(pl_module).__name__} has no `backbone` attribute: give {type(self).__name__}(feature_fn="
                "lambda module, x: module.encoder(x)) or expose the encoder as `self.backbone`"
            )
        return backbone, getattr(backbone, "embed", backbone)

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
            self.last = self._compute(trainer, pl_module)
            self._fingerprint = fp
            self._log_figure(trainer)

    def _write_loggers(self, trainer: L.Trainer) -> None:
        """``self.last`` to every logger at step = completed epochs (rank 0; the loggers are rank-0 only)."""
        if trainer.global_rank != 0 or not self.last:
            return
        metrics = {f"{self.prefix}/{k}": float(v) for k, v in self.last.items()}
        for lg in trainer.loggers:
            lg.log_metrics(metrics, step=self._x)

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse a second monitor of this type with the same ``prefix``: both would log the same names (Lightning
        would average them) and share one checkpoint state."""
        for other in trainer.callbacks:
            if other is not self and type(other) is type(self) and other.prefix == self.prefix:
                raise ValueError(
                    f"two {type(self).__name__}s in one Trainer log under the same prefix {self.prefix!r}: their "
                    "values would be averaged into one name and their checkpoint states would collide; give each "
                    f"its own prefix=, e.g. prefix='{self.prefix}/a' and prefix='{self.prefix}/b'"
                )

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.at_train_start:
            return
        self._x = trainer.current_epoch  # epochs completed before this fit (0, or those of a resumed run)
        self._refresh(trainer, pl_module)
        self.history.append((-1, dict(self.last)))
        self._write_loggers(trainer)  # self.log is not allowed in on_train_start: the loggers only

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._due(trainer):
            return
        self._x = trainer.current_epoch + 1
        self._refresh(trainer, pl_module)
        self.history.append((trainer.current_epoch, dict(self.last)))
        for key, value in self.last.items():  # callback_metrics (checkpointing, early stopping); loggers below
            pl_module.log(f"{self.prefix}/{key}", value, on_step=False, on_epoch=True, sync_dist=False, logger=False)
        self._write_loggers(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"fingerprint": self._fingerprint, "last": dict(self.last), "history": list(self.history)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._fingerprint = state_dict.get("fingerprint")
        self.last = dict(state_dict.get("last", {}))
        self.history = [(int(e), dict(v)) for e, v in state_dict.get("history", [])]
