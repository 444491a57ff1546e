"""FeatureExtractor: run a frozen feature function over many images at the machine's speed.

Interface (stable; other packages code against it):
    ext = FeatureExtractor(feature_fn, device="cpu", max_batch=FORWARD_BATCH)
    z = ext(images)          # (N, C, H, W) float -> (N, D), inference mode, chunked by max_batch
    z = ext.extract(images)  # the same
    z, (y,) = ext.extract_loader(loader)   # every batch of a DataLoader; other batch fields concatenated

The levers (docs/speed.md has the measurements behind every default):
    memory_format  "auto" (channels_last for conv nets: the input is converted, weights are untouched),
                   "contiguous" (NCHW) or "channels_last".
    max_batch      chunk size of the forwards (default FORWARD_BATCH = 256: the throughput plateau of
                   EfficientNet-Lite0 at 64 px on 2 CPU cores; memory grows linearly with it).
    threads        torch intra-op threads, set once when the extractor is built (None: leave as is).
    compile        torch.compile (inductor; weights frozen as constants). Pays only on long runs: compiling takes
                   tens of seconds on CPU. A frozen graph is abandoned (eager from then on, with a warning) when the
                   module's weights change; chunks of another shape than the first run eagerly.
    precision      "tf32" (default: TF32 tensor cores for CUDA matmuls and convolutions; plain fp32 on CPU), "fp32"
                   (IEEE float32, TF32 off), "bf16" or "fp16" (autocast). Set only inside the forward, the caller's
                   settings restored (src/features/precision.py, with the measurements behind the default).
                   Features come back as float32.
    autocast       deprecated alias of precision: None = the default, "bf16" / "fp16".
    inference      True: torch.inference_mode; False: torch.no_grad (outputs may be used in autograd later).
    eval_mode      True: an nn.Module behind ``feature_fn`` runs in eval mode; every submodule's mode is restored.
    pin_memory     CPU → CUDA copies through pinned memory with non_blocking=True (CUDA path not measured here).
The allocator lever is process-wide (:func:`src.utils.allocator.keep_freed_memory`, the CLIs call it); every call
keeps freed memory for its own duration in a process that did not (:func:`src.utils.allocator.freed_memory_kept`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from ..utils.allocator import freed_memory_kept
from ..utils.checks import check_int
from ..utils.modes import eval_mode as _eval_mode
from .compiled import CompiledForward
from .formats import resolve_memory_format, to_memory_format
from .owner import owner_module
from .precision import check_precision, precision_context
from .transfer import to_device

__all__ = ["FORWARD_BATCH", "FeatureExtractor", "as_extractor"]

#: images per backbone forward, the default of every forward batch (``max_batch``, SynBench's ``batch_size``): the
#: throughput plateau of EfficientNet-Lite0 at 64 px on 2 CPU cores (docs/speed.md); memory grows linearly with it
FORWARD_BATCH = 256

# Attributes read through to the module behind feature_fn (a Backbone's normalisation and sizes), so that an
# extractor can stand wherever a Backbone's ``embed`` is expected (e.g. SynBench's normalisation detection).
_FORWARDED = ("mean", "std", "embed_dim", "input_size", "name")


class FeatureExtractor:
    """Callable wrapper: ``extractor(images) -> features`` in chunks of ``max_batch`` images on ``device``.

    Args:
        feature_fn: (B, *shape) float tensor -> (B, ...) tensor, e.g. a Backbone's ``embed``.
        device: where the forwards run (None: where the images are).
        max_batch: images per forward (>= 1).
        inference: ``torch.inference_mode`` (True) or ``torch.no_grad`` (False).
        memory_format: "auto" | "contiguous" | "channels_last", see the module docstring.
        threads: torch intra-op threads, set once here (None: unchanged).
        compile: wrap ``feature_fn`` in ``torch.compile`` (inductor, freezing).
        precision: "fp32" | "tf32" | "bf16" | "fp16", None = the default "tf32" (see the module docstring).
        autocast: deprecated alias of ``precision`` (None | "bf16" | "fp16").
        eval_mode: run a module behind ``feature_fn`` in eval mode (restored afterwards).
        pin_memory: pinned host memory for CPU → CUDA copies.
        output_dtype: dtype of the returned features (float32; None keeps the forward's dtype).
    """

    def __init__(
        self,
        feature_fn: Callable[[Tensor], Tensor],
        device: str | torch.device | None = None,
        max_batch: int = FORWARD_BATCH,
        inference: bool = True,
        *,
        memory_format: str = "auto",
        threads: int | None = None,
        compile: bool = False,
        autocast: str | None = None,
        precision: str | None = None,
        eval_mode: bool = True,
        pin_memory: bool = True,
        output_dtype: torch.dtype | None = torch.float32,
    ) -> None:
        if not callable(feature_fn):
            raise TypeError(f"feature_fn must be callable (e.g. backbone.embed), got {type(feature_fn).__name__}")
        max_batch = check_int(max_batch, "max_batch", 1, meaning="images per forward")
        if threads is not None:
            threads = check_int(threads, "threads", 1, meaning="None leaves torch's setting")
        if not isinstance(compile, bool):
            raise ValueError(f"compile must be True or False, got {compile!r}")
        self.feature_fn = feature_fn
        self.device = torch.device(device) if device is not None else None
        self.max_batch = max_batch
        self.inference = bool(inference)
        self.module = owner_module(feature_fn)
        self.memory_format_choice = memory_format
        self.memory_format = resolve_memory_format(memory_format, self.module, self.device)
        self.precision = check_precision(precision, autocast)
        self.eval_mode = bool(eval_mode)
        self.pin_memory = bool(pin_memory)
        self.output_dtype = output_dtype
        self.threads = threads
        if threads is not None:
            torch.set_num_threads(threads)
        self._compiled = CompiledForward(feature_fn, self.module) if compile else None

    # -- attribute pass-through ------------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in _FORWARDED:
            module = self.__dict__.get("module")
            if module is not None and hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    @property
    def autocast(self) -> str | None:
        """The autocast dtype name of the policy ("bf16" | "fp16"), None for "fp32" / "tf32" (the old attribute)."""
        return self.precision if self.precision in ("bf16", "fp16") else None

    @property
    def compile_s(self) -> float | None:
        """Seconds the first compiled call took (compilation included); None when not compiled (yet)."""
        return self._compiled.compile_s if self._compiled is not None else None

    def __repr__(self) -> str:
        return (
            f"FeatureExtractor({getattr(self.feature_fn, '__qualname__', type(self.feature_fn).__name__)}, "
            f"device={self.device}, max_batch={self.max_batch}, memory_format={self.memory_format!r}, "
            f"compile={self._compiled is not None}, precision={self.precision!r}, inference={self.inference})"
        )

    # -- core ----------------------------------------------------------------------------------------------------------
    def _context(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(freed_memory_kept())  # the forwards' buffers reused, not faulted in op by op
        stack.enter_context(torch.inference_mode() if self.inference else torch.no_grad())
        if self.eval_mode and self.module is not None:
            stack.enter_context(_eval_mode(self.module))
        return stack

    def _eager(self, x: Tensor) -> Tensor:
        return self.feature_fn(x)

    def _forward(self, chunk: Tensor) -> Tensor:
        x = to_memory_format(to_device(chunk, self.device, self.pin_memory), self.memory_format)
        with precision_context(self.precision, x.device):
            out = self._compiled(x, self._eager) if self._compiled is not None else self.feature_fn(x)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"feature_fn must return a tensor (B, D), got {type(out).__name__}; wrap it so that it returns the "
                "embedding, e.g. lambda x: model(x)[0]"
            )
        if out.dim() < 1 or out.shape[0] != chunk.shape[0]:
            raise ValueError(
                f"feature_fn returned shape {tuple(out.shape)} for a batch of {chunk.shape[0]} images; it must map "
                "(B, ...) to (B, D)"
            )
        if self.output_dtype is not None and out.is_floating_point() and out.dtype != self.output_dtype:
            out = out.to(self.output_dtype)
        return out

    def _check(self, images: Tensor) -> None:
        if not isinstance(images, Tensor):
            raise TypeError(f"images must be a torch.Tensor (N, C, H, W), got {type(images).__name__}")
        if images.dim() < 1:
            raise ValueError("images must have a batch dimension: (N, C, H, W)")
        if not images.is_floating_point():
            raise TypeError(
                f"images must be a float tensor (pixel space [0, 1]), got {images.dtype}; convert uint8 with "
                "x.float() / 255"
            )

    def __call__(self, images: Tensor) -> Tensor:
        """Features of ``images`` (N, ...) as (N, D), computed in chunks of ``max_batch``."""
        self._check(images)
        with self._context():
            if images.shape[0] <= self.max_batch:
                return self._forward(images)
            outs = [self._forward(chunk) for chunk in images.split(self.max_batch)]
            return torch.cat(outs)

    extract = __call__

    def iter_chunks(self, images: Tensor) -> Iterator[Tensor]:
        """Features chunk by chunk (``max_batch`` images each), for streaming statistics without holding all."""
        self._check(images)
        for chunk in images.split(self.max_batch):
            with self._context():
                yield self._forward(chunk)

    def extract_loader(self, loader: Iterable[Any], field: int = 0) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Features of every batch of ``loader`` (batches are tensors or sequences whose ``field``-th element
        holds the images) and the other tensor fields concatenated in order: ``(z, (y, ...))``."""
        feats: list[Tensor] = []
        others: list[list[Tensor]] = []
        for batch in loader:
            if isinstance(batch, Tensor):
                images, rest = batch, []
            elif isinstance(batch, Sequence) and len(batch) > field:
                images, rest = batch[field], [b for i, b in enumerate(batch) if i != field]
            else:
                raise TypeError(
                    f"extract_loader needs batches that are tensors or sequences with the images at index {field}, "
                    f"got {type(batch).__name__}"
                )
            feats.append(self(images))
            if not others:
                others = [[] for _ in rest]
            for acc, value in zip(others, rest):
                acc.append(torch.as_tensor(value))
        if not feats:
            raise ValueError("extract_loader got an empty loader")
        return torch.cat(feats), tuple(torch.cat(v) for v in others)

    def num_chunks(self, n: int) -> int:
        """Number of forwards for ``n`` images."""
        return math.ceil(n / self.max_batch)


def as_extractor(fn: Callable[[Tensor], Tensor] | FeatureExtractor, **options: Any) -> FeatureExtractor:
    """``fn`` itself when it is already an extractor, else ``FeatureExtractor(fn, **options)``.

    ``options`` may come from a config block (e.g. ``configs/synbench.yaml``'s ``extractor:``); ``None`` values are
    dropped so that the extractor's own defaults apply.
    """
    if isinstance(fn, FeatureExtractor):
        return fn
    return FeatureExtractor(fn, **{k: v for k, v in options.items() if v is not None})
