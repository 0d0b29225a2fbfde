"""``ella select --seeds K``: every candidate at K seeds, each decision called only where the
seeds agree, printed with its spread, resumed seed by seed."""

import json
import math
import statistics

import pytest
import torch

from ella import selection
from ella.cli import main
from ella.errors import ConfigError, RunDirectoryError
from ella.selection.replicates import replicate_seeds, summarise

NULL = {"log_likelihood": -1000.0, "log_evidence": -1010.0}


def test_summarise_against_a_hand_computation():
    d = [30.0, 10.0, 20.0]
    found = summarise(d)
    se = math.sqrt(((30 - 20) ** 2 + (10 - 20) ** 2 + 0) / 2) / math.sqrt(3)  # 5.77
    assert found["mean"] == pytest.approx(20.0) and found["se"] == pytest.approx(se)
    assert found["agree"] == 3 and found["seeds"] == 3 and found["decided"]  # 20 > 2 x 5.77
    wide = summarise([30.0, 1.0, 2.0])  # one sign, but the mean is within 2 SE
    assert wide["agree"] == 3 and not wide["decided"]
    split = summarise([5.0, -1.0, 6.0])
    assert split["agree"] == 2 and not split["decided"]
    one = summarise([100.0])
    assert math.isnan(one["se"]) and not one["decided"]  # one seed decides nothing
    assert replicate_seeds(7, 3) == [7, 1007, 2007]


def test_seeds_are_checked_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="seeds must be an int from 1 to 32; got 0"):
        selection.select(tmp_path, seeds=0)
    assert main(["select", str(tmp_path), "--seeds", "40"]) == 1


def fake_run(directory):
    from tests.selection.fakes import write_config

    return write_config(directory, paths=["conv", "gconv"], seed=3)


#: per seed, the evidence of each candidate: dropping CONV gains +5 and +200 (one sign, not
#: two standard errors: not decided), dropping GCONV loses at both seeds
EVIDENCE = {3: {(): -100.0, ("conv",): -95.0, ("gconv",): -300.0},
            1003: {(): -100.0, ("conv",): 100.0, ("gconv",): -250.0},
            2003: {(): -100.0, ("conv",): -90.0, ("gconv",): -260.0}}  # fmt: skip


def fake_train_on(calls, interrupt_at=None):
    def train_on(run_dir, dropped, epochs, data_dir=None, progress=False, start=None,
                 units=None, criterion=None, seed=None):  # fmt: skip
        if interrupt_at is not None and len(calls) == interrupt_at:
            raise KeyboardInterrupt
        calls.append((tuple(sorted(dropped)), seed))
        kept = [p for p in units if p not in dropped]
        row = {
            "kept": kept, "test_accuracy": 0.5, "test_nll": 1.0,
            "log_evidence": EVIDENCE[seed][tuple(sorted(dropped))], "log_likelihood": -10.0,
            "shares": {p: 100.0 / len(kept) for p in kept},
        }  # fmt: skip
        return row, {"model": {"w": torch.tensor(float(seed))}, "log_prior": torch.zeros(2)}

    return train_on


def test_a_gain_the_seeds_do_not_decide_keeps_the_control(tmp_path, monkeypatch, capsys):
    run = fake_run(tmp_path / "run")
    calls = []
    monkeypatch.setattr(selection, "null_model", lambda run_dir, data_dir=None: NULL)
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, interrupt_at=4))
    with pytest.raises(KeyboardInterrupt):  # stopped before GCONV's first seed
        selection.select(run, epochs=2, seeds=2)
    assert calls == [((), 3), ((), 1003), (("conv",), 3), (("conv",), 1003)]
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls))
    record = selection.select(run, epochs=2, seeds=2)
    assert calls[4:] == [(("gconv",), 3), (("gconv",), 1003)]  # finished rows kept
    assert record["seeds"] == 2 and record["finished"] and record["kept"] == ["conv", "gconv"]
    this = record["rounds"][0]
    assert this["winner"] == "none"  # CONV's mean gain +102.5 is not decided at 2 seeds
    conv = this["rows"][1]
    assert conv["log_evidence"] == statistics.fmean([-95.0, 100.0])
    assert [r["seed"] for r in conv["replicates"]] == [3, 1003]
    answer = selection.format_answer(run, {}).splitlines()[0]
    assert "(ella select --seeds 2, 2 epochs per network): CONV+GCONV" in answer
    assert "dropping CONV is ahead (+102 ± 98 nats, 2 of 2 seeds agree, not decided)" in answer
    assert "; not decided at 2 seeds: asking with --seeds 4 trains 6 more networks;" in answer
    sure = selection.decision(record)
    assert sure["seeds"] == 2 and not sure["decided"] and sure["kept"] == ["conv", "gconv"]
    (step,) = sure["steps"]
    assert step["unit"] == "conv" and step["action"] == "keep" and not step["decided"]
    assert step["mean"] == pytest.approx(102.5) and step["agree"] == 2
    assert step["se"] == pytest.approx(statistics.stdev([5.0, 200.0]) / 2**0.5)
    assert sure["more"] == {"seeds": 4, "networks": 6, "minutes": None}  # no seconds in rows
    text = selection.format_path_selection(record)
    assert "-175 ± 25, 2 of 2 seeds agree, decided" in text  # GCONV's loss is decided

    # another number of seeds is another selection: refused unasked
    with pytest.raises(RunDirectoryError, match="--seeds 2"):
        selection.select(run, epochs=2, seeds=3)


def test_an_interrupted_candidate_trains_only_the_seeds_it_lacks(tmp_path, monkeypatch):
    run = fake_run(tmp_path / "run")
    calls = []
    monkeypatch.setattr(selection, "null_model", lambda run_dir, data_dir=None: NULL)
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, interrupt_at=5))
    with pytest.raises(KeyboardInterrupt):  # CONV's first two seeds done, its third not
        selection.select(run, epochs=2, seeds=3, drop_only=True)
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls))
    saved = json.loads((run / "path_drops_replicates.json").read_text())
    assert len(saved) == 3  # the control's seeds 1003 and 2003, CONV's 1003
    result = selection.select(run, epochs=2, seeds=3, drop_only=True)
    # CONV's first seed again (its weights are the row's) and its third, not its second
    assert calls[5:] == [(("conv",), 3), (("conv",), 2003), (("gconv",), 3),
                         (("gconv",), 1003), (("gconv",), 2003)]  # fmt: skip
    assert result["seeds"] == 3
    text = selection.format_path_drops(result)
    assert "the evidence keeps every path" in text  # CONV's gain is not decided
    assert "+72 ± 64 nats, 3 of 3 seeds agree, not decided" in text


@pytest.mark.slow  # a tiny run and six candidates of one epoch
def test_ella_select_seeds_on_a_tiny_run(tmp_path, capsys):
    run = tmp_path / "run"
    tiny = [
        "--train-size", "48", "--test-size", "32", "--width", "1", "--epochs", "2",
        "--batch-size", "16", "--n-epochs-burnin", "1", "--marglik-frequency", "1",
        "--n-hypersteps", "2", "--no-progress", "--paths", "conv", "gconv",
    ]  # fmt: skip
    assert main(["train", "--out", str(run), *tiny]) == 0
    capsys.readouterr()
    ask = ["select", str(run), "--drop-only", "--epochs", "1", "--seeds", "2", "--no-progress"]
    assert main(ask) == 0
    out = capsys.readouterr().out
    drops = json.loads((run / "path_drops.json").read_text())
    assert drops["seeds"] == 2 and [len(r["replicates"]) for r in drops["rows"]] == [2, 2, 2]
    for row in drops["rows"]:  # the row's evidence is its seeds' mean
        mean = statistics.fmean(r["log_evidence"] for r in row["replicates"])
        assert row["log_evidence"] == pytest.approx(mean)
    assert "seeds agree" in out
    assert main(ask) == 0  # resumed: nothing trained again, the same record
    assert json.loads((run / "path_drops.json").read_text()) == drops


def test_the_per_layer_figure_labels_a_replicated_drop_with_its_spread():
    def row(dropped, evidences):
        reps = [{"seed": s, "log_evidence": e} for s, e in zip((0, 1000), evidences, strict=True)]
        return {"dropped": dropped, "log_evidence": statistics.fmean(evidences),
                "log_likelihood": -10.0, "replicates": reps}  # fmt: skip

    groups = ["layer1.conv", "layer1.gconv"]
    record = {
        "epochs": 2, "paths": groups, "per_layer": True, "seeds": 2, "null": NULL,
        "kept": ["layer1.gconv"], "finished": True,
        "rounds": [{"kept": groups, "winner": "layer1.conv",
                    "rows": [row("none", [-100.0, -110.0]), row("layer1.conv", [-60.0, -66.0]),
                             row("layer1.gconv", [-300.0, -320.0])]}],
    }  # fmt: skip
    labels = selection.answer.per_layer_labels(record)
    # gains +40 and +44: mean +42, SE stdev([40, 44]) / sqrt(2) = 2
    assert labels == {"layer1.conv": "dropped, round 1\n+42 ± 2 nats", "layer1.gconv": "kept"}
