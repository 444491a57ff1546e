"""Memory format of the images fed to the network: NCHW (``contiguous``) or NHWC (``channels_last``).

On CPU, oneDNN convolutions run in NHWC when either the input or the weight is channels_last, so converting the
*input* is enough: the module's weights are never touched (measured: input-only 1.44x vs input+weights 1.42x
over NCHW for EfficientNet-Lite0 at 64 px, batch 256, 2 threads). Features differ from NCHW only by the
summation order inside each convolution (float32 rounding; tests/features bound it against a float64 forward).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["MEMORY_FORMATS", "resolve_memory_format", "to_memory_format", "is_conv_net"]

MEMORY_FORMATS = ("auto", "contiguous", "channels_last")


def is_conv_net(module: nn.Module | None) -> bool:
    """More than one 2-D convolution: a CNN (a ViT has exactly one, its patch embedding, and gains nothing)."""
    if module is None:
        return False
    return sum(isinstance(m, nn.Conv2d) for m in module.modules()) > 1


def resolve_memory_format(choice: str, module: nn.Module | None, device: torch.device | None) -> str:
    """``auto`` → ``channels_last`` for conv nets (CPU: measured faster, ``benchmarks.engine``; CUDA: PyTorch's
    performance guidance for conv nets, not measured here), else ``contiguous``. Other choices pass through."""
    if choice not in MEMORY_FORMATS:
        raise ValueError(f"unknown memory_format {choice!r}; choose one of {MEMORY_FORMATS}")
    if choice != "auto":
        return choice
    kind = device.type if device is not None else "cpu"
    return "channels_last" if kind in ("cpu", "cuda") and is_conv_net(module) else "contiguous"


def to_memory_format(x: Tensor, fmt: str) -> Tensor:
    """``x`` in the requested layout (4-D tensors only; anything else is returned unchanged)."""
    if fmt == "channels_last" and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x
