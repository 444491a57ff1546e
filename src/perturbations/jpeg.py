"""JPEG compression at quality k (libjpeg through torchvision.io), per image on the CPU.

Not a batched torch op: ``torchvision.io.encode_jpeg`` / ``decode_jpeg`` call libjpeg once per image on CPU tensors
(images on another device are moved to the CPU and back). ImageNet-C (``imagecorruptions.jpeg_compression``) saves with
PIL at the same quality; both use libjpeg's default 4:2:0 chroma subsampling and standard quantisation tables.
Quality is an integer: k is rounded to the nearest integer (Table 8 of Liu et al., arXiv:2604.14973: [30, 70]).
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

__all__ = ["jpeg_compression", "to_uint8"]


def to_uint8(x: Tensor) -> Tensor:
    """[0, 1] float -> uint8 by rounding (exact for images that came from uint8)."""
    return (x * 255.0).round_().clamp_(0, 255).to(torch.uint8)


def jpeg_compression(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Encode every image as JPEG at quality ``round(k)`` and decode it back."""
    with warnings.catch_warnings():  # torchvision 0.29 deprecates torchvision.io in favour of torchcodec (not a dep)
        warnings.simplefilter("ignore", DeprecationWarning)
        from torchvision.io import decode_jpeg, encode_jpeg

    quality = torch.round(k.to(torch.float64)).to(torch.int64).tolist()
    images = to_uint8(x.detach().cpu())
    out = torch.empty_like(images)
    for q in sorted(set(quality)):
        sel = [i for i, qi in enumerate(quality) if qi == q]
        encoded = encode_jpeg([images[i].contiguous() for i in sel], quality=int(q))
        for i, img in zip(sel, decode_jpeg(encoded)):
            out[i] = img
    return (out.to(device=x.device, dtype=x.dtype) / 255.0).clamp_(0.0, 1.0)
