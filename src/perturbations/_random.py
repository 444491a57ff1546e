"""Random draws for the perturbations: on the images' device, reproducible from one ``torch.Generator``.

Two engines, one key. One 64-bit base seed is drawn from the caller's generator (or torch's default CPU one when
None); it is the only value that ever leaves a generator, a scalar on the host, so no device waits and no tensor
crosses between host and device.

* ``"philox"`` (images on a GPU or any non-CPU device, by default): the stream ``stream_key(base)`` of the
  counter-based Philox-4x32-10 generator (:mod:`src.rng.philox`; Salmon et al., "Parallel random numbers: as easy
  as 1, 2, 3", SC 2011, doi:10.1145/2063384.2063405) in integer tensor ops ON the images' device. Value i of a draw
  is a function of (base, i) alone: the same on every device (uniforms, integers and bits bit-identical; normals
  up to the device's float64 log / cos / sin in the last ulp), for any batch split and thread count.
* ``"mt"`` (CPU images, by default): the flat tensor is cut into fixed chunks of ``CHUNK`` values, chunk ``i`` is
  filled by its own ``torch.Generator`` seeded with ``splitmix64(base + i)`` on ``torch.get_num_threads()`` Python
  threads (torch releases the GIL inside the fill). The chunking does not depend on the number of threads. Kept for
  the CPU so that CPU results stay those of earlier versions and no CPU perturbation gets slower: with the fused
  Philox kernel the two engines are within noise of each other on the 2-core test CPU except frost (Philox
  0.87-0.92x) and Gaussian noise (Philox 1.12-1.39x) (``python -m benchmarks.perturbations --part engines``).

``set_engine("philox")`` (or the environment variable ``REPBENCH_PERTURB_RNG=philox``) runs the device path on the
CPU too: then a seed gives the same draws on the CPU as on a GPU. In both engines image i's draws occupy the values
i·(per-image size) … of the flat tensor (the image axis leads), so an image's draws do not depend on how many images
follow it in the batch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import TypeVar

import torch
from torch import Tensor

from ..rng import philox

__all__ = ["rand", "randn", "randint", "rand_bits", "parallel_map", "CHUNK", "ENGINES", "engine_for", "set_engine"]

T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("auto", "philox", "mt")
_ENGINE = {"name": os.environ.get("REPBENCH_PERTURB_RNG", "auto")}
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


def set_engine(name: str) -> str:
    """Choose the engine of the draws for this process: "auto" (Philox on non-CPU devices, chunked Mersenne Twister
    on the CPU; the default), "philox" (everywhere: CPU draws equal GPU draws) or "mt" (CPU generators, also for
    GPU images, drawn on the host and copied: the behaviour before Philox). Returns the previous choice."""
    if name not in ENGINES:
        raise ValueError(f"unknown random engine {name!r}; use one of {list(ENGINES)} (REPBENCH_PERTURB_RNG)")
    before, _ENGINE["name"] = _ENGINE["name"], name
    return before


def engine_for(device: torch.device) -> str:
    """The engine that draws for images on ``device`` ("philox" | "mt")."""
    name = _ENGINE["name"]
    if name not in ENGINES:
        raise ValueError(f"REPBENCH_PERTURB_RNG={name!r} is not one of {list(ENGINES)}")
    if name == "auto":
        return "mt" if device.type == "cpu" else "philox"
    return name


def _base_seed(generator: torch.Generator | None) -> int:
    """The one draw from the caller's generator: a 62-bit base seed (on the host for a CPU generator or None; a
    CUDA generator's scalar is read back, the only synchronisation then)."""
    return int(torch.randint(0, 1 << 62, (), generator=generator, device=generator.device if generator else "cpu"))


def _philox_words(n: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """n Philox words (int64 in [0, 2³²)) of the stream of a fresh base seed, on ``device``."""
    return philox.random_bits(philox.stream_key(_base_seed(generator)), n, device=device)


def _philox_uniform01(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> Tensor:
    """U[0, 1) float32 of ``shape``: the top 24 bits of each word times 2⁻²⁴ (exact: every value is a multiple of
    2⁻²⁴ below 1, the same on every device)."""
    w = _philox_words(math.prod(shape), generator, device)
    return w.bitwise_right_shift_(8).to(torch.float32).mul_(2.0**-24).view(shape)


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
    base = _base_seed(generator)
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
    if engine_for(like.device) == "philox":
        return _philox_uniform01(shape, generator, like.device).mul_(high - low).add_(low)
    return _fill(shape, torch.float32, generator, like, lambda t, g: t.uniform_(low, high, generator=g)).to(like.device)


def randn(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Standard normal of ``shape`` in ``like``'s dtype and device (drawn in float32 whatever the images' dtype)."""
    if engine_for(like.device) == "philox":
        key = philox.stream_key(_base_seed(generator))
        return philox.normal(key, shape, device=like.device, dtype=torch.float32).to(like.dtype)
    z = _fill(shape, torch.float32, generator, like, lambda t, g: t.normal_(generator=g))
    return z.to(device=like.device, dtype=like.dtype)


def randint(low: int, high: int, shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Integers uniform in ``[low, high)`` of ``shape`` (int64) on ``like``'s device. Philox: ``low + ⌊w·(high −
    low)/2³²⌋`` of a 32-bit word w (Lemire, "Fast random integer generation in an interval", arXiv:1805.10941,
    without the rejection step: bias below (high − low)/2³², < 1e-8 for the small ranges used here)."""
    if engine_for(like.device) == "philox":
        if not 0 < high - low < 1 << 31:
            raise ValueError(f"randint needs 0 < high - low < 2**31, got [{low}, {high})")
        w = _philox_words(math.prod(shape), generator, like.device)
        return w.mul_(high - low).bitwise_right_shift_(32).add_(low).view(shape)
    z = _fill(shape, torch.int64, generator, like, lambda t, g: t.random_(low, high, generator=g))
    return z.to(like.device)


def rand_bits(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """Independent fair bits of ``shape`` (bool) on ``like``'s device: random bytes, unpacked 8 bits each (8x fewer
    generator calls than one draw per value)."""
    numel = math.prod(int(v) for v in shape)
    if engine_for(like.device) == "philox":  # 32 bits per word, byte b of word i = bits 32·i + 8·b … + 7
        w = _philox_words((numel + 31) // 32, generator, like.device)
        shifts8 = torch.arange(0, 32, 8, dtype=torch.int64, device=w.device)
        words = w[:, None].bitwise_right_shift(shifts8).bitwise_and_(255).to(torch.uint8).view(-1)
    else:
        words = _fill(((numel + 7) // 8,), torch.uint8, generator, like, lambda t, g: t.random_(0, 256, generator=g))
    shifts = torch.arange(8, dtype=torch.uint8, device=words.device)
    bits = words[:, None].bitwise_right_shift(shifts).bitwise_and_(1)
    return bits.view(-1)[:numel].view(shape).to(device=like.device, dtype=torch.bool)
