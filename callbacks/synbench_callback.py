"""``SynBenchCallback``: SynBench-Score of ``pl_module.backbone`` (or any feature function) every N epochs.

Usable in any Lightning training: attach it to a Trainer whose LightningModule exposes ``backbone`` (a RepBench
:class:`~src.backbones.Backbone` or any module mapping (N, C, H, W) images to (N, D) features) or pass
``feature_fn=lambda module, x: ...``. The synthetic data is the callback's own, sharded by rank (each rank draws
only its chunks of every split), and the score is a :class:`~src.metrics.SynBenchScore` on sum-reduced statistics,
so the logged numbers do not depend on the number of processes (every rank joins every collective, also ranks
without chunks, so no rank count can deadlock). Logs ``val/synbench/score`` (ε = eps[0]),
``val/synbench/score_eps_<ε>``, ``val/synbench/best_eps`` and the E(a_t) curves as a TensorBoard figure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from src.metrics.synbench_score import synbench_distributed
from src.synbench import SynBenchConfig
from src.synbench.defaults import yaml_defaults
from src.utils.modes import eval_mode

__all__ = ["SynBenchCallback", "callback_budget", "weights_fingerprint"]


def callback_budget() -> dict[str, Any]:
    """The default protocol of the callback: the ``config`` block of configs/callbacks/synbench.yaml (one place)."""
    return yaml_defaults("callbacks/synbench.yaml", "synbench", "config")


def weights_fingerprint(module: nn.Module) -> str:
    """A digest of every parameter and buffer (exact change detection, no copy of the weights kept)."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


class SynBenchCallback(L.Callback):
    """Args:
    every_n_epochs: compute at the end of every N-th training epoch (and after the last one).
    input_size: side (int) or (C, H, W) of the synthetic images (the compute budget; 32 by default).
    config: a :class:`SynBenchConfig` or a mapping of its fields; unspecified fields use the callback budget of
        configs/callbacks/synbench.yaml (:func:`callback_budget`: 6 s values, 2048 + 512 samples per s,
        ε ∈ {0, …, 0.8}, a_T = 0.7), then the SynBenchConfig defaults.
    extractor: options of :class:`src.features.FeatureExtractor` for the forwards.
    feature_fn: ``(pl_module, x) -> (N, D)``; default ``pl_module.backbone.embed`` (or ``backbone(x)``).
    skip_unchanged: do not recompute when the backbone's weights did not change (a frozen probe needs it once).
    log_figure: add the E(a_t) curves to TensorBoard.
    prefix: log-name prefix (``val/synbench``).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        input_size: int | Sequence[int] = 32,
        config: SynBenchConfig | Mapping[str, Any] | None = None,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None = None,
        skip_unchanged: bool = True,
        log_figure: bool = True,
        prefix: str = "val/synbench",
        extractor: Mapping[str, Any] | None = None,
    ) -> None:
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        if isinstance(config, SynBenchConfig):
            self.config = config
        else:
            self.config = SynBenchConfig(**{**callback_budget(), **dict(config or {})})
        size = (3, input_size, input_size) if isinstance(input_size, int) else tuple(int(v) for v in input_size)
        self.input_shape = size
        self.every_n_epochs = int(every_n_epochs)
        self.feature_fn = feature_fn
        self.skip_unchanged = skip_unchanged
        self.log_figure = log_figure
        self.prefix = prefix.rstrip("/")
        self.extractor = dict(extractor or {})
        self._fingerprint: str | None = None
        self.last: dict[str, float] = {}
        self.history: list[tuple[int, dict[str, float]]] = []
        self.computations = 0
        self.result = None  # SynBenchResult of the last computation

    # ------------------------------------------------------------------ pieces
    def _encoder(self, pl_module: L.LightningModule) -> tuple[nn.Module, Callable[[Tensor], Tensor]]:
        if self.feature_fn is not None:
            owner = getattr(pl_module, "backbone", pl_module)
            return owner, lambda x: self.feature_fn(pl_module, x)
        backbone = getattr(pl_module, "backbone", None)
        if backbone is None:
            raise AttributeError(
                f"{type(pl_module).__name__} has no `backbone` attribute: give SynBenchCallback(feature_fn=lambda "
                "module, x: module.encoder(x)) or expose the encoder as `self.backbone`"
            )
        return backbone, getattr(backbone, "embed", backbone)

    def compute(self, pl_module: L.LightningModule) -> dict[str, float]:
        """Run the protocol on this rank's shard; every rank must call it (statistics are all-reduced)."""
        module, fn = self._encoder(pl_module)
        with eval_mode(module):
            out, self.result = synbench_distributed(
                fn, self.input_shape, self.config, device=pl_module.device, extractor=self.extractor
            )
        self.computations += 1
        return out

    # ------------------------------------------------------------------ hooks
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch = trainer.current_epoch
        last_epoch = trainer.max_epochs is not None and epoch + 1 >= trainer.max_epochs
        if (epoch + 1) % self.every_n_epochs and not last_epoch:
            return
        module, _ = self._encoder(pl_module)
        fp = weights_fingerprint(module) if self.skip_unchanged else None
        if fp is None or fp != self._fingerprint or not self.last:
            self.last = self.compute(pl_module)
            self._fingerprint = fp
            self._log_figure(trainer)
        self.history.append((epoch, dict(self.last)))
        for key, value in self.last.items():
            pl_module.log(f"{self.prefix}/{key}", value, on_step=False, on_epoch=True, sync_dist=False)

    def _log_figure(self, trainer: L.Trainer) -> None:
        if not self.log_figure or trainer.global_rank != 0:
            return
        for lg in trainer.loggers:
            experiment = getattr(lg, "experiment", None)
            if hasattr(experiment, "add_figure"):
                fig = self.result.figure(title=f"SynBench, epoch {trainer.current_epoch}")
                experiment.add_figure(f"{self.prefix}/curves", fig, global_step=trainer.global_step, close=True)

    def state_dict(self) -> dict[str, Any]:
        return {"fingerprint": self._fingerprint, "last": dict(self.last)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._fingerprint = state_dict.get("fingerprint")
        self.last = dict(state_dict.get("last", {}))
