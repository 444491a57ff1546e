"""``SynBenchCallback``: SynBench-Score of ``pl_module.backbone`` (or any feature function) every N epochs.

Usable in any Lightning training: attach it to a Trainer whose LightningModule exposes ``backbone`` (a RepBench
:class:`~src.backbones.Backbone` or any module mapping (N, C, H, W) images to (N, D) features) or pass
``feature_fn=lambda module, x: ...``. The backbone sees the synthetic images as it sees its training images
(``normalize=(mean, std)`` when the pipeline normalises, the monitors' input contract, :mod:`src.callbacks._monitor`;
the callback's protocol uses ``normalization="backbone"``: the network sees the pixel samples normalised the way
its own inputs are). The synthetic data is the callback's own, sharded by rank (each rank draws
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
from torch import Tensor

from ..metrics.synbench_score import synbench_distributed
from ..rng.philox import sampler_ready, warm_up_sampler
from ..synbench import SYNBENCH_BUDGETS, SynBenchConfig, synbench_budget
from ..synbench.plan import check_input_shape, check_normalization_shape
from ..synbench.runner import sampling_device
from ..synbench.sampling import channel_layout
from ..utils.modes import eval_mode
from ..utils.normalization import Normalize
from ._monitor import BackboneMonitor, PixelEncoder, rank_and_world, weights_fingerprint

__all__ = ["SynBenchCallback", "callback_budget", "weights_fingerprint"]  # fingerprint: re-exported


# The callback's CPU-sized protocol: the "callback" budget of src/synbench/config.py (SYNBENCH_BUDGETS, where its
# choices are explained); configs/callbacks/synbench.yaml repeats it for the CLI (tests/test_defaults.py checks the
# two are equal). Code defaults live in code: nothing reads YAML at run time. The network sees the synthetic images
# normalised as its training images are (a RepBench backbone: its own mean/std; a plain module: normalize=, else
# [0, 1]-centred pixels); the official protocol's "imagenet" feeds every network ImageNet-normalised samples, which is
# not what a backbone trained on other statistics sees.
CALLBACK_BUDGET: Mapping[str, Any] = SYNBENCH_BUDGETS["callback"]


def callback_budget() -> dict[str, Any]:
    """A fresh dict of :data:`CALLBACK_BUDGET`, the callback's default protocol (the ``config`` block of its YAML
    equals it)."""
    return synbench_budget("callback")


class SynBenchCallback(BackboneMonitor):
    """Args:
    every_n_epochs: compute at the end of every N-th training epoch (and after the last one).
    input_size: side (int) or (C, H, W) of the synthetic images (the compute budget; 32 by default).
    config: a :class:`SynBenchConfig` or a mapping of its fields; unspecified fields use the callback budget of
        configs/callbacks/synbench.yaml (:func:`callback_budget`: 6 s values, 2048 + 512 samples per s,
        ε ∈ {0, …, 0.8}, a_T = 0.7, ``normalization="backbone"``), then the SynBenchConfig defaults.
    extractor: options of :class:`src.features.FeatureExtractor` for the forwards.
    feature_fn: ``(pl_module, x) -> (N, D)``; default ``pl_module.backbone.embed`` (or ``backbone(x)``).
    skip_unchanged: do not recompute when the backbone's weights did not change (a frozen probe needs it once).
    log_figure: add the E(a_t) curves to TensorBoard.
    prefix: log-name prefix (``val/synbench``).
    at_train_start: also compute once before training (logged at step 0: the score of the initial weights).
    progress: report progress while computing (counts of embedded synthetic images, elapsed time).
    normalize: ``(mean, std)`` (or ``{"mean", "std"}``, torchvision's ``Normalize``) when the backbone takes images
        normalised that way (the monitors' input contract): the synthetic pixel images are normalised with it before
        every forward (composed with a RepBench backbone's own normalisation inside ``embed``). None: the backbone
        takes [0, 1] pixels (RepBench's backbones normalise inside).

    Two of one kind in one Trainer: give each its own ``prefix=`` (Lightning refuses two with equal arguments as
    "more than one stateful callback"; :func:`~src.callbacks.check_monitor_prefixes` says it before the Trainer).
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
        at_train_start: bool = False,
        progress: bool = True,
        normalize: Normalize = None,
    ) -> None:
        super().__init__(every_n_epochs, feature_fn, skip_unchanged, prefix, at_train_start, progress, normalize)
        # the one door (Options.coerce): a SynBenchConfig as given, a mapping's fields over the callback budget
        self.config = SynBenchConfig.coerce(
            config if isinstance(config, SynBenchConfig) else {**callback_budget(), **dict(config or {})}
        )
        if isinstance(input_size, int) and not isinstance(input_size, bool):
            if input_size < 1:
                raise ValueError(
                    f"input_size must be >= 1 pixels per side (or a shape like (3, 32, 32)), got {input_size}"
                )
            input_size = (3, input_size, input_size)
        self.input_shape = check_input_shape(input_size)  # refused now, not after the first training epoch
        check_normalization_shape(self.config.normalization, self.input_shape)
        if self.normalize is not None:
            self.normalize.check_channels(channel_layout(self.input_shape)[0], type(self).__name__)
        self.log_figure = log_figure
        self.extractor = dict(extractor or {})
        self.result = None  # SynBenchResult of the last computation

    def _identity(self) -> dict[str, Any]:
        digest = hashlib.blake2b(repr(self.config).encode(), digest_size=6).hexdigest()
        return {"input_shape": list(self.input_shape), "config": digest}

    def _check_images(self) -> Tensor:
        """Two deterministic synthetic-like images of ``input_shape`` (mean 0.5, the samples' offset) for the
        encoder check before training (the global RNG is not touched)."""
        g = torch.Generator().manual_seed(0)
        return 0.5 + 0.5 * torch.randn(2, *self.input_shape, generator=g)

    # ------------------------------------------------------------------ pieces
    def compute(self, trainer: L.Trainer | None, pl_module: L.LightningModule) -> dict[str, float]:
        """Run the protocol on this rank's shard; every rank must call it (statistics are all-reduced). The same
        signature as every monitor's ``compute``; ``trainer`` None (outside a fit) reports progress to the
        ``repbench`` logger and runs as one process."""
        module, fn = self._encoder(pl_module)
        cfg = self.config
        one_process = rank_and_world(trainer)[1] == 1  # with more, this rank's share is not known here
        total = len(cfg.s_values) * (cfg.n_train + cfg.n_test) if one_process else None
        progress = self._progress(trainer, "SynBench", total)
        channels = channel_layout(self.input_shape)[0]
        mean_std = fn.mean_std(channels) if isinstance(fn, PixelEncoder) else None  # None: detected (a Backbone)
        device = sampling_device(cfg, pl_module.device)
        if not sampler_ready(device):  # the Philox kernels compile at their first use in a process
            progress.say("compiling the sampler (once per process) ...")
            warm_up_sampler(device)
            progress.stage("sampler compiled")
        with eval_mode(module):
            out, self.result = synbench_distributed(
                progress.counted(fn), self.input_shape, cfg, device=pl_module.device, extractor=self.extractor,
                backbone_mean_std=mean_std,
            )  # fmt: skip
        progress.done()
        self.computations += 1
        return out

    def _log_figure(self, trainer: L.Trainer) -> None:
        if self.log_figure:
            title = f"SynBench, after {self._x} epoch(s)"
            self._add_figure(trainer, f"{self.prefix}/curves", lambda: self.result.figure(title=title))
