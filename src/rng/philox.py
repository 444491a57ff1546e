"""Philox-4x32-10: RepBench's one counter-based random number generator, in integer tensor ops on any device.

Algorithm: Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011
(doi:10.1145/2063384.2063405). A counter of four 32-bit words and a key of two 32-bit words go through ten rounds of

    (x0, x1, x2, x3) ← (hi(M1·x2) ⊕ x1 ⊕ k0, lo(M1·x2), hi(M0·x0) ⊕ x3 ⊕ k1, lo(M0·x0)),   k ← k + (W0, W1) mod 2³²

(M0 = 0xD2511F53, M1 = 0xCD9E8D57, W0 = 0x9E3779B9, W1 = 0xBB67AE85; the key is bumped between rounds), and the four
output words are the random bits of that counter. Because every output is a pure function of (key, counter), a
stream's numbers are the same whatever splits the work: batch size, number of threads, number of processes, device.

Exactness: 32-bit words are held in int64 tensors with values in [0, 2³²). The 32×32 → 64-bit product M·x never
forms a value ≥ 2⁶³ (signed overflow is undefined behaviour): M is split into 16-bit limbs M = M_h·2¹⁶ + M_l, so
A = x·M_h and B = x·M_l are < 2⁴⁸; with A = A_h·2¹⁶ + A_l (A_l < 2¹⁶), M·x = A_h·2³² + T for T = A_l·2¹⁶ + B < 2⁴⁹,
hence lo = T mod 2³² and hi = A_h + ⌊T / 2³²⌋. Every intermediate is < 2⁴⁹, so the integer words are bit-identical on
every device and backend.

Streams (:func:`stream_key`): a 64-bit key from the project's one seed hash (:func:`src.utils.numerics.seed_word`)
of any integers, split into the two key words. Word w of a stream is output word w mod 4 of counter ⌊w / 4⌋, the
counter's 64-bit index held in words (x0, x1) = (low, high 32 bits), x2 = x3 = 0.

Floats: :func:`uniform` maps word w to (w + ½)·2⁻³² in float64 (in (0, 1)); :func:`normal` takes Box–Muller over the
word pair (2p, 2p + 1): z_2p = r·cos θ, z_2p+1 = r·sin θ with r = √(−2 ln u₁), θ = 2π·w_{2p+1}·2⁻³² (Box & Muller,
"A note on the generation of random normal deviates", Ann. Math. Stat. 29(2), 1958, doi:10.1214/aoms/1177706645), each
step an eager float64 op (IEEE-rounded), then cast. The integer words match on every device; the normals on CUDA equal
the CPU's except where the device's float64 log / cos / sin differ from the CPU's in the last ulp, which survives the
cast to float32 only rarely (on an NVIDIA H200, SynBench's accuracies and scores came out identical to six digits).

Speed: the rounds, Box–Muller and the cast run as one :func:`torch.compile`-d kernel (:func:`compile_enabled`) that
makes its counter indices itself and writes only its output, one call per draw, parallel over torch's threads
(``python -m benchmarks.sampling``: ≈ 900 Mvalues/s of float32 normals at 2 threads on a 2-core AVX2 CPU in the
kernel, 1.9× one thread); eager, the CPU works in pieces of ``BLOCK`` counters. A value never depends on the split.
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ..utils.checks import check_int
from ..utils.numerics import seed_word

__all__ = [
    "philox4x32",
    "counter_words",
    "counter_normals",
    "range_words",
    "range_normals",
    "compile_enabled",
    "sampler_ready",
    "warm_up_sampler",
    "stream_key",
    "random_bits",
    "uniform",
    "normal",
    "BLOCK",
    "ROUNDS",
    "FLOAT_DTYPES",
]

M0, M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers (SC 2011, Table 2)
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments (golden ratio, √3 − 1)
MASK32 = 0xFFFFFFFF
ROUNDS = 10
BLOCK = 1 << 18  # counters per eager CPU piece (8 MiB per float64 temporary): bounded temporaries
_TWO_POW_M32 = 2.0**-32

Key = tuple[int, int] | Tensor
#: the output dtypes of :func:`uniform` and :func:`normal` (and the sampler kernels): torch's IEEE binary formats
#: with a finfo that the clamp of :func:`_open_unit` and the cast work in; float8 formats are refused early
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_KEY_FIX = "use stream_key(...) to make one"


def stream_key(*words: int) -> tuple[int, int]:
    """The Philox key (k0, k1) of the stream named by ``words`` (any integers, e.g. (seed, s·10⁶, split, chunk)):
    the 64-bit :func:`~src.utils.numerics.seed_word` of the words (numpy's SeedSequence), low 32 bits → k0, high
    32 bits → k1. Distinct word tuples give unrelated keys."""
    if not words:
        raise ValueError("stream_key needs at least one integer word, e.g. stream_key(seed)")
    w = seed_word(*(check_int(v, f"stream_key word {i}") for i, v in enumerate(words)))
    return w & MASK32, w >> 32


def _check_words(words: Tensor, name: str, fix: str) -> None:
    """A ValueError naming ``name`` when an int64 word of ``words`` lies outside [0, 2³²) (a 32-bit word)."""
    if words.numel() and bool(((words < 0) | (words > MASK32)).any()):
        lo, hi = (int(v) for v in torch.aminmax(words))
        raise ValueError(f"{name} words must lie in [0, 2**32), got values in [{lo}, {hi}]; {fix}")


def _key_words(key: Key) -> tuple[Any, Any]:
    """(k0, k1) as Python ints (from a pair) or 0-d int64 tensors (from a Tensor (2,)); both in [0, 2³²), else a
    ValueError (the same rule for both forms)."""
    if isinstance(key, Tensor):
        if key.shape != (2,) or key.dtype.is_floating_point or key.dtype.is_complex or key.dtype == torch.bool:
            raise ValueError(f"key must be an integer Tensor of shape (2,), got {key.dtype} {tuple(key.shape)}")
        k = key.to(torch.int64)  # a uint64 word >= 2**63 wraps to a negative one: refused all the same
        _check_words(k, "key", _KEY_FIX)
        return k[0], k[1]
    try:
        pair = tuple(key)
    except TypeError as err:
        raise TypeError(f"key must be a pair of 32-bit ints (k0, k1) or a Tensor (2,), got {key!r}") from err
    if len(pair) != 2:
        raise TypeError(f"key must be a pair of 32-bit ints (k0, k1) or a Tensor (2,), got {key!r}")
    k0, k1 = (check_int(v, f"key word k{i}", fix=_KEY_FIX) for i, v in enumerate(pair))
    if not (0 <= k0 <= MASK32 and 0 <= k1 <= MASK32):
        raise ValueError(f"key words must lie in [0, 2**32), got ({k0}, {k1}); {_KEY_FIX}")
    return k0, k1


def _mulhilo(x: Tensor, m: int) -> tuple[Tensor, Tensor]:
    """(hi, lo) 32-bit halves of m·x for int64 x in [0, 2³²) and a constant m < 2³², exact with every intermediate
    < 2⁴⁹ (16-bit limbs of m; see the module docstring)."""
    a = x * (m >> 16)  # < 2^48
    t = x * (m & 0xFFFF)  # < 2^48
    t += (a & 0xFFFF) << 16  # T < 2^49
    hi = a.bitwise_right_shift_(16).add_(t >> 32)
    return hi, t.bitwise_and_(MASK32)


def _rounds(x0: Tensor, x1: Tensor, x2: Tensor, x3: Tensor, k0: Any, k1: Any, rounds: int) -> list[Tensor]:
    """``rounds`` Philox-4x32 rounds on four word planes (int64, same shape), key bumped between rounds."""
    for r in range(rounds):
        if r:
            k0 = (k0 + W0) & MASK32
            k1 = (k1 + W1) & MASK32
        hi0, lo0 = _mulhilo(x0, M0)
        hi1, lo1 = _mulhilo(x2, M1)
        x0, x1, x2, x3 = hi1.bitwise_xor_(x1).bitwise_xor_(k0), lo1, hi0.bitwise_xor_(x3).bitwise_xor_(k1), lo0
    return [x0, x1, x2, x3]


def philox4x32(counter: Tensor, key: Key, rounds: int = ROUNDS) -> Tensor:
    """Philox-4x32-``rounds`` of every counter: ``counter`` (..., 4) int64 words in [0, 2³²), ``key`` (k0, k1) or
    a Tensor (2,) → (..., 4) int64 words in [0, 2³²), on the counter's device (Salmon et al., SC 2011)."""
    if not isinstance(counter, Tensor) or counter.dtype != torch.int64 or counter.shape[-1:] != (4,):
        got = f"{counter.dtype} {tuple(counter.shape)}" if isinstance(counter, Tensor) else type(counter).__name__
        raise ValueError(f"counter must be an int64 Tensor (..., 4), got {got}")
    _check_words(counter, "counter", "each counter is four 32-bit words (reduce a wider index mod 2**32 per word)")
    rounds = check_int(rounds, "rounds", 0, meaning="Philox rounds; the standard is 10")
    k0, k1 = _key_words(key)
    if isinstance(k0, Tensor):
        k0, k1 = k0.to(counter.device), k1.to(counter.device)
    planes = [counter[..., j].contiguous() for j in range(4)]
    return torch.stack(_rounds(*planes, k0, k1, rounds), dim=-1)


def _counter_planes(idx: Tensor, k0: Tensor, k1: Tensor) -> list[Tensor]:
    """The four output word planes of the counters with 64-bit indices ``idx``: counter (low, high, 0, 0)."""
    zeros = torch.zeros_like(idx)
    return _rounds(idx & MASK32, idx >> 32, zeros, zeros, k0, k1, ROUNDS)


def counter_words(idx: Tensor, k0: Tensor, k1: Tensor) -> Tensor:
    """Output words of the counters with 64-bit indices ``idx`` (int64 >= 0) under the key (k0, k1) (0-d int64
    tensors on idx's device), interleaved: (idx.numel()·4,) int64. The function :func:`torch.compile` fuses."""
    return torch.stack(_counter_planes(idx, k0, k1), dim=-1).view(-1)


def counter_normals(idx: Tensor, k0: Tensor, k1: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """Box–Muller normals of the output words of the counters ``idx``, computed in float64 and cast to ``dtype``,
    interleaved as the words: (idx.numel()·4,); normal j is :func:`_box_muller` of the word pair
    (2⌊j/2⌋, 2⌊j/2⌋ + 1), which never straddles two counters (four words each), so the pairs are the word planes
    (x0, x1) and (x2, x3). The function :func:`torch.compile` fuses with the rounds: taking Box–Muller plane by plane
    (not on the interleaved words) lets the kernel write only the output (measured 5.8× the throughput of the
    interleaved form on the CPU); with the cast inside the kernel it is also parallel over torch's threads."""
    x0, x1, x2, x3 = _counter_planes(idx, k0, k1)
    z = (*_box_muller(x0, x1), *_box_muller(x2, x3))
    return torch.stack([v.to(dtype) for v in z], dim=-1).view(-1)


def _indices(first: Tensor, count: int) -> Tensor:
    """Counter indices first … first + count − 1 on ``first``'s device (made inside the compiled kernel)."""
    return torch.arange(count, dtype=torch.int64, device=first.device) + first


def range_words(first: Tensor, count: int, k0: Tensor, k1: Tensor) -> Tensor:
    """:func:`counter_words` of the counters first … first + count − 1 (``first`` a 0-d int64 tensor on the
    device): the counter indices are made inside the function, so the compiled kernel reads no input array."""
    return counter_words(_indices(first, count), k0, k1)


def range_normals(first: Tensor, count: int, k0: Tensor, k1: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """:func:`counter_normals` of the counters first … first + count − 1 (see :func:`range_words`)."""
    return counter_normals(_indices(first, count), k0, k1, dtype)


_FUSED: dict[tuple[str, ...], Callable[..., Tensor]] = {}
_FUSED_LOCK = threading.Lock()
_HINT = 1 << 16  # counters in the first (checking) call of a compiled kernel


def compile_enabled() -> bool:
    """Whether the integer rounds (and the Box–Muller step of :func:`normal`) run as one :func:`torch.compile`-d
    kernel (on by default; environment variable ``REPBENCH_PHILOX_COMPILE=0`` keeps them eager). The words are the
    same either way (exact integer arithmetic); the compiled normals equal the eager ones up to the last ulp of the
    float64 log / cos / sin (checked on first use; no difference measured on the CPU in 4·10⁶ values)."""
    return os.environ.get("REPBENCH_PHILOX_COMPILE", "1") != "0"


def _agree(compiled: Tensor, eager: Tensor) -> bool:
    """Words: equal. Normals: equal within 8 ulp of |z| <= 6.77 in float64 (≈ 1.2e-14, the spread of two float64
    log/cos/sin implementations of <= 1-4 ulp each through r·cos θ), plus one rounding of the cast when the output
    is shorter (values that close may round to neighbouring float32 / bfloat16 values: 6.77·eps of the format)."""
    if not compiled.dtype.is_floating_point:
        return torch.equal(compiled, eager)
    cast = torch.finfo(compiled.dtype).eps if compiled.dtype != torch.float64 else 0.0
    bound = 6.77 * (8 * torch.finfo(torch.float64).eps + cast)
    return bool((compiled.double() - eager.double()).abs().max() <= bound)


def _slot(device: torch.device, fn: Callable[..., Tensor], extra: tuple[Any, ...]) -> tuple[str, ...]:
    """The key of one compiled kernel in ``_FUSED``: (function, device type, extra arguments)."""
    return (fn.__name__, device.type, *map(str, extra))


def _fused(device: torch.device, fn: Callable[..., Tensor] | None = None, *extra: Any) -> Callable[..., Tensor]:
    """The compiled ``fn`` (:func:`range_words`, or :func:`range_normals` with its ``dtype`` in ``extra``) for
    ``device``'s type, one kernel per (fn, device type, extra), compiled and checked against the eager function on
    a range across the 2³² carry on first use, under a lock; the eager ``fn`` when compiling is off, fails, or
    disagrees. The checking call is large (``_HINT`` counters) because the first call's size is the kernel's size
    hint: inductor parallelises the loop of a kernel first called on a large range, not one first called on 64."""
    fn = range_words if fn is None else fn
    slot = _slot(device, fn, extra)
    cached = _FUSED.get(slot)
    if cached is not None:
        return cached
    with _FUSED_LOCK:
        if slot in _FUSED:
            return _FUSED[slot]
        chosen = fn
        if compile_enabled() and device.type in ("cpu", "cuda"):
            try:
                compiled = torch.compile(fn, dynamic=True, fullgraph=True)
                first = torch.tensor((1 << 32) - 3, dtype=torch.int64, device=device)
                k = (torch.tensor(0x01234567, device=device), torch.tensor(0x89ABCDEF, device=device))
                if _agree(compiled(first, _HINT, *k, *extra), fn(first, _HINT, *k, *extra)):
                    chosen = compiled
                else:  # pragma: no cover - a miscompile; never observed
                    warnings.warn(f"philox: the compiled {fn.__name__} disagrees with eager; using eager", stacklevel=2)
            except Exception as err:
                warnings.warn(f"philox: torch.compile unavailable ({type(err).__name__}); using eager", stacklevel=2)
        _FUSED[slot] = chosen
        return chosen


def _sampler_slots(device: Any, dtype: torch.dtype) -> list[tuple[Callable[..., Tensor], tuple[Any, ...]]]:
    """The kernels a SynBench run draws with on ``device`` (samples of ``dtype``): :func:`range_words` (the labels,
    :func:`uniform`) and :func:`range_normals` with ``dtype`` (the samples, :func:`normal`)."""
    return [(range_words, ()), (range_normals, (_check_dtype(dtype),))]


def sampler_ready(device: Any = "cpu", dtype: torch.dtype = torch.float32) -> bool:
    """Whether the sampler kernels of a SynBench run with samples of ``dtype`` on ``device`` are built in this
    process (a dictionary look-up): False means the next draw there compiles them first (seconds to tens of seconds
    on a busy CPU). True also when there is nothing to compile (``REPBENCH_PHILOX_COMPILE=0``, or a device type
    other than cpu / cuda: eager). SynBench draws its labels with :func:`uniform` (kernel :func:`range_words`) and
    its samples with :func:`normal` in float32 (kernel :func:`range_normals`, float32) on the feature device: so
    ``sampler_ready(device)`` with the defaults is the question for ``synbench(..., device=device)``."""
    dev = _device(device)
    slots = _sampler_slots(dev, dtype)
    if not compile_enabled() or dev.type not in ("cpu", "cuda"):
        return True
    return all(_slot(dev, fn, extra) in _FUSED for fn, extra in slots)


def warm_up_sampler(device: Any = "cpu", dtype: torch.dtype = torch.float32) -> float:
    """Build (compile and check) the sampler kernels of :func:`sampler_ready` now, once per process; returns the
    seconds it took (≈ 0 when they were built already). For a caller that wants to say so::

        if not sampler_ready(device):
            log.info("compiling the SynBench sampler (once per process)")
            log.info("sampler compiled in %.1f s", warm_up_sampler(device))
    """
    dev = _device(device)
    start = time.perf_counter()
    for fn, extra in _sampler_slots(dev, dtype):
        _fused(dev, fn, *extra)
    return time.perf_counter() - start


def _scalar(v: Any, device: torch.device) -> Tensor:
    """A 0-d int64 tensor on ``device``: a Python int is written by a fill kernel (no host-to-device copy, hence no
    stream synchronisation on CUDA), a tensor is moved."""
    if isinstance(v, Tensor):
        return v.to(device=device, dtype=torch.int64)
    return torch.full((), int(v), dtype=torch.int64, device=device)


def _stream(
    fn: Callable[..., Tensor], key: Key, n: int, offset: int, device: torch.device, dtype: torch.dtype, *extra: Any
) -> Tensor:
    """Values ``offset`` … ``offset + n − 1`` of the stream ``key``, (n,) of ``dtype``: value w is value w mod 4 of
    counter ⌊w / 4⌋ under ``fn`` (:func:`range_words` or :func:`range_normals`, extra arguments ``extra``).

    The compiled kernel (and any device other than the CPU) takes the whole range in one call, parallel inside the
    kernel, and the result is a view of its output (no copy). Eager on the CPU, the range goes in sequential pieces
    of ``4·BLOCK`` values that bound the eager temporaries, each op parallel over torch's threads. No Python thread
    pool: torch ops run from pool threads measurably slowed the rest of a training run (the main job: 82 s against
    72 s). A value never depends on the split."""
    k0, k1 = (_scalar(k, device) for k in _key_words(key))
    kernel = _fused(device, fn, *extra)

    def piece(start: int, stop: int) -> Tensor:
        first = start // 4
        lo = start - 4 * first
        count = (stop - 1) // 4 - first + 1
        return kernel(_scalar(first, device), count, k0, k1, *extra)[lo : lo + stop - start]

    if n == 0:
        return torch.empty(0, dtype=dtype, device=device)
    if kernel is not fn or device.type != "cpu" or n <= 4 * BLOCK:
        return piece(offset, offset + n)
    out = torch.empty(n, dtype=dtype, device=device)
    for s in range(0, n, 4 * BLOCK):
        e = min(s + 4 * BLOCK, n)
        out[s:e] = piece(offset + s, offset + e)
    return out


def _check_dtype(dtype: object) -> torch.dtype:
    """``dtype`` if it is one of :data:`FLOAT_DTYPES`, else a ValueError naming them (before any work)."""
    if dtype not in FLOAT_DTYPES:
        names = ", ".join(str(d) for d in FLOAT_DTYPES)
        raise ValueError(
            f"dtype must be one of the floating dtypes {names}, got {dtype!r}; for another format draw in "
            "torch.float32 and cast the result"
        )
    return dtype  # type: ignore[return-value]


def _check_range(n: int, offset: int) -> None:
    """``offset + n`` below 2⁶² (the counter's 64-bit index, four words per counter)."""
    if offset + n >= 1 << 62:
        raise ValueError(f"offset + n must stay below 2**62 words of a stream, got {offset + n}")


def _device(device: Any) -> torch.device:
    return torch.device("cpu") if device is None else torch.device(device)


def random_bits(key: Key, n: int, *, offset: int = 0, device: Any = None) -> Tensor:
    """Words ``offset`` … ``offset + n − 1`` of the stream ``key``: (n,) int64 in [0, 2³²), word w = output word
    w mod 4 of counter ⌊w / 4⌋. Any offset and n; ``random_bits(key, n, offset=k) == random_bits(key, n + k)[k:]``."""
    n = check_int(n, "n", 0, meaning="words to draw")
    offset = check_int(offset, "offset", 0, meaning="index of the first word in the stream")
    _check_range(n, offset)
    return _stream(range_words, key, n, offset, _device(device), torch.int64)


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    """``shape`` (a size or a sequence of sizes, e.g. a tuple, list, torch.Size or 1-d tensor / array) as a tuple
    of ints >= 0; a TypeError / ValueError naming ``shape`` for anything else (never truncated)."""
    ndim = getattr(shape, "ndim", None)  # a tensor or numpy array of sizes
    if (isinstance(shape, Sequence) and not isinstance(shape, str)) or ndim == 1:
        return tuple(check_int(v, f"shape[{i}]", 0) for i, v in enumerate(shape))
    return (check_int(shape, "shape", 0, meaning="a size, or a sequence of sizes such as (4, 3)"),)


def _open_unit(u: Tensor, dtype: torch.dtype) -> Tensor:
    """float64 u in (0, 1) cast to ``dtype``, kept inside (0, 1): the cast may round to 0 or 1 in a short format."""
    if dtype == torch.float64:
        return u
    fi = torch.finfo(dtype)
    return u.to(dtype).clamp_(fi.tiny, 1.0 - fi.eps / 2)  # largest value below 1 in a binary format: 1 − eps/2


def uniform(
    key: Key, shape: int | Sequence[int], *, offset: int = 0, device: Any = None, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Uniform values in (0, 1) (never 0 or 1): value i = (word (offset + i) + ½)·2⁻³² in float64, cast to
    ``dtype`` (clamped to the largest value below 1 and the smallest normal of ``dtype`` where the cast rounds
    onto 0 or 1: float32 moves the top 2⁻²⁵ of the mass, float64 nothing)."""
    _check_dtype(dtype)
    shape = _shape(shape)
    bits = random_bits(key, math.prod(shape), offset=offset, device=device)
    return _open_unit(bits.double().add_(0.5).mul_(_TWO_POW_M32), dtype).view(shape)


def _box_muller(w1: Tensor, w2: Tensor) -> tuple[Tensor, Tensor]:
    """Two standard normals (r·cos θ, r·sin θ) per word pair (w1, w2) (int64 words in [0, 2³²), same shape):
    u₁ = (w1 + ½)·2⁻³² in (0, 1) (log finite), θ = 2π·w2·2⁻³², r = √(−2 ln u₁) (Box & Muller 1958), each step one
    IEEE-rounded float64 op in eager mode."""
    u1 = w1.double().add_(0.5).mul_(_TWO_POW_M32)
    theta = w2.double().mul_(2.0 * math.pi * _TWO_POW_M32)
    r = u1.log_().mul_(-2.0).sqrt_()
    return r * theta.cos(), r * theta.sin_()


def normal(
    key: Key, shape: int | Sequence[int], *, offset: int = 0, device: Any = None, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Standard normal values (Box–Muller in float64, then cast to ``dtype``): value i is normal j = offset + i of
    the stream, z_j = r·cos θ (j even) or r·sin θ (j odd) of the word pair (2⌊j/2⌋, 2⌊j/2⌋ + 1), so it depends only
    on (key, offset + i). |z| <= √(2·33·ln 2) ≈ 6.77 (u₁ >= 2⁻³³)."""
    _check_dtype(dtype)
    shape = _shape(shape)
    n = math.prod(shape)
    offset = check_int(offset, "offset", 0, meaning="index of the first value in the stream")
    _check_range(n + 2, offset)
    return _stream(range_normals, key, n, offset, _device(device), dtype, dtype).view(shape)
