"""Closed-form moments of the kernel alignment Tr(MG) under the Task Prior, computed in tiles (never n × n).

Task Priors (Patel & Balestriero, arXiv:2507.09871), Lemma 2.2 and Thm 2.3: under the Gibbs measure
μ(G) ∝ exp(Tr(GK)/T) every edge G_ij is an independent Bernoulli(σ(K_ij/T)), so for an evaluated kernel M

    E[Tr(MG)]   = Σ_{i,j} M_ij σ(K_ij/T),
    Var[Tr(MG)] = Σ_{i,j} M_ij² σ(K_ij/T) (1 − σ(K_ij/T)),

over all ordered pairs (i, j), the diagonal included. Here M (from the eval features) and K (from the prior
features) are centred cosine kernels (``kernels.py``), each divided by a scale (its Frobenius norm, or 1).

One loop (design principle "one loop per protocol"): ``sharded_moment_sums`` walks the row blocks that a ``Shard``
owns (round-robin over ⌈n / block_size⌉ blocks) and returns the partial (ΣE, ΣVar) in float64; a sum all-reduce of
the partials over shards gives the totals. When both kernels are symmetric (always, from features) a row block b
visits only the column tiles c ≥ b and counts c > b twice, halving the work. Memory: a few block_size² tiles and
block_size × D slices, plus O(n + D) statistics. σ(x)(1 − σ(x)) is evaluated as σ(x)σ(−x) (no cancellation).
"""

from __future__ import annotations

import math

import torch

from ..utils.distributed import Reduce, Shard, no_reduce
from .conventions import CONVENTIONS, DEFAULT_CONVENTION, TaskPriorConvention, resolve_convention
from .kernels import CenteredCosine
from .validation import (
    check_block_size,
    check_kernel,
    check_norm,
    check_same_n,
    check_scale,
    check_temperature,
)

Tensor = torch.Tensor

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_EVAL_SCALE",
    "DEFAULT_PRIOR_SCALE",
    "KernelSource",
    "kernel_source",
    "kernel_scale",
    "moment_sums",
    "sharded_moment_sums",
    "task_prior_moments",
    "tile_moment_sums",
]

DEFAULT_BLOCK_SIZE = 1024
#: the "repbench" convention's scales (owned by ``conventions.py``; see docs/task_prior.md, "Scales"): M/‖M‖_F makes
#: E and Var comparable across backbones; K is kept raw so that σ(K_ij/T) stays informative at any n (a
#: Frobenius-scaled K has entries ~1/n and σ(K/T) -> 1/2).
DEFAULT_EVAL_SCALE = CONVENTIONS[DEFAULT_CONVENTION].eval_scale
DEFAULT_PRIOR_SCALE = CONVENTIONS[DEFAULT_CONVENTION].prior_scale


class _DenseKernel:
    """A precomputed (n × n) kernel behind the same ``block`` interface as ``CenteredCosine``."""

    def __init__(self, kernel: Tensor, name: str) -> None:
        check_kernel(kernel, name)
        self.kernel = kernel
        self.n = kernel.shape[0]
        self.symmetric = bool(torch.equal(kernel, kernel.T))

    def block(self, r: slice, c: slice) -> Tensor:
        return self.kernel[r, c].to(torch.float64)

    def frobenius_norm(self) -> float:
        return float(torch.linalg.matrix_norm(self.kernel.to(torch.float64), ord="fro"))

    @property
    def device(self) -> torch.device:
        return self.kernel.device


KernelSource = CenteredCosine | _DenseKernel


def kernel_source(features: Tensor | None, kernel: Tensor | None, name: str) -> KernelSource:
    """The kernel of ``name`` from exactly one of its features (centred cosine) or a precomputed matrix."""
    if isinstance(features, (CenteredCosine, _DenseKernel)):
        return features
    if kernel is not None:
        if features is not None:
            raise ValueError(f"pass either {name}_features or {name}_kernel, not both")
        return _DenseKernel(kernel, f"{name}_kernel")
    if features is None:
        raise ValueError(f"{name}_features is required (or pass a precomputed {name}_kernel)")
    return CenteredCosine(features, name=f"{name}_features")


def kernel_scale(source: KernelSource, scale: str, name: str = "scale") -> float:
    """The divisor of a kernel for ``scale``: its Frobenius norm, or 1 for ``"none"``."""
    check_scale(scale, name)
    if scale == "none":
        return 1.0
    norm = source.frobenius_norm()
    if not norm > 0:
        raise ValueError(
            f"{name}='frobenius' but the kernel is zero (for features: every row points in the same direction, "
            f"e.g. identical images or a collapsed backbone), so it cannot be scaled to unit norm; use {name}='none'"
        )
    return norm


def tile_moment_sums(m_tile: Tensor, k_tile: Tensor, temperature: float) -> Tensor:
    """(Σ M σ(K/T), Σ M² σ(K/T) σ(−K/T)) over one tile of already-scaled kernels: float64 tensor (2,)."""
    x = k_tile.to(torch.float64) / temperature
    m = m_tile.to(torch.float64)
    p = torch.sigmoid(x)
    e = torch.sum(m * p)
    v = torch.sum(m.square() * p * torch.sigmoid(-x))
    return torch.stack([e, v])


def _block_row_sums(
    msrc: KernelSource,
    ksrc: KernelSource,
    rows: slice,
    cols: range,
    block_size: int,
    temperature: float,
    eval_norm: float,
    prior_norm: float,
    weight_of=None,
) -> Tensor:
    out = torch.zeros(2, dtype=torch.float64, device=msrc.device)
    for c in cols:
        cs = slice(c * block_size, (c + 1) * block_size)
        m = msrc.block(rows, cs).to(torch.float64) / eval_norm
        k = ksrc.block(rows, cs).to(torch.float64) / prior_norm
        part = tile_moment_sums(m, k.to(out.device), temperature)
        out += part if weight_of is None else weight_of(c) * part
    return out


def _check_pair(msrc: KernelSource, ksrc: KernelSource, temperature, block_size, eval_norm, prior_norm):
    check_same_n(msrc.n, ksrc.n)
    return (
        check_temperature(temperature),
        check_block_size(block_size),
        check_norm(eval_norm, "eval_norm"),
        check_norm(prior_norm, "prior_norm"),
    )


def moment_sums(
    eval_features: Tensor | None,
    prior_features: Tensor | None,
    temperature: float,
    *,
    rows: range | slice | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    eval_norm: float = 1.0,
    prior_norm: float = 1.0,
    eval_kernel: Tensor | None = None,
    prior_kernel: Tensor | None = None,
) -> Tensor:
    """Partial (ΣE, ΣVar) of Thm 2.3 over ``rows`` (all columns): float64 tensor (2,).

    ``rows``: a contiguous ``range``/``slice`` with step 1 (None: all rows); the kernels are M/eval_norm and
    K/prior_norm. Summing the results over a partition of the rows gives ``task_prior_moments``' totals.
    """
    msrc = kernel_source(eval_features, eval_kernel, "eval")
    ksrc = kernel_source(prior_features, prior_kernel, "prior")
    t, bs, en, pn = _check_pair(msrc, ksrc, temperature, block_size, eval_norm, prior_norm)
    n = msrc.n
    if rows is None:
        rows = range(n)
    if isinstance(rows, slice):
        rows = range(*rows.indices(n))
    if not isinstance(rows, range) or rows.step != 1:
        raise ValueError(f"rows must be a contiguous range or slice with step 1, got {rows!r}")
    if rows.start < 0 or rows.stop > n:
        raise ValueError(f"rows {rows!r} out of bounds for n = {n}")
    out = torch.zeros(2, dtype=torch.float64, device=msrc.device)
    for r0 in range(rows.start, rows.stop, bs):
        rs = slice(r0, min(r0 + bs, rows.stop))
        out += _block_row_sums(msrc, ksrc, rs, range(math.ceil(n / bs)), bs, t, en, pn)
    return out


def sharded_moment_sums(
    eval_features: Tensor | KernelSource | None,
    prior_features: Tensor | KernelSource | None,
    temperature: float,
    *,
    shard: Shard | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    eval_norm: float = 1.0,
    prior_norm: float = 1.0,
    eval_kernel: Tensor | None = None,
    prior_kernel: Tensor | None = None,
) -> Tensor:
    """This shard's partial (ΣE, ΣVar): float64 tensor (2,), zeros when the shard owns no block.

    Row blocks b = 0 … ⌈n / block_size⌉ − 1 are split round-robin by ``shard``; a sum over all shards (e.g.
    ``all_reduce_sum``) gives the totals of Thm 2.3. Symmetric kernels use the upper block triangle (c ≥ b, c > b
    counted twice). ``eval_features``/``prior_features`` may also be prebuilt sources from ``kernel_source``.
    """
    shard = shard or Shard()
    msrc = kernel_source(eval_features, eval_kernel, "eval")
    ksrc = kernel_source(prior_features, prior_kernel, "prior")
    t, bs, en, pn = _check_pair(msrc, ksrc, temperature, block_size, eval_norm, prior_norm)
    n = msrc.n
    nb = math.ceil(n / bs)
    symmetric = msrc.symmetric and ksrc.symmetric
    out = torch.zeros(2, dtype=torch.float64, device=msrc.device)
    for b in shard.indices(nb):
        rs = slice(b * bs, min((b + 1) * bs, n))
        if symmetric:
            out += _block_row_sums(msrc, ksrc, rs, range(b, nb), bs, t, en, pn, lambda c, b=b: 1.0 if c == b else 2.0)
        else:
            out += _block_row_sums(msrc, ksrc, rs, range(nb), bs, t, en, pn)
    return out


def task_prior_moments(
    eval_features: Tensor | None,
    prior_features: Tensor | None,
    temperature: float | None = None,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    eval_scale: str | None = None,
    prior_scale: str | None = None,
    convention: str | TaskPriorConvention | None = None,
    eval_kernel: Tensor | None = None,
    prior_kernel: Tensor | None = None,
    shard: Shard | None = None,
    reduce: Reduce = no_reduce,
) -> tuple[float, float]:
    """(E[Tr(MG)], Var[Tr(MG)]) under the Task Prior of K at ``temperature`` (Task Priors, Thm 2.3).

    M: centred cosine kernel of ``eval_features`` (or ``eval_kernel`` as given), divided by its Frobenius norm when
    ``eval_scale="frobenius"``; K likewise from the prior, with ``prior_scale``. ``temperature``, ``eval_scale`` and
    ``prior_scale`` left at None take the values of ``convention`` (``"repbench"``: T = 0.01, M/‖M‖_F, raw K;
    ``"paper"``: T = 0.01, both raw; ``"authors"``: T = 1e-5, both Frobenius-scaled; see ``conventions.py``); an
    explicit value wins. Blocked in row/column tiles of ``block_size``: memory O(block_size² + block_size·D + n),
    never n × n. ``shard``/``reduce`` are the DDP seams (defaults: this process does everything, no reduction).
    """
    conv = resolve_convention(convention, temperature=temperature, eval_scale=eval_scale, prior_scale=prior_scale)
    temperature = conv.temperature
    msrc = kernel_source(eval_features, eval_kernel, "eval")
    ksrc = kernel_source(prior_features, prior_kernel, "prior")
    check_same_n(msrc.n, ksrc.n)
    check_block_size(block_size)
    en = kernel_scale(msrc, conv.eval_scale, "eval_scale")
    pn = kernel_scale(ksrc, conv.prior_scale, "prior_scale")
    sums = sharded_moment_sums(msrc, ksrc, temperature, shard=shard, block_size=block_size, eval_norm=en, prior_norm=pn)
    sums = reduce(sums)
    return float(sums[0]), float(sums[1])
