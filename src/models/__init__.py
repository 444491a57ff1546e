"""LightningModules. Every class exported here is registered with the checkpoint allow-list
(``src.utils.checkpoint.register_module``), so ``load_module`` / ``python -m src.eval`` can rebuild it."""

from .base import RepBenchModule, backbone_spec, build_backbone, unpack_batch
from .depth_probe import DepthProbe
from .robust_finetune import PerturbationRobustFineTune
from .robust_probe import RobustLinearProbe
from .simclr import SimCLRPretraining
from .supervised import SupervisedPretraining
from .task_prior_probe import TaskPriorProbe

__all__ = [
    "DepthProbe",
    "PerturbationRobustFineTune",
    "RepBenchModule",
    "RobustLinearProbe",
    "SimCLRPretraining",
    "SupervisedPretraining",
    "TaskPriorProbe",
    "backbone_spec",
    "build_backbone",
    "unpack_batch",
]
