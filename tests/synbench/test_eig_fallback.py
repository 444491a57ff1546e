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
    torch.testing.assert_close(vals, ref_vals, rtol=1e-9, atol=1e-12)
    # eigenvectors up to sign: compare the projectors
    torch.testing.assert_close(
        vecs @ torch.diag(vals) @ vecs.T, ref_vecs @ torch.diag(ref_vals) @ ref_vecs.T, rtol=1e-9, atol=1e-10
    )
