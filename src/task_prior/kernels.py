"""The centred cosine kernel of the Task Priors paper, without materialising it.

Patel & Balestriero, "Task Priors" (arXiv:2507.09871), Sec. 2.1 and App. D.1, use K = H X̂ X̂ᵀ H: rows of the
features X (n × D) ℓ2-normalised (X̂), then double-centred with H = I − 11ᵀ/n. Because H X̂ = X̂ − 1 μᵀ with
μ = X̂ᵀ1/n (the column means of X̂), the kernel factors exactly as

    K = X̃ X̃ᵀ,   X̃ = X̂ − 1 μᵀ   (n × D),

so any block K[rows, cols] = X̃[rows] X̃[cols]ᵀ is computed from two (block × D) slices, and
‖K‖_F = ‖X̃ᵀ X̃‖_F (the same nonzero eigenvalues) is a D × D product. ``CenteredCosine`` holds only the
per-row scales 1/‖x_i‖ (n) and μ (D) next to a reference to the features: no n × n and no float64 copy of X.
"""

from __future__ import annotations

import torch

from ..utils.checks import CHECK_CHUNK, check_features
from ..utils.numerics import pow2_exponent, times_pow2
from .validation import ZERO_NORM

Tensor = torch.Tensor

__all__ = ["CenteredCosine", "centered_cosine_kernel", "kernel_frobenius_norm", "centered_normalized_features"]


class CenteredCosine:
    """Lazy view of X̃ = H X̂ (float64): ``rows(sl)`` gives X̃[sl]; ``block(r, c)`` gives K[r, c] = X̃[r] X̃[c]ᵀ."""

    symmetric = True

    def __init__(self, features: Tensor, *, name: str = "features", dtype: torch.dtype = torch.float64) -> None:
        check_features(features, name)
        self.features = features
        self.dtype = dtype
        self.n, self.dim = features.shape
        inv_norms = []
        col_sum = torch.zeros(self.dim, dtype=torch.float64, device=features.device)
        for k, chunk in enumerate(features.split(CHECK_CHUNK)):
            c64 = chunk.to(torch.float64)
            norms = _row_norms(c64)
            if bool((norms <= ZERO_NORM).any()):
                bad = int(torch.nonzero(norms <= ZERO_NORM)[0, 0])
                raise ValueError(
                    f"{name} has a zero-norm row (norm {float(norms[bad]):.3g} <= {ZERO_NORM}, row "
                    f"{bad + k * CHECK_CHUNK}); the cosine kernel is undefined there: drop such rows or add a small "
                    "offset to the features"
                )
            if not bool(torch.isfinite(norms).all()):
                bad = int(torch.nonzero(~torch.isfinite(norms))[0, 0]) + k * CHECK_CHUNK
                raise ValueError(
                    f"{name} has a row whose norm exceeds the float64 range (row {bad}); the cosine kernel is "
                    "scale-invariant: divide the features by a constant (e.g. their largest absolute value)"
                )
            inv = 1.0 / norms
            inv_norms.append(inv)
            col_sum += (c64 * inv[:, None]).sum(0)
        self.inv_norms = torch.cat(inv_norms)  # (n,) float64
        self.mean = col_sum / self.n  # μ (D,) float64

    @property
    def device(self) -> torch.device:
        return self.features.device

    def rows(self, sl: slice) -> Tensor:
        """X̃[sl] = X[sl]/‖X[sl]‖ − μ, in ``self.dtype``."""
        x = self.features[sl].to(torch.float64)
        return (x * self.inv_norms[sl, None] - self.mean).to(self.dtype)

    def block(self, r: slice, c: slice) -> Tensor:
        return self.rows(r) @ self.rows(c).T

    def gram(self) -> Tensor:
        """X̃ᵀX̃ (D × D, float64), accumulated over row chunks."""
        g = torch.zeros(self.dim, self.dim, dtype=torch.float64, device=self.features.device)
        for start in range(0, self.n, CHECK_CHUNK):
            xt = self.rows(slice(start, start + CHECK_CHUNK)).to(torch.float64)
            g += xt.T @ xt
        return g

    def frobenius_norm(self) -> float:
        return float(torch.linalg.matrix_norm(self.gram(), ord="fro"))


def _row_norms(x: Tensor) -> Tensor:
    """ℓ2 norms of the rows of float64 ``x``, each row first divided by the power of two of its largest |entry|
    (exact) so that rows at 1e200 or 1e-200 (whose squares over/underflow) get their true norm."""
    e = pow2_exponent(x, 1)
    return times_pow2(torch.linalg.vector_norm(times_pow2(x, -e), dim=1), e[:, 0])


def centered_normalized_features(features: Tensor) -> Tensor:
    """X̃ = H X̂ (n × D, float64): the exact factor of the centred cosine kernel, K = X̃ X̃ᵀ."""
    cc = CenteredCosine(features)
    return cc.rows(slice(0, cc.n))


def centered_cosine_kernel(features: Tensor, *, frobenius: bool = False) -> Tensor:
    """K = H X̂ X̂ᵀ H (n × n, float64); divided by ‖K‖_F when ``frobenius`` (the authors' experiments).

    Dense: for small n only (tests, notebooks, precomputed-kernel paths). Task Priors, Sec. 2.1 / App. D.1.
    """
    xt = centered_normalized_features(features)
    k = xt @ xt.T
    k = 0.5 * (k + k.T)  # exactly symmetric (BLAS may round K_ij and K_ji differently)
    if frobenius:
        norm = torch.linalg.matrix_norm(k, ord="fro")
        if float(norm) <= 0:
            raise ValueError("the centred cosine kernel is zero (all rows point the same way); cannot scale it")
        k = k / norm
    return k


def kernel_frobenius_norm(features: Tensor) -> float:
    """‖H X̂ X̂ᵀ H‖_F computed as ‖X̃ᵀ X̃‖_F (a D × D product; never n × n)."""
    return CenteredCosine(features).frobenius_norm()
