"""One feature-extraction engine for every frozen-backbone forward over many images (SynBench, the probe's
feature cache, DivergenceRadius sweeps, Task-Prior features, evaluation)."""

from .extractor import FeatureExtractor, as_extractor

__all__ = ["FeatureExtractor", "as_extractor"]
