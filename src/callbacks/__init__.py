"""Lightning callbacks that monitor a backbone during anyone's training."""

from ._monitor import check_monitor_prefixes
from .checkpointing import (
    ExceptionCheckpoint,
    ScoreCheckpoint,
    ScoreEarlyStopping,
    SelectionCriterion,
    metric_direction,
    metric_producer,
)
from .collapse_alarm import CollapseAlarm, CollapseAlarmWarning, mean_cross_cosine
from .divergence_radius_callback import DivergenceRadiusCallback
from .downstream_callback import DownstreamProbeCallback
from .spectrum_callback import RepresentationCollapseWarning, RepresentationSpectrumCallback
from .synbench_callback import SynBenchCallback
from .task_prior_callback import TaskPriorCallback

__all__ = [
    "CollapseAlarm",
    "CollapseAlarmWarning",
    "DivergenceRadiusCallback",
    "DownstreamProbeCallback",
    "ExceptionCheckpoint",
    "RepresentationCollapseWarning",
    "RepresentationSpectrumCallback",
    "ScoreCheckpoint",
    "ScoreEarlyStopping",
    "SelectionCriterion",
    "SynBenchCallback",
    "TaskPriorCallback",
    "check_monitor_prefixes",
    "mean_cross_cosine",
    "metric_direction",
    "metric_producer",
]
