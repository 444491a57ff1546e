"""JPEG compression at quality k: libjpeg on the CPU, nvJPEG on a CUDA device (both through torchvision.io).

CPU images: ``torchvision.io.encode_jpeg`` / ``decode_jpeg`` call libjpeg once per image, in groups on a thread pool.
CUDA images (torchvision >= 0.19 encodes CUDA tensors): one batched nvJPEG encode and one batched decode per quality
on the images' device; only the compressed bytes (a few kB per image) pass through the host, as the decoder takes
host bytes. nvJPEG uses the same standard quantisation tables and 4:2:0 chroma subsampling but its own DCT and
colour-conversion rounding, so its images differ from libjpeg's by a few levels at the same quality (a GPU run is
reproducible on its own, not bit-equal to the CPU). Other devices (MPS, ...) go through the CPU. ImageNet-C (``imagecorruptions.jpeg_compression``) saves with
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

__all__ = ["jpeg_compression", "jpeg_compression_cuda", "to_uint8"]


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


_CUDA_CODEC = {"ok": True}  # False after nvJPEG failed once in this process


def _round_trip(images: list[Tensor], quality: int) -> list[Tensor]:
    encode, decode = _codec()
    return decode(encode(images, quality=quality))


def _qualities(k: Tensor) -> list[int]:
    return torch.round(k.to(torch.float64)).to(torch.int64).tolist()


def _groups(quality: list[int]) -> dict[int, list[int]]:
    """Image indices by quality, qualities in increasing order."""
    return {q: [i for i, qi in enumerate(quality) if qi == q] for q in sorted(set(quality))}


def jpeg_compression_cuda(x: Tensor, k: Tensor) -> Tensor:
    """:func:`jpeg_compression` for CUDA images with nvJPEG: per quality, one batched ``encode_jpeg`` of the uint8
    images on their device and one batched ``decode_jpeg(..., device=x.device)``; the compressed bytes go to the
    host in one copy. Called with CPU images it runs the same code with libjpeg (the CPU tests exercise it so)."""
    encode, decode = _codec()
    images = to_uint8(x.detach())
    out = torch.empty_like(images)
    for q, sel in _groups(_qualities(k)).items():
        data = encode([images[i] for i in sel], quality=q)
        if data[0].device.type != "cpu":  # the decoder reads host bytes: one device-to-host copy of them all
            data = list(torch.cat(data).cpu().split([d.numel() for d in data]))
        decoded = torch.stack(decode(data, device=x.device))
        if len(sel) == len(out):
            out = decoded
        else:
            out[sel] = decoded
    return torch.mul(out, 1.0 / 255.0).to(x.dtype)


def jpeg_compression(x: Tensor, k: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Encode every image as JPEG at quality ``round(k)`` and decode it back.

    CUDA images: nvJPEG on their device (:func:`jpeg_compression_cuda`). Else libjpeg: images are coded in
    ``torch.get_num_threads()`` contiguous groups on a thread pool (libjpeg runs outside the GIL), one
    ``encode_jpeg`` / ``decode_jpeg`` call per group and quality.
    """
    if x.device.type == "cuda" and _CUDA_CODEC["ok"]:
        try:
            return jpeg_compression_cuda(x, k)
        except RuntimeError as err:  # torchvision without nvJPEG: libjpeg on the CPU from now on, said once
            _CUDA_CODEC["ok"] = False
            warnings.warn(
                f"jpeg_compression: nvJPEG unavailable ({err}); coding on the CPU with libjpeg (needs torchvision "
                ">= 0.19 built with CUDA for GPU coding)",
                RuntimeWarning,
                stacklevel=3,
            )
    quality = _qualities(k)
    images = to_uint8(x.detach().cpu())
    jobs = []  # (indices, quality)
    workers = max(1, min(torch.get_num_threads(), len(quality)))
    for q, sel in _groups(quality).items():
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
