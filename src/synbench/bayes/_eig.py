"""Eigendecomposition of the pooled feature covariance with the eigenvalue cut-off (pseudo-inverse rule)."""

from __future__ import annotations

import warnings

import torch

from ...utils.threads import torch_threads

Tensor = torch.Tensor
F64 = torch.float64
EIG_TOL_MODES = ("absolute", "relative")
DROPPED_VARIANCE_WARNING = 0.01  # warn when the cut-off removes more than 1 % of the spectrum's variance


def check_eig_tol(eig_tol: float, eig_tol_mode: str = "absolute") -> None:
    """ValueError for a negative / non-finite cut-off or an unknown mode (a negative cut-off keeps rounding-level
    negative eigenvalues and turns the pseudo-inverse into NaN/inf)."""
    if eig_tol_mode not in EIG_TOL_MODES:
        raise ValueError(f"eig_tol_mode must be one of {EIG_TOL_MODES}, got {eig_tol_mode!r}")
    if not (isinstance(eig_tol, int | float) and eig_tol >= 0 and eig_tol < float("inf")):
        raise ValueError(
            f"eig_tol must be a finite number >= 0 (eigenvalues <= eig_tol are dropped), got {eig_tol!r}; "
            "use the official 1e-6 (absolute) or e.g. 1e-9 with eig_tol_mode='relative'"
        )


def eig_cutoff(evals: Tensor, eig_tol: float, eig_tol_mode: str = "absolute") -> float:
    """The threshold below which eigenvalues are dropped: eig_tol ("absolute", official code) or
    eig_tol·λ_max ("relative": invariant to the feature scale)."""
    check_eig_tol(eig_tol, eig_tol_mode)
    if eig_tol_mode == "absolute":
        return float(eig_tol)
    top = float(evals.max()) if evals.numel() else 0.0
    return float(eig_tol) * max(top, 0.0)


def retained_eig(
    cov: Tensor,
    eig_tol: float = 1e-6,
    threads: int | None = None,
    eig_tol_mode: str = "absolute",
    warn: bool = True,
) -> tuple[Tensor, Tensor]:
    """Eigenpairs (σ_k, F) of the symmetrised float64 Σ with σ_k > cut-off (official pseudo-inverse rule; the
    cut-off is :func:`eig_cutoff`). ``threads``: CPU threads for the eigendecomposition (None: unchanged).

    Warns (RuntimeWarning) when the dropped eigenvalues carry more than 1 % of the spectrum's variance
    (Σ of positive eigenvalues): with the absolute cut-off, small-scale features lose real directions and the
    result depends on the feature scale (e.g. features × 1e-3 change the accuracy).
    """
    check_eig_tol(eig_tol, eig_tol_mode)
    c = torch.as_tensor(cov, dtype=F64)
    sym = 0.5 * (c + c.T)
    with torch_threads(threads if c.device.type == "cpu" else None):
        try:
            evals, evecs = torch.linalg.eigh(sym)
        except torch.linalg.LinAlgError:
            # LAPACK's divide-and-conquer (syevd) can fail to converge on ill-conditioned covariances of real
            # backbones (seen: EfficientNet-Lite2 features); the relatively robust representation driver does not.
            from scipy.linalg import eigh as scipy_eigh

            w, v = scipy_eigh(sym.cpu().numpy(), driver="evr")
            evals, evecs = torch.from_numpy(w).to(c.device), torch.from_numpy(v).to(c.device)
    cut = eig_cutoff(evals, eig_tol, eig_tol_mode)
    keep = evals > cut
    if warn:
        positive = evals.clamp_min(0.0)
        total, dropped = float(positive.sum()), float(positive[~keep].sum())
        if total > 0 and dropped > DROPPED_VARIANCE_WARNING * total:
            warnings.warn(
                f"SynBench: the eigenvalue cut-off {eig_tol:g} ({eig_tol_mode}) drops {int((~keep).sum())} of "
                f"{evals.numel()} covariance eigenvalues carrying {100 * dropped / total:.1f} % of the feature "
                "variance, so the result depends on the feature scale; use eig_tol_mode='relative' (or a smaller "
                "eig_tol) for small-scale features",
                RuntimeWarning,
                stacklevel=2,
            )
    return evals[keep], evecs[:, keep]
