"""The nn.Module behind a feature function (``bb.embed`` → ``bb``; a module → itself; a plain function → None)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = ["owner_module", "weights_version"]


def owner_module(feature_fn: Callable[..., Any]) -> nn.Module | None:
    """The module a bound method belongs to, the module itself, or None for any other callable."""
    owner = getattr(feature_fn, "__self__", feature_fn)
    return owner if isinstance(owner, nn.Module) else None


def weights_version(module: nn.Module | None) -> tuple[int, ...]:
    """A signature that changes whenever a parameter or buffer of ``module`` is modified in place (optimizer
    steps, ``load_state_dict``, ``copy_``: each bumps the tensor's version counter) or replaced."""
    if module is None:
        return ()
    sig: list[int] = []
    for t in (*module.parameters(), *module.buffers()):
        sig += (id(t), t._version, t.data_ptr())
    return tuple(sig)
