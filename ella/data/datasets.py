"""Image classification data sets, their variants, and where their files come from.

A data set name is ``[variant_]base``:

* bases: ``mnist_subset`` (shipped in the package: the first 3000 training and
  1000 test images of MNIST), ``mnist``, ``fashion_mnist`` (original IDX gzip
  files), ``cifar10`` (``cifar-10-python.tar.gz`` or its extracted
  ``cifar-10-batches-py/``), ``cifar10_subset`` (``cifar10-subset/cifar10_subset.npz``,
  3805 training and 761 test images);
* variants, each a per-sample transform with a fixed seed (the same data every
  time; train and test drawn independently): ``rotated`` (angle U[-180, 180]
  degrees), ``translated`` (shift U{-8..8} pixels), ``scaled`` (factor
  log-uniform in [0.7, 1.4]), ``c4``/``d4`` (a random exact group element),
  ``quadrant`` (the ELLA paper's Table 1: the image in a random quadrant of a
  2S x 2S canvas, resized to 32x32, labelled by class) and ``quadrant40``
  (the same images labelled by (class, quadrant): ``4 * class + quadrant``).

Images are scaled to [0, 1], transformed, then standardised with the base's
training-set mean and standard deviation (:data:`STATS`). Test sets are never
augmented: training-time augmentation is separate (:func:`ella.data.transforms.augment`).
"""

from __future__ import annotations

import io
import pickle
import tarfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from ella.data import transforms as T
from ella.data.files import DataFileError, data_root, read_idx, verified_path
from ella.errors import ConfigError, InputDataError

EMBEDDED_MNIST = "mnist_subset.npz"
_IDX_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
BASES = ("mnist_subset", "mnist", "fashion_mnist", "cifar10", "cifar10_subset")
VARIANTS = ("rotated", "translated", "scaled", "c4", "d4", "quadrant", "quadrant40")
#: per-channel (mean, std) of the training sets, for standardising inputs
STATS = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
#: seeds of the variant transforms for the train and test split
VARIANT_SEEDS = {"train": 1234, "test": 5678}


@dataclass
class ImageData:
    """Train and test sets of standardised images (N, C, H, W) with integer labels."""

    name: str
    train: TensorDataset
    test: TensorDataset
    num_classes: int

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            check_image_data(getattr(self, split), self.num_classes, f"{self.name} {split} set")

    @property
    def in_channels(self) -> int:
        """Channels of the images (1 for MNIST, 3 for CIFAR-10)."""
        return int(self.train.tensors[0].shape[1])

    @property
    def image_size(self) -> int:
        """Side of the square images in pixels."""
        return int(self.train.tensors[0].shape[-1])


def check_image_data(data: TensorDataset, num_classes: int, what: str = "data") -> None:
    """Refuse data that training would fail on later: images must be finite (N, C, H, W)
    floats, labels integers in ``[0, num_classes)``, one label per image.

    Raises:
        InputDataError: naming the problem.
    """
    tensors = getattr(data, "tensors", None)
    if tensors is None or len(tensors) != 2:
        raise InputDataError(f"{what}: expected a TensorDataset(images, labels)")
    x, y = tensors
    if x.dim() != 4 or not x.is_floating_point():
        raise InputDataError(
            f"{what}: images must be a float tensor (N, C, H, W), got {x.dtype} {tuple(x.shape)}"
        )
    if len(x) == 0:
        raise InputDataError(f"{what} is empty")
    if not torch.isfinite(x).all():
        raise InputDataError(f"{what}: the input data contains NaN or infinite values")
    if y.dim() != 1 or len(y) != len(x):
        raise InputDataError(f"{what}: expected one label per image, got labels {tuple(y.shape)}")
    check_labels(y, num_classes, what)


def check_labels(
    y: torch.Tensor, num_classes: int, what: str = "data", classes_from: str = "num_classes"
) -> None:
    """Refuse labels that cross-entropy and the evidence cannot use: they must be one class
    index per example, a 1-D ``torch.long`` tensor with values in ``[0, num_classes)``.

    Args:
        y: the labels.
        num_classes: the number of classes ``K``.
        what: the data named in the message (``"mnist train set"``...).
        classes_from: what sets ``K``, named in the fix of an out-of-range label.

    Raises:
        InputDataError: naming the problem and the fix.
    """
    if not isinstance(y, torch.Tensor):
        raise InputDataError(
            f"{what}: labels must be a tensor of class indices, got {type(y).__name__}; "
            "convert them with torch.as_tensor(labels, dtype=torch.long)"
        )
    if y.dim() != 1:
        raise InputDataError(
            f"{what}: labels must be one class index per example (a 1-D tensor), got shape "
            f"{tuple(y.shape)}; for one-hot or probability rows use y.argmax(-1), for a "
            "column y.view(-1)"
        )
    if y.dtype != torch.long:
        whole = not (y.is_floating_point() or y.is_complex()) or bool((y == y.round()).all())
        raise InputDataError(
            f"{what}: labels must be integers (int64) class indices, got {y.dtype}; "
            + (
                "convert them with y.long()"
                if whole
                else "they are not whole numbers: map them to the class indices 0, 1, ..."
            )
        )
    if y.numel() == 0:
        return
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= num_classes:
        raise InputDataError(
            f"{what}: labels must be in [0, {num_classes - 1}] for {num_classes} classes, "
            f"got values from {low} to {high}; number the classes from 0, or make "
            f"{classes_from} cover every label"
        )


def available_datasets() -> list[str]:
    """Every name :func:`load_dataset` knows: the bases and each variant of each."""
    return [*BASES, *(f"{v}_{b}" for v in VARIANTS for b in BASES)]


def parse_name(name: str) -> tuple[str | None, str]:
    """``"rotated_mnist"`` -> ``("rotated", "mnist")``; ``"mnist"`` -> ``(None, "mnist")``."""
    key = name.lower().replace("-", "_")
    if key in BASES:
        return None, key
    variant, _, base = key.partition("_")
    if variant in VARIANTS and base in BASES:
        return variant, base
    raise ConfigError(
        f"unknown dataset {name!r}; use a base ({', '.join(BASES)}) optionally prefixed by a "
        f"variant ({', '.join(VARIANTS)}), e.g. rotated_mnist"
    )


def image_side(name: str) -> int:
    """The side in pixels of a data set's images, from its name (:func:`parse_name`):
    32 for CIFAR-10 and the quadrant variants' canvas, 28 for the MNIST sets."""
    variant, base = parse_name(name)
    return 32 if base.startswith("cifar") or (variant or "").startswith("quadrant") else 28


# ---------------------------------------------------------------- raw arrays (uint8)
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def load_embedded_mnist() -> Arrays:
    """The MNIST subset shipped in the package (first 3000 train, first 1000 test images)."""
    with resources.files("ella.data").joinpath(EMBEDDED_MNIST).open("rb") as f:
        arrays = np.load(f)
        return tuple(arrays[k] for k in ("x_train", "y_train", "x_test", "y_test"))


def load_idx_dataset(name: str, data_dir=None) -> Arrays:
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


class _BatchUnpickler(pickle.Unpickler):
    """Reads a CIFAR-10 batch without running code: of all globals a pickle may name,
    only numpy's array reconstruction is allowed (the batches hold a dict of bytes,
    lists and one uint8 array)."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data file")
        return super().find_class(module, name)


def _unpickle_batch(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        batch = _BatchUnpickler(io.BytesIO(data), encoding="bytes").load()
        images = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except Exception as err:
        raise DataFileError(f"{where} is not a readable CIFAR-10 batch: {err}") from err
    return images, labels


def load_cifar10(data_dir=None) -> Arrays:
    """Full CIFAR-10 from ``cifar-10-python.tar.gz`` (md5-verified) or ``cifar-10-batches-py/``."""
    root = data_root(data_dir)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    folder = root / "cifar-10-batches-py"
    if folder.is_dir():  # each batch md5-verified before it is parsed
        raw = {n: verified_path(root, f"cifar-10-batches-py/{n}").read_bytes() for n in names}
    else:
        archive = verified_path(root, "cifar-10-python.tar.gz")
        with tarfile.open(archive, "r:gz") as tar:
            raw = {n: tar.extractfile(f"cifar-10-batches-py/{n}").read() for n in names}
    batches = [_unpickle_batch(raw[n], n) for n in names]
    x_train = np.concatenate([b[0] for b in batches[:5]])
    y_train = np.concatenate([b[1] for b in batches[:5]])
    return x_train, y_train, batches[5][0], batches[5][1]


def load_cifar10_subset(data_dir=None) -> Arrays:
    """The partial CIFAR-10 npz (``cifar10-subset/cifar10_subset.npz``), md5-verified."""
    path = verified_path(data_root(data_dir), "cifar10-subset/cifar10_subset.npz")
    with np.load(path) as f:
        return tuple(f[k] for k in ("train_images", "train_labels", "test_images", "test_labels"))


def _load_base(base: str, data_dir) -> Arrays:
    if base == "mnist_subset":
        return load_embedded_mnist()
    if base in _IDX_FOLDERS:
        return load_idx_dataset(base, data_dir)
    if base == "cifar10":
        return load_cifar10(data_dir)
    return load_cifar10_subset(data_dir)


# ---------------------------------------------------------------- variants
def apply_variant(
    x: torch.Tensor, y: torch.Tensor, variant: str | None, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Transform images in [0, 1] (N, C, H, W) per sample with a fixed seed.

    Returns:
        ``(images, labels, quadrants)``; ``quadrants`` is None except for the
        quadrant variants.
    """
    g = torch.Generator().manual_seed(seed)
    n = len(x)
    if variant is None:
        return x, y, None
    if variant == "rotated":
        return T.rotate(x, T.random_angles(n, 180.0, g)), y, None
    if variant == "translated":
        return T.translate(x, T.random_shifts(n, 8, g)), y, None
    if variant == "scaled":
        return T.scale(x, T.random_scales(n, 0.7, 1.4, g)), y, None
    if variant in ("c4", "d4"):
        elements = torch.randint(4 if variant == "c4" else 8, (n,), generator=g)
        return T.act_per_sample(x, variant.upper(), elements), y, None
    quadrants = torch.randint(4, (n,), generator=g)
    images = T.place_in_quadrant(x, quadrants)
    labels = 4 * y + quadrants if variant == "quadrant40" else y
    return images, labels, quadrants


def _prepare(images, labels, size, variant, seed, stats) -> TensorDataset:
    x = torch.tensor(np.asarray(images[:size]), dtype=torch.float32).div_(255.0)
    if x.dim() == 3:
        x = x.unsqueeze(1)
    y = torch.tensor(np.asarray(labels[:size]), dtype=torch.long)
    x, y, _ = apply_variant(x, y, variant, seed)
    mean = torch.tensor(stats[0]).view(1, -1, 1, 1)
    std = torch.tensor(stats[1]).view(1, -1, 1, 1)
    return TensorDataset((x - mean) / std, y)


def standardisation(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel ``(mean, std)`` that :func:`load_dataset` standardises ``name`` with."""
    _, base = parse_name(name)
    return STATS["cifar10" if base.startswith("cifar") else base.replace("_subset", "")]


def load_dataset(
    name: str = "mnist_subset",
    data_dir: str | Path | None = None,
    train_size: int | None = None,
    test_size: int | None = None,
) -> ImageData:
    """Load a data set (see the module docstring for names); keep the first images.

    Args:
        name: e.g. ``"mnist_subset"``, ``"rotated_mnist"``, ``"quadrant40_mnist"``,
            ``"cifar10_subset"``, ``"rotated_cifar10"``.
        data_dir: directory with ``MNIST/raw`` etc.; default ``$ELLA_DATA`` or ``~/.cache/ella``.
        train_size: number of training images to keep (default all).
        test_size: number of test images to keep (default all).
    """
    variant, base = parse_name(name)
    x_train, y_train, x_test, y_test = _load_base(base, data_dir)
    for size, n, what in ((train_size, len(x_train), "train"), (test_size, len(x_test), "test")):
        if size is not None and not 0 < size <= n:
            raise ValueError(f"{what} size must be between 1 and {n}, got {size}")
    stats = standardisation(name)
    return ImageData(
        name=name.lower().replace("-", "_"),
        train=_prepare(x_train, y_train, train_size, variant, VARIANT_SEEDS["train"], stats),
        test=_prepare(x_test, y_test, test_size, variant, VARIANT_SEEDS["test"], stats),
        num_classes=40 if variant == "quadrant40" else 10,
    )
