"""LightningDataModules of [0, 1] pixel-space images with batches ``(x, y, index)``, and their shared helpers."""

from .common import IndexedDataset, ResumableDataLoader, SeededRandomSampler, make_loader, stratified_split
from .depth import SyntheticDepthDataModule
from .digits import DigitsDataModule
from .gaussian import GaussianTaskDataModule
from .nyu_depth import NYUDepthV2DataModule
from .photos import PhotosDataModule
from .torchvision_sets import DatasetNotFoundError, TorchvisionDataModule

__all__ = [
    "DatasetNotFoundError",
    "DigitsDataModule",
    "GaussianTaskDataModule",
    "IndexedDataset",
    "NYUDepthV2DataModule",
    "PhotosDataModule",
    "ResumableDataLoader",
    "SeededRandomSampler",
    "SyntheticDepthDataModule",
    "TorchvisionDataModule",
    "make_loader",
    "stratified_split",
]
