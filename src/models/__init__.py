"""LightningModules: ε-robust linear probing (more to come: robust fine-tuning, Task-Prior probes)."""
from .robust_probe import RobustLinearProbe, build_backbone

__all__ = ["RobustLinearProbe", "build_backbone"]
