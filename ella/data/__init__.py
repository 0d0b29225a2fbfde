"""Data sets: a registry of them, and loaders for original file formats with checksum
verification."""

from ella.data.datasets import ImageData, available_datasets, load_dataset
from ella.data.files import DataFileError, data_root, read_idx
from ella.data.registry import (
    BaseDataset,
    DataFile,
    npz_loader,
    register_dataset,
    unregister_dataset,
)

__all__ = [
    "BaseDataset",
    "DataFile",
    "DataFileError",
    "ImageData",
    "available_datasets",
    "data_root",
    "load_dataset",
    "npz_loader",
    "read_idx",
    "register_dataset",
    "unregister_dataset",
]
