"""ella.schemas, and every file ella reads back under generated corruptions.

The property (hypothesis, seeded): a file of a finished tiny run, corrupted (a value of
another JSON type, a key removed or added, the text cut short, random bytes; in a ``.pt``
file also flipped bits in a tensor's bytes and a tensor cast to another dtype, with its
checksum left or written again), is either read to the same answer as the original or
refused with one error that names the file; never a raw exception, and never a different
answer printed with exit status 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ella.cli import main
from ella.errors import CheckpointError, EllaError
from ella.export import load_exported
from ella.io import DIGEST_KEY, values_digest
from ella.schemas import (
    FINITE,
    NUMBER,
    PATH,
    PATH_DROPS_FILE,
    RESULTS_FILE,
    SELECTION_FILE,
    UNIT,
    ListOf,
    MapOf,
    Maybe,
    Record,
    at_least,
    between,
    check,
    mismatch,
    one_of,
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
def selected_run(session_folder) -> Path:
    """A finished learned mixer with a finished selection, its drops and an export, made
    once in the session (tests copy it before they change it)."""
    from tests.session_once import made_once

    def make(where: Path) -> None:
        run = where / "run"
        for argv in (
            ["train", "--out", str(run), *MIXER],
            ["select", str(run), "--epochs", "1", "--no-progress"],
            ["select", str(run), "--epochs", "1", "--drop-only", "--no-progress"],
            ["export", str(run), "--threshold", "0.5"],
        ):
            code, _, err = ella(argv)
            assert code == 0, err

    return made_once(session_folder, "schemas", make) / "run"


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


def _tensor_records(original: bytes) -> list[tuple[int, int]]:
    """``(start, size)`` of each tensor's bytes in a torch file (an uncompressed zip)."""
    found = []
    with zipfile.ZipFile(io.BytesIO(original)) as archive:
        for record in archive.infolist():
            if "/data/" in record.filename and record.file_size:
                head = record.header_offset
                name_len, extra_len = (
                    int.from_bytes(original[head + k : head + k + 2], "little") for k in (26, 28)
                )
                found.append((head + 30 + name_len + extra_len, record.file_size))
    return found


#: the dtypes a tensor is cast to
CASTS = [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.uint8]


@st.composite
def torch_damage(draw, original: bytes, decode, encode):
    """``(what, where, bytes)``: the torch file ``original`` with flipped bits in one tensor's
    bytes, or one tensor cast to another dtype, its checksum (:data:`DIGEST_KEY`) left as it
    was or written again (a file that is whole but holds a tensor of the wrong dtype)."""
    if draw(st.booleans()):
        start, size = draw(st.sampled_from(_tensor_records(original)))
        seed, bits = draw(st.integers(0, 2**32 - 1)), draw(st.integers(1, 20))
        rng, raw = random.Random(seed), bytearray(original)
        for _ in range(bits):
            raw[start + rng.randrange(size)] ^= 1 << rng.randrange(8)
        return f"{bits} bits flipped (seed {seed})", (), bytes(raw)
    data = decode(original)
    places = [p for p in _places(data) if isinstance(_parent(data, p)[p[-1]], torch.Tensor)]
    place = draw(st.sampled_from(places))
    parent = _parent(data, place)
    dtype = draw(st.sampled_from([d for d in CASTS if d != parent[place[-1]].dtype]))
    parent[place[-1]] = parent[place[-1]].to(dtype)
    rewritten = draw(st.booleans()) and DIGEST_KEY in data
    if rewritten:
        data.pop(DIGEST_KEY)
        data[DIGEST_KEY] = values_digest(data)
    checksum = "written again" if rewritten else "left"
    return f"{place} cast to {dtype}, checksum {checksum}", place, encode(data)


def _torch_file(path: Path):
    original = path.read_bytes()

    def decode(b: bytes):
        return torch.load(io.BytesIO(b), weights_only=True)

    def encode(d) -> bytes:
        buffer = io.BytesIO()
        torch.save(d, buffer)
        return buffer.getvalue()

    return original, st.one_of(
        corruptions(original, decode, encode), torch_damage(original, decode, encode)
    )


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


#: per torch file kind of a run: the command that reads it (RUN: the run); the export is
#: read by ella.load_exported, below
TORCH_READERS = {
    # the checkpoint of a finished run, read by --resume (which loads and checks it)
    "checkpoint.pt": ["train", "--out", "RUN", "--resume", "--no-progress"],
    # the selected network, read when the finished selection is shown again
    "path_selection.pt": ["select", "RUN", "--epochs", "1", "--no-progress"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TORCH_READERS))
def test_a_corrupted_torch_file_is_read_alike_or_refused_by_name(selected_run, tmp_path, name):
    scratch = tmp_path / "run"
    argv = [str(scratch) if a == "RUN" else a for a in TORCH_READERS[name]]
    shutil.copytree(selected_run, scratch)
    expected = ella(argv)
    assert expected[0] == 0, expected[2]
    original, strategy = _torch_file(selected_run / name)

    @PROPERTY
    @given(strategy)
    def read(corruption):
        what, _, data = corruption
        (scratch / name).write_bytes(data)
        code, out, err = ella(argv)
        assert "Traceback" not in err, (what, err)
        if code == 0:
            assert out == expected[1], (what, out)
        else:
            assert code == 1 and name in err, (what, err)

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


# ---------------------------------------------------------------- values outside their domain


def test_a_domain_names_what_a_value_can_be():
    spec = Record(
        {"n": at_least(0), "acc": between(0, 1), "x": ListOf(FINITE), "kept": ListOf(PATH)},
        {"state": one_of("final", "best_evidence"), "units": ListOf(UNIT)},
    )
    good = {"n": 0, "acc": 1, "x": [-1.5, 2], "kept": ["fc", "gconv"], "units": ["layer3.conv"]}
    assert mismatch(good, spec) is None
    kinds = "one of fc, conv, gconv, residual"
    cases = [
        ({**good, "n": -1}, "n should be an integer of at least 0, found the number -1"),
        ({**good, "acc": 1.5}, "acc should be a finite number from 0 to 1, found the number 1.5"),
        ({**good, "x": [1, None]}, "x[1] should be a finite number, found null"),
        ({**good, "x": [float("nan")]}, "x[0] should be a finite number, found the number nan"),
        ({**good, "x": ["NaN"]}, "x[0] should be a finite number, found the string 'NaN'"),
        ({**good, "x": [{"a": 1}]}, "x[0] should be a finite number, found an object"),
        ({**good, "kept": "abc"}, "kept should be a list of strings, found the string 'abc'"),
        ({**good, "kept": ["fc", "nonsense"]},
         f"kept[1] should be a path name ({kinds}), found the string 'nonsense'"),
        ({**good, "state": "best"},
         "state should be one of 'final', 'best_evidence', found the string 'best'"),
        ({**good, "units": ["layer3.nonsense"]},
         f"units[0] should be a path name ({kinds}) or a layer's path (layer3.conv), found the "
         "string 'layer3.nonsense'"),
    ]  # fmt: skip
    for value, expected in cases:
        assert mismatch(value, spec) == expected


#: the fix of a selection record that cannot be read
SELECTION_FIX = "add --overwrite to ella select to start the selection again without it"


def _finished_selection() -> dict:
    """A finished whole-path selection of CONV+GCONV: round 1 drops CONV, round 2 keeps GCONV."""

    def row(dropped, kept, evidence):
        return {"dropped": dropped, "kept": kept, "test_accuracy": 0.5, "test_nll": 1.0,
                "log_evidence": evidence, "log_likelihood": -5.0,
                "shares": {p: 100.0 / len(kept) for p in kept}}  # fmt: skip

    return {
        "epochs": 2, "paths": ["conv", "gconv"], "kept": ["gconv"], "finished": True,
        "rounds": [
            {"kept": ["conv", "gconv"], "winner": "conv",
             "rows": [row("none", ["conv", "gconv"], -10.0), row("conv", ["gconv"], -8.0),
                      row("gconv", ["conv"], -12.0)]},
            {"kept": ["gconv"], "winner": "none", "rows": [row("none", ["gconv"], -8.0)]},
        ],
        "null": {"log_likelihood": -20.0, "log_evidence": -21.0},
    }  # fmt: skip


def _refused_record(path: Path, record: dict, read, *needles: str) -> None:
    """``record`` written to ``path`` is refused by ``read(path)`` with every needle, and the
    file is left as it was."""
    path.write_text(json.dumps(record))
    before = path.read_bytes()
    with pytest.raises(CheckpointError) as refusal:
        read(path)
    for needle in (str(path), "is not as ella writes it", *needles):
        assert needle in str(refusal.value), str(refusal.value)
    assert path.read_bytes() == before


def test_a_selection_record_names_only_its_own_paths(tmp_path):
    from ella.selection import read_selection

    path = tmp_path / "path_selection.json"
    path.write_text(json.dumps(_finished_selection()))
    assert read_selection(path)["kept"] == ["gconv"]

    def changed(change) -> dict:
        record = _finished_selection()
        change(record)
        return record

    rows = lambda r: r["rounds"][0]["rows"]  # noqa: E731
    cases = [
        (lambda r: r.update(kept=["fc", "nonsense"]),
         "kept[1] should be a path name", "found the string 'nonsense'"),
        (lambda r: r.update(kept=["fc"]), "kept[0] is 'fc', none of the record's paths"),
        (lambda r: r.update(kept=["conv"]), "kept is [conv], not what its rounds kept ([gconv])"),
        (lambda r: r.update(kept=["gconv", "gconv"]), "kept names 'gconv' twice"),
        (lambda r: r.update(paths=["layer1.conv", "layer1.gconv"]),
         "paths[0] is 'layer1.conv', not a path name as a whole-path selection names them"),
        (lambda r: r["rounds"][1].update(kept=["conv"]),
         "rounds[1].kept is [conv], not what the rounds before it kept ([gconv])"),
        (lambda r: rows(r)[2].update(dropped="fc"),
         "rounds[0].rows[2].dropped is 'fc', neither 'none' nor one of the round's kept paths"),
        (lambda r: rows(r)[1].update(kept=["conv"]),
         "rounds[0].rows[1].kept is [conv], not the round's kept paths without 'conv'"),
        (lambda r: rows(r)[1].update(log_evidence=None),
         "rounds[0].rows[1].log_evidence should be a finite number, found null"),
        (lambda r: rows(r)[1].update(test_accuracy=50.0),
         "rounds[0].rows[1].test_accuracy should be a finite number from 0 to 1"),
        (lambda r: rows(r)[1]["shares"].update(gconv="NaN"),
         "rounds[0].rows[1].shares.gconv should be a finite number, found the string 'NaN'"),
        (lambda r: r["null"].update(log_evidence={"a": 1}),
         "null.log_evidence should be a finite number, found an object"),
        (lambda r: r.update(epochs=0), "epochs should be an integer of at least 1"),
        (lambda r: r["rounds"][1].update(winner=None),
         "it is finished but its last round (round 2) has no winner"),
        (lambda r: r.update(criterion="validation"),
         "rounds[0].rows[0].validation_log_likelihood is missing"),
    ]  # fmt: skip
    for change, *needles in cases:
        _refused_record(path, changed(change), read_selection, *needles, SELECTION_FIX)


def test_a_per_layer_record_names_layers_paths(tmp_path):
    from ella.selection import read_selection

    record = {
        "epochs": 2, "paths": ["layer1.conv", "layer1.gconv"],
        "kept": ["layer1.conv", "layer1.gconv"], "finished": False, "per_layer": True, "rounds": [],
    }  # fmt: skip
    path = tmp_path / "path_selection_per_layer.json"
    path.write_text(json.dumps(record))
    assert read_selection(path)["paths"] == record["paths"]
    _refused_record(
        path, {**record, "paths": ["conv", "gconv"], "kept": ["conv", "gconv"]}, read_selection,
        "paths[0] is 'conv', not a layer's path (layer3.conv) as a per-layer selection names them",
    )  # fmt: skip
    _refused_record(
        path, {**record, "kept": ["layer2.conv"]}, read_selection,
        "kept[0] is 'layer2.conv', none of the record's paths (layer1.conv, layer1.gconv)",
    )  # fmt: skip


def test_drops_name_only_the_controls_paths(tmp_path):
    from ella.selection import read_drops

    first = _finished_selection()["rounds"][0]["rows"]
    path = tmp_path / "path_drops.json"
    path.write_text(json.dumps({"epochs": 2, "rows": first}))
    assert [r["dropped"] for r in read_drops(path)["rows"]] == ["none", "conv", "gconv"]
    fix = "add --overwrite to ella select --drop-only to train them again"
    cases = [
        ({"dropped": "fc"}, "rows[2].dropped is 'fc', none of the control's kept paths"),
        ({"dropped": "nonsense"}, "rows[2].dropped is 'nonsense', not a path name"),
        ({"dropped": "conv"}, "rows[2].dropped is 'conv', which rows[1] drops"),
        ({"kept": ["conv", "gconv"]}, "rows[2].kept is [conv, gconv], not the control's without"),
        ({"log_evidence": None}, "rows[2].log_evidence should be a finite number, found null"),
    ]
    for change, needle in cases:
        rows = [*first[:2], {**first[2], **change}]
        _refused_record(path, {"epochs": 2, "rows": rows}, read_drops, needle, fix)


def test_select_refuses_a_record_it_cannot_read_before_any_work(tmp_path, monkeypatch):
    """A round's row with log evidence null: refused before a candidate is trained, and the
    record is not rewritten."""
    from ella import selection
    from tests.selection.fakes import fake_train_on, write_config

    run = write_config(tmp_path / "run")
    monkeypatch.setattr(selection, "null_model", lambda run_dir, data_dir=None: NULL_MODEL)
    calls = []
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls))
    record = selection.select_paths(run, 3)
    assert record["finished"] and calls
    record["rounds"][0]["rows"][1]["log_evidence"] = None
    path = run / "path_selection.json"
    path.write_text(json.dumps(record))
    before, calls[:] = path.read_bytes(), []
    with pytest.raises(CheckpointError) as refusal:
        selection.select(run, epochs=3, progress=False)
    message = str(refusal.value)
    assert str(path) in message and "--overwrite starts the selection again" in message
    assert "rounds[0].rows[1].log_evidence should be a finite number, found null" in message
    assert calls == [] and path.read_bytes() == before


NULL_MODEL = {"log_likelihood": -1000.0, "log_evidence": -1010.0}


def test_results_are_refused_where_a_value_is_not_a_number(run, capsys):
    """``ella train --resume`` of a finished run, and ``ella report``, check the values of
    results.json before reading them into the table."""
    from ella.rundir import RESULTS_FIX
    from tests.cli_runs import refused, snapshot

    path = run / "results.json"
    results = json.loads(path.read_text())
    group = next(iter(results["prior_variance"]))
    path.write_text(json.dumps({**results, "prior_variance": {group: {"a": 1}}}))
    before = snapshot(run)
    needles = [
        str(path), f"prior_variance.{group} should be a finite number of at least 0, found an "
        "object", RESULTS_FIX,
    ]  # fmt: skip
    refused(capsys, ["train", "--out", str(run), "--resume", "--no-progress"], 1, *needles)
    refused(capsys, ["report", str(run)], 1, *needles)
    assert snapshot(run) == before
    # a row of the per-layer table, which the table formats
    row = {"layer": "layer1", "effective": {"conv": 1.0}, "parameters": {"conv": 4},
           "prior_variance": {"conv": {"a": 1}}}  # fmt: skip
    assert mismatch({**results, "effective_parameters": [row]}, RESULTS_FILE) == (
        "effective_parameters[0].prior_variance.conv should be a finite number of at least 0, "
        "found an object"
    )
    assert mismatch({**results, "parameters": -1}, RESULTS_FILE) == (
        "parameters should be an integer of at least 0, found the number -1"
    )


def test_report_refuses_a_selection_that_keeps_a_path_it_does_not_have(run, capsys):
    from tests.cli_runs import refused, snapshot

    record = _finished_selection()
    for kept, needle in (
        (["fc", "nonsense"], "kept[1] should be a path name"),
        (["fc", "conv"], "kept[0] is 'fc', none of the record's paths (conv, gconv)"),
    ):
        path = run / "path_selection.json"
        path.write_text(json.dumps({**record, "kept": kept}))
        before = snapshot(run)
        err = refused(capsys, ["report", str(run)], 1, str(path), needle, SELECTION_FIX)
        assert "FC+NONSENSE" not in err and snapshot(run) == before
