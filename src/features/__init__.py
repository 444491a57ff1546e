"""One feature-extraction engine for every frozen-backbone forward over many images (SynBench, the probe's
feature cache, DivergenceRadius sweeps, Task-Prior features, evaluation)."""

from .extractor import FORWARD_BATCH, FeatureExtractor, as_extractor
from .formats import MEMORY_FORMATS, resolve_memory_format
from .options import EXTRACTOR_OPTIONS, extractor_options

__all__ = [
    "EXTRACTOR_OPTIONS",
    "FORWARD_BATCH",
    "MEMORY_FORMATS",
    "FeatureExtractor",
    "as_extractor",
    "extractor_options",
    "resolve_memory_format",
]
