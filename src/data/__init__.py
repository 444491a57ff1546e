"""LightningDataModules of [0, 1] pixel-space images with batches ``(x, y, index)``, and their shared helpers."""

from .common import IndexedDataset, SeededRandomSampler, make_loader, stratified_split
from .digits import DigitsDataModule
from .gaussian import GaussianTaskDataModule
from .torchvision_sets import DatasetNotFoundError, TorchvisionDataModule

__all__ = [
    "DatasetNotFoundError",
    "DigitsDataModule",
    "GaussianTaskDataModule",
    "IndexedDataset",
    "SeededRandomSampler",
    "TorchvisionDataModule",
    "make_loader",
    "stratified_split",
]
