"""ella.schemas, and every file ella reads back under generated corruptions.

The property (hypothesis, seeded): a file of a finished tiny run, corrupted (a value of
another JSON type, a key removed or added, the text cut short, random bytes), is either read
to the same answer as the original or refused with one error that names the file; never a
raw exception, and never a different answer printed with exit status 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ella.cli import main
from ella.errors import CheckpointError, EllaError
from ella.export import load_exported
from ella.schemas import (
    NUMBER,
    PATH_DROPS_FILE,
    RESULTS_FILE,
    SELECTION_FILE,
    ListOf,
    MapOf,
    Maybe,
    Record,
    check,
    mismatch,
)

# ---------------------------------------------------------------- the schema language


def test_mismatch_names_the_key_what_it_should_be_and_what_it_is():
    spec = Record(
        {"epochs": int, "rounds": ListOf(Record({"winner": Maybe(str), "rows": list}))},
        {"null": MapOf(NUMBER)},
    )
    good = {"epochs": 2, "rounds": [{"winner": None, "rows": []}], "extra": "kept"}
    assert mismatch(good, spec) is None
    cases = [
        ({**good, "epochs": True}, "epochs should be an integer, found true or false"),
        ({**good, "epochs": 2.0}, "epochs should be an integer, found the number 2.0"),
        ({**good, "rounds": "ab"}, "rounds should be a list of objects, found the string 'ab'"),
        ({**good, "rounds": [{"rows": []}]}, "rounds[0].winner is missing"),
        ({**good, "rounds": [{"winner": 3, "rows": []}]},
         "rounds[0].winner should be a string or null, found the number 3"),
        ({**good, "null": {"a": "x"}}, "null.a should be a number, found the string 'x'"),
        ({**good, "null": {"a": None}}, None),  # a non-finite number is written as null
        ([good], "the whole file should be an object, found a list"),
    ]  # fmt: skip
    for value, expected in cases:
        assert mismatch(value, spec) == expected
    with pytest.raises(CheckpointError, match=r"f.json is not as ella writes it: epochs .*; fix"):
        check({**good, "epochs": "2"}, spec, Path("f.json"), "fix")


# ---------------------------------------------------------------- generated corruptions
#: a learned CONV+GCONV mixer small enough for a selection of 1 epoch per candidate
MIXER = [
    "--train-size", "64", "--test-size", "32", "--width", "1", "--epochs", "1",
    "--n-epochs-burnin", "1", "--marglik-frequency", "1", "--n-hypersteps", "1",
    "--batch-size", "32", "--paths", "conv", "gconv", "--no-progress",
]  # fmt: skip


def ella(argv: list[str]) -> tuple[int, str, str]:
    """``ella argv`` in-process: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def selected_run(tmp_path_factory) -> Path:
    """A finished learned mixer with a finished selection, its drops and an export."""
    run = tmp_path_factory.mktemp("schemas") / "run"
    for argv in (
        ["train", "--out", str(run), *MIXER],
        ["select", str(run), "--epochs", "1", "--no-progress"],
        ["select", str(run), "--epochs", "1", "--drop-only", "--no-progress"],
        ["export", str(run), "--threshold", "0.5"],
    ):
        code, _, err = ella(argv)
        assert code == 0, err
    return run


def _json_kind(value) -> str:
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"  # null is how ella writes a non-finite number
    return type(value).__name__


#: one value of each JSON kind
OTHERS = [True, 7, "text", [1, 2], {"a": 1}]


def _places(value, at=()) -> list[tuple]:
    """The path of every value inside ``value`` (dict keys and list indices)."""
    found = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else []
    )
    for key, item in items:
        found.append((*at, key))
        found.extend(_places(item, (*at, key)))
    return found


def _parent(data, place):
    for key in place[:-1]:
        data = data[key]
    return data


@st.composite
def corruptions(draw, original: bytes, decode, encode):
    """``(what, where, bytes)``: the file ``original`` corrupted one way (``decode``/``encode``
    turn its bytes into plain values and back)."""
    how = draw(st.sampled_from(["retype", "delete", "extra", "truncate", "bytes"]))
    if how == "truncate":
        cut = draw(st.integers(0, len(original) - 1))
        return f"cut at byte {cut}", (), original[:cut]
    if how == "bytes":
        seed = draw(st.integers(0, 2**32 - 1))
        size = draw(st.integers(1, 512))
        return f"random bytes {seed}", (), random.Random(seed).randbytes(size)
    data = decode(original)
    places = _places(data)
    dicts = [()] + [p for p in places if isinstance(_parent(data, (*p, None)), dict)]
    if how == "extra":
        place = draw(st.sampled_from(dicts))
        _parent(data, (*place, None))["zz_added_later"] = draw(st.sampled_from(OTHERS))
        return f"a key added at {place}", place, encode(data)
    keyed = [p for p in places if isinstance(p[-1], str)]
    place = draw(st.sampled_from(keyed if how == "delete" else places))
    parent = _parent(data, place)
    if how == "delete":
        del parent[place[-1]]
        return f"{place} removed", place, encode(data)
    old = parent[place[-1]]
    new = draw(st.sampled_from([v for v in OTHERS if _json_kind(v) != _json_kind(old)]))
    parent[place[-1]] = new
    return f"{place} = {new!r}", place, encode(data)


def _json_file(path: Path):
    original = path.read_bytes()
    return original, corruptions(
        original, lambda b: json.loads(b), lambda d: json.dumps(d).encode()
    )


def _torch_file(path: Path):
    original = path.read_bytes()

    def decode(b: bytes):
        return torch.load(io.BytesIO(b), weights_only=True)

    def encode(d) -> bytes:
        buffer = io.BytesIO()
        torch.save(d, buffer)
        return buffer.getvalue()

    return original, corruptions(original, decode, encode)


PROPERTY = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: per file kind: the file in the run, the command that reads it (RUN: the run) and its
#: schema (None: checked by the configuration class)
READERS = {
    "results.json": (["report", "RUN"], RESULTS_FILE),
    "path_selection.json": (["report", "RUN"], SELECTION_FILE),
    "config.json": (["train", "--out", "RUN", "--resume", "--no-progress"], None),
    "path_drops.json": (
        ["select", "RUN", "--epochs", "1", "--drop-only", "--no-progress"],
        PATH_DROPS_FILE,
    ),
}


def described(spec, place: tuple) -> tuple[object, bool] | None:
    """The schema ``spec`` at ``place`` and whether that key may be absent: an optional
    key of a record (an older version did not write it), or an entry of a map of named
    values (a path or a layer that a run lacks, printed as missing); None where the schema
    does not describe it."""
    optional = False
    for key in place:
        while isinstance(spec, Maybe):
            spec = spec.spec
        if isinstance(spec, Record) and key in spec.required:
            spec, optional = spec.required[key], False
        elif isinstance(spec, Record) and key in spec.optional:
            spec, optional = spec.optional[key], True
        elif isinstance(spec, MapOf):
            spec, optional = spec.value, True
        elif isinstance(spec, ListOf):
            spec, optional = spec.item, False
        else:
            return None  # not described: the reader must not depend on it
    return spec, optional


def changes_the_data(schema, what: str, place: tuple) -> bool:
    """Whether a corruption is a change of the data rather than of the file's form, which
    the reader may show as it is: an absent key that may be absent (:func:`described`), or
    an entry added to a map of named values."""
    found = described(schema, place) if schema is not None else None
    if found is None:
        return False
    spec, optional = found
    if what.endswith("removed"):
        return optional
    return what.startswith("a key added") and isinstance(spec, MapOf)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(READERS))
def test_a_corrupted_file_is_read_alike_or_refused_by_name(selected_run, tmp_path, name):
    scratch = tmp_path / "run"
    command, schema = READERS[name]
    argv = [str(scratch) if a == "RUN" else a for a in command]
    shutil.copytree(selected_run, scratch)
    expected = ella(argv)
    assert expected[0] == 0, expected[2]
    original, strategy = _json_file(selected_run / name)

    @PROPERTY
    @given(strategy)
    def read(corruption):
        what, place, data = corruption
        shutil.rmtree(scratch)
        shutil.copytree(selected_run, scratch)
        (scratch / name).write_bytes(data)
        code, out, err = ella(argv)
        assert "Traceback" not in err, (what, err)
        if code == 0:
            assert changes_the_data(schema, what, place) or out == expected[1], (what, out)
        else:
            assert code == 1 and str(scratch / name) in err, (what, err)

    read()


@pytest.mark.slow
def test_a_corrupted_checkpoint_is_resumed_alike_or_refused_by_name(selected_run, tmp_path):
    """The checkpoint of a finished run, read by --resume (which loads and checks it)."""
    scratch = tmp_path / "run"
    argv = ["train", "--out", str(scratch), "--resume", "--no-progress"]
    shutil.copytree(selected_run, scratch)
    expected = ella(argv)
    assert expected[0] == 0, expected[2]
    original, strategy = _torch_file(selected_run / "checkpoint.pt")

    @PROPERTY
    @given(strategy)
    def read(corruption):
        what, _, data = corruption
        (scratch / "checkpoint.pt").write_bytes(data)
        code, out, err = ella(argv)
        assert "Traceback" not in err, (what, err)
        if code == 0:
            assert out == expected[1], (what, out)
        else:
            assert code == 1 and "checkpoint.pt" in err, (what, err)

    read()


@pytest.mark.slow
def test_a_corrupted_export_is_loaded_alike_or_refused_by_name(selected_run, tmp_path):
    path = tmp_path / "exported.pt"
    net = load_exported(selected_run)
    x = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        expected = net(x)
    original, strategy = _torch_file(selected_run / "exported.pt")

    @PROPERTY
    @given(strategy)
    def read(corruption):
        what, _, data = corruption
        path.write_bytes(data)
        try:
            loaded = load_exported(selected_run, path)
        except EllaError as err:
            assert isinstance(err, CheckpointError) and str(path) in str(err), (what, err)
            return
        with torch.no_grad():
            assert torch.equal(loaded(x), expected), what

    read()
