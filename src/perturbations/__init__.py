"""The nine common perturbations of Table 8 (Liu et al., arXiv:2604.14973) with continuous parameters, batched in torch.

    y = perturb(x, "jpeg_compression", 50)          # x, y: (N, 3, H, W) float in [0, 1]
    ks = parameter_grid("fog", m=5, mode="equal")   # a, a + (b - a)/(m - 1), ..., b
    y = perturb(x, "brightness", severity=3)        # ImageNet-C severity, where k reproduces it exactly

Fixed additional parameters follow ImageNet-C (``imagecorruptions``); see docs/perturbations.md.
"""

from .registry import (
    MIN_SIZE,
    PERTURBATIONS,
    SEVERITY_LEVELS,
    PerturbationSpec,
    parameter_grid,
    perturb,
    sample_parameters,
    severity_parameter,
)

__all__ = [
    "MIN_SIZE",
    "PERTURBATIONS",
    "SEVERITY_LEVELS",
    "PerturbationSpec",
    "parameter_grid",
    "perturb",
    "sample_parameters",
    "severity_parameter",
]
