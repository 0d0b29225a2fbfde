"""The registry of base data sets: one :class:`BaseDataset` entry each, and the variants.

A base data set is everything :func:`ella.data.load_dataset`, ``ella download`` and the
help texts need to know of it: its name, its files with their md5 (and where to download
them), how it loads, its training-set per-channel mean and standard deviation, its number
of classes and image side, and which variants apply. :func:`register_dataset` adds one
(from inside the package or outside it); its files' checksums then guard every read
(:func:`ella.data.files.verified_path`). The built-in data sets are registered by
:mod:`ella.data.datasets`, which the package imports first.

A variant (:data:`VARIANT_TABLE`) is a per-image transform of any base
(:func:`ella.data.datasets.apply_variant`); it may change the image side (the quadrant
canvas) and the classes (``quadrant40``: ``4 * class + quadrant``, 4 K classes of K).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from ella.data import files
from ella.errors import ConfigError

#: the raw splits a loader returns: (x_train, y_train, x_test, y_test), images of values in
#: [0, 255] as (N, H, W) or (N, C, H, W), labels (N,) class indices
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Variant:
    """A per-image transform of a base: the side of its images (``None``: the base's) and
    how many classes each class of the base becomes."""

    name: str
    side: int | None = None
    classes_per_class: int = 1


#: the variants by name, in the order help texts list them
VARIANT_TABLE: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("rotated"),
        Variant("translated"),
        Variant("scaled"),
        Variant("c4"),
        Variant("d4"),
        Variant("quadrant", side=32),  # the 2S x 2S canvas resized to 32x32
        Variant("quadrant40", side=32, classes_per_class=4),  # (class, quadrant)
    )
}
VARIANTS = tuple(VARIANT_TABLE)
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_MD5 = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class DataFile:
    """One file of a data set: its path under the data directory (``/``-separated), its
    md5, checked before every read, and the address ``ella download`` fetches it from
    (``None``: not downloadable)."""

    path: str
    md5: str
    url: str | None = None

    def __post_init__(self) -> None:
        parts = PurePosixPath(self.path).parts
        if not parts or self.path.startswith("/") or ".." in parts or "\\" in self.path:
            raise ConfigError(
                f"data file path {self.path!r} must be relative to the data directory, "
                "'/'-separated and without '..' (e.g. 'my_set/images.npz')"
            )
        if not _MD5.fullmatch(self.md5):
            raise ConfigError(
                f"the md5 of {self.path} must be 32 lower-case hexadecimal digits, got "
                f"{self.md5!r}; compute it with ella.data.files.md5(path)"
            )


@dataclass(frozen=True)
class BaseDataset:
    """A base data set: the ``base`` of a name ``[variant_]base``.

    Args:
        name: lower-case letters, digits and underscores, not starting with a variant's
            name and ``_``.
        load: data directory -> :data:`Arrays`; reads its files through
            :func:`ella.data.files.verified_path` (or :func:`npz_loader`), so that their
            md5 is checked first.
        mean: per-channel mean of the training images scaled to [0, 1].
        std: per-channel standard deviation, likewise; images are standardised as
            ``(x - mean) / std``.
        num_classes: the number of classes ``K`` of the labels ``0..K-1``.
        image_side: side in pixels of the square images.
        files: the files ``load`` reads, with their checksums (none: it needs no file).
        variants: the variants that apply (all by default).
        about: what the images are, for the data page's table.
        where: which files it reads, for the data page's table.
    """

    name: str
    load: Callable[[Path], Arrays]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int = 10
    image_side: int = 28
    files: tuple[DataFile, ...] = ()
    variants: tuple[str, ...] = VARIANTS
    about: str = ""
    where: str = ""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"data set name {self.name!r} must be lower-case letters, digits and "
                "underscores, starting with a letter (e.g. 'my_digits')"
            )
        prefix = self.name.partition("_")[0]
        if prefix in VARIANT_TABLE and "_" in self.name:
            raise ConfigError(
                f"data set name {self.name!r} reads as the variant {prefix} of "
                f"{self.name.partition('_')[2]!r}: choose a name not starting with {prefix}_"
            )
        if not callable(self.load):
            raise ConfigError(f"data set {self.name}: load must be a function of the data root")
        if not self.mean or len(self.mean) != len(self.std) or min(self.std) <= 0:
            raise ConfigError(
                f"data set {self.name}: give one mean and one positive std per channel, got "
                f"mean {self.mean} and std {self.std}"
            )
        if self.num_classes < 1 or self.image_side < 1:
            raise ConfigError(
                f"data set {self.name}: num_classes and image_side must be positive, got "
                f"{self.num_classes} and {self.image_side}"
            )
        unknown = [v for v in self.variants if v not in VARIANT_TABLE]
        if unknown:
            raise ConfigError(
                f"data set {self.name}: unknown variants {unknown}; choose from "
                f"{', '.join(VARIANTS)}"
            )

    @property
    def downloadable(self) -> bool:
        """Whether ``ella download`` can fetch its files."""
        return any(f.url for f in self.files)


#: the registered base data sets by name, in the order help texts list them
DATASETS: dict[str, BaseDataset] = {}


def register_dataset(dataset: BaseDataset) -> BaseDataset:
    """Add a base data set: its name, and each variant's, become names of
    :func:`~ella.data.load_dataset`, ``ella train`` and ``ella ensemble``, its files known
    (checked by md5 before use, downloadable where they have an address); returns it.

    Raises:
        ConfigError: the name is taken, or a file is declared with another md5.
    """
    if dataset.name in DATASETS:
        raise ConfigError(
            f"a data set {dataset.name!r} exists already: choose another name, or "
            f"unregister_dataset({dataset.name!r}) first"
        )
    for file in dataset.files:
        known = files.KNOWN_MD5.get(file.path)
        if known is not None and known != file.md5:
            raise ConfigError(
                f"data file {file.path} is known with md5 {known}, not {file.md5}: give the "
                "data set's files a folder of their own"
            )
    DATASETS[dataset.name] = dataset
    for file in dataset.files:
        files.KNOWN_MD5[file.path] = file.md5
        if file.url:
            files.SOURCES[file.path] = file.url
    return dataset


def unregister_dataset(name: str) -> None:
    """Remove a registered data set and those of its files no other one declares."""
    if name not in DATASETS:
        raise ConfigError(f"no data set {name!r} is registered; registered: {', '.join(DATASETS)}")
    dataset = DATASETS.pop(name)
    kept = {f.path for d in DATASETS.values() for f in d.files}
    for file in dataset.files:
        if file.path not in kept:
            files.KNOWN_MD5.pop(file.path, None)
            files.SOURCES.pop(file.path, None)


def npz_loader(
    path: str, keys: Iterable[str] = ("x_train", "y_train", "x_test", "y_test")
) -> Callable[[Path], Arrays]:
    """A loader of the four arrays ``keys`` of a ``.npz`` file (``path`` under the data
    directory, :func:`~ella.data.files.data_root` of its argument), its md5 checked first;
    object arrays are refused (nothing runs from data)."""
    keys = tuple(keys)

    def load(data_dir: str | Path | None = None) -> Arrays:
        verified = files.verified_path(files.data_root(data_dir), path)
        try:
            with np.load(verified, allow_pickle=False) as arrays:
                return tuple(arrays[k] for k in keys)
        except (OSError, KeyError, ValueError) as err:
            raise files.DataFileError(
                f"{verified} is not an .npz of the arrays {', '.join(keys)}: {err}; save "
                "plain numeric arrays under those names (np.savez)"
            ) from err

    return load


def listed(names: Iterable[str], last: str = "or") -> str:
    """``"a, b or c"``."""
    names = list(names)
    return f"{', '.join(names[:-1])} {last} {names[-1]}" if len(names) > 1 else "".join(names)


def dataset_help() -> str:
    """The registered names as the ``--dataset`` option describes them."""
    bases = [f"{d.name} (embedded)" if not d.files else d.name for d in DATASETS.values()]
    return (
        f"[variant_]base, base one of {', '.join(bases)}; variant one of "
        f"{', '.join(VARIANTS)} (e.g. rotated_mnist)"
    )


def downloadable() -> list[str]:
    """The data sets ``ella download`` can fetch, in registration order."""
    return [d.name for d in DATASETS.values() if d.downloadable]


__all__ = [
    "DATASETS",
    "VARIANTS",
    "VARIANT_TABLE",
    "Arrays",
    "BaseDataset",
    "DataFile",
    "Variant",
    "dataset_help",
    "downloadable",
    "listed",
    "npz_loader",
    "register_dataset",
    "unregister_dataset",
]
