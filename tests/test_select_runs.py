"""``ella select`` on runs it trains: the decisions of the stored reference, the selected
network's weights, ``ella train --select-paths`` and a run's data found where it was.

``data/path_selection_reference.json`` holds what ``ella report RUN --select-paths`` and
``ella report RUN --drop-paths`` decided on a tiny learned CONV+GCONV mixer before the
selection moved to ``ella select``, with the commands that made it (one thread). On the
machine that wrote it the numbers come back to the last bit. Elsewhere the tiny network's
training amplifies float rounding (two threads instead of one moved the evidences by up to
9% and kept every decision), so the evidences and the losing candidates' collapse marks are
compared only where the trained run is the reference's own, the decisions always.
"""

import json
import math
import shlex
from pathlib import Path

import pytest
import torch

from ella import selection
from ella.cli import main
from ella.io import load_torch
from ella.marglik import PriorStructure
from ella.rundir import (
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_CANDIDATE,
    PATH_SELECTION_STATE,
    holds_run,
)
from tests.data.test_datasets import SHARED

REFERENCE = Path(__file__).with_name("data") / "path_selection_reference.json"


@pytest.fixture
def one_thread(monkeypatch):
    """``ella`` in-process with one thread (``ELLA_THREADS``), as the reference was made."""
    threads = torch.get_num_threads()
    monkeypatch.setenv("ELLA_THREADS", "1")
    yield
    torch.set_num_threads(threads)


def decisions(rounds: list[dict], null: dict) -> list[dict]:
    """Per round: the network, its candidates in order, which collapsed, the winner."""
    return [
        {
            "kept": r["kept"],
            "candidates": [row["dropped"] for row in r["rows"]],
            "collapsed": [
                row["dropped"] != selection.CONTROL and selection.collapsed(row, r["rows"][0], null)
                for row in r["rows"]
            ],
            "winner": r["winner"],
        }
        for r in rounds
    ]


def without_marks(decision: dict) -> dict:
    """A round's decision without the losing candidates' collapse marks: which candidate
    collapses in a tiny network is a trajectory that float rounding moves (the GCONV-only
    candidate kept 0.20 of the control's fit in the reference, 1.86 once the instance norm
    summed in another order), where the network, the candidates and the winner are not."""
    winner = decision["candidates"].index(decision["winner"])
    return {**decision, "collapsed": decision["collapsed"][winner]}


def assert_rows_match(rows: list[dict], expected: list[dict]) -> None:
    """The reference's numbers, to its rounding (0.01 nats, 0.001 for the likelihood)."""
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        assert row["kept"] == want["kept"]
        assert row["log_evidence"] == pytest.approx(want["log_evidence"], abs=0.006)
        assert row["log_likelihood"] == pytest.approx(want["log_likelihood"], abs=6e-4)
        assert row["test_accuracy"] == want["test_accuracy"]


@pytest.mark.slow  # trains a tiny run and three candidates (about 30 s on 2 cores)
def test_select_decides_as_report_select_paths_did(tmp_path, capsys, one_thread):
    reference = json.loads(REFERENCE.read_text())
    run = tmp_path / "run"
    train = shlex.split(reference["commands"]["train"].replace("RUN", str(run)))
    assert train[:2] == ["ella", "train"] and main(train[1:]) == 0
    epochs = str(reference["epochs"])
    assert main(["select", str(run), "--epochs", epochs, "--no-progress"]) == 0
    out = capsys.readouterr().out
    record = json.loads((run / PATH_SELECTION).read_text())
    expected = reference["selection"]
    assert record["paths"] == expected["paths"] and record["finished"]
    got, want = (
        decisions(record["rounds"], record["null"]),
        decisions(expected["rounds"], reference["null"]),
    )
    assert [without_marks(d) for d in got] == [without_marks(d) for d in want]
    assert [[r["collapsed"] for r in rd["rows"]] for rd in expected["rounds"]] == [
        d["collapsed"] for d in want
    ]  # the rounded reference reproduces its own collapse marks
    assert record["kept"] == expected["kept"]
    assert f"\nselected: {'+'.join(p.upper() for p in expected['kept'])};" in out

    # --drop-only: the first round again, reused (the reference trained it afresh)
    assert main(["select", str(run), "--epochs", epochs, "--drop-only"]) == 0
    out = capsys.readouterr().out
    drops = json.loads((run / PATH_DROPS).read_text())
    control = drops["rows"][0]["log_evidence"]
    would = [r["dropped"] for r in drops["rows"][1:] if r["log_evidence"] > control]
    assert [r["dropped"] for r in drops["rows"]] == [
        r["dropped"] for r in reference["drop_only"]["rows"]
    ]
    assert would == reference["drop_only"]["would_drop"]
    assert "the evidence would drop: " + ", ".join(p.upper() for p in would) in out

    results = json.loads((run / "results.json").read_text())
    if results["log_marglik"] == pytest.approx(reference["run"]["log_marglik"], rel=1e-6):
        # the run is the reference's own: so are the candidates, to the reference's rounding
        assert record["null"]["log_evidence"] == pytest.approx(
            reference["null"]["log_evidence"], abs=0.006
        )
        assert got == want  # the losing candidates' collapse marks as well
        for got_round, want_round in zip(record["rounds"], expected["rounds"], strict=True):
            assert_rows_match(got_round["rows"], want_round["rows"])
        assert_rows_match(drops["rows"], reference["drop_only"]["rows"])

    # the selected network: the run's, a dropped path's weights at zero, a kept one's not
    from ella.train.runs import load_run

    selected = load_torch(run / PATH_SELECTION_STATE)
    assert selected["kept"] == record["kept"]
    net = load_run(run).net
    net.load_state_dict(selected["model"])
    structure = PriorStructure(net, "layer_path")
    assert len(selected["log_prior"]) == len(structure.names)
    params = [p for p in net.parameters() if p.requires_grad]
    for group, p in zip(structure.tensor_groups, params, strict=True):
        path = group.rpartition(".")[2]
        if path in record["paths"]:
            assert bool(p.any()) == (path in selected["kept"]), group
    assert not (run / PATH_SELECTION_CANDIDATE).exists() and holds_run(run)
    assert main(["report", str(run)]) == 0  # a plain report shows the selection again
    assert "\nselected: " in capsys.readouterr().out


@pytest.mark.slow  # trains a small run and selects its paths
def test_train_select_paths_selects_after_training(tmp_path, capsys):
    from tests.test_cli import TINY

    out = tmp_path / "run"
    args = ["train", "--out", str(out), *TINY, "--paths", "conv", "gconv"]
    assert main([*args, "--select-paths", "--select-epochs", "1"]) == 0
    text = capsys.readouterr().out
    assert "round 1 (network CONV+GCONV):" in text and "\nselected: " in text
    assert json.loads((out / PATH_SELECTION).read_text())["finished"]
    assert (out / PATH_SELECTION_STATE).is_file()


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_train_on_finds_the_data_where_the_run_found_it(tmp_path, monkeypatch):
    """A run on data files in ``--data-dir``: training it on, given no data directory,
    reads them there (not from ``$ELLA_DATA`` or the default cache, empty here)."""
    from ella.train import train
    from tests.train.test_loop import tiny_config

    out = tmp_path / "run"
    train(tiny_config(epochs=2, dataset="mnist", data_dir=str(SHARED)), out)
    monkeypatch.setenv("ELLA_DATA", str(tmp_path / "empty"))
    row, _ = selection.train_on(out, ["fc", "layer1.conv"], 1)
    assert row["kept"] == ["conv", "gconv"] and math.isfinite(row["log_evidence"])
