"""ella.selection (``ella select``): the candidates, their files, resuming and the tables,
with fake candidates; the runs that train are in tests/test_select_runs.py."""

import itertools
import json

import pytest
from torch import nn

import ella
from ella import selection
from ella.cli import main
from ella.errors import CheckpointError, ConfigError, RunDirectoryError
from ella.io import load_torch
from ella.rundir import (
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_CANDIDATE,
    PATH_SELECTION_STATE,
    holds_run,
)
from ella.train import TrainConfig
from tests.selection.fakes import NULL, SELECTION_EVIDENCE, fake_train_on, write_config


@pytest.mark.parametrize(
    ("values", "epochs", "error", "match"),
    [
        ({"learn_priors": False}, 5, RunDirectoryError, "MAP run"),
        ({"paths": ["gconv"]}, 5, ConfigError, "two or more paths"),
        ({"prior_mean": "init"}, 5, ConfigError, "prior-mean init"),
        ({}, 0, ConfigError, "ella select --epochs"),
        ({"model": "cnn"}, 5, ConfigError, "--model mixer"),
        ({"invariance": "learned", "augment": "none"}, 5, ConfigError, "without --invariance"),
        ({"members": 2}, 5, RunDirectoryError, "ensemble run"),
        ({"finished": False}, 5, RunDirectoryError, "ella train --out .* --resume"),
    ],
)
@pytest.mark.parametrize("drop_only", [False, True])
def test_select_refuses_what_it_cannot_select_before_any_work(
    tmp_path, monkeypatch, values, epochs, error, match, drop_only
):
    run = write_config(tmp_path / "run", **values)
    monkeypatch.setattr(selection, "train_on", fake_train_on([], interrupt_at=0))
    with pytest.raises(error, match=match):
        selection.select(run, epochs=epochs, drop_only=drop_only)
    assert {p.name for p in run.iterdir()} <= {"config.json", "results.json"}  # no work


def test_select_takes_a_fit_result_not_a_model():
    with pytest.raises(TypeError, match="FitResult that ella.fit returned"):
        ella.select(nn.Linear(2, 2))


def test_drop_each_path_saves_every_candidate_and_resumes(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run", paths=["conv", "gconv"])
    evidence = {None: -100.0, "conv": -90.0, "gconv": -130.0}
    calls = []

    def fake(run_dir, dropped, epochs, data_dir=None, progress=False, *args, **kwargs):
        drop = dropped[0] if dropped else None
        calls.append(drop)
        if drop == "gconv" and len(calls) == 3:
            raise KeyboardInterrupt  # interrupted at the last candidate
        return {"test_accuracy": 0.5, "log_evidence": evidence[drop]}, {}

    monkeypatch.setattr(selection, "train_on", fake)
    with pytest.raises(KeyboardInterrupt):
        selection.drop_each_path(run, 3)
    saved = json.loads((run / PATH_DROPS).read_text())
    assert [r["dropped"] for r in saved["rows"]] == ["none", "conv"]
    result = selection.drop_each_path(run, 3)  # only gconv is trained again
    assert calls == [None, "conv", "gconv", "gconv"]
    assert [r["dropped"] for r in result["rows"]] == ["none", "conv", "gconv"]
    selection.drop_each_path(run, 4, overwrite=True)  # other epochs: nothing reused
    assert calls[4:] == [None, "conv", "gconv"]
    text = selection.format_path_drops(result)
    assert "the evidence would drop: CONV (most: CONV, +10 nats)" in text
    assert "\ngconv           50.00         -130.0       -30.0\n" in text
    assert holds_run(run)  # path_drops.json counts as a run output


def test_format_path_drops_says_when_every_path_is_kept():
    rows = [
        {"dropped": "none", "test_accuracy": 0.9, "log_evidence": -10.0},
        {"dropped": "conv", "test_accuracy": 0.8, "log_evidence": -20.0},
    ]
    text = selection.format_path_drops({"epochs": 2, "rows": rows})
    assert text.endswith("the evidence keeps every path")


@pytest.fixture(autouse=True)
def fake_null_model(monkeypatch):
    """The fake runs have no data: their class-frequency model is ``NULL``."""
    monkeypatch.setattr(selection, "null_model", lambda run_dir, data_dir=None: NULL)


def test_select_paths_drops_greedily_and_starts_each_round_from_the_winner(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    calls = []
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls))
    record = selection.select_paths(run, 3)
    # round 1 from the run; FC wins (call 2); round 2 from its weights; CONV wins (call 6)
    assert calls == [
        ((), None),
        (("fc",), None),
        (("conv",), None),
        (("gconv",), None),
        (("fc",), 2.0),
        (("conv", "fc"), 2.0),
        (("fc", "gconv"), 2.0),
    ]
    assert [r["winner"] for r in record["rounds"]] == ["fc", "conv"]
    assert record["kept"] == ["gconv"] and record["finished"]
    selected = load_torch(run / PATH_SELECTION_STATE)
    assert float(selected["model"]["w"]) == 6.0 and selected["kept"] == ["gconv"]
    assert not (run / PATH_SELECTION_CANDIDATE).exists()
    text = selection.format_path_selection(record)
    assert "round 2 (network CONV+GCONV):" in text and "the evidence drops CONV" in text
    assert "selected: GCONV; test accuracy 50.00% (the whole network trained on alike: " in text
    assert "log evidence -80.0 (+20.0)" in text
    assert holds_run(run)


def test_drop_each_path_reuses_the_first_round_of_a_selection(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    monkeypatch.setattr(selection, "train_on", fake_train_on([]))
    record = selection.select_paths(run, 3)

    def not_again(*args, **kwargs):
        raise AssertionError("a candidate of the selection's first round was trained again")

    monkeypatch.setattr(selection, "train_on", not_again)
    result = selection.drop_each_path(run, 3)
    assert result["rows"] == record["rounds"][0]["rows"]
    trained = []
    monkeypatch.setattr(
        selection,
        "train_on",
        lambda run_dir, dropped, *args, **kwargs: (
            trained.append(dropped[0] if dropped else None) or ({"log_evidence": -1.0}, {})
        ),
    )
    selection.drop_each_path(run, 4, overwrite=True)  # other epochs than the selection's: trained
    assert trained == [None, "fc", "conv", "gconv"]


def test_select_paths_resumes_within_a_round(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    calls = []
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, interrupt_at=6))
    with pytest.raises(KeyboardInterrupt):  # after round 2's control and CONV candidate
        selection.select_paths(run, 3)
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls))
    record = selection.select_paths(run, 3)
    assert calls[6:] == [(("fc", "gconv"), 2.0)]  # the round's start read back from the file
    assert float(load_torch(run / PATH_SELECTION_STATE)["model"]["w"]) == 6.0
    assert record["kept"] == ["gconv"]
    assert selection.select_paths(run, 3) == record and len(calls) == 7  # finished: no work
    selection.select_paths(run, 4, overwrite=True)  # other epochs: started afresh
    assert len(calls) == 14


def test_select_paths_starts_a_round_again_without_its_best_weights(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    calls = []
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, interrupt_at=2))
    with pytest.raises(KeyboardInterrupt):
        selection.select_paths(run, 3)
    (run / PATH_SELECTION_CANDIDATE).unlink()
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls))
    selection.select_paths(run, 3)
    assert calls[2:6] == [((), None), (("fc",), None), (("conv",), None), (("gconv",), None)]


def test_select_paths_stops_when_the_control_wins(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run", paths=["conv", "gconv"])
    calls = []
    evidence = {(): -10.0, ("conv",): -20.0, ("gconv",): -30.0}
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, evidence=evidence))
    record = selection.select_paths(run, 2)
    assert len(calls) == 3 and record["kept"] == ["conv", "gconv"]
    assert [r["winner"] for r in record["rounds"]] == ["none"]
    assert "the evidence keeps every path" in selection.format_path_selection(record)
    assert float(load_torch(run / PATH_SELECTION_STATE)["model"]["w"]) == 1.0


def test_select_paths_passes_over_a_collapsed_candidate(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    calls = []
    # round 2's best candidate, CONV and FC at zero, keeps 40% of its control's (FC at zero)
    # gain over the class frequencies, 0.4 * 990: it has collapsed
    likelihood = {("fc",): -10.0, ("conv", "fc"): NULL["log_likelihood"] + 0.4 * 990}
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, likelihood=likelihood))
    record = selection.select_paths(run, 3)
    assert [r["winner"] for r in record["rounds"]] == ["fc", "none"]
    assert record["kept"] == ["conv", "gconv"] and record["null"] == NULL
    assert float(load_torch(run / PATH_SELECTION_STATE)["model"]["w"]) == 5.0  # round 2's control
    text = selection.format_path_selection(record)
    assert "-80.0       +10.0  0/0/100  collapsed" in text
    assert "uniform Dirichlet prior): log evidence -1010.0" in text
    assert "prefers the class frequencies" not in text  # -90 > -1010


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"learn_priors": False}, "needs learned priors"),
        ({"prior_mean": "init"}, "--prior-mean zero"),
        ({"paths": ("gconv",)}, "two or more --paths"),
        ({"model": "cnn"}, "--model mixer"),
    ],
)
def test_train_select_paths_refuses_what_it_cannot_select_before_any_work(values, match):

    with pytest.raises(ConfigError, match=match):
        TrainConfig(select_paths=True, **values)
    TrainConfig(select_paths=False, **values)  # without --select-paths each is a valid run


def test_collapsed_is_less_than_half_of_the_controls_gain_over_the_class_frequencies():
    null, control = {"log_likelihood": -2300.0}, {"log_likelihood": -300.0}  # gain 2000
    assert not selection.collapsed({"log_likelihood": -1300.0}, control, null)  # keeps 1000
    assert selection.collapsed({"log_likelihood": -1301.0}, control, null)
    assert selection.collapsed({"log_likelihood": -2300.0}, control, null)
    assert not selection.collapsed({"log_likelihood": -100.0}, control, null)  # fits better


def test_select_command_prints_the_selection_and_the_drops(tmp_path, monkeypatch, capsys):
    run = write_config(tmp_path / "run")
    calls = []
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls))
    assert main(["select", str(run), "--epochs", "3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "round 2 (network CONV+GCONV):" in out and "\nselected: GCONV;" in out
    assert f"written: {run / PATH_SELECTION}, {run / PATH_SELECTION_STATE}" in out
    assert main(["select", str(run), "--epochs", "3", "--drop-only"]) == 0  # round 1 reused
    out = capsys.readouterr().out
    plan, table = out.split("\n", 1)
    assert plan == (
        f"ella select {run} --drop-only trains 4 networks of 3 epochs in its one round; each "
        "scored by log evidence (--criterion evidence)"
    )
    assert table.startswith("path drops: each path at zero") and len(calls) == 7
    assert "the evidence would drop: FC, CONV (most: FC, +10 nats)" in out
    assert f"written: {run / PATH_DROPS}" in out
    assert not (run / ".ella.lock").exists()  # held while it ran, released after


def test_select_command_holds_the_run_directory(tmp_path, monkeypatch, capsys):
    from ella.rundir import run_lock

    run = write_config(tmp_path / "run")
    held = []

    def train_on(run_dir, dropped, *args, **kwargs):
        held.append((run_dir / ".ella.lock").is_file())
        return fake_train_on([])(run_dir, dropped, *args, **kwargs)

    monkeypatch.setattr(selection, "train_on", train_on)
    assert main(["select", str(run), "--epochs", "3"]) == 0
    assert held and all(held)
    capsys.readouterr()
    with run_lock(run):  # nests in this process: ella train --select-paths holds it already
        selection.select(run, epochs=3)


@pytest.mark.parametrize(
    ("option", "replacement"),
    [
        (["--select-paths"], "use `ella select RUN`"),
        (["--drop-paths"], "use `ella select RUN --drop-only`"),
        (["--drop-epochs", "5"], "use `ella select RUN --epochs N`"),
    ],
)
def test_report_refuses_the_selection_options_naming_ella_select(
    tmp_path, capsys, option, replacement
):
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(tmp_path), *option])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"{option[0]} moved to its own command: ella report only reports" in err
    assert replacement in err


def test_report_shows_a_finished_selection_again(tmp_path, monkeypatch, capsys):
    """``ella report`` prints the record ``ella select`` left, without training anything."""
    import ella.learner.report

    run = write_config(tmp_path / "run")
    monkeypatch.setattr(selection, "train_on", fake_train_on([]))
    record = selection.select(run, epochs=3)
    results = {  # what every version of ella train wrote (ella.schemas.RESULTS_FILE)
        "effective_parameters": [], "effective_parameters_other": [], "prior_precision": {},
        "prior_variance": {}, "log_marglik": [-1.0], "log_marglik_epochs": [1],
        "test_accuracy": 0.5, "test_nll": 1.0, "final_test_accuracy": 0.5,
        "final_test_nll": 1.0, "reported_state": "final", "reported_epoch": 1,
        "log_marglik_reported_state": -1.0, "parameters": 10, "train_size": 8,
        "test_size": 8, "epochs": 1, "train_time_s": 1.0, "config": {"dataset": "mnist_subset"},
    }  # fmt: skip
    (run / "results.json").write_text(json.dumps(results))
    monkeypatch.setattr(selection, "train_on", fake_train_on([], interrupt_at=0))
    monkeypatch.setattr(ella.learner.report, "format_table", lambda results: "TABLE")
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    answer = selection.format_answer(run, {})
    assert out.startswith(f"{answer}\n\nTABLE\n")  # the answer is the headline
    assert selection.format_path_selection(record) in out


def test_answer_of_a_finished_selection_names_the_paths_and_each_drops_gain(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    monkeypatch.setattr(selection, "train_on", fake_train_on([]))
    selection.select_paths(run, 3)
    lines = selection.format_answer(run, {}).splitlines()
    assert lines == [
        "which paths the data need, by the evidence (ella select, 3 epochs per network): "
        "GCONV; dropped FC (+10 nats), then CONV (+10 nats); one training per candidate, so "
        "not decided (one seed measures no spread): asking with --seeds 3 trains 14 more "
        "networks; test accuracy 50.00% (the whole network trained on alike: 50.00%); "
        f"{selection.EVIDENCE_AGREEMENT}",
        f"which paths each layer needs: not asked yet; ella select {run} --per-layer drops "
        "one path of one layer at a time: a network of 20 epochs per path of each layer in its "
        f"first round; {selection.PER_LAYER_RELIABILITY}",
        selection.SHARES_NOTE,
    ]


def test_answer_says_what_keeping_every_path_costs_and_when_it_is_below_no_network(
    tmp_path, monkeypatch
):
    kept = write_config(tmp_path / "kept", paths=["conv", "gconv"])
    evidence = {(): -10.0, ("conv",): -20.0, ("gconv",): -30.0}
    monkeypatch.setattr(selection, "train_on", fake_train_on([], evidence=evidence))
    selection.select_paths(kept, 2)
    answer = selection.format_answer(kept, {})
    assert ": CONV+GCONV; every path kept; dropping CONV would cost 10 nats; " in answer
    assert (
        "; one training per candidate, so not decided (one seed measures no spread): asking "
        "with --seeds 3 trains 6 more networks; test accuracy" in answer
    )
    assert "no network" not in answer
    then = write_config(tmp_path / "then")
    evidence = {**SELECTION_EVIDENCE, ("conv", "fc"): -95.0}  # round 2: the control wins
    monkeypatch.setattr(selection, "train_on", fake_train_on([], evidence=evidence))
    selection.select_paths(then, 2)
    answer = selection.format_answer(then, {})
    assert ": CONV+GCONV; dropped FC (+10 nats); dropping CONV too would cost 5 nats; " in answer
    below = write_config(tmp_path / "below", paths=["conv", "gconv"])
    evidence = {(): -2000.0, ("conv",): -1500.0, ("gconv",): -2500.0}  # NULL: -1010
    monkeypatch.setattr(selection, "train_on", fake_train_on([], evidence=evidence))
    selection.select_paths(below, 2)
    answer = selection.format_answer(below, {})
    assert ": GCONV; dropped CONV (+500 nats); " in answer
    assert answer.splitlines()[0].endswith(
        "; below no network's evidence, so a choice among networks, not against none; "
        + selection.EVIDENCE_AGREEMENT
    )


def test_answer_before_a_selection_is_its_cost_at_the_runs_pace(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    results = {"train_time_s": 60.0, "epochs": 20}  # 3 s per epoch
    first = selection.format_answer(run, results).splitlines()[0]
    assert first == (
        f"which paths the data need: not asked yet; ella select {run} asks the evidence, "
        "training the network with and without each path: 4 networks of 20 epochs in its "
        "first round, about 4 min at this run's pace (7 networks, 7 min, if it drops a path "
        "each round)"
    )
    two = write_config(tmp_path / "two", paths=["conv", "gconv"])
    assert (
        selection.format_answer(two, {})
        .splitlines()[0]
        .endswith("3 networks of 20 epochs in its first round")
    )  # no pace in the results: no time
    assert selection.selection_rounds(4) == [5, 4, 3] and selection.selection_rounds(2) == [3]
    layers = {**results, "effective_parameters": [{}] * 8}  # 8 layers of 3 paths
    assert (
        selection.format_answer(run, layers)
        .splitlines()[1]
        .startswith(
            f"which paths each layer needs: not asked yet; ella select {run} --per-layer drops "
            "one path of one layer at a time: 25 networks of 20 epochs in its first round, about "
            "25 min at this run's pace; "
        )
    )
    monkeypatch.setattr(selection, "train_on", fake_train_on([], interrupt_at=2))
    with pytest.raises(KeyboardInterrupt):
        selection.select_paths(run, 3)
    assert selection.format_answer(run, results).splitlines()[0] == (
        f"which paths the data need: a selection stopped in round 1; ella select {run} "
        "--epochs 3 resumes it"
    )


@pytest.mark.parametrize(
    "values",
    [{"learn_priors": False}, {"paths": ["gconv"]}, {"invariance": "learned", "augment": "none"}],
)
def test_no_answer_for_a_run_ella_select_cannot_take(tmp_path, values):
    assert selection.format_answer(write_config(tmp_path / "run", **values), {}) is None


def test_select_command_runs_in_one_process(tmp_path, monkeypatch, capsys):
    run = write_config(tmp_path / "run")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["select", str(run)]) == 1
    assert "runs in one process: run it without torchrun" in capsys.readouterr().err


#: the log evidence of a per-layer candidate: the run's, plus each dropped group's gain
LAYER_GAINS = {"layer1.conv": 10.0, "layer1.gconv": -20.0, "layer2.conv": -30.0,
               "layer2.gconv": 5.0}  # fmt: skip


def test_droppable_keeps_a_path_in_every_layer():
    assert selection.droppable(["fc", "conv"]) == ["fc", "conv"]
    assert selection.droppable(["gconv"]) == []
    kept = ["layer1.gconv", "layer2.conv", "layer2.gconv"]
    assert selection.droppable(kept, per_layer=True) == ["layer2.conv", "layer2.gconv"]
    assert selection.droppable(["layer1.gconv", "layer2.conv"], per_layer=True) == []


def test_select_per_layer_drops_one_path_of_one_layer_at_a_time(tmp_path, monkeypatch, capsys):
    run = write_config(tmp_path / "run", paths=["conv", "gconv"])
    groups = list(LAYER_GAINS)
    monkeypatch.setattr(selection, "run_groups", lambda run_dir, data_dir=None: groups)
    evidence = {
        tuple(sorted(d)): -100.0 + sum(LAYER_GAINS[g] for g in d)
        for n in range(len(groups) + 1) for d in itertools.combinations(groups, n)
    }  # fmt: skip
    calls = []
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, evidence=evidence))
    record = selection.select(run, epochs=3, per_layer=True)
    # round 1: the control and all four groups; layer1.conv wins; round 2: layer 1 keeps
    # its one path, so only layer 2's two are tried; layer2.gconv wins; nothing is left
    assert [c[0] for c in calls] == [
        (), ("layer1.conv",), ("layer1.gconv",), ("layer2.conv",), ("layer2.gconv",),
        ("layer1.conv",), ("layer1.conv", "layer2.conv"), ("layer1.conv", "layer2.gconv"),
    ]  # fmt: skip
    assert [r["winner"] for r in record["rounds"]] == ["layer1.conv", "layer2.gconv"]
    assert record["kept"] == ["layer1.gconv", "layer2.conv"] and record["per_layer"]
    assert (run / "path_selection_per_layer.json").is_file()
    assert (run / "path_selection_per_layer.pt").is_file()
    assert not (run / PATH_SELECTION_STATE).exists()  # the whole-path selection's files
    text = selection.format_path_selection(record)
    assert "the evidence drops layer1 CONV" in text
    assert "selected: layer1 GCONV, layer2 CONV; test accuracy" in text
    answer = selection.answer.answer_line(record)
    assert answer.startswith(
        "which paths each layer needs, by the evidence (ella select --per-layer, 3 epochs per "
        "network): layer1 GCONV, layer2 CONV"
    )
    with pytest.raises(ConfigError, match="leave out one of the two"):
        selection.select(run, epochs=3, per_layer=True, drop_only=True)
    # its figure: each group kept, or the round that dropped it and the gain
    assert selection.per_layer_outcome(record) == {
        "layer1.conv": (1, LAYER_GAINS["layer1.conv"]), "layer1.gconv": None,
        "layer2.conv": None, "layer2.gconv": (2, LAYER_GAINS["layer2.gconv"]),
    }  # fmt: skip
    labels = selection.answer.per_layer_labels(record)
    assert labels["layer1.gconv"] == "kept"
    assert labels["layer1.conv"] == f"dropped, round 1\n{LAYER_GAINS['layer1.conv']:+.0f} nats"
    png = selection.save_per_layer_figure(record, tmp_path / "f.png").read_bytes()
    assert png.startswith(b"\x89PNG") and png.endswith(b"IEND\xaeB`\x82")


@pytest.mark.parametrize("drop_only", [False, True])
def test_a_record_of_other_epochs_is_not_replaced_unasked(tmp_path, monkeypatch, drop_only):
    run = write_config(tmp_path / "run")
    monkeypatch.setattr(selection, "train_on", fake_train_on([]))
    selection.select(run, epochs=1, drop_only=drop_only)
    name = PATH_DROPS if drop_only else PATH_SELECTION
    before = (run / name).read_bytes()
    with pytest.raises(RunDirectoryError, match="add --overwrite to replace") as caught:
        selection.select(run, epochs=2, drop_only=drop_only)
    assert "--epochs 1 shows" in str(caught.value)
    assert (run / name).read_bytes() == before  # nothing replaced
    record = selection.select(run, epochs=2, drop_only=drop_only, overwrite=True)
    assert record["epochs"] == 2 and json.loads((run / name).read_text())["epochs"] == 2
    selection.select(run, epochs=2, drop_only=drop_only)  # the same epochs: resumed, no refusal


def test_the_answer_tells_a_running_selection_from_a_stopped_one(tmp_path, monkeypatch):
    """While another process holds the run directory, an unfinished selection is running;
    once it is gone, the same record is a selection that stopped."""

    run = write_config(tmp_path / "run")
    fresh = write_config(tmp_path / "fresh")  # held before its first record is written
    monkeypatch.setattr(selection, "train_on", fake_train_on([], interrupt_at=2))
    with pytest.raises(KeyboardInterrupt):
        selection.select_paths(run, 3)
    holders = [hold(run), hold(fresh)]
    try:
        first = selection.format_answer(run, {}).splitlines()[0]
        assert first == (
            f"which paths the data need: a selection is running (in round 1; pid "
            f"{holders[0].pid} holds the run directory)"
        )
        first = selection.format_answer(fresh, {}).splitlines()[0]
        assert first == (
            f"which paths the data need: not answered yet; pid {holders[1].pid} holds the run "
            "directory, and a selection writes its record after its first network"
        )
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
    first = selection.format_answer(run, {}).splitlines()[0]
    assert "a selection stopped in round 1; ella select" in first
    assert "not asked yet" in selection.format_answer(fresh, {})


def hold(run):
    """A process that holds ``run``'s lock until killed (started once it holds it)."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from ella.rundir import run_lock\n"
         "with run_lock(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(60)",
         str(run)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_decision_of_one_seed_decides_nothing_and_prices_more_seeds_at_the_rows_pace():
    def row(dropped, evidence, seconds=60.0):
        return {"dropped": dropped, "log_evidence": evidence, "log_likelihood": -100.0,
                "seconds": seconds}  # fmt: skip

    record = {
        "epochs": 2, "null": {"log_likelihood": -1000.0, "log_evidence": -1010.0},
        "kept": ["gconv"], "finished": True,
        "rounds": [
            {"kept": ["conv", "gconv"], "winner": "conv",
             "rows": [row("none", -50.0), row("conv", -20.0), row("gconv", -70.0)]},
            {"kept": ["gconv"], "winner": "none", "rows": [row("none", -20.0)]},
        ],
    }  # fmt: skip
    sure = selection.decision(record)
    assert sure["kept"] == ["gconv"] and sure["seeds"] == 1 and not sure["decided"]
    assert sure["steps"] == [{"round": 1, "unit": "conv", "action": "drop", "mean": 30.0,
                              "se": None, "agree": 1, "seeds": 1, "decided": False}]  # fmt: skip
    # 4 networks of 60 s each, trained twice more
    assert sure["more"] == {"seeds": 3, "networks": 8, "minutes": 8.0}


def test_select_says_what_it_will_train_and_dry_run_trains_nothing(tmp_path, monkeypatch, capsys):
    run = write_config(tmp_path / "run")
    layers = [{"layer": f"layer{i}"} for i in (1, 2)]
    (run / "results.json").write_text(
        json.dumps({"train_time_s": 60.0, "epochs": 20, "effective_parameters": layers})
    )
    calls = []
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, interrupt_at=0))
    assert main(["select", str(run), "--dry-run", "--seeds", "2"]) == 0
    # 3 s per epoch: 4 networks x 20 epochs x 2 seeds = 8 min; 7 networks 14 min
    assert capsys.readouterr().out == (
        f"ella select {run} trains 4 networks of 20 epochs at 2 seeds each in its first "
        "round, about 8 min at this run's pace (7 networks, 14 min, if it drops a path each "
        "round); each scored by log evidence (--criterion evidence)\n"
    )
    assert main(["select", str(run), "--dry-run", "--per-layer", "--epochs", "10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"ella select {run} --per-layer trains 7 networks of 10 epochs in its first round, "
        "about 4 min at this run's pace; each scored by log evidence (--criterion evidence); "
        "in a miniature this selection agreed"
    )
    assert calls == [] and not (run / PATH_SELECTION).exists()  # nothing trained or written
    assert main(["select", str(run), "--dry-run", "--epochs", "0"]) == 1  # checked first
    assert "ella select --epochs" in capsys.readouterr().err


def test_report_gives_the_answer_of_drops_when_no_selection_was_made(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    monkeypatch.setattr(selection, "train_on", fake_train_on([], interrupt_at=2))
    with pytest.raises(KeyboardInterrupt):
        selection.select(run, epochs=3, drop_only=True)
    line = selection.format_answer(run, {}).splitlines()[0]
    assert line == (
        "which paths the data need: one round of drops (ella select --drop-only) has 2 of 4 "
        f"networks, stopped; ella select {run} --drop-only --epochs 3 resumes it"
    )
    monkeypatch.setattr(selection, "train_on", fake_train_on([]))
    selection.select(run, epochs=3, drop_only=True)
    line = selection.format_answer(run, {}).splitlines()[0]
    assert line == (
        "which paths the data need, first round only (ella select --drop-only --epochs 3, 3 "
        "epochs per network): the evidence would drop: FC, CONV (most: FC, +10 nats) (one "
        f"training per candidate, so not decided); ella select {run} --epochs 3 makes the "
        "whole choice, its first round this one"
    )


def test_a_finished_selection_shown_again_is_read_and_never_written(tmp_path, monkeypatch):
    """Asking again for a finished greedy selection or finished drops trains nothing and
    leaves every file of the run directory as it was (the same inode: no atomic rewrite)."""
    run = write_config(tmp_path / "run")
    monkeypatch.setattr(selection, "train_on", fake_train_on([]))
    first = selection.select(run, epochs=3)
    drops = selection.drop_each_path(run, 3)

    def files():
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in run.iterdir()}

    before = files()
    monkeypatch.setattr(selection, "train_on", fake_train_on([], interrupt_at=0))
    assert selection.select(run, epochs=3)["kept"] == first["kept"]
    assert selection.drop_each_path(run, 3)["rows"] == drops["rows"]
    assert files() == before


@pytest.mark.parametrize(("validation_size", "expected"), [(0, "evidence"), (20, "validation")])
def test_a_selection_naming_no_criterion_scores_by_the_held_out_images_where_the_run_has_them(
    tmp_path, monkeypatch, validation_size, expected
):
    run = write_config(tmp_path / "run", validation_size=validation_size)
    seen = []
    fake = fake_train_on([])

    def train_on(*args, criterion=None, **kwargs):
        seen.append(criterion)
        row, end = fake(*args, criterion=criterion, **kwargs)
        return {**row, "validation_log_likelihood": -1.0}, end

    monkeypatch.setattr(selection, "train_on", train_on)
    record = selection.select(run, epochs=3, drop_only=True)
    assert set(seen) == {expected}
    assert record.get("criterion", selection.DEFAULT_CRITERION) == expected


def test_drops_with_overwrite_are_not_held_back_by_a_damaged_selection_record(
    tmp_path, monkeypatch
):
    """``--drop-only`` reuses a greedy record's first round; a damaged one is refused
    naming both fixes, and ``overwrite=True`` trains the drops without it, leaving it be."""
    run = write_config(tmp_path / "run")
    (run / PATH_SELECTION).write_text('{"epochs": 3, "rounds": [')
    monkeypatch.setattr(selection, "train_on", fake_train_on([]))
    with pytest.raises(CheckpointError, match="restore it.*or add --overwrite to ella select"):
        selection.select(run, epochs=3, drop_only=True)
    record = selection.select(run, epochs=3, drop_only=True, overwrite=True)
    assert len(record["rows"]) == 4
    assert (run / PATH_SELECTION).read_text() == '{"epochs": 3, "rounds": ['
