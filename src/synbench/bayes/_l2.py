"""ℓ2 robust direction: the Moré-Sorensen secular equation solved by safeguarded Newton (Theorem 3.1)."""

from __future__ import annotations

import torch

Tensor = torch.Tensor
F64 = torch.float64


def _l2_solve(mu_r: Tensor, sig: Tensor, budgets: Tensor) -> tuple[Tensor, Tensor]:
    """ℓ2 z_Σ in Σ's retained eigenbasis (Theorem 3.1, convex problem argmin_{‖z‖≤β} (μ̃−z)ᵀΣ⁺(μ̃−z)).

    KKT: z_k = μ_k/(1 + λσ_k), λ ≥ 0 with ‖z(λ)‖ = β, i.e. w_k = μ_k/(1/λ + σ_k): a ridge-LDA direction.
    1/‖z(λ)‖ is concave increasing in λ (the Moré-Sorensen secular equation), so Newton started at the lower
    bracket end (‖μ‖/β − 1)/σ_max increases monotonically to the root; the bracket [.., (‖μ‖/β − 1)/σ_min]
    and a geometric-mean bisection safeguard it. All budgets are solved at once. Returns (Z, W), (E, r).
    """
    e, r = budgets.numel(), mu_r.numel()
    z_out = torch.zeros(e, r, dtype=F64, device=mu_r.device)
    w_out = torch.zeros(e, r, dtype=F64, device=mu_r.device)
    norm = torch.linalg.vector_norm(mu_r)
    if r == 0 or norm == 0:
        return z_out, w_out
    zero, degen = budgets == 0, budgets >= norm
    w_out[zero] = mu_r / sig
    z_out[degen] = mu_r
    inner = ~(zero | degen)
    if inner.any():
        beta = budgets[inner]
        m2 = mu_r * mu_r
        ratio = norm / beta - 1.0
        lo, hi = ratio / sig.max(), ratio / sig.min()
        lam = lo.clone()
        for _ in range(200):
            d = 1.0 + lam[:, None] * sig[None, :]
            zz = (m2 / d**2).sum(1)
            phi = zz.rsqrt() - 1.0 / beta
            dphi = zz.pow(-1.5) * (m2 * sig / d**3).sum(1)
            lo = torch.where(phi <= 0, lam, lo)
            hi = torch.where(phi >= 0, lam, hi)
            new = lam - phi / dphi
            bad = ~torch.isfinite(new) | (new < lo) | (new > hi)
            new = torch.where(bad, torch.sqrt(lo * hi), new)
            done = (new - lam).abs() <= 1e-15 * lam
            lam = new
            if bool(done.all()):
                break
        d = 1.0 + lam[:, None] * sig[None, :]
        z_out[inner] = mu_r / d
        w_out[inner] = mu_r / (1.0 / lam[:, None] + sig[None, :])
    return z_out, w_out
