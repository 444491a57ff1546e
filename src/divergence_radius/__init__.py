"""DivergenceRadius and friends (Liu et al., "Robustness of Vision Foundation Models to Common Perturbations",
arXiv:2604.14973): exact minimum enclosing balls, the three per-image robustness values, the perturbation sweep (its
specification: :class:`DivergenceRadiusConfig`), ACC_p (§5) and RMSE_p of a depth head (App. D–F:
:class:`DepthHead`, :func:`fit_depth_head`, :func:`image_rmse`) with their regressions, and :func:`compare_backbones`
(the downstream report of several backbones as one Report). No Lightning imports here (the torchmetrics and callback
are thin shells)."""

from .compare import compare_backbones
from .config import DivergenceRadiusConfig
from .depth import DepthHead, DepthHeadConfig, DepthModel, fit_depth_head, image_rmse, load_depth_checkpoint
from .downstream import fit_linear_probe, open_clip_zero_shot
from .meb import minimum_enclosing_ball
from .metrics import cosine_robustness, divergence_radius, euclidean_robustness
from .protocol import (
    DepthTargets,
    PerturbationCache,
    SweepOutput,
    cache_perturbations,
    robustness_sweep,
    sweep_means,
    sweep_parameters,
    sweep_sums,
)

#: the user's names; the classifiers' building blocks (LinearClassifier, ZeroShotClassifier, fit_line,
#: regression_mse, zero_shot_weights) and normalize_embeddings are imported from their modules
__all__ = [
    "DepthHead",
    "DepthHeadConfig",
    "DepthModel",
    "DepthTargets",
    "DivergenceRadiusConfig",
    "PerturbationCache",
    "SweepOutput",
    "cache_perturbations",
    "compare_backbones",
    "cosine_robustness",
    "divergence_radius",
    "euclidean_robustness",
    "fit_depth_head",
    "fit_linear_probe",
    "image_rmse",
    "load_depth_checkpoint",
    "minimum_enclosing_ball",
    "open_clip_zero_shot",
    "robustness_sweep",
    "sweep_means",
    "sweep_parameters",
    "sweep_sums",
]
