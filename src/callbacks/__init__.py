"""Lightning callbacks that monitor a backbone during anyone's training."""

from .checkpointing import (
    ExceptionCheckpoint,
    ScoreCheckpoint,
    ScoreEarlyStopping,
    SelectionCriterion,
    metric_direction,
    metric_producer,
)
from .divergence_radius_callback import DivergenceRadiusCallback
from .spectrum_callback import RepresentationCollapseWarning, RepresentationSpectrumCallback
from .synbench_callback import SynBenchCallback
from .task_prior_callback import TaskPriorCallback

__all__ = [
    "DivergenceRadiusCallback",
    "ExceptionCheckpoint",
    "RepresentationCollapseWarning",
    "RepresentationSpectrumCallback",
    "ScoreCheckpoint",
    "ScoreEarlyStopping",
    "SelectionCriterion",
    "SynBenchCallback",
    "TaskPriorCallback",
    "metric_direction",
    "metric_producer",
]
