import io
import math
import pickle
import tarfile

import numpy as np
import pytest
import torch

from ella.data import DataFileError, load_dataset
from ella.data import transforms as T
from ella.data.datasets import apply_variant, load_cifar10, parse_name
from tests.data.shared import SHARED


def images(n=6, size=8):
    return torch.rand(n, 1, size, size, generator=torch.Generator().manual_seed(3))


def test_rotate_by_a_quarter_turn_is_rot90():
    x = images()
    quarter = T.rotate(x, torch.full((len(x),), math.pi / 2))
    torch.testing.assert_close(quarter, torch.rot90(x, 1, dims=(-2, -1)), atol=1e-5, rtol=0)
    torch.testing.assert_close(T.rotate(x, torch.zeros(len(x))), x, atol=1e-6, rtol=0)


def test_translate_moves_whole_pixels_and_fills_background():
    x = images(2)
    out = T.translate(x, torch.tensor([[1, 2], [0, -3]]))
    assert torch.equal(out[0, 0, 1:, 2:], x[0, 0, :-1, :-2])
    assert torch.equal(out[1, 0, :, :-3], x[1, 0, :, 3:])
    assert torch.all(out[0, 0, 0] == x[0].min())


def test_quadrant_label_matches_where_the_digit_was_placed():
    x = torch.zeros(40, 1, 28, 28)
    x[:, :, 10:18, 10:18] = 1.0  # a bright square in the middle of each image
    y = torch.arange(40) % 10
    out, labels, quadrants = apply_variant(x, y, "quadrant40", seed=0)
    assert out.shape == (40, 1, 32, 32)
    assert torch.equal(labels, 4 * y + quadrants)
    assert set(quadrants.tolist()) == {0, 1, 2, 3}
    for img, q in zip(out, quadrants.tolist(), strict=True):
        mass = img[0].reshape(2, 16, 2, 16).sum(dim=(1, 3)).flatten()  # per quadrant
        assert int(mass.argmax()) == q
    _, digit_labels, _ = apply_variant(x, y, "quadrant", seed=0)
    assert torch.equal(digit_labels, y)


def test_variants_are_reproducible_and_train_test_differ():
    a = load_dataset("rotated_mnist_subset", train_size=50, test_size=50)
    b = load_dataset("rotated_mnist_subset", train_size=50, test_size=50)
    assert torch.equal(a.train.tensors[0], b.train.tensors[0])
    plain = load_dataset("mnist_subset", train_size=50)
    assert not torch.allclose(a.train.tensors[0], plain.train.tensors[0])


def test_c4_variant_is_an_exact_rotation_of_each_image():
    plain = load_dataset("mnist_subset", train_size=30).train.tensors[0]
    c4 = load_dataset("c4_mnist_subset", train_size=30).train.tensors[0]
    for original, turned in zip(plain, c4, strict=True):
        assert any(torch.equal(turned, torch.rot90(original, k, dims=(-2, -1))) for k in range(4))


def test_augmentation_is_per_image_and_seeded():
    x = images(16)
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    a, b = T.augment(x, "c4", g1), T.augment(x, "c4", g2)
    assert torch.equal(a, b)
    changed = [not torch.equal(a[i], x[i]) for i in range(16)]
    assert any(changed) and not all(changed)  # per image, not one choice per batch
    with pytest.raises(ValueError, match="unknown augmentation"):
        T.augment(x, "mixup", g1)


@pytest.mark.parametrize("kind", ["c4", "d4", "rotate", "translate", "scale"])
def test_an_epochs_draws_made_up_front_augment_as_batch_by_batch_draws(kind):
    """Drawing every batch's parameters first, then augmenting, gives each image what
    augmenting the batches in turn gives (ella train draws an epoch's draws at once)."""
    x = images(20)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    in_turn = torch.cat([T.augment(b, kind, g1, 2) for b in x.split(8)])
    draws = [T.draw_augmentation(kind, len(b), g2, 2) for b in x.split(8)]
    batches = zip(x.split(8), draws, strict=True)
    up_front = torch.cat([T.apply_augmentation(b, kind, d) for b, d in batches])
    assert torch.equal(up_front, in_turn)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind", ["c4", "d4", "rotate", "translate", "scale"])
def test_augmentation_on_cuda_equals_the_cpu(kind):
    x = images(32, 28)
    params = T.draw_augmentation(kind, len(x), torch.Generator().manual_seed(1), 2)
    on_cpu = T.apply_augmentation(x, kind, params)
    on_cuda = T.apply_augmentation(x.cuda(), kind, params.cuda()).cpu()
    torch.testing.assert_close(on_cuda, on_cpu, atol=1e-5, rtol=0)


def test_names():
    assert parse_name("rotated_cifar10") == ("rotated", "cifar10")
    assert parse_name("quadrant40_mnist") == ("quadrant40", "mnist")
    with pytest.raises(ValueError, match="unknown dataset 'tilted_mnist'"):
        parse_name("tilted_mnist")


# ---------------------------------------------------------------- CIFAR-10 files
def fake_cifar_archive(path, n=4, corrupt=None):
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            batch = {b"data": rng.integers(0, 255, (n, 3072), dtype=np.uint8), b"labels": [1] * n}
            data = pickle.dumps(batch)
            if name == corrupt:
                data = data[: len(data) // 2]
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def trust_extracted_batches(tmp_path, monkeypatch):
    """Register the fake batches' md5 as the known ones (the originals are not available
    here), so that the folder route's parsing is tested after its checksum step."""
    from ella.data import files

    known = dict(files.KNOWN_MD5)
    for path in (tmp_path / "cifar-10-batches-py").iterdir():
        known[f"cifar-10-batches-py/{path.name}"] = files.md5(path)
    monkeypatch.setattr(files, "KNOWN_MD5", known)


def test_cifar_batches_folder(tmp_path, monkeypatch):
    archive = tmp_path / "src.tar.gz"
    fake_cifar_archive(archive)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    trust_extracted_batches(tmp_path, monkeypatch)
    x_train, y_train, x_test, y_test = load_cifar10(tmp_path)
    assert x_train.shape == (20, 3, 32, 32) and x_test.shape == (4, 3, 32, 32)
    assert set(y_train.tolist()) == {1}


def test_cifar_archive_is_checksummed(tmp_path):
    fake_cifar_archive(tmp_path / "cifar-10-python.tar.gz")
    with pytest.raises(DataFileError, match="cifar-10-python.tar.gz is truncated or corrupt"):
        load_cifar10(tmp_path)


def test_cifar_batches_are_checksummed_before_parsing(tmp_path):
    archive = tmp_path / "src.tar.gz"
    fake_cifar_archive(archive)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    with pytest.raises(DataFileError, match="data_batch_1 is truncated or corrupt"):
        load_cifar10(tmp_path)


def test_truncated_cifar_batch_is_reported(tmp_path, monkeypatch):
    archive = tmp_path / "src.tar.gz"
    fake_cifar_archive(archive, corrupt="data_batch_3")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    trust_extracted_batches(tmp_path, monkeypatch)
    with pytest.raises(DataFileError, match="data_batch_3 is not a readable CIFAR-10 batch"):
        load_cifar10(tmp_path)


def test_missing_cifar_says_what_to_do(tmp_path):
    with pytest.raises(DataFileError, match="ella download"):
        load_cifar10(tmp_path)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_cifar_subset_from_shared_data():
    data = load_dataset("rotated_cifar10_subset", data_dir=SHARED, train_size=20)
    assert data.train.tensors[0].shape == (20, 3, 32, 32)
    assert len(data.test) == 761 and data.num_classes == 10
