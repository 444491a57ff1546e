"""Lightning callbacks that monitor a backbone during anyone's training."""

from .checkpointing import ExceptionCheckpoint
from .synbench_callback import SynBenchCallback

__all__ = ["ExceptionCheckpoint", "SynBenchCallback"]
