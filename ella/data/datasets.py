"""Image classification data sets as tensors: the embedded MNIST subset and MNIST files."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch
from torch.utils.data import TensorDataset

from ella.data.files import data_root, read_idx, verified_path

EMBEDDED_MNIST = "mnist_subset.npz"
_IDX_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
#: per-channel (mean, std) of the full training sets, for standardising inputs
STATS = {"mnist": (0.1307, 0.3081), "fashion_mnist": (0.2860, 0.3530)}


@dataclass
class ImageData:
    """Train and test sets of standardised images (N, C, H, W) with integer labels."""

    name: str
    train: TensorDataset
    test: TensorDataset
    num_classes: int

    @property
    def in_channels(self) -> int:
        return int(self.train.tensors[0].shape[1])

    @property
    def image_size(self) -> int:
        return int(self.train.tensors[0].shape[-1])


def available_datasets() -> list[str]:
    return ["mnist_subset", *_IDX_FOLDERS]


def _to_tensors(images: np.ndarray, labels: np.ndarray, stats: tuple[float, float]):
    x = torch.tensor(np.asarray(images), dtype=torch.float32).div_(255.0)
    if x.dim() == 3:
        x = x.unsqueeze(1)
    x = (x - stats[0]) / stats[1]
    return TensorDataset(x, torch.tensor(np.asarray(labels), dtype=torch.long))


def _subset(ds: TensorDataset, size: int | None, what: str) -> TensorDataset:
    n = len(ds)
    if size is None:
        return ds
    if not 0 < size <= n:
        raise ValueError(f"{what} size must be between 1 and {n}, got {size}")
    return TensorDataset(*(t[:size] for t in ds.tensors))


def load_embedded_mnist() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The MNIST subset shipped in the package (first 3000 train, first 1000 test images)."""
    with resources.files("ella.data").joinpath(EMBEDDED_MNIST).open("rb") as f:
        arrays = np.load(f)
        return tuple(arrays[k] for k in ("x_train", "y_train", "x_test", "y_test"))


def load_idx_dataset(name: str, data_dir=None):
    """Original MNIST or FashionMNIST from IDX gzip files, checksums verified."""
    root, folder = data_root(data_dir), _IDX_FOLDERS[name]

    def read(stem: str) -> np.ndarray:
        return read_idx(verified_path(root, f"{folder}/raw/{stem}.gz"))

    return (
        read("train-images-idx3-ubyte"),
        read("train-labels-idx1-ubyte"),
        read("t10k-images-idx3-ubyte"),
        read("t10k-labels-idx1-ubyte"),
    )


def load_dataset(
    name: str = "mnist_subset",
    data_dir=None,
    train_size: int | None = None,
    test_size: int | None = None,
) -> ImageData:
    """Load a data set by name; ``train_size``/``test_size`` keep the first images.

    Images are scaled to [0, 1] and standardised with the training set's mean
    and standard deviation (:data:`STATS`).

    Args:
        name: ``"mnist_subset"`` (embedded, no files needed), ``"mnist"`` or
            ``"fashion_mnist"`` (original files under the data directory).
        data_dir: directory with ``MNIST/raw`` etc.; default ``$ELLA_DATA`` or ``~/.cache/ella``.
        train_size: number of training images to keep (default all).
        test_size: number of test images to keep (default all).
    """
    key = name.lower().replace("-", "_")
    if key == "mnist_subset":
        arrays = load_embedded_mnist()
    elif key in _IDX_FOLDERS:
        arrays = load_idx_dataset(key, data_dir)
    else:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(available_datasets())}")
    x_train, y_train, x_test, y_test = arrays
    stats = STATS["fashion_mnist" if key == "fashion_mnist" else "mnist"]
    return ImageData(
        name=key,
        train=_subset(_to_tensors(x_train, y_train, stats), train_size, "train"),
        test=_subset(_to_tensors(x_test, y_test, stats), test_size, "test"),
        num_classes=10,
    )
