"""retained_eig falls back to scipy's MRRR driver when LAPACK's syevd does not converge."""

from __future__ import annotations

import torch

from src.synbench import bayes


def test_fallback_gives_the_same_eigenpairs(monkeypatch) -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(40, 30, generator=g, dtype=torch.float64)
    cov = a.T @ a / 40 + torch.diag(torch.logspace(-9, 0, 30, dtype=torch.float64))
    ref_vals, ref_vecs = bayes.retained_eig(cov)

    def fail(*args, **kwargs):
        raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")

    monkeypatch.setattr(torch.linalg, "eigh", fail)
    vals, vecs = bayes.retained_eig(cov)
    # Backward-stable symmetric eigensolvers: |Δλ| ≤ c·d·u·‖Σ‖₂ for every eigenvalue (Weyl), and V Λ Vᵀ
    # reconstructs Σ to the same absolute accuracy; c = 10.
    tol = 10 * 30 * 2.0**-53 * float(torch.linalg.matrix_norm(cov, 2))
    torch.testing.assert_close(vals, ref_vals, rtol=0, atol=tol)
    # eigenvectors up to sign: compare V Λ Vᵀ
    torch.testing.assert_close(
        vecs @ torch.diag(vals) @ vecs.T, ref_vecs @ torch.diag(ref_vals) @ ref_vecs.T, rtol=0, atol=tol
    )
