"""experiments.path_select: its claims read from the selected networks, and a smoke run."""

import json

import pytest

from experiments import path_select
from tests.data.test_datasets import SHARED


def row(dataset, seed, shares, selected_acc=0.9, control_acc=0.8):
    return {
        "dataset": dataset,
        "seed": seed,
        "selected": {
            "shares": dict(zip(("fc", "conv", "gconv"), shares, strict=True)),
            "test_accuracy": selected_acc,
        },
        "control": {"test_accuracy": control_acc},
    }


def test_a_claim_holds_only_if_it_holds_at_every_seed():
    rows = [
        row("mnist", 0, (20, 50, 30)),
        row("rotated_mnist", 0, (0, 0, 100)),
        row("mnist", 1, (36, 0, 64)),
        row("rotated_mnist", 1, (30, 0, 70), selected_acc=0.7),  # FC not the smallest here
    ]
    claims = path_select.claims(rows, [0, 1])
    assert claims["GCONV has the largest share on rotated MNIST (selected network)"]
    assert claims["the GCONV share on rotated MNIST exceeds that on MNIST (selected network)"]
    assert not claims["FC has the smallest share on rotated_mnist (selected network)"]
    assert claims["selected >= the whole network trained on alike in test accuracy on mnist"]
    assert not claims[
        "selected >= the whole network trained on alike in test accuracy on rotated_mnist"
    ]
    only_seed_0 = path_select.claims(rows[:2], [0])
    assert only_seed_0["FC has the smallest share on rotated_mnist (selected network)"]


def table1_row(task, kept, selected_acc, reference):
    model = {"digit": "conv_map", "quadrant": "fc_map"}[task]
    return {
        "dataset": task,
        "seed": 0,
        "kept": kept,
        "selected": {"test_accuracy": selected_acc},
        "control": {"test_accuracy": 0.5},
        "references": {model: {"test_accuracy": reference, "test_nll": 0.3}},
    }


def test_table1_claims_compare_with_its_map_rows_and_read_the_kept_paths():
    table = path_select.TABLES["1"]
    rows = [
        table1_row("digit", ["conv"], 0.9395, 0.95),  # 1.05 points under CONV: misses
        table1_row("quadrant", ["fc", "conv"], 0.60, 0.59),
    ]
    claims = path_select.claims(rows, [0], table)
    assert not claims["selected >= conv_map - 1 point on digit"]
    assert claims["the selection drops FC on digit"]
    assert claims["selected >= fc_map on (digit, quadrant)"]
    assert claims["the selection keeps FC on (digit, quadrant)"]
    rows = [
        table1_row("digit", ["fc", "conv"], 0.9405, 0.95),
        table1_row("quadrant", ["conv"], 0.58, 0.59),
    ]
    claims = path_select.claims(rows, [0], table)
    assert claims["selected >= conv_map - 1 point on digit"]
    assert not claims["the selection drops FC on digit"]
    assert not claims["selected >= fc_map on (digit, quadrant)"]
    assert not claims["the selection keeps FC on (digit, quadrant)"]


def test_a_profile_or_row_of_another_table_is_refused_before_any_work(tmp_path, capsys):
    base = ["--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path)]
    with pytest.raises(SystemExit):
        path_select.main([*base, "--table", "1", "--profile", "cpu_80_sgd"])
    assert "Table 1 has" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        path_select.main([*base, "--table", "1", "--datasets", "mnist"])
    assert "Table 1's rows are" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_table1_smoke_trains_the_map_row_it_compares_with(tmp_path):
    argv = [
        "--table", "1", "--profile", "smoke", "--results-dir", str(tmp_path),
        "--work-dir", str(tmp_path / "w"), "--datasets", "digit", "--select-epochs", "1",
    ]  # fmt: skip
    (r,) = path_select.main(argv)["rows"]
    assert set(r["references"]) == {"conv_map"}
    assert (tmp_path / "w" / "table1_smoke_digit_conv_map_seed0" / "results.json").is_file()
    text = (tmp_path / "path_select_table1.md").read_text()
    assert text.startswith("# Table 1's claims") and "digit seed 0: conv_map" in text


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_path_select_smoke_reuses_its_runs(tmp_path):
    argv = [
        "--profile", "smoke", "--results-dir", str(tmp_path), "--work-dir", str(tmp_path / "w"),
        "--datasets", "rotated_mnist", "--select-epochs", "1",
    ]  # fmt: skip
    payload = path_select.main(argv)
    (r,) = payload["rows"]
    assert r["rounds"][0]["rows"][0]["dropped"] == "none" and r["kept"]
    assert r["null"]["log_evidence"] < 0 and set(r["selected"]["shares"]) == {"fc", "conv", "gconv"}
    run = tmp_path / "w" / "smoke_rotated_mnist_seed0"
    stamp = (run / "path_selection.json").stat().st_mtime_ns
    again = path_select.main(argv)  # everything reused: the same rows
    assert again["rows"] == payload["rows"]
    assert (run / "path_selection.json").stat().st_mtime_ns >= stamp
    path_select.main([*argv, "--render-only"])
    assert json.loads((tmp_path / "path_select.json").read_text())["rows"] == payload["rows"]
    assert "| rotated_mnist | 0 |" in (tmp_path / "path_select.md").read_text()
