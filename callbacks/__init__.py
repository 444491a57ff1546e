"""Lightning callbacks that monitor a backbone during anyone's training."""

from .synbench_callback import SynBenchCallback

__all__ = ["SynBenchCallback"]
