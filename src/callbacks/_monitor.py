"""``BackboneMonitor``: the shell shared by the per-epoch monitors (SynBench, DivergenceRadius, Task Prior).

One place for what every monitor does around its computation: find the encoder (``pl_module.backbone`` or a
``feature_fn``), decide when to compute (every N epochs, after the last one, optionally before training), skip the
computation while the backbone's weights are unchanged, log the values and a figure, and keep its state in
checkpoints. Subclasses implement :meth:`BackboneMonitor.compute` (every rank calls it; it must join the same
collectives on every rank) and optionally :meth:`BackboneMonitor._log_figure`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

__all__ = ["BackboneMonitor", "first_val_images", "weights_fingerprint"]


def weights_fingerprint(module: nn.Module) -> str:
    """A digest of every parameter and buffer (exact change detection, no copy of the weights kept)."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


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
    rank and every epoch."""
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


class BackboneMonitor(L.Callback):
    """Base of the monitors. Logs ``f"{prefix}/{key}"`` for every ``key`` of :meth:`compute`'s result."""

    def __init__(
        self,
        every_n_epochs: int,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None,
        skip_unchanged: bool,
        prefix: str,
        at_train_start: bool = False,
    ) -> None:
        if int(every_n_epochs) < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        self.every_n_epochs = int(every_n_epochs)
        self.feature_fn = feature_fn
        self.skip_unchanged = bool(skip_unchanged)
        self.prefix = prefix.rstrip("/")
        self.at_train_start = bool(at_train_start)
        self._fingerprint: str | None = None
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

    @staticmethod
    def _add_figure(trainer: L.Trainer, tag: str, make_figure: Callable[[], Any]) -> None:
        """Add ``make_figure()`` under ``tag`` to every logger that takes figures (TensorBoard), on rank 0 only."""
        if trainer.global_rank != 0:
            return
        for lg in trainer.loggers:
            experiment = getattr(lg, "experiment", None)
            if hasattr(experiment, "add_figure"):
                experiment.add_figure(tag, make_figure(), global_step=trainer.global_step, close=True)

    # ------------------------------------------------------------------ pieces
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
        epoch = trainer.current_epoch
        last_epoch = trainer.max_epochs is not None and epoch + 1 >= trainer.max_epochs
        return (epoch + 1) % self.every_n_epochs == 0 or last_epoch

    def _refresh(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Compute unless the weights are unchanged since the last computation (every rank decides alike)."""
        module, _ = self._encoder(pl_module)
        fp = weights_fingerprint(module) if self.skip_unchanged else None
        if fp is None or fp != self._fingerprint or not self.last:
            self.last = self._compute(trainer, pl_module)
            self._fingerprint = fp
            self._log_figure(trainer)

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.at_train_start:
            return
        self._refresh(trainer, pl_module)
        self.history.append((-1, dict(self.last)))
        if trainer.global_rank == 0:  # self.log is not allowed in on_train_start: write to the loggers directly
            for lg in trainer.loggers:
                lg.log_metrics({f"{self.prefix}/{k}": v for k, v in self.last.items()}, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._due(trainer):
            return
        self._refresh(trainer, pl_module)
        self.history.append((trainer.current_epoch, dict(self.last)))
        for key, value in self.last.items():
            pl_module.log(f"{self.prefix}/{key}", value, on_step=False, on_epoch=True, sync_dist=False)

    def state_dict(self) -> dict[str, Any]:
        return {"fingerprint": self._fingerprint, "last": dict(self.last)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._fingerprint = state_dict.get("fingerprint")
        self.last = dict(state_dict.get("last", {}))
