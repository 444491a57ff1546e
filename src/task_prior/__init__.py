"""Task Priors (Patel & Balestriero, arXiv:2507.09871): the centred cosine kernel, closed-form moments of the
kernel alignment Tr(MG) computed in tiles (never n × n in memory), and the prefix sampler of labelings.
``conventions.py`` holds the settings presets ("paper", "authors", "repbench"), ``config.py`` every option of the
probe study with its one default (:class:`TaskPriorConfig`), ``report.py`` the study over backbones
(:func:`compare_backbones` -> a Report). No Lightning or Hydra imports here: the torchmetric, callback,
LightningModule, CLI and Hydra callback are shells over these functions."""

from .config import TaskPriorConfig
from .conventions import CONVENTIONS, DEFAULT_CONVENTION, TaskPriorConvention, resolve_convention
from .kernels import CenteredCosine, centered_cosine_kernel, centered_normalized_features, kernel_frobenius_norm
from .matrix import prior_matrix, prior_matrix_figure
from .moments import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_EVAL_SCALE,
    DEFAULT_PRIOR_SCALE,
    kernel_scale,
    kernel_source,
    moment_sums,
    sharded_moment_sums,
    task_prior_moments,
    tile_moment_sums,
)
from .report import compare_backbones, compare_features
from .sampler import DEFAULT_SAMPLER_SCALE, prior_factor, sample_task_labels, sequential_log_prob

__all__ = [
    "TaskPriorConfig",
    "compare_backbones",
    "compare_features",
    "prior_matrix",
    "prior_matrix_figure",
    "CONVENTIONS",
    "DEFAULT_CONVENTION",
    "TaskPriorConvention",
    "resolve_convention",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_EVAL_SCALE",
    "DEFAULT_PRIOR_SCALE",
    "DEFAULT_SAMPLER_SCALE",
    "CenteredCosine",
    "centered_cosine_kernel",
    "centered_normalized_features",
    "kernel_frobenius_norm",
    "kernel_scale",
    "kernel_source",
    "moment_sums",
    "prior_factor",
    "sample_task_labels",
    "sequential_log_prob",
    "sharded_moment_sums",
    "task_prior_moments",
    "tile_moment_sums",
]
