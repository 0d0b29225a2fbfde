"""Data sets as one registry: a data set registered outside the package (the example of
docs/development.md) loads, is checked by its md5 and trains with ``ella train``; the
names of the help texts, of ``ella download`` and of the data page are the registry's."""

import contextlib
import dataclasses
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from ella.cli import build_parser, main
from ella.data import (
    BaseDataset,
    DataFile,
    DataFileError,
    load_dataset,
    npz_loader,
    register_dataset,
    unregister_dataset,
)
from ella.data.datasets import available_datasets, image_side, num_classes, parse_name
from ella.data.files import KNOWN_MD5, SOURCES, md5
from ella.data.registry import DATASETS, VARIANTS, dataset_help
from ella.ensembles.config import HELP as ENSEMBLE_HELP
from ella.errors import ConfigError, InputDataError
from ella.train.config import HELP, help_texts

ROOT = Path(__file__).resolve().parents[2]
#: a run of a few seconds: 48 images of 16x16, one epoch and its evidence round
TINY = [
    "--train-size", "48", "--test-size", "32", "--width", "1", "--epochs", "1",
    "--batch-size", "16", "--n-epochs-burnin", "0", "--marglik-frequency", "1",
    "--n-hypersteps", "2", "--no-progress", "--paths", "conv", "gconv",
]  # fmt: skip


@pytest.fixture
def registry():
    """The registry and its file tables as they are, restored after the test."""
    saved = dict(DATASETS), dict(KNOWN_MD5), dict(SOURCES)
    yield
    for table, before in zip((DATASETS, KNOWN_MD5, SOURCES), saved, strict=True):
        table.clear()
        table.update(before)


@pytest.fixture
def stripes(tmp_path, monkeypatch, registry) -> Path:
    """docs/development.md's example run in ``tmp_path``: ``stripes`` registered, its
    file in ``tmp_path / "data"``, which it returns."""
    text = (ROOT / "docs" / "development.md").read_text()
    section = text[text.index("## Adding a data set") :]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "docs/development.md, Adding a data set", "exec"), {})
    assert "stripes" in DATASETS
    assert printed.getvalue() == "torch.Size([64, 1, 16, 16]) 2\n"  # as its comment says
    return tmp_path / "data"


def test_the_built_in_bases_are_the_registrys():
    assert list(DATASETS) == ["mnist_subset", "mnist", "fashion_mnist", "cifar10", "cifar10_subset"]
    assert {f.path for d in DATASETS.values() for f in d.files} == set(KNOWN_MD5)
    assert list(SOURCES) == [f.path for d in DATASETS.values() for f in d.files if f.url]
    sides = [image_side(n) for n in ("cifar10_subset", "quadrant_mnist", "mnist")]
    assert sides == [32, 32, 28]
    assert (num_classes("mnist"), num_classes("quadrant40_cifar10")) == (10, 40)


def test_a_registered_data_set_loads_is_checked_and_is_undone(stripes):
    data_set = DATASETS["stripes"]
    data = load_dataset("rotated_stripes", data_dir=stripes)
    assert data.image_size == 16 and data.num_classes == 2 and len(data.test) == 32
    assert (image_side("quadrant40_stripes"), num_classes("quadrant40_stripes")) == (32, 8)
    plain = load_dataset("stripes", data_dir=stripes).train.tensors[0]
    assert abs(float(plain.mean())) < 1e-5  # standardised by its mean and std
    for wrong in ({"image_side": 28}, {"mean": (0.5,) * 3, "std": (0.5,) * 3}):
        unregister_dataset("stripes")
        register_dataset(dataclasses.replace(data_set, **wrong))
        with pytest.raises(InputDataError, match=r"shape \(64, 16, 16\), where it declares"):
            load_dataset("stripes", data_dir=stripes)
    unregister_dataset("stripes")
    register_dataset(data_set)

    file = stripes / "stripes" / "stripes.npz"
    file.write_bytes(file.read_bytes()[:-10])  # truncated: refused by its md5, not parsed
    with pytest.raises(DataFileError, match="stripes.npz is truncated or corrupt"):
        load_dataset("stripes", data_dir=stripes)
    file.unlink()
    with pytest.raises(DataFileError, match="missing data file .*stripes/stripes.npz"):
        load_dataset("stripes", data_dir=stripes)

    unregister_dataset("stripes")
    assert "stripes/stripes.npz" not in KNOWN_MD5
    with pytest.raises(ConfigError, match="unknown dataset 'stripes'"):
        parse_name("stripes")


def test_ella_train_trains_on_a_registered_data_set(stripes, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--dataset", "d4_stripes", "--data-dir", str(stripes), "--out", str(out)]
    assert main([*args, *TINY]) == 0
    assert json.loads((out / "config.json").read_text())["dataset"] == "d4_stripes"
    results = json.loads((out / "results.json").read_text())
    assert 0.0 <= results["test_accuracy"] <= 100.0


def test_help_texts_and_download_names_come_from_the_registry(registry, capsys):
    assert HELP["dataset"] == help_texts()["dataset"] == f"data set: {dataset_help()}"
    for name in re.findall(r"\w+", ENSEMBLE_HELP["dataset"].partition("e.g.")[2]):
        parse_name(name)  # the ensemble's examples are names the registry knows

    def loads(root):
        raise AssertionError("not loaded by a help text")

    file = DataFile("digits/digits.npz", "0" * 32, "https://example.org/digits.npz")
    register_dataset(BaseDataset("digits", loads, (0.5,), (0.25,), variants=("c4",), files=(file,)))
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--help"])
    assert "cifar10_subset, digits; variant" in re.sub(r"\s+", " ", capsys.readouterr().out)
    with pytest.raises(SystemExit):
        parser.parse_args(["download", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "mnist, fashion_mnist, cifar10 and/or digits" in text
    assert main(["download", "mnist_subset"]) == 2
    assert "choose from cifar10, digits, fashion_mnist, mnist" in capsys.readouterr().err
    assert SOURCES["digits/digits.npz"] == file.url and KNOWN_MD5[file.path] == file.md5

    assert "c4_digits" in available_datasets() and "rotated_digits" not in available_datasets()
    with pytest.raises(
        ConfigError, match=r"digits has no variant rotated; use digits itself or .* \(c4\)"
    ):
        parse_name("rotated_digits")
    with pytest.raises(ConfigError, match=r"use a base \(.*cifar10_subset, digits\)"):
        parse_name("tilted_digits")


def test_a_registration_that_cannot_work_is_refused_with_its_fix(registry):
    def loads(root):
        raise AssertionError

    with pytest.raises(ConfigError, match="exists already: choose another name"):
        register_dataset(BaseDataset("mnist", loads, (0.5,), (0.25,)))
    with pytest.raises(ConfigError, match="reads as the variant rotated of 'digits'"):
        BaseDataset("rotated_digits", loads, (0.5,), (0.25,))
    with pytest.raises(ConfigError, match="lower-case letters"):
        BaseDataset("My-Digits", loads, (0.5,), (0.25,))
    with pytest.raises(ConfigError, match="one mean and one positive std per channel"):
        BaseDataset("digits", loads, (0.5, 0.5), (0.25,))
    with pytest.raises(ConfigError, match="unknown variants"):
        BaseDataset("digits", loads, (0.5,), (0.25,), variants=("tilted",))
    with pytest.raises(ConfigError, match="relative to the data directory"):
        DataFile("../digits.npz", "0" * 32)
    with pytest.raises(ConfigError, match="compute it with ella.data.files.md5"):
        DataFile("digits.npz", "abc")
    taken = DataFile("MNIST/raw/train-images-idx3-ubyte.gz", "0" * 32)
    with pytest.raises(ConfigError, match="a folder of their own"):
        register_dataset(BaseDataset("digits", loads, (0.5,), (0.25,), files=(taken,)))
    assert "digits" not in DATASETS and KNOWN_MD5[taken.path] != taken.md5


def test_objects_in_a_data_file_are_refused(tmp_path, registry):
    np.savez(tmp_path / "objects.npz", x_train=np.array([{"a": 1}], dtype=object))
    load = npz_loader("objects.npz", ("x_train",) * 4)
    register_dataset(
        BaseDataset(
            "objects",
            load,
            (0.5,),
            (0.25,),
            files=(DataFile("objects.npz", md5(tmp_path / "objects.npz")),),
        )
    )
    with pytest.raises(DataFileError, match="allow_pickle.*save plain numeric arrays"):
        load_dataset("objects", data_dir=tmp_path)


def test_the_data_pages_table_of_bases_is_the_registrys():
    rows = [f"| `{d.name}` | {d.about} | {d.where} |" for d in DATASETS.values()]
    table = "\n".join(["| base | images | files |", "|---|---|---|", *rows])
    page = (ROOT / "docs" / "guide" / "data.md").read_text()
    assert table in page, f"docs/guide/data.md's table of bases is not the registry's:\n{table}"
    variants = page[page.index("## Variants") : page.index("## Training-time augmentation")]
    assert all(f"`{v}`" in variants for v in VARIANTS)
