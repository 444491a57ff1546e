"""JPEG compression at quality k (libjpeg through torchvision.io), per image on the CPU.

Not a batched torch op: ``torchvision.io.encode_jpeg`` / ``decode_jpeg`` call libjpeg once per image on CPU tensors
(images on another device are moved to the CPU and back). ImageNet-C (``imagecorruptions.jpeg_compression``) saves with
PIL at the same quality; both use libjpeg's default 4:2:0 chroma subsampling and standard quantisation tables.
Quality is an integer: k is rounded to the nearest integer (Table 8 of Liu et al., arXiv:2604.14973: [30, 70]).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import lru_cache

import torch
from torch import Tensor

from ._random import parallel_map

__all__ = ["jpeg_compression", "to_uint8"]


def to_uint8(x: Tensor) -> Tensor:
    """[0, 1] float -> uint8 by rounding half up (exact for images that came from uint8): ``⌊255·x + 0.5⌋`` (one
    fused multiply-add; the truncating cast does the floor)."""
    return torch.addcmul(x.new_tensor(0.5), x, x.new_tensor(255.0)).clamp_(0.0, 255.0).to(torch.uint8)


@lru_cache(maxsize=1)
def _codec() -> tuple[Callable, Callable]:
    """torchvision's ``encode_jpeg``, ``decode_jpeg`` (imported once: torchvision 0.29 deprecates torchvision.io in
    favour of torchcodec, which is not a dependency)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from torchvision.io import decode_jpeg, encode_jpeg
    return encode_jpeg, decode_jpeg


def _round_trip(images: list[Tensor], quality: int) -> list[Tensor]:
    encode, decode = _codec()
    return decode(encode(images, quality=quality))


def jpeg_compression(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Encode every image as JPEG at quality ``round(k)`` and decode it back.

    Images are coded in ``torch.get_num_threads()`` contiguous groups on a thread pool (libjpeg runs outside the
    GIL), one ``encode_jpeg`` / ``decode_jpeg`` call per group and quality.
    """
    quality = torch.round(k.to(torch.float64)).to(torch.int64).tolist()
    images = to_uint8(x.detach().cpu())
    jobs = []  # (indices, quality)
    workers = max(1, min(torch.get_num_threads(), len(quality)))
    for q in sorted(set(quality)):
        sel = [i for i, qi in enumerate(quality) if qi == q]
        step = -(-len(sel) // workers)
        jobs += [(sel[j : j + step], q) for j in range(0, len(sel), step)]

    def run(job: tuple[list[int], int]) -> list[Tensor]:
        sel, q = job
        return _round_trip([images[i] for i in sel], q)

    results = parallel_map(run, jobs, workers)
    decoded: list[Tensor | None] = [None] * len(quality)
    for (sel, _), out in zip(jobs, results):
        for i, img in zip(sel, out):
            decoded[i] = img
    y = torch.mul(torch.stack(decoded), 1.0 / 255.0)  # type: ignore[arg-type]  # uint8 -> float32 in one pass
    return y.to(device=x.device, dtype=x.dtype)
