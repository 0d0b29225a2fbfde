"""ella.engine.health: the collapse of the training accuracy, on hand-made epoch rows."""

import pytest

from ella.engine.health import collapse_line, training_collapse
from ella.learner.report import format_table


def rows(*accuracies: float) -> list[dict]:
    return [{"epoch": e, "train_accuracy": a} for e, a in enumerate(accuracies, start=1)]


def test_the_largest_fall_below_the_best_so_far_is_reported_with_the_end():
    # the shape of the cpu_80_sgd rotated MNIST run: a peak, a collapse, a partial recovery
    collapse = training_collapse(rows(0.5, 0.994, 0.976, 0.709, 0.154, 0.18, 0.474))
    assert collapse == {
        "best": 0.994, "best_epoch": 2, "lowest": 0.154, "lowest_epoch": 5,
        "final": 0.474, "final_epoch": 7,
    }  # fmt: skip


def test_a_run_that_recovered_still_reports_its_collapse():
    collapse = training_collapse(rows(0.9, 0.3, 0.95))
    assert (collapse["lowest"], collapse["final"]) == (0.3, 0.95)


def test_of_two_falls_the_larger_one_counts():
    collapse = training_collapse(rows(0.9, 0.6, 0.95, 0.2, 0.9))
    assert (collapse["best_epoch"], collapse["lowest_epoch"]) == (3, 4)


def test_dips_smaller_than_the_fall_are_no_collapse():
    assert training_collapse(rows(0.2, 0.5, 0.8, 0.65, 0.9)) is None  # 15 points
    assert training_collapse(rows(0.9, 0.8, 0.7, 0.6)) is not None  # 30 points, in steps
    assert training_collapse(rows(0.5, 0.3), fall=0.25) is None
    assert training_collapse([]) is None
    # rows without a training accuracy (none recorded) are skipped
    assert training_collapse([{"epoch": 1}, *rows(0.9, 0.1)[1:]]) is None
    with pytest.raises(ValueError, match="fall must be in"):
        training_collapse(rows(0.5), fall=0)


def test_the_report_states_a_collapse_and_says_what_to_try():
    collapse = training_collapse(rows(0.994, 0.154, 0.474))
    line = collapse_line(collapse)
    assert line.startswith(
        "training collapsed: train accuracy 99.4% at epoch 1, 15.4% at epoch 2, 47.4% at the "
        "end (epoch 3)."
    )
    assert "--norm none" in line and "smaller --lr" in line
    results = {"effective_parameters": [], "test_accuracy": 0.5, "training_collapse": collapse}
    assert line in format_table(results).splitlines()
    assert "collapsed" not in format_table({**results, "training_collapse": None})


def test_a_collapse_is_said_once_at_the_epoch_it_happens():
    from ella.engine.health import new_collapse

    history = rows(0.5, 0.9, 0.8, 0.65, 0.3, 0.2)
    said = [new_collapse(history[:n]) for n in range(len(history) + 1)]
    assert [n for n, line in enumerate(said) if line] == [4]  # 0.9 -> 0.65 at epoch 4
    assert said[4] == (
        "epoch 4: the training accuracy fell from 90.0% (epoch 2) to 65.0%; the run goes on, "
        "and its report will say how it ended (ella.engine.health)"
    )


def test_the_training_loop_says_it_on_stderr_as_it_happens(tmp_path, monkeypatch, capsys):
    from ella.train import Trainer
    from tests.runs import tiny_config

    accuracies = iter([0.6, 0.95, 0.3, 0.25])
    monkeypatch.setattr(  # scripted epochs: the loop around them is what is tested
        Trainer,
        "train_epoch",
        lambda self: {"train_loss": 1.0, "train_accuracy": next(accuracies), "lr": 0.1},
    )
    results = Trainer(tiny_config(epochs=4, learn_priors=False), tmp_path).run()
    err = capsys.readouterr().err
    assert err.count("the training accuracy fell") == 1
    assert "epoch 3: the training accuracy fell from 95.0% (epoch 2) to 30.0%" in err
    assert results["training_collapse"]["lowest_epoch"] == 4
    table = results["table"]
    assert "training collapsed: train accuracy 95.0% at epoch 2, 25.0% at epoch 4" in table
