"""Prefix sampler of q-class labelings from the Task Prior (Patel & Balestriero, arXiv:2507.09871, Sec. 2.2,
Algorithm 1 in App. C), vectorised over tasks.

Points are visited one at a time (in index order as in the paper, or in a random permutation per task as in the
authors' code); point i joins class c with probability

    p(y_i = c | y_<i) = softmax_c( (1/T) Σ_{j<i} K_ij 1[y_j = c] ) = softmax_c( (1/T) Z_i · U_c ),

with a factor K ≈ Z Zᵀ and U_c = Σ_{j<i, y_j=c} Z_j the class-wise prefix sums (r-vectors), so a step costs
O(q·r) per task instead of O(i). For the centred cosine kernel the factor is exact: Z = H X̂ = X̃ (n × D), divided
by √scale so that Z Zᵀ = K / scale. A labeling's probability under this sampler is the product of these
conditionals (tested against enumeration for tiny n).

Convention (documented in docs/task_prior.md): Algorithm 1 uses 1/T. The Gibbs measure restricted to labelings,
μ^q_K(y) ∝ exp(Tr(GK)/T) with G_ij = 1[y_i = y_j], has full conditional ∝ exp((2/T) Σ_{j≠i} K_ij 1[y_j = c]) —
each unordered pair appears twice in Tr(GK). The paper's prefix conditional at temperature T therefore matches the
exact conditional's scale at temperature 2T; pass ``temperature=T/2`` for the Gibbs scale of μ^q_K at T.
"""

from __future__ import annotations

import warnings

import torch

from ..utils.checks import check_features, check_int
from ..utils.numerics import check_generator
from ..utils.threads import torch_threads
from .conventions import CONVENTIONS, DEFAULT_CONVENTION, FACTORS, TaskPriorConvention, resolve_convention
from .kernels import CenteredCosine
from .validation import check_scale, check_temperature

Tensor = torch.Tensor

__all__ = ["DEFAULT_SAMPLER_SCALE", "prior_factor", "sample_task_labels", "sequential_log_prob"]

#: the "repbench" convention's sampler scale (owned by ``conventions.py``): the prefix sums grow with n, so the
#: sampler uses K/‖K‖_F: then T means the same at any n (see the docs)
DEFAULT_SAMPLER_SCALE = CONVENTIONS[DEFAULT_CONVENTION].sampler_scale


def prior_factor(prior_features: Tensor, *, scale: str = DEFAULT_SAMPLER_SCALE, kind: str = "cosine") -> Tensor:
    """Z (n × D, float64) with Z Zᵀ = K/s exactly, s = ‖K‖_F or 1 (``scale``).

    ``kind="cosine"``: Z = H X̂ (rows ℓ2-normalised, then centred), K the centred cosine kernel (the paper's kernel).
    ``kind="raw"``: Z = H X = X − mean row (the features only centred), K the centred linear kernel (the authors'
    sampler).
    """
    check_scale(scale, "scale")
    if kind not in FACTORS:
        raise ValueError(f"kind (the sampler factor) must be one of {FACTORS}, got {kind!r}")
    if kind == "cosine":
        cc = CenteredCosine(prior_features, name="prior_features")
        z, frobenius_norm = cc.rows(slice(0, cc.n)), cc.frobenius_norm
    else:
        x = check_features(prior_features, "prior_features").to(torch.float64)
        z = x - x.mean(0)
        # ‖ZZᵀ‖_F = ‖ZᵀZ‖_F (the same nonzero eigenvalues): a D × D product, never n × n
        frobenius_norm = lambda: float(torch.linalg.matrix_norm(z.T @ z, ord="fro"))  # noqa: E731
    if scale == "none":
        return z
    norm = frobenius_norm()
    if not norm > 0:
        raise ValueError("the prior kernel is zero (all points identical); use scale='none'")
    return z / norm**0.5


def _check_factor(factor: Tensor) -> Tensor:
    if not isinstance(factor, Tensor) or factor.ndim != 2 or not factor.is_floating_point():
        raise ValueError("factor must be a floating (n, r) tensor with K ≈ factor @ factor.T")
    if not bool(torch.isfinite(factor).all()):
        raise ValueError("factor contains NaN or inf")
    n, r = factor.shape
    if n == r and n > 1 and torch.allclose(factor, factor.T):
        warnings.warn(
            "factor is square and symmetric: if it is the kernel K itself, the sampler uses K @ K.T = K², not K. "
            "Pass a factor Z with K ≈ Z Zᵀ (features, Cholesky or eigen-factor) instead.",
            stacklevel=3,
        )
    return factor.to(torch.float64)


def sample_task_labels(
    prior_features: Tensor | None,
    num_classes: int,
    temperature: float | None = None,
    num_tasks: int = 1,
    *,
    generator: torch.Generator | None = None,
    order: str | None = None,
    factor: Tensor | None = None,
    scale: str | None = None,
    kind: str | None = None,
    convention: str | TaskPriorConvention | None = None,
) -> Tensor:
    """``num_tasks`` labelings in {0, …, q−1}^n drawn by the prefix sampler (Algorithm 1): LongTensor (num_tasks, n).

    ``temperature``, ``order``, ``scale`` and ``kind`` left at None take the sampler settings of ``convention``
    (``"repbench"``: T = 0.01 on the centred cosine K/‖K‖_F, sequential; ``"paper"``: T = 0.01 on the raw centred
    cosine K, sequential; ``"authors"``: T = 1000 on the centred raw features, random order; ``conventions.py``); an
    explicit value wins. ``factor``: a precomputed Z (n × r) with K ≈ Z Zᵀ (then ``prior_features`` may be None and
    ``scale``/``kind`` are ignored); default Z = ``prior_factor(prior_features, scale=scale, kind=kind)``.
    ``order="random"`` visits the points in a fresh random permutation per task (the authors' code). Randomness: task t consumes the t-th consecutive run of
    n·q (sequential) or n + n·q (random: permutation keys, then Gumbel noise) float64 uniforms from ``generator``,
    so ``num_tasks=k`` equals k successive calls with ``num_tasks=1`` on the same generator. Memory O(k·n·q + q·k·r).
    Any T > 0 is valid: as T → 0 a point joins the class of largest prefix score Σ_{j<i} K_ij 1[y_j = c] (ties,
    e.g. empty classes, broken uniformly), and tiny T (down to the smallest float64) give exactly that limit.
    """
    q, k = check_int(num_classes, "num_classes", 2), check_int(num_tasks, "num_tasks", 1)
    check_generator(generator)
    conv = resolve_convention(
        convention, sample_temperature=temperature, order=order, sampler_scale=scale, sampler_factor=kind
    )
    t, order = conv.sample_temperature, conv.order
    if factor is not None:
        z = _check_factor(factor)
        if prior_features is not None and prior_features.shape[0] != z.shape[0]:
            raise ValueError(f"factor has {z.shape[0]} rows but prior_features has {prior_features.shape[0]}")
    elif prior_features is None:
        raise ValueError("pass prior_features (or a precomputed factor)")
    else:
        z = prior_factor(prior_features, scale=conv.sampler_scale, kind=conv.sampler_factor)
    n, r = z.shape
    device = z.device
    # Per task: n permutation keys (random order only), then n·q uniforms turned into Gumbel noise; a class is
    # argmax_c(h_c + g_c), an exact draw from softmax(h) (Gumbel-max). Memory: num_tasks·n·q float64.
    extra = n if order == "random" else 0
    uniforms = torch.rand(k, extra + n * q, generator=generator, dtype=torch.float64, device=device)
    perm = torch.argsort(uniforms[:, :n], dim=1) if order == "random" else None
    gumbel = uniforms[:, extra:].view(k, n, q).clamp_(min=torch.finfo(torch.float64).tiny)
    gumbel.log_().neg_().log_().neg_()
    # logits h/T with |h| <= n·max‖z_i‖²: fold 1/T into z when they cannot overflow (the common case, no extra ops
    # per step), else shift by the row maximum first (_scaled_logits: exact T -> 0 limit, no inf - inf)
    direct = n * float(z.square().sum(1).max()) / t < 2.0**1000
    zq = z / t if direct else z
    prefix = torch.zeros(k * q, r, dtype=torch.float64, device=device)  # row t·q + c holds U_c of task t
    labels = torch.empty(k, n, dtype=torch.long, device=device)
    tasks = torch.arange(k, device=device)
    rows = tasks * q
    # per-step ops are tiny: one intra-op thread (multithreaded small ops collapse on loaded CPUs, see torch_threads)
    with torch_threads(1):
        for step in range(n):
            if perm is None:
                zi = z[step].expand(k, r)
                h = (prefix @ zq[step]).view(k, q)
            else:
                idx = perm[:, step]
                zi = z[idx]  # (k, r)
                h = torch.bmm(prefix.view(k, q, r), zq[idx].unsqueeze(-1)).view(k, q)  # one gather per step
            c = torch.argmax((h if direct else _scaled_logits(h, t)) + gumbel[:, step], dim=1)
            if perm is None:
                labels[:, step] = c
            else:
                labels[tasks, idx] = c
            prefix.index_add_(0, rows + c, zi)
    return labels


def _scaled_logits(h: Tensor, t: float) -> Tensor:
    """(h − max_c h)/T: the logits h/T up to a per-row constant (softmax and Gumbel-max are unchanged by it).

    Finite or −inf, never NaN, at any T > 0: h/T itself overflows for tiny T (T = 1e-310: 1/T = inf, 0·inf = NaN),
    while every entry here is <= 0 with 0 at the row's maximum. As T → 0 the classes below the maximum go to −inf and
    ties at the maximum are broken by the Gumbel noise: exactly the T → 0 limit of the sampler (argmax of h).
    """
    return (h - h.amax(-1, keepdim=True)) / t


def sequential_log_prob(labels: Tensor, factor: Tensor, temperature: float, num_classes: int) -> Tensor:
    """log P(labels) under the sequential prefix sampler: Σ_i log softmax_c((1/T) Σ_{j<i} K_ij 1[y_j=c])[y_i],
    K = factor factorᵀ. Dense O(n²) reference for tests and small n; labels (..., n) -> (...)."""
    t = check_temperature(temperature)
    kern = factor.to(torch.float64) @ factor.to(torch.float64).T
    onehot = torch.nn.functional.one_hot(labels, num_classes).to(torch.float64)  # (..., n, q)
    strict_lower = torch.tril(kern, diagonal=-1)  # K_ij for j < i
    h = _scaled_logits(strict_lower @ onehot, t)  # (..., n, q)
    logp = torch.log_softmax(h, dim=-1)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1).sum(-1)
