"""Data sets: loaders for original file formats with checksum verification."""

from ella.data.datasets import ImageData, available_datasets, load_dataset
from ella.data.files import DataFileError, data_root, read_idx

__all__ = [
    "DataFileError",
    "ImageData",
    "available_datasets",
    "data_root",
    "load_dataset",
    "read_idx",
]
