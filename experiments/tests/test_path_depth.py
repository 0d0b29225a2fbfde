"""experiments.path_depth: the evidence's choice of depth, its file, and its refusals."""

import pytest

from experiments import path_depth

NULL = {"log_likelihood": -1000.0, "log_evidence": -900.0}


def depth_row(k, evidence, likelihood=-100.0, accuracy=0.9):
    return {
        "k": k,
        "dropped": [f"layer{i}.fc" for i in range(1, k + 1)],
        "test_accuracy": accuracy,
        "log_evidence": evidence,
        "log_likelihood": likelihood,
    }


def one_run_payload(path, rows, **extra):
    """A results file of one run's sweep, as path_depth.main writes it."""
    return {
        "path": path,
        "epochs": 3,
        **extra,
        "command": f"python -m experiments.path_depth run --path {path} --epochs 3",
        "environment": {"device": "cpu"},
        "runs": {"run": {"dataset": "mnist", "seed": 0, "null": NULL, "rows": rows}},
    }


def test_choice_is_the_best_evidence_among_the_candidates_that_kept_their_fit():
    rows = [depth_row(0, -500.0), depth_row(1, -450.0), depth_row(2, -300.0, likelihood=-800.0)]
    # k = 2 has the best evidence but kept 200 of the control's 900 nats over the null
    assert path_depth.choice(rows, NULL)["k"] == 1
    rows[2]["log_likelihood"] = -200.0
    assert path_depth.choice(rows, NULL)["k"] == 2
    assert path_depth.choice(rows[:1], NULL)["k"] == 0


def test_markdown_names_the_chosen_depth_and_the_collapsed_rows():
    rows = [depth_row(0, -500.0), depth_row(1, -450.0), depth_row(2, -300.0, likelihood=-800.0)]
    text = path_depth.markdown(one_run_payload("fc", rows))
    assert "The evidence drops FC from the first 1 of 2 layers (90.00% test accuracy)" in text
    assert "| 1-2 | 90.00 | -300 | +200 | -800 | yes |" in text
    assert "| none | 90.00 | -500 | +0 | -100 |  |" in text


def test_the_output_side_drops_the_last_layers_and_names_them():
    layers = [f"layer{i}" for i in range(1, 9)]
    assert path_depth.dropped_layers(layers, 3, "input") == ["layer1", "layer2", "layer3"]
    assert path_depth.dropped_layers(layers, 3, "output") == ["layer6", "layer7", "layer8"]
    assert path_depth.dropped_layers(layers, 0, "output") == []
    assert path_depth.dropped_layers(layers, 8, "output") == layers
    with pytest.raises(ValueError, match="side must be one of"):
        path_depth.dropped_layers(layers, 1, "middle")
    assert [path_depth.span(k, 8, "output") for k in (0, 1, 2, 8)] == ["none", "8", "7-8", "1-8"]
    assert [path_depth.span(k, 8, "input") for k in (0, 1, 2)] == ["none", "1", "1-2"]
    rows = [depth_row(0, -500.0), depth_row(1, -450.0), depth_row(2, -600.0)]
    text = path_depth.markdown(one_run_payload("gconv", rows, side="output"))
    assert "The evidence drops GCONV from the last 1 of 2 layers" in text
    assert "| 2 | 90.00 | -450 | +50 |" in text
    assert "| 1-2 | 90.00 | -600 | -100 |" in text


def test_a_path_the_run_does_not_have_is_refused_before_any_work(tmp_path, capsys):
    from ella.train import train
    from tests.train.test_loop import tiny_config

    run = tmp_path / "run"
    train(tiny_config(epochs=1, paths=("fc", "conv")), run)
    with pytest.raises(SystemExit):
        path_depth.main([str(run), "--path", "gconv", "--results-dir", str(tmp_path / "out")])
    assert "has no gconv path" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_two_runs_of_one_name_are_refused_before_any_work(tmp_path, capsys):
    from ella.train import train
    from tests.train.test_loop import tiny_config

    for parent in ("a", "b"):
        train(tiny_config(epochs=1, paths=("fc", "conv")), tmp_path / parent / "run")
    runs = [str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run")]
    with pytest.raises(SystemExit):
        path_depth.main([*runs, "--results-dir", str(tmp_path / "out")])
    assert "another run is named run" in capsys.readouterr().err
    assert not (tmp_path / "out" / "path_depth.json").exists()
