"""Image classification data sets, their variants, and loading them by name.

A data set name is ``[variant_]base``:

* bases: the registered data sets (:data:`ella.data.registry.DATASETS`; more with
  :func:`~ella.data.registry.register_dataset`), built in (:data:`BUILT_IN`, each with
  its images and files): ``mnist_subset`` (shipped in the package), ``mnist``,
  ``fashion_mnist``, ``cifar10`` and ``cifar10_subset``;
* variants (:data:`ella.data.registry.VARIANT_TABLE`), each a per-sample transform with
  a fixed seed (the same data every time; train and test drawn independently):
  ``rotated`` (angle U[-180, 180] degrees), ``translated`` (shift U{-8..8} pixels),
  ``scaled`` (factor log-uniform in [0.7, 1.4]), ``c4``/``d4`` (a random exact group
  element), ``quadrant`` (the ELLA paper's Table 1: the image in a random quadrant of a
  2S x 2S canvas, resized to 32x32, labelled by class) and ``quadrant40`` (the same
  images labelled by (class, quadrant): ``4 * class + quadrant``).

Images are scaled to [0, 1], transformed, then standardised with the base's
training-set mean and standard deviation (:func:`standardisation`). Test sets are never
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
from ella.data.registry import (
    DATASETS,
    VARIANT_TABLE,
    VARIANTS,
    Arrays,
    BaseDataset,
    DataFile,
    npz_loader,
    register_dataset,
)
from ella.errors import ConfigError, InputDataError

EMBEDDED_MNIST = "mnist_subset.npz"
_IDX_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
#: the IDX files of a split pair: train images, train labels, test images, test labels
_IDX_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
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
    bases = DATASETS.values()
    return [*DATASETS, *(f"{v}_{d.name}" for v in VARIANTS for d in bases if v in d.variants)]


def parse_name(name: str) -> tuple[str | None, str]:
    """``"rotated_mnist"`` -> ``("rotated", "mnist")``; ``"mnist"`` -> ``(None, "mnist")``."""
    key = name.lower().replace("-", "_")
    if key in DATASETS:
        return None, key
    variant, _, base = key.partition("_")
    if variant in VARIANTS and base in DATASETS:
        if variant not in DATASETS[base].variants:
            raise ConfigError(
                f"dataset {name!r}: {base} has no variant {variant}; use {base} itself or "
                f"one of its variants ({', '.join(DATASETS[base].variants) or 'none'})"
            )
        return variant, base
    raise ConfigError(
        f"unknown dataset {name!r}; use a base ({', '.join(DATASETS)}) optionally prefixed by "
        f"a variant ({', '.join(VARIANTS)}), e.g. rotated_mnist"
    )


def image_side(name: str) -> int:
    """The side in pixels of a data set's images, from its name (:func:`parse_name`): the
    variant's (32 for the quadrant canvas), else the base's (32 for CIFAR-10, 28 for MNIST)."""
    variant, base = parse_name(name)
    return (variant and VARIANT_TABLE[variant].side) or DATASETS[base].image_side


def num_classes(name: str) -> int:
    """The number of classes of a data set's labels: the base's, times the variant's
    classes per class (4 for ``quadrant40``: ``4 * class + quadrant``)."""
    variant, base = parse_name(name)
    return DATASETS[base].num_classes * (VARIANT_TABLE[variant].classes_per_class if variant else 1)


# ---------------------------------------------------------------- raw arrays (uint8)
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

    return tuple(read(stem) for stem in _IDX_STEMS)


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


#: the partial CIFAR-10 npz (``cifar10-subset/cifar10_subset.npz``), md5-verified
load_cifar10_subset = npz_loader(
    "cifar10-subset/cifar10_subset.npz",
    ("train_images", "train_labels", "test_images", "test_labels"),
)


# ---------------------------------------------------------------- the built-in bases
_MNIST_STATS = {"mean": (0.1307,), "std": (0.3081,)}
_CIFAR10_STATS = {"mean": (0.4914, 0.4822, 0.4465), "std": (0.2470, 0.2435, 0.2616)}


def _idx_files(folder: str, url: str, md5s: tuple[str, ...]) -> tuple[DataFile, ...]:
    """The four IDX gzip files under ``<folder>/raw/``, fetched from ``<url>/<file>``."""
    return tuple(
        DataFile(f"{folder}/raw/{stem}.gz", digest, f"{url}/{stem}.gz")
        for stem, digest in zip(_IDX_STEMS, md5s, strict=True)
    )


_CIFAR10_BATCHES = {  # md5 of the extracted archive's batches (as torchvision lists them)
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
#: the built-in bases, registered in this order (the md5 of the original files, identical
#: on the usual mirrors)
BUILT_IN = (
    BaseDataset(
        "mnist_subset",
        lambda root: load_embedded_mnist(),
        **_MNIST_STATS,
        about="the first 3000 training and 1000 test images of MNIST, 28x28",
        where="shipped inside the package: none needed",
    ),
    BaseDataset(
        "mnist",
        lambda root: load_idx_dataset("mnist", root),
        **_MNIST_STATS,
        files=_idx_files(
            "MNIST",
            "https://ossci-datasets.s3.amazonaws.com/mnist",
            (
                "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                "d53e105ee54ea40749a09fcbcd1e9432",
                "9fb629c4189551a2d022fa330f9573f3",
                "ec29112dd5afa0611ce80d1b7f02629c",
            ),
        ),
        about="MNIST, 28x28",
        where="`MNIST/raw/*-ubyte.gz` (the original IDX gzip files)",
    ),
    BaseDataset(
        "fashion_mnist",
        lambda root: load_idx_dataset("fashion_mnist", root),
        mean=(0.2860,),
        std=(0.3530,),
        files=_idx_files(
            "FashionMNIST",
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com",
            (
                "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                "25c81989df183df01b3e8a0aad5dffbe",
                "bef4ecab320f06d8554ea6380940ec79",
                "bb300cfdad3c16e7a12a480ee83cd310",
            ),
        ),
        about="Fashion-MNIST, 28x28",
        where="`FashionMNIST/raw/*-ubyte.gz`",
    ),
    BaseDataset(
        "cifar10",
        load_cifar10,
        **_CIFAR10_STATS,
        image_side=32,
        files=(
            DataFile(
                "cifar-10-python.tar.gz",
                "c58f30108f718f92721af3b95e74349a",
                "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            ),
            *(DataFile(f"cifar-10-batches-py/{n}", d) for n, d in _CIFAR10_BATCHES.items()),
        ),
        about="CIFAR-10, 3x32x32",
        where="`cifar-10-python.tar.gz`, or its extracted `cifar-10-batches-py/`",
    ),
    BaseDataset(
        "cifar10_subset",
        load_cifar10_subset,
        **_CIFAR10_STATS,
        image_side=32,
        files=(
            DataFile("cifar10-subset/cifar10_subset.npz", "0a87453073352c45b0ed4967f381e3e2"),
            DataFile("cifar10-subset/batches.meta", "5ff9c542aee3614f3951f8cda6e48888"),
        ),
        about="3805 training and 761 test images of CIFAR-10",
        where="`cifar10-subset/cifar10_subset.npz`",
    ),
)
for _dataset in BUILT_IN:
    register_dataset(_dataset)


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


def check_declared_shape(dataset: BaseDataset, shape: tuple[int, ...]) -> None:
    """Refuse a loader's images (N, H, W) or (N, C, H, W) whose side or channels are not
    what its data set declares (``image_side``, one ``mean`` and ``std`` per channel).

    Raises:
        InputDataError: naming the declaration to fix.
    """
    side, channels = dataset.image_side, len(dataset.mean)
    allowed = [(channels, side, side)] + ([(side, side)] if channels == 1 else [])
    if tuple(shape[1:]) not in allowed:
        raise InputDataError(
            f"data set {dataset.name}: its loader gave images of shape {tuple(shape)}, where "
            f"it declares {channels} channel(s) of {side}x{side} pixels; fix the loader, or "
            "its image_side, mean and std"
        )


def standardisation(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel ``(mean, std)`` that :func:`load_dataset` standardises ``name`` with."""
    base = DATASETS[parse_name(name)[1]]
    return base.mean, base.std


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
    x_train, y_train, x_test, y_test = DATASETS[base].load(data_root(data_dir))
    for x in (x_train, x_test):
        check_declared_shape(DATASETS[base], np.shape(x))
    for size, n, what in ((train_size, len(x_train), "train"), (test_size, len(x_test), "test")):
        if size is not None and not 0 < size <= n:
            raise ValueError(f"{what} size must be between 1 and {n}, got {size}")
    stats = standardisation(name)
    return ImageData(
        name=name.lower().replace("-", "_"),
        train=_prepare(x_train, y_train, train_size, variant, VARIANT_SEEDS["train"], stats),
        test=_prepare(x_test, y_test, test_size, variant, VARIANT_SEEDS["test"], stats),
        num_classes=num_classes(name),
    )
