"""Class-conditional Gaussian inputs of SynBench in pixel space (ICML 2024 paper §3.1 eq. 1, §3.3, §4.4,
Algorithm 1 line 8; official ``Gaussian_Dataset``).

x = mean_offset + (2y − 1)·s·1_d/√d + ε, ε ~ N(0, Σ), y ~ Bernoulli(τ) ∈ {0, 1} (1 ↔ +μ), no clipping, for
samples of any shape (B, *input_shape), d = prod(input_shape). Σ = I ("identity", Gaussian-I) or block-diagonal
over channels with a banded Toeplitz block over the flattened values of each channel ("banded", Gaussian-H,
§4.4: heptadiagonal for a band of 4 values). Channels (:func:`channel_layout`): axis 0 of (C, H, W) and of every
other rank ≥ 2; a flat vector (d,) is one channel of d values.

Reproducibility: samples come in fixed chunks of ``chunk_size``; chunk c of split ("train"/"test") at s is drawn
from the Philox-4x32-10 stream (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011,
doi:10.1145/2063384.2063405; :mod:`src.rng.philox`) keyed by :func:`chunk_key` = stream_key(seed, round(s·1e6),
split, c): the noise is normals 0 … B·d − 1 of the stream (Box–Muller in float64, then ``dtype``), the labels are
uniforms at words 2⁶¹ … 2⁶¹ + B − 1. Sample i is therefore the same whatever the batch size, the number of samples
requested, the other s values on the grid, the thread count, the process count, and the device (the integer words
are bit-identical everywhere; the normals up to a rare last-ulp difference of a device's float64 log/cos/sin that
survives the float32 cast). Samples are drawn on ``device`` (the feature device), so nothing is copied.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from scipy.linalg import LinAlgError, cho_solve_banded, cholesky_banded

from ..rng.philox import normal, stream_key, uniform
from ..utils.numerics import seed_word

Tensor = torch.Tensor
SPLITS = {"train": 0, "test": 1}


def channel_layout(input_shape: Sequence[int]) -> tuple[int, int]:
    """(channels, values per channel) of samples (B, *input_shape): axis 0 is the channel axis for rank ≥ 2
    ((C, H, W) → (C, H·W)); a flat vector (d,) is one channel of d values → (1, d)."""
    shape = tuple(int(v) for v in input_shape)
    if len(shape) == 1:
        return 1, shape[0]
    return shape[0], math.prod(shape[1:])


LABEL_OFFSET = 1 << 61  # first word of a chunk's labels in its stream (the noise uses words below B·d + 1)


def _chunk_words(seed: int, s: float, split: str, chunk: int) -> tuple[int, int, int, int]:
    """The words naming one chunk: (seed, round(s · 10⁶), split index, chunk); ValueError for a negative seed or s,
    an unknown split."""
    if seed < 0 or s < 0:
        raise ValueError("seed and s must be >= 0")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    return int(seed), int(round(s * 1e6)), SPLITS[split], int(chunk)


def chunk_key(seed: int, s: float, split: str, chunk: int) -> tuple[int, int]:
    """Philox key of one chunk: :func:`~src.rng.philox.stream_key` (the project's one seed hash,
    :func:`~src.utils.numerics.seed_word`, split into two 32-bit words) of (seed, round(s · 10⁶), split, chunk)."""
    return stream_key(*_chunk_words(seed, s, split, chunk))


def chunk_seed(seed: int, s: float, split: str, chunk: int) -> int:
    """63-bit seed of one chunk: the low 63 bits of :func:`~src.utils.numerics.seed_word` of (seed, round(s · 10⁶),
    split, chunk) — the same 64-bit word as :func:`chunk_key`. Kept for callers that seed their own generator;
    SynBench itself draws from the Philox stream of :func:`chunk_key`."""
    return seed_word(*_chunk_words(seed, s, split, chunk)) & ((1 << 63) - 1)


def banded_cholesky(band: Sequence[float], n: int) -> Tensor:
    """Lower banded Cholesky factor of the symmetric Toeplitz band matrix T (T_ij = band[|i − j|], zero beyond
    the band) of size n, in scipy's lower banded storage: out[k, j] = L[j + k, j], shape (len(band), n).

    Raises ValueError when T is not positive definite (e.g. the band's symbol c₀ + 2Σ c_k cos(kω) is too
    negative for this n). O(n·len(band)²) time, so a 224² channel (n = 50176) costs milliseconds.
    """
    b = np.asarray(band, dtype=np.float64).reshape(-1)
    if b.size == 0 or not np.all(np.isfinite(b)):
        raise ValueError(f"band must be a non-empty finite sequence, got {band!r}")
    k = min(b.size, n)
    ab = np.zeros((k, n))
    for j in range(k):
        ab[j, : n - j] = b[j]
    try:
        factor = cholesky_banded(ab, lower=True)
    except LinAlgError as err:
        raise ValueError(
            f"banded covariance with band {[float(v) for v in b]} is not positive definite for {n} pixels per channel"
        ) from err
    return torch.from_numpy(factor)


def banded_margin_scale(band: Sequence[float], n: int, factor: Tensor | None = None) -> float:
    """κ with √(μ̃ᵀΣ⁻¹μ̃) = κ·s for μ̃ = s·1_d/√d and the channel-block band Σ: κ² = 1ᵀT⁻¹1 / n (per channel)."""
    f = banded_cholesky(band, n) if factor is None else factor
    x = cho_solve_banded((f.numpy(), True), np.ones(n))
    return math.sqrt(float(x.sum()) / n)


def apply_banded_factor(noise: Tensor, factor: Tensor) -> Tensor:
    """L·e along the last axis for a lower banded factor (``banded_cholesky`` storage); exact covariance T."""
    n = noise.shape[-1]
    f = factor.to(noise.device, noise.dtype)
    out = noise * f[0]
    for k in range(1, f.shape[0]):
        out[..., k:] += f[k, : n - k] * noise[..., : n - k]
    return out


def sample_chunk(
    chunk: int,
    *,
    s: float,
    input_shape: Sequence[int],
    seed: int = 0,
    split: str = "train",
    chunk_size: int = 256,
    mean_offset: float = 0.5,
    class_prior: float = 0.5,
    factor: Tensor | None = None,
    channel_affine: tuple[Tensor, Tensor] | None = None,
    dtype: torch.dtype = torch.float32,
    device: Any = "cpu",
) -> tuple[Tensor, Tensor]:
    """Chunk ``chunk`` (samples chunk·chunk_size ... +chunk_size) of one split: (x (B, *input_shape), y (B,)).

    ``input_shape``: any shape of positive sizes, channels as :func:`channel_layout`. ``factor``: banded Cholesky
    factor for Gaussian-H over the values of one channel (None: Σ = I). ``channel_affine`` = (scale, shift), each
    (C,): returns scale_c·x + shift_c instead of x (normalisation folded into sampling, two passes). Drawn on
    ``device`` from the chunk's Philox stream (module docstring) with ``torch.get_num_threads()`` CPU threads.
    """
    if not 0.0 < class_prior < 1.0:
        raise ValueError(f"class_prior must lie in (0, 1), got {class_prior}")
    shape = tuple(int(v) for v in input_shape)
    d = math.prod(shape)
    key = chunk_key(seed, s, split, chunk)
    y = (uniform(key, chunk_size, offset=LABEL_OFFSET, device=device, dtype=torch.float64) < class_prior).long()
    x = normal(key, (chunk_size, *shape), device=device, dtype=dtype)
    per_channel = x.view(chunk_size, *channel_layout(shape))  # (B, C, values per channel): a view of x
    if factor is not None:
        per_channel = apply_banded_factor(per_channel, factor)
    mean = mean_offset + (2.0 * y.to(dtype) - 1.0) * (s / math.sqrt(d))  # (B,)
    if channel_affine is None:
        return per_channel.add_(mean.view(chunk_size, 1, 1)).view(chunk_size, *shape), y
    scale, shift = (t.to(device, dtype).view(-1, 1) for t in channel_affine)  # (C, 1)
    bias = scale * mean.view(chunk_size, 1, 1) + shift  # (B, C, 1)
    return per_channel.mul_(scale).add_(bias).view(chunk_size, *shape), y


def iter_samples(n: int, batch_size: int, **kwargs: Any) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield batches (x, y) of samples 0 … n−1 of one split (last batch may be smaller); kwargs as
    :func:`sample_chunk`. Only the chunks overlapping the current batch are kept in memory."""
    if n <= 0 or batch_size <= 0:
        raise ValueError("n and batch_size must be positive")
    cs = int(kwargs.get("chunk_size", 256))
    buf_x: list[Tensor] = []
    buf_y: list[Tensor] = []
    have, chunk, start = 0, 0, 0
    while start < n:
        need = min(batch_size, n - start)
        while have < need:
            x, y = sample_chunk(chunk, **kwargs)
            buf_x.append(x)
            buf_y.append(y)
            have += cs
            chunk += 1
        x = buf_x[0] if len(buf_x) == 1 else torch.cat(buf_x)
        y = buf_y[0] if len(buf_y) == 1 else torch.cat(buf_y)
        yield x[:need], y[:need]
        rest = have - need
        buf_x, buf_y = ([x[need:]], [y[need:]]) if rest else ([], [])
        have, start = rest, start + need


def sample(n: int, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """All n samples of one split at once (convenience for tests and small inputs)."""
    xs, ys = zip(*iter_samples(n, n, **kwargs))
    return torch.cat(xs), torch.cat(ys)
