"""Switch a module to eval mode and restore every submodule's own mode afterwards ("frozen means frozen")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

__all__ = ["eval_mode", "preserved_modes"]


@contextmanager
def preserved_modes(module: nn.Module) -> Iterator[None]:
    """Restore the train/eval flag of every submodule on exit (``module.train(x)`` would set them all alike)."""
    modes = [(m, m.training) for m in module.modules()]
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """``module.eval()`` for the duration; each submodule's previous mode is restored afterwards."""
    with preserved_modes(module):
        module.eval()
        yield module
