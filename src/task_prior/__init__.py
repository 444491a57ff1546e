"""Task Priors (Patel & Balestriero, arXiv:2507.09871): the centred cosine kernel, closed-form moments of the
kernel alignment Tr(MG) computed in tiles (never n × n in memory), and the prefix sampler of labelings.
``conventions.py`` holds the settings presets ("paper", "authors", "repbench"), ``config.py`` every option of the
probe study with its one default (:class:`TaskPriorConfig`), ``compare.py`` the study over backbones
(:func:`compare_backbones` -> a Report). No Lightning or Hydra imports here: the torchmetric, callback,
LightningModule, CLI and Hydra callback are shells over these functions."""

from .compare import compare_backbones, compare_features
from .config import TaskPriorConfig
from .conventions import CONVENTIONS, DEFAULT_CONVENTION, TaskPriorConvention, resolve_convention
from .kernels import centered_cosine_kernel
from .matrix import prior_matrix, prior_matrix_figure
from .moments import task_prior_moments
from .sampler import sample_task_labels

#: the user's names; the building blocks (tiled and sharded moment sums, kernel scales, the sampler's factors, the
#: defaults) are imported from their modules (``src.task_prior.moments``, ``.kernels``, ``.sampler``)
__all__ = [
    "TaskPriorConfig",
    "compare_backbones",
    "compare_features",
    "task_prior_moments",
    "sample_task_labels",
    "centered_cosine_kernel",
    "prior_matrix",
    "prior_matrix_figure",
    "CONVENTIONS",
    "DEFAULT_CONVENTION",
    "TaskPriorConvention",
    "resolve_convention",
]
