"""experiments.path_fractions on hand-made results: fractions, factors and quotients."""

import json

import pytest

from ella.errors import CheckpointError, RunDirectoryError
from experiments import path_fractions


def layer(name, effective, variance, relative_gconv=70.0):
    return {
        "layer": name,
        "effective": dict(zip(("fc", "conv", "gconv"), effective, strict=True)),
        "parameters": {"fc": 1000, "conv": 400, "gconv": 100},
        "prior_variance": dict(zip(("fc", "conv", "gconv"), variance, strict=True)),
        "relative": {"fc": 1.0, "conv": 99.0 - relative_gconv, "gconv": relative_gconv},
    }


def write_run(directory, rows, accuracy=0.9):
    directory.mkdir()
    results = {"test_accuracy": accuracy, "effective_parameters": rows}
    (directory / "results.json").write_text(json.dumps(results))
    return directory


def test_fractions_factors_and_quotients_follow_the_rows(tmp_path, capsys):
    first = write_run(tmp_path / "a", [layer("layer1", (1, 40, 20), (1.0, 0.4, 0.1))])
    second = write_run(tmp_path / "b", [layer("layer1", (3, 60, 50), (1.0, 0.3, 0.1), 75.0)])
    (row,) = path_fractions.main([str(first), str(second)])
    assert row["fc"] == pytest.approx((0.1, 0.3))
    assert row["conv"] == pytest.approx((10.0, 15.0))
    assert row["gconv"] == pytest.approx((20.0, 50.0))
    assert row["gconv_over_conv"] == pytest.approx((0.5, 50 / 60))
    assert row["variance_conv_over_gconv"] == pytest.approx((4.0, 3.0))
    text = capsys.readouterr().out
    assert (
        "| layer1 | 0.10 -> 0.30 | 10.00 -> 15.00 | 20.00 -> 50.00 | x3.00 / x1.50 / x2.50 " in text
    )
    assert "| 70.0 -> 75.0 | 0.50 -> 0.83 | 4.00 -> 3.00 |" in text


def test_runs_without_path_rows_or_of_other_models_are_refused(tmp_path):
    learned = write_run(tmp_path / "a", [layer("layer1", (1, 40, 20), (1.0, 0.4, 0.1))])
    map_run = write_run(tmp_path / "map", [])
    with pytest.raises(RunDirectoryError, match="without --no-learn-priors"):
        path_fractions.main([str(learned), str(map_run)])
    other = write_run(tmp_path / "b", [layer("layer2", (1, 40, 20), (1.0, 0.4, 0.1))])
    with pytest.raises(RunDirectoryError, match="different layers"):
        path_fractions.main([str(learned), str(other)])
    with pytest.raises(CheckpointError, match="no results.json"):
        path_fractions.main([str(learned), str(tmp_path / "missing")])
