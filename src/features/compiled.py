"""``torch.compile`` for a frozen feature function, with the guards a frozen graph needs.

Inductor with ``freezing`` (weights folded as constants, convolution weights pre-packed for oneDNN). A frozen
graph does not see later weight updates, so every call first checks the module's weight signature
(:func:`~src.features.owner.weights_version`); after a change it warns once and runs eagerly. One input shape is
compiled (the first chunk's); other shapes (a last, smaller chunk) run eagerly instead of paying a recompilation
(tens of seconds on CPU). Compile time is recorded in ``compile_s``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import torch
from torch import Tensor, nn

from .owner import weights_version

__all__ = ["CompiledForward"]


class CompiledForward:
    """Callable ``(x, eager) -> features``: the compiled ``fn`` where it applies, else ``eager(x)``."""

    def __init__(self, fn: Callable[[Tensor], Tensor], module: nn.Module | None) -> None:
        self.fn = fn
        self.module = module
        self.freezing = module is not None  # freezing needs the weights as module attributes
        self.compiled: Callable[[Tensor], Tensor] | None = None
        self.key: tuple | None = None
        self.version: tuple[int, ...] = ()
        self.compile_s: float | None = None
        self.disabled: str | None = None

    @staticmethod
    def _key(x: Tensor) -> tuple:
        return (tuple(x.shape), x.stride(), x.dtype, x.device, torch.is_inference_mode_enabled())

    def __call__(self, x: Tensor, eager: Callable[[Tensor], Tensor]) -> Tensor:
        if self.disabled is not None:
            return eager(x)
        if self.compiled is None:
            options = {"freezing": True} if self.freezing else None
            self.compiled = torch.compile(self.fn, dynamic=False, options=options)
            self.key, self.version = self._key(x), weights_version(self.module)
            t0 = time.perf_counter()
            out = self.compiled(x)
            self.compile_s = time.perf_counter() - t0
            return out
        if self._key(x) != self.key:
            return eager(x)
        if weights_version(self.module) != self.version:
            self.disabled = "the module's weights changed after torch.compile froze them"
            warnings.warn(
                f"FeatureExtractor: {self.disabled}; running eagerly from now on (build a new extractor to "
                "compile the new weights)",
                RuntimeWarning,
                stacklevel=3,
            )
            return eager(x)
        return self.compiled(x)
