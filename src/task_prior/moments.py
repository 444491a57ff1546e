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

from ..features.precision import tf32_mode
from ..utils.checks import CHECK_CHUNK, check_positive
from ..utils.distributed import Reduce, Shard, no_reduce
from .conventions import CONVENTIONS, DEFAULT_CONVENTION, TaskPriorConvention, resolve_convention
from .kernels import CenteredCosine
from .validation import (
    MOMENT_PRECISIONS,
    check_block_size,
    check_kernel,
    check_moment_precision,
    check_norm,
    check_same_n,
    check_scale,
    check_temperature,
)

Tensor = torch.Tensor

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_PRECISION",
    "DEFAULT_RTOL",
    "PRECISIONS",
    "DEFAULT_EVAL_SCALE",
    "DEFAULT_PRIOR_SCALE",
    "KernelSource",
    "kernel_source",
    "kernel_scale",
    "moment_sums",
    "choose_precision",
    "float32_error_bounds",
    "float32_product_error",
    "sharded_moment_sums",
    "task_prior_moments",
    "tile_moment_sums",
]

DEFAULT_BLOCK_SIZE = 1024
#: ``precision=`` of the moments: float64 products (exact to float64 rounding), float32 products (float64 everywhere
#: else), or per kernel by the a-priori bound of ``float32_error_bounds`` against ``rtol``
PRECISIONS = MOMENT_PRECISIONS  # the owner is validation.py
DEFAULT_PRECISION = "float64"
#: relative error budget of ``precision="auto"`` (4 significant digits; see ``float32_error_bounds``)
DEFAULT_RTOL = 1e-4
#: float32 products accumulate in float32 over chunks of this many feature columns, the chunks in float64; the
#: float32 error bound grows with the chunk length L as γ_{L+3} (``float32_product_error``)
F32_CHUNK = 256
#: unit roundoff of float32 (round to nearest)
U32 = 2.0**-24
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


def float32_product_error(dim: int, chunk: int = F32_CHUNK) -> float:
    """c = γ_{L+3} = (L+3)u / (1 − (L+3)u), u = 2⁻²⁴, L = min(chunk, dim): |fl(aᵀb) − aᵀb| ≤ c‖a‖‖b‖ for the
    float32 products of ``_product`` on float64 vectors a, b.

    Higham, "Accuracy and Stability of Numerical Algorithms" (2nd ed., SIAM 2002, DOI 10.1137/1.9780898718027),
    Eq. (3.5): a float32 dot product of length L, in any order, errs by ≤ γ_L |a|ᵀ|b|. Rounding a and b to float32
    first (after a float64 row scale) multiplies each product by (1 + θ₂), |θ₂| ≤ γ₂; the float64 sum of the
    ⌈D/L⌉ chunk results adds ≤ ⌈D/L⌉·2⁻⁵³ relative, less than one more u for any D < 2³⁰; in all γ_{L+3}|a|ᵀ|b|, and
    |a|ᵀ|b| ≤ ‖a‖‖b‖ (Cauchy–Schwarz). This is the worst case (the typical error is ~√L·u, Higham & Mary,
    "A New Approach to Probabilistic Rounding Error Analysis", DOI 10.1137/18M1226312).
    """
    k = (min(chunk, dim) + 3) * U32
    return k / (1.0 - k)


def _row_norm_stats(src: CenteredCosine) -> tuple[float, float]:
    """(max_i ‖x̃_i‖, Σ_i ‖x̃_i‖²) over the rows of X̃, in float64 chunks (O(n·D), no n × n)."""
    mx, sq = 0.0, 0.0
    for start in range(0, src.n, CHECK_CHUNK):
        norms = torch.linalg.vector_norm(src.rows(slice(start, start + CHECK_CHUNK)).to(torch.float64), dim=1)
        mx, sq = max(mx, float(norms.max())), sq + float(norms.square().sum())
    return mx, sq


def float32_error_bounds(
    msrc: KernelSource,
    ksrc: KernelSource,
    temperature: float,
    prior_norm: float = 1.0,
    eval_fro: float | None = None,
) -> tuple[float, float]:
    """(ρ_M, ρ_K): a-priori relative error bounds of the moments' terms when M's / K's products run in float32.

    With c = ``float32_product_error`` (|ΔK_ij| ≤ c‖x̃_i‖‖x̃_j‖ for the rows x̃ of X̃, K = X̃X̃ᵀ, and likewise for M
    with the eval rows ỹ):

    * K in float32: the argument x_ij = K_ij/(prior_norm·T) errs by ε_ij ≤ ε = c·max_i‖x̃_i‖²/(prior_norm·T).
      Since d log σ(x)/dx = σ(−x) ∈ (0, 1) and d log[σ(x)σ(−x)]/dx = 1 − 2σ(x) ∈ (−1, 1), every σ_ij and every
      w_ij = σ_ijσ(−x_ij) is off by a relative factor within e^{±ε}: ρ_K = e^ε − 1, and
      |ΔVar| ≤ ρ_K·Var, |ΔE| ≤ ρ_K·Σ|M_ij|σ_ij. The temperature enters here: ρ_K ∝ 1/T.
    * M in float32: ‖ΔM‖_F ≤ c·sqrt(Σ_ij ‖ỹ_i‖²‖ỹ_j‖²) = c·Σ_i ‖ỹ_i‖² = c·tr(M) (raw M = ỸỸᵀ), so relative to ‖M‖_F
      (any scale cancels) ρ_M = c·tr(M)/‖M‖_F ≤ c·√rank(M); then |ΔE| ≤ ρ_M‖M‖_F‖σ‖_F and
      |ΔVar| ≤ 2ρ_M‖M‖_F‖M∘w‖_F + ρ_M²‖M‖_F²/4 (Cauchy–Schwarz, w ≤ 1/4). No T.
    * Both in float32: the M bounds multiplied by (1 + ρ_K), plus the K bounds.

    ``eval_fro``: ‖M‖_F of the raw eval kernel when already known (else computed, an n·D² product). Precomputed
    (dense) kernels have no float32 products: their ρ is 0.
    """
    c_m = float32_product_error(msrc.dim) if isinstance(msrc, CenteredCosine) else 0.0
    c_k = float32_product_error(ksrc.dim) if isinstance(ksrc, CenteredCosine) else 0.0
    rho_m = rho_k = 0.0
    if c_m:
        trace = _row_norm_stats(msrc)[1]
        fro = msrc.frobenius_norm() if eval_fro is None else eval_fro
        rho_m = c_m * trace / fro if fro > 0 else math.inf
    if c_k:
        eps = c_k * _row_norm_stats(ksrc)[0] ** 2 / prior_norm / temperature
        rho_k = math.expm1(eps) if eps < 700 else math.inf
    return rho_m, rho_k


def choose_precision(
    precision: str,
    msrc: KernelSource,
    ksrc: KernelSource,
    temperature: float,
    prior_norm: float = 1.0,
    eval_fro: float | None = None,
    rtol: float = DEFAULT_RTOL,
) -> tuple[torch.dtype, torch.dtype]:
    """(dtype of M's products, dtype of K's products) for ``precision``: "float64" both, "float32" both, "auto" each
    float32 exactly when its bound from ``float32_error_bounds`` is ≤ ``rtol`` (else float64)."""
    check_moment_precision(precision)
    if precision != "auto":
        dt = torch.float64 if precision == "float64" else torch.float32
        return dt, dt
    rtol = check_positive(rtol, "rtol", "e.g. rtol=1e-4 (a relative error of the moments' terms)")
    rho_m, rho_k = float32_error_bounds(msrc, ksrc, temperature, prior_norm, eval_fro)
    return (
        torch.float32 if rho_m <= rtol else torch.float64,
        torch.float32 if rho_k <= rtol else torch.float64,
    )


def tile_moment_sums(m_tile: Tensor, k_tile: Tensor, temperature: float) -> Tensor:
    """(Σ M σ(K/T), Σ M² σ(K/T) σ(−K/T)) over one tile of already-scaled kernels: float64 tensor (2,)."""
    x = k_tile.to(torch.float64) / temperature
    m = m_tile.to(torch.float64)
    p = torch.sigmoid(x)
    e = torch.sum(m * p)
    v = torch.sum(m.square() * p * torch.sigmoid(-x))
    return torch.stack([e, v])


def _tile_sums_(m: Tensor, x: Tensor, p: Tensor) -> Tensor:
    """``tile_moment_sums`` in place on float64 contiguous tiles: ``m`` = scaled M, ``x`` = K/T (both overwritten),
    ``p`` a workspace of the same shape. Seven passes over the tile and no allocation of tile size (the loop's cost
    beside the two products): σ(x) into p; E = m·p; x <- σ(−x); p <- σ(x)σ(−x); m <- m²; Var = m·p."""
    torch.sigmoid(x, out=p)
    mv, pv = m.view(-1), p.view(-1)
    e = torch.dot(mv, pv)
    x.neg_().sigmoid_()
    p.mul_(x)
    m.square_()
    return torch.stack([e, torch.dot(mv, pv)])


def _product(a: Tensor, b: Tensor, out: Tensor, scratch: Tensor | None) -> Tensor:
    """a bᵀ into the float64 ``out`` (rows × rows). float64 operands: one GEMM. float32 operands: GEMMs over
    chunks of ``F32_CHUNK`` columns (float32 accumulation inside a chunk), the chunks summed in float64."""
    if a.dtype == torch.float64:
        return torch.mm(a, b.T, out=out)
    with tf32_mode(False):  # the float32 bound assumes IEEE products: never TF32, whatever the process set
        for k0 in range(0, a.shape[1], F32_CHUNK):
            part = torch.mm(a[:, k0 : k0 + F32_CHUNK], b[:, k0 : k0 + F32_CHUNK].T, out=scratch)
            if k0 == 0:
                out.copy_(part)
            else:
                out.add_(part)
    return out


class _Workspace:
    """Reusable tile buffers (float64 ×3, float32 ×1) of block_size² each: no allocation per tile (on the CPU a fresh
    8 MB tile per operation costs page faults; on CUDA it spares the caching allocator)."""

    def __init__(self, block_size: int, device: torch.device, need_f32: bool) -> None:
        size = block_size * block_size
        self.f64 = [torch.empty(size, dtype=torch.float64, device=device) for _ in range(3)]
        self.f32 = torch.empty(size, dtype=torch.float32, device=device) if need_f32 else None

    def tiles(self, rows: int, cols: int) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        n = rows * cols
        scratch = None if self.f32 is None else self.f32[:n].view(rows, cols)
        return (*(buf[:n].view(rows, cols) for buf in self.f64), scratch)


def _foldable(scale: float, dim: int, dtype: torch.dtype) -> bool:
    """Whether a row scale can be folded into the operands: finite and small enough that no product sum of rows of
    norm ≤ 2 (|aᵀb| ≤ 4·scale) can overflow ``dtype`` (else the tile is divided after the product, as before)."""
    return math.isfinite(scale) and scale <= torch.finfo(dtype).max / (8.0 * dim)


def _scaled_rows(src: CenteredCosine, sl: slice, scale: float, dtype: torch.dtype) -> Tensor:
    """X̃[sl]·scale = X[sl]·(scale/‖x_i‖) − scale·μ in float64 (one conversion and one fused multiply-add instead of
    ``CenteredCosine.rows``' three passes, within a few float64 roundings of it), rounded once to ``dtype``; the
    row-side scale folds 1/‖M‖ or 1/(‖K‖·T) into the product."""
    x = src.features[sl].to(torch.float64)
    inv = src.inv_norms[sl, None] if scale == 1.0 else src.inv_norms[sl, None] * scale
    mean = src.mean if scale == 1.0 else src.mean * scale
    x = torch.addcmul(-mean, x, inv)
    return x.to(dtype)


def _factor_row_sums(
    msrc: CenteredCosine,
    ksrc: CenteredCosine,
    rows: slice,
    cols: range,
    block_size: int,
    temperature: float,
    eval_norm: float,
    prior_norm: float,
    dtypes: tuple[torch.dtype, torch.dtype],
    ws: _Workspace,
    weight_of=None,
) -> Tensor:
    """Row block ``rows`` against the column tiles ``cols`` of two centred cosine kernels, from their factors: the
    row slices (scaled by 1/eval_norm and 1/(prior_norm·T)) are built once per row block, each column slice once per
    tile, and each tile of M and of K/T is one product (``_product``) consumed in place by ``_tile_sums_``."""
    m_scale, k_scale = 1.0 / eval_norm, 1.0 / prior_norm / temperature
    fold_m, fold_k = _foldable(m_scale, msrc.dim, dtypes[0]), _foldable(k_scale, ksrc.dim, dtypes[1])
    ym = _scaled_rows(msrc, rows, m_scale if fold_m else 1.0, dtypes[0])
    xk = _scaled_rows(ksrc, rows, k_scale if fold_k else 1.0, dtypes[1])
    out = torch.zeros(2, dtype=torch.float64, device=ym.device)
    for c in cols:
        cs = slice(c * block_size, min((c + 1) * block_size, msrc.n))
        m, x, p, scratch = ws.tiles(ym.shape[0], cs.stop - cs.start)
        _product(ym, _scaled_rows(msrc, cs, 1.0, dtypes[0]), m, scratch)
        _product(xk, _scaled_rows(ksrc, cs, 1.0, dtypes[1]), x, scratch)
        if not fold_m:
            m.div_(eval_norm)
        if not fold_k:  # e.g. T = 1e-310: K/‖K‖ first, then /T (±inf, never 0·inf)
            x.div_(prior_norm).div_(temperature)
        part = _tile_sums_(m, x, p)
        out += part if weight_of is None else weight_of(c) * part
    return out


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
    precision: str = DEFAULT_PRECISION,
    rtol: float = DEFAULT_RTOL,
    device: str | torch.device | None = None,
    eval_fro: float | None = None,
) -> Tensor:
    """This shard's partial (ΣE, ΣVar): float64 tensor (2,), zeros when the shard owns no block.

    Row blocks b = 0 … ⌈n / block_size⌉ − 1 are split round-robin by ``shard``; a sum over all shards (e.g.
    ``all_reduce_sum``) gives the totals of Thm 2.3. Symmetric kernels use the upper block triangle (c ≥ b, c > b
    counted twice). ``eval_features``/``prior_features`` may also be prebuilt sources from ``kernel_source``.

    ``precision``: "float64" (default), "float32" or "auto" for the products of two feature-built kernels
    (``choose_precision``, bounds in ``float32_error_bounds``; ``eval_fro`` = ‖M‖_F of the raw eval kernel if known,
    used by "auto" only); σ, the tile sums and the accumulators stay float64. Precomputed kernels are used as given
    (float64). ``device``: tensors given are moved there first (None: where they are); prebuilt sources are used on
    their own device.
    """
    shard = shard or Shard()
    msrc = kernel_source(_to_device(eval_features, device), _to_device(eval_kernel, device), "eval")
    ksrc = kernel_source(_to_device(prior_features, device), _to_device(prior_kernel, device), "prior")
    t, bs, en, pn = _check_pair(msrc, ksrc, temperature, block_size, eval_norm, prior_norm)
    check_moment_precision(precision)
    n = msrc.n
    nb = math.ceil(n / bs)
    symmetric = msrc.symmetric and ksrc.symmetric
    out = torch.zeros(2, dtype=torch.float64, device=msrc.device)
    factored = isinstance(msrc, CenteredCosine) and isinstance(ksrc, CenteredCosine)
    if factored and msrc.device != ksrc.device:
        raise ValueError(
            f"eval features are on {msrc.device} and prior features on {ksrc.device}; pass device= (e.g. "
            "device='cuda') to move both, or move them yourself"
        )
    blocks = shard.indices(nb)
    if factored and len(blocks):
        dtypes = choose_precision(precision, msrc, ksrc, t, pn, eval_fro, rtol)
        ws = _Workspace(min(bs, n), msrc.device, torch.float32 in dtypes)
    for b in blocks:
        rs = slice(b * bs, min((b + 1) * bs, n))
        cols, weight = (range(b, nb), lambda c, b=b: 1.0 if c == b else 2.0) if symmetric else (range(nb), None)
        if factored:
            out += _factor_row_sums(msrc, ksrc, rs, cols, bs, t, en, pn, dtypes, ws, weight)
        else:
            out += _block_row_sums(msrc, ksrc, rs, cols, bs, t, en, pn, weight)
    return out


def _to_device(x, device: str | torch.device | None):
    """``x`` moved to ``device`` when it is a tensor and a device is given; anything else unchanged."""
    return x.to(device) if device is not None and isinstance(x, Tensor) else x


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
    precision: str = DEFAULT_PRECISION,
    rtol: float = DEFAULT_RTOL,
    device: str | torch.device | None = None,
) -> tuple[float, float]:
    """(E[Tr(MG)], Var[Tr(MG)]) under the Task Prior of K at ``temperature`` (Task Priors, Thm 2.3).

    M: centred cosine kernel of ``eval_features`` (or ``eval_kernel`` as given), divided by its Frobenius norm when
    ``eval_scale="frobenius"``; K likewise from the prior, with ``prior_scale``. ``temperature``, ``eval_scale`` and
    ``prior_scale`` left at None take the values of ``convention`` (``"repbench"``: T = 0.01, M/‖M‖_F, raw K;
    ``"paper"``: T = 0.01, both raw; ``"authors"``: T = 1e-5, both Frobenius-scaled; see ``conventions.py``); an
    explicit value wins. Blocked in row/column tiles of ``block_size``: memory O(block_size² + block_size·D + n),
    never n × n. ``shard``/``reduce`` are the DDP seams (defaults: this process does everything, no reduction).

    Speed: each tile costs two products (block² × D multiply-adds) and seven in-place passes over the tile, all on
    the features' device (or ``device``: e.g. ``device="cuda"`` moves the features there first; memory is then the
    features plus O(block_size² + block_size·D) on the device, so n = 10⁶ fits one GPU). ``precision``: "float64"
    (default: exact to float64 rounding), "float32" (float32 products, chunked, float64 everywhere else) or "auto"
    (float32 for M's and/or K's products only where the a-priori bound of ``float32_error_bounds`` is ≤ ``rtol``:
    K's grows as 1/T, so small temperatures keep float64).
    """
    conv = resolve_convention(convention, temperature=temperature, eval_scale=eval_scale, prior_scale=prior_scale)
    temperature = conv.temperature
    check_moment_precision(precision)
    msrc = kernel_source(_to_device(eval_features, device), _to_device(eval_kernel, device), "eval")
    ksrc = kernel_source(_to_device(prior_features, device), _to_device(prior_kernel, device), "prior")
    check_same_n(msrc.n, ksrc.n)
    check_block_size(block_size)
    en = kernel_scale(msrc, conv.eval_scale, "eval_scale")
    pn = kernel_scale(ksrc, conv.prior_scale, "prior_scale")
    fro = en if conv.eval_scale == "frobenius" else None
    sums = sharded_moment_sums(
        msrc,
        ksrc,
        temperature,
        shard=shard,
        block_size=block_size,
        eval_norm=en,
        prior_norm=pn,
        precision=precision,
        rtol=rtol,
        eval_fro=fro,
    )
    sums = reduce(sums)
    return float(sums[0]), float(sums[1])
