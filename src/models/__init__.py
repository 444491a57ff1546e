"""LightningModules: ε-robust linear probing (more to come: robust fine-tuning, Task-Prior probes)."""

from .robust_probe import RobustLinearProbe, build_backbone
from .supervised import SupervisedPretraining

__all__ = ["RobustLinearProbe", "SupervisedPretraining", "build_backbone"]
