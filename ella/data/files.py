"""Data files: where they live, their known checksums, and reading IDX files.

The data directory is, in order: the ``data_dir`` argument, the ``ELLA_DATA``
environment variable, or ``~/.cache/ella``. Files are looked up in the
torchvision-style layout ``<root>/MNIST/raw/<file>.gz`` (also used by
``../shared/data``), and verified against their md5 before use; each data set of the
registry (:mod:`ella.data.registry`) declares its files and their md5.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import numpy as np

from ella.errors import EllaError
from ella.io import atomic_write

#: md5 of every registered data set's files (:func:`ella.data.registry.register_dataset`
#: fills it; the built-in ones are the originals', identical on the usual mirrors)
KNOWN_MD5: dict[str, str] = {}
#: where ``ella download`` fetches each downloadable file (the usual public mirrors)
SOURCES: dict[str, str] = {}


class DataFileError(EllaError, RuntimeError):
    """A data file is missing, truncated or corrupt; the message says what to do."""


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory: argument, else ``$ELLA_DATA``, else ``~/.cache/ella``."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if os.environ.get("ELLA_DATA"):
        return Path(os.environ["ELLA_DATA"]).expanduser()
    return Path.home() / ".cache" / "ella"


def md5(path: Path) -> str:
    """The MD5 hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verified_path(root: Path, relative: str) -> Path:
    """Path of a known file under ``root``, checked against its md5."""
    path = root / relative
    if not path.is_file():
        hint = " or run `ella download` to fetch it," if relative in SOURCES else ""
        raise DataFileError(
            f"missing data file {path}. Put the original file there,{hint} or point "
            f"--data-dir (or the ELLA_DATA environment variable) at a directory holding "
            f"{relative}"
        )
    expected = KNOWN_MD5.get(relative)
    if expected is not None and md5(path) != expected:
        raise DataFileError(
            f"data file {path} is truncated or corrupt (md5 {md5(path)}, expected {expected}); "
            "delete it and fetch the original again"
        )
    return path


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (gzip or plain) into a numpy array (unsigned bytes only)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise DataFileError(f"cannot read {path}: {err}; the file is probably corrupt") from err
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DataFileError(f"{path} is not an IDX file of unsigned bytes")
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if len(data) != header + int(np.prod(shape)):
        raise DataFileError(f"{path} is truncated: header says shape {shape}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def download(relative: str, root: Path, timeout: float = 60.0) -> Path:
    """Fetch one known file from its usual source into ``root``, atomically, and verify it.

    Only called when a user asks (``ella download``); tests and CI never download.
    """
    import urllib.request

    if relative not in SOURCES:
        raise ValueError(f"no known source for {relative}; known: {', '.join(SOURCES)}")
    path = root / relative
    if path.is_file() and md5(path) == KNOWN_MD5[relative]:
        return path
    url = SOURCES[relative]
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            atomic_write(path, lambda f: f.write(response.read()))
    except OSError as err:
        raise DataFileError(f"could not download {url}: {err}; check the network") from err
    try:
        return verified_path(root, relative)
    except DataFileError:
        path.unlink(missing_ok=True)  # never leave a corrupt download behind
        raise
