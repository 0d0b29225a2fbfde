import gzip
import shutil

import pytest
import torch

from ella.data import DataFileError, load_dataset, read_idx
from ella.data.files import KNOWN_MD5
from tests.data.shared import SHARED


def test_embedded_subset():
    data = load_dataset("mnist_subset")
    x, y = data.train.tensors
    assert x.shape == (3000, 1, 28, 28) and y.shape == (3000,)
    assert len(data.test) == 1000
    assert set(y.tolist()) == set(range(10))
    assert abs(float(x.mean())) < 0.2 and 0.8 < float(x.std()) < 1.2  # standardised
    small = load_dataset("mnist-subset", train_size=10, test_size=5)
    assert (len(small.train), len(small.test)) == (10, 5)
    assert torch.equal(small.train.tensors[0], x[:10])


def test_bad_sizes_and_names():
    with pytest.raises(ValueError, match="between 1 and 3000"):
        load_dataset(train_size=5000)
    with pytest.raises(ValueError, match="unknown dataset 'kmnist'"):
        load_dataset("kmnist")


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(DataFileError, match="missing data file .*ELLA_DATA"):
        load_dataset("mnist", data_dir=tmp_path)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_original_files_with_checksums(tmp_path):
    data = load_dataset("fashion_mnist", data_dir=SHARED, train_size=100)
    assert data.train.tensors[0].shape == (100, 1, 28, 28) and len(data.test) == 10000
    # a corrupt copy is detected by its checksum
    rel = "MNIST/raw/t10k-labels-idx1-ubyte.gz"
    for name in KNOWN_MD5:
        if name.startswith("MNIST"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(SHARED / name, tmp_path / name)
    with open(tmp_path / rel, "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01")
    with pytest.raises(DataFileError, match="t10k-labels.*corrupt"):
        load_dataset("mnist", data_dir=tmp_path)


def test_read_idx_rejects_truncated_files(tmp_path):
    header = bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big")
    good, short = tmp_path / "good.gz", tmp_path / "short.gz"
    good.write_bytes(gzip.compress(header + bytes(range(10))))
    short.write_bytes(gzip.compress(header + bytes(range(7))))
    assert read_idx(good).tolist() == list(range(10))
    with pytest.raises(DataFileError, match="truncated"):
        read_idx(short)
    (tmp_path / "junk.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataFileError, match="corrupt"):
        read_idx(tmp_path / "junk.gz")
