"""Random draws for the perturbations: fast on CPU, reproducible from one ``torch.Generator`` on any device.

A CPU ``torch.Generator`` fills a tensor serially (one Mersenne Twister, ~5-10 ns per value), which made drawing the
noise slower than everything else in ``gaussian_noise``, ``elastic_transform``, ``fog`` and ``glass_blur``. Here one
64-bit base seed is drawn from the caller's generator (or torch's default one when None); the flat tensor is cut into
fixed chunks of ``CHUNK`` values, chunk ``i`` is filled by its own ``torch.Generator`` seeded with
``splitmix64(base + i)``, and the chunks are filled in parallel by ``torch.get_num_threads()`` Python threads (torch
releases the GIL inside the fill). The chunking does not depend on the number of threads, so a seed gives the same
draws on every machine and thread count. Draws always happen on the generator's device (CPU when none is given and the
images are on the CPU) in float32 and are then moved / cast, so a seed also gives the same images on every device and
in every image dtype. CUDA generators fill the whole tensor at once (already parallel).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import TypeVar

import torch
from torch import Tensor

__all__ = ["rand", "randn", "randint", "rand_bits", "parallel_map", "CHUNK"]

T = TypeVar("T")
R = TypeVar("R")

CHUNK = 1 << 18  # values per chunk (1 MiB of float32): large enough that a chunk's fill dwarfs the thread hand-off
_MASK = (1 << 64) - 1


def _splitmix64(z: int) -> int:
    """One step of SplitMix64 (Steele, Lea & Flood, OOPSLA 2014): decorrelates consecutive chunk seeds."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return (z ^ (z >> 31)) & ((1 << 63) - 1)  # torch seeds are taken as int64 here: keep them non-negative


@lru_cache(maxsize=4)
def _pool(workers: int, pid: int) -> ThreadPoolExecutor:
    """One pool per process (keyed by pid: a pool inherited through fork has no threads in the child)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="repbench-rng")


def parallel_map(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``[fn(i) for i in items]`` on up to ``workers`` threads of this process's pool (serially for one worker or
    one item). For work that releases the GIL (torch fills, libjpeg)."""
    workers = min(workers, len(items))
    if workers <= 1:
        return [fn(i) for i in items]
    return list(_pool(workers, os.getpid()).map(fn, items))


def _device(generator: torch.Generator | None, like: Tensor) -> torch.device:
    return generator.device if generator is not None else like.device


def _fill(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    generator: torch.Generator | None,
    like: Tensor,
    fill: Callable[[Tensor, torch.Generator | None], Tensor],
) -> Tensor:
    """A tensor of ``shape`` on the generator's device filled by ``fill(chunk, chunk_generator)`` chunk by chunk."""
    device = _device(generator, like)
    out = torch.empty(shape, dtype=dtype, device=device)
    if device.type != "cpu":
        fill(out, generator)
        return out
    base = int(torch.randint(0, 1 << 62, (), generator=generator))
    flat = out.view(-1)
    n_chunks = -(-flat.numel() // CHUNK)

    def one(i: int) -> None:
        fill(flat[i * CHUNK : (i + 1) * CHUNK], torch.Generator().manual_seed(_splitmix64(base + i)))

    parallel_map(one, range(n_chunks), torch.get_num_threads())
    return out


def rand(
    shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor, low: float = 0.0, high: float = 1.0
) -> Tensor:
    """Uniform [low, high) float32 of ``shape`` on ``like``'s device (``low + (high − low)·U[0, 1)``)."""
    return _fill(shape, torch.float32, generator, like, lambda t, g: t.uniform_(low, high, generator=g)).to(like.device)


def randn(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Standard normal of ``shape`` in ``like``'s dtype and device (drawn in float32 whatever the images' dtype)."""
    z = _fill(shape, torch.float32, generator, like, lambda t, g: t.normal_(generator=g))
    return z.to(device=like.device, dtype=like.dtype)


def randint(low: int, high: int, shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Integers uniform in ``[low, high)`` of ``shape`` (int64) on ``like``'s device."""
    z = _fill(shape, torch.int64, generator, like, lambda t, g: t.random_(low, high, generator=g))
    return z.to(like.device)


def rand_bits(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Independent fair bits of ``shape`` (bool) on ``like``'s device: random bytes, unpacked 8 bits each (8x fewer
    generator calls than one draw per value)."""
    numel = 1
    for s in shape:
        numel *= int(s)
    words = _fill(((numel + 7) // 8,), torch.uint8, generator, like, lambda t, g: t.random_(0, 256, generator=g))
    shifts = torch.arange(8, dtype=torch.uint8, device=words.device)
    bits = words[:, None].bitwise_right_shift(shifts).bitwise_and_(1)
    return bits.view(-1)[:numel].view(shape).to(device=like.device, dtype=torch.bool)
