"""ε-robust Bayes directions w = Σ⁺(μ̃ − z_Σ(μ̃)) for an ε grid (Theorem 3.1 (i), eq. 4, Appendix A.5)."""

from __future__ import annotations

from typing import Any

import torch

from ._eig import eig_cutoff, retained_eig
from ._eps import check_eps
from ._l2 import _l2_solve
from ._linf import _linf_solve

Tensor = torch.Tensor
F64 = torch.float64


def robust_bayes_directions(
    mu_tilde: Tensor,
    cov: Tensor | None,
    eps_list: Any,
    relative: bool = True,
    *,
    eig: tuple[Tensor, Tensor] | None = None,
    eig_tol: float = 1e-6,
    norm: str = "l2",
    eig_tol_mode: str = "absolute",
) -> tuple[Tensor, Tensor]:
    """Batched :func:`robust_bayes_direction` over an ε list: (W, Z), each (E, D) float64.

    Pass ``eig=(evals, evecs)`` (e.g. from :func:`retained_eig`) to reuse one eigendecomposition for all ε;
    eigenvalues ≤ the cut-off (:func:`~._eig.eig_cutoff`: eig_tol, or eig_tol·λ_max with
    ``eig_tol_mode="relative"``) are dropped either way. ``cov`` may then be None (ℓ2 only needs ``eig``).
    """
    if norm not in ("l2", "linf"):
        raise ValueError(f"norm must be 'l2' or 'linf', got {norm!r}")
    eps = check_eps(eps_list, "relative" if relative else "absolute")
    mu = torch.as_tensor(mu_tilde, dtype=F64).reshape(-1)
    if not torch.isfinite(mu).all() or (cov is not None and not torch.isfinite(torch.as_tensor(cov)).all()):
        raise ValueError("mu_tilde / cov contain NaN or inf")
    if eig is None:
        if cov is None:
            raise ValueError("give cov or eig=(evals, evecs)")
        sig, f = retained_eig(cov, eig_tol, eig_tol_mode=eig_tol_mode)
    else:
        sig, f = (torch.as_tensor(t, dtype=F64, device=mu.device) for t in eig)
        keep = sig > eig_cutoff(sig, eig_tol, eig_tol_mode)
        sig, f = sig[keep], f[:, keep]
    eps = eps.to(mu.device)
    if norm == "l2":
        mu_r = f.T @ mu
        budgets = eps * torch.linalg.vector_norm(mu_r) if relative else eps
        z_r, w_r = _l2_solve(mu_r, sig, budgets)
        return w_r @ f.T, z_r @ f.T
    c = None if cov is None else torch.as_tensor(cov, dtype=F64, device=mu.device)
    diag = None
    if c is not None and torch.count_nonzero(c - torch.diag(torch.diagonal(c))) == 0:
        dg = torch.diagonal(c)
        diag = torch.where(dg > eig_cutoff(dg, eig_tol, eig_tol_mode), dg, torch.zeros_like(mu))
    scale = float(mu.abs().max()) if relative else 1.0
    pairs = _linf_solve(mu, sig, f, [float(e) * scale for e in eps], diag)
    return torch.stack([p[1] for p in pairs]), torch.stack([p[0] for p in pairs])


def robust_bayes_direction(
    mu_tilde: Tensor,
    cov: Tensor | None,
    eps: float,
    relative: bool = True,
    *,
    eig: tuple[Tensor, Tensor] | None = None,
    eig_tol: float = 1e-6,
    norm: str = "l2",
    eig_tol_mode: str = "absolute",
) -> tuple[Tensor, Tensor]:
    """(w, z) of the ε-robust Bayes classifier sign((x − m)ᵀw), Theorem 3.1 (i) / eq. 4.

    z = z_Σ(μ̃) = argmin_{‖z‖ ≤ β} (μ̃ − z)ᵀΣ⁺(μ̃ − z), w = Σ⁺(μ̃ − z), β = ε‖Fᵀμ̃‖ (relative, ℓ2) or ε.
    ℓ2 is solved in closed form up to a 1-D root (see ``_l2_solve``): ε = 0 gives plain LDA w = Σ⁺μ̃;
    β ≥ ‖Fᵀμ̃‖ gives z = Fᵀμ̃ projected back, w = 0 (degenerate, module docstring). ``norm="linf"`` solves
    the ‖z‖∞ ≤ β problem exactly (``_linf_solve``).
    """
    w, z = robust_bayes_directions(
        mu_tilde, cov, [eps], relative, eig=eig, eig_tol=eig_tol, norm=norm, eig_tol_mode=eig_tol_mode
    )
    return w[0], z[0]
