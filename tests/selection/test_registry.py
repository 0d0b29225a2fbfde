"""A selection made of units: a search and a criterion defined outside the package (the
example of docs/development.md) run by ``ella select``, resumed, and printed by
``ella report``, with no file of the package changed."""

import json
import re
from pathlib import Path

import pytest

from ella import selection
from ella.cli import main
from ella.errors import ConfigError
from ella.selection import CRITERIA, LAYER_PATHS, SEARCHES, WHOLE_PATHS
from tests.cli_runs import TINY_MIXER

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def registries():
    """The registries as they are, restored after the test."""
    saved = dict(SEARCHES), dict(CRITERIA)
    yield
    for registry, before in zip((SEARCHES, CRITERIA), saved, strict=True):
        registry.clear()
        registry.update(before)


def development_example() -> str:
    """The Python example of docs/development.md's "Adding a search or a criterion"."""
    text = (ROOT / "docs" / "development.md").read_text()
    section = text[text.index("## Adding a search or a criterion") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_unit_kinds_own_their_labels_and_what_a_round_may_drop():
    assert WHOLE_PATHS.label("conv") == "CONV" and LAYER_PATHS.label("layer3.conv") == "layer3 CONV"
    assert LAYER_PATHS.kept_label(["layer1.conv", "layer1.gconv", "layer2.gconv"]) == (
        "layer1 CONV+GCONV, layer2 GCONV"
    )
    assert WHOLE_PATHS.droppable(["conv"]) == [] and WHOLE_PATHS.droppable(["fc", "conv"])
    assert LAYER_PATHS.droppable(["layer1.conv", "layer1.gconv", "layer2.gconv"]) == [
        "layer1.conv",
        "layer1.gconv",
    ]


def test_unknown_or_contradictory_choices_are_refused_by_name(registries):
    with pytest.raises(ConfigError, match="--search must be one of greedy, per_layer, drop"):
        selection.search_of("nope", option="--search")
    with pytest.raises(ConfigError, match="has no one-round form"):
        selection.search_of(drop_only=True, per_layer=True)
    with pytest.raises(ConfigError, match="one of evidence, training_speed, validation; got"):
        selection.criterion_of("nope")
    with pytest.raises(ConfigError, match="exists already"):
        selection.register_criterion(CRITERIA["evidence"])
    with pytest.raises(ConfigError, match="a record file of its own"):
        selection.register_search(
            type("Same", (selection.Search,), {"name": "same", "files": SEARCHES["drop"].files})()
        )


@pytest.mark.slow  # a tiny run and four candidates of one epoch
def test_a_search_and_a_criterion_of_ones_own_run_resume_and_are_reported(
    tmp_path, capsys, monkeypatch, registries
):
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *TINY_MIXER]) == 0
    exec(development_example(), {})  # registers first_path and training_fit
    assert "first_path" in SEARCHES and "training_fit" in CRITERIA
    capsys.readouterr()

    # interrupted after its first candidate, the search resumes with that row kept
    real, calls = selection.train_on, []

    def interrupted_once(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(selection, "train_on", interrupted_once)
    ask = ["select", str(run), "--search", "first_path", "--criterion", "training_fit"]
    assert main([*ask, "--epochs", "1", "--no-progress"]) == 130
    first = json.loads((run / "first_path.json").read_text())["rows"]
    assert [r["dropped"] for r in first] == ["none"]
    assert main([*ask, "--epochs", "1", "--no-progress"]) == 0
    rows = json.loads((run / "first_path.json").read_text())["rows"]
    assert rows[0] == first[0] and [r["dropped"] for r in rows] == ["none", "conv"]
    assert calls == [[], ["conv"], ["conv"]]  # the control was not trained again
    assert all(isinstance(r["training_log_likelihood"], float) for r in rows)
    out = capsys.readouterr().out
    assert "path drops:" in out and f"written: {run / 'first_path.json'}" in out

    # the greedy search under the new criterion: its record names it, the report prints it
    monkeypatch.setattr(selection, "train_on", real)
    assert main(["select", str(run), "--criterion", "training_fit", "--epochs", "1"]) == 0
    record = json.loads((run / "path_selection.json").read_text())
    assert record["criterion"] == "training_fit" and record["finished"]
    for this in record["rounds"]:  # each round decided by the criterion's field
        eligible = [this["rows"][0]] + selection.kept_their_fit(this["rows"], record["null"])
        best = max(eligible, key=lambda r: r["training_log_likelihood"])
        assert this["winner"] == best["dropped"]
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "path drops:" in out  # the search of one's own, reported
    assert "raises the train log lik (training_fit) most" in out
    assert "by train log lik (ella select --criterion training_fit" in out


def test_the_validation_criterion_needs_a_validation_split(tmp_path):
    from tests.selection.fakes import write_config

    run = write_config(tmp_path / "run", paths=["conv", "gconv"])
    with pytest.raises(ConfigError, match="holds none: train it with a validation split"):
        selection.select(run, criterion="validation")
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "results.json"]


@pytest.mark.slow  # a tiny run with a validation split and three candidates of one epoch
def test_the_validation_criterion_scores_the_selected_network_on_the_held_out_images(
    tmp_path, capsys
):
    import dataclasses

    import torch

    from ella.io import load_torch
    from ella.train import TrainConfig, Trainer, evaluate

    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *TINY_MIXER, "--validation-size", "16"]) == 0
    ask = ["select", str(run), "--criterion", "validation", "--epochs", "1", "--no-progress"]
    assert main(ask) == 0
    out = capsys.readouterr().out
    record = json.loads((run / "path_selection.json").read_text())
    assert record["criterion"] == "validation" and "val log lik" in out
    selected = load_torch(run / "path_selection.pt")
    config = TrainConfig.from_dict(json.loads((run / "config.json").read_text()))
    trainer = Trainer(dataclasses.replace(config, progress=False), tmp_path / "scratch")
    trainer.model.load_state_dict(selected["model"])
    held = evaluate(trainer.model.eval(), trainer.validation)
    last = record["rounds"][-1]
    winner = next(r for r in last["rows"] if r["dropped"] == last["winner"])
    assert winner["validation_log_likelihood"] == pytest.approx(-16 * held["nll"], rel=1e-5)
    assert torch.isfinite(torch.tensor(winner["log_evidence"]))  # the evidence beside it


def test_training_speed_is_minus_the_summed_training_nll():
    candidate = selection.Candidate(
        net=None, evidence=None, optimum=None, dropped=[], log_evidence=-5.0,
        train_data=list(range(10)), config=None, train_nll=[1.0, 0.5, 0.25],
    )  # fmt: skip
    assert CRITERIA["training_speed"].score(candidate) == {"training_speed": -17.5}
