"""Eigendecomposition of the pooled feature covariance with the eigenvalue cut-off (pseudo-inverse rule)."""

from __future__ import annotations

import warnings

import torch

from ...utils.threads import torch_threads

Tensor = torch.Tensor
F64 = torch.float64
EIG_TOL_MODES = ("absolute", "relative")
# The cut-off may remove at most 1 % of the spectrum's variance. Measured (EfficientNet-Lite0, 32 px, 5 s values):
# at the features' own scale the official 1e-6 drops 3.5e-7 of the variance; features x 1e-2 drop 2.1 % and the
# eps = 0 score moves 0.089 -> 0.113, x 1e-3 (69 %) and x 1e-4 (100 %) give score 0.
DROPPED_VARIANCE_LIMIT = 0.01


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

    Beyond a cut-off that drops more than 1 % of the spectrum's variance (Σ of positive eigenvalues) the result
    depends on the feature scale: the absolute (official) cut-off then raises a ValueError naming the fix
    (``eig_tol_mode='relative'`` or a smaller ``eig_tol``) - features × 1e-4 would otherwise score 0 - and a
    relative one, chosen explicitly, warns (RuntimeWarning; ``warn=False``: silent).
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
    keep = evals > eig_cutoff(evals, eig_tol, eig_tol_mode)
    check_dropped_variance(evals, keep, eig_tol, eig_tol_mode, warn)
    return evals[keep], evecs[:, keep]


def check_dropped_variance(evals: Tensor, keep: Tensor, eig_tol: float, eig_tol_mode: str, warn: bool = True) -> None:
    """Refuse (absolute cut-off) or warn about (relative cut-off) a cut-off that drops more than
    ``DROPPED_VARIANCE_LIMIT`` of the variance carried by the positive eigenvalues ``evals``; ``keep`` marks the
    retained ones."""
    positive = evals.clamp_min(0.0)
    total, dropped = float(positive.sum()), float(positive[~keep].sum())
    if not (total > 0 and dropped > DROPPED_VARIANCE_LIMIT * total):
        return
    what = (
        f"SynBench: the eigenvalue cut-off {eig_tol:g} ({eig_tol_mode}) drops {int((~keep).sum())} of "
        f"{evals.numel()} covariance eigenvalues carrying {100 * dropped / total:.1f} % of the feature variance "
        f"(largest eigenvalue {float(evals.max()):.3g})"
    )
    if eig_tol_mode == "absolute":
        raise ValueError(
            f"{what}: the features are too small for the official absolute cut-off, which would discard their "
            "signal and make the score depend on the feature scale (features x 1e-4 would score 0). Fix: "
            "eig_tol_mode='relative' (cut-off eig_tol x largest eigenvalue, scale-invariant; config key "
            "synbench.eig_tol_mode=relative, or eig_tol_mode: relative in a callback's config), or an absolute "
            f"eig_tol of about 1e-6 x the largest eigenvalue ({1e-6 * float(evals.max()):.1g})"
        )
    if warn:
        warnings.warn(f"{what}; use a smaller eig_tol to keep them", RuntimeWarning, stacklevel=3)
